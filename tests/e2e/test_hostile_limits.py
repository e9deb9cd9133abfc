"""Limits that must hold in front of real traffic (issue 21), each case a script of raw
sockets against the live proxy.

- Connections over ``--max-connections`` are answered 503, with one ``rejected`` line
  and nothing for the event loop's exception handler (a traceback on stderr, in
  ``serve``), on asyncio's loop and on uvloop's (``chaosproxy serve`` runs on uvloop,
  whose transports are not :class:`asyncio.Transport` instances); the guard's body
  timer works on both.
- A probe that sends an empty line (CRLF) and leaves is no request: no ``rejected``
  line; an empty line before a request is ignored (RFC 9112 section 2.2).
- Every hold of a fault (``stall``, ``stall: forever``, ``hang``, a ``delay``, holds in
  a row) ends at ``--hold-timeout``: the response aborted, outcome ``cut``, ``reason:
  "hold timeout"``; holds within it are the faults' to make. Under ``serve``, with
  ``--max-connections 20``, twenty ``hang`` streams leave room for the next client
  within the hold timeout and a second.

The loop-specific cases run their own loop (``asyncio.Runner`` with the loop's
factory, as ``serve`` does with uvloop); the others run on the test's loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvloop

from chaosproxy.control.api import ChaosProxy
from chaosproxy.core.pipeline import BUDGET_REASON
from chaosproxy.scenario import parse_scenario
from chaosproxy.server.guard import ClientGuard, GuardedRunner
from tests.support.cli import port_in, start_serve, stop_serve

pytestmark = pytest.mark.timeout(60)

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}

GET = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def on_loop(name: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``main()`` on a fresh loop of that kind. Nothing may reach the loop's
    exception handler: in ``serve`` that is a traceback on stderr."""
    reported: list[dict[str, Any]] = []
    with asyncio.Runner(loop_factory=LOOPS[name]) as runner:
        runner.get_loop().set_exception_handler(lambda _, context: reported.append(context))
        runner.run(main())
    assert not reported, [str(c.get("exception") or c.get("message")) for c in reported]


def port_of(proxy: ChaosProxy) -> int:
    return int(proxy.url.rsplit(":", 1)[1])


def guard_of(proxy: ChaosProxy) -> ClientGuard:
    running = proxy._running
    assert running is not None
    (guard,) = [r.guard for r in running.runners if isinstance(r, GuardedRunner)]
    return guard


async def until(condition: Callable[[], bool], *, limit: float = 5.0) -> None:
    """Wait (bounded) for state that changes asynchronously and has no event to await."""
    async with asyncio.timeout(limit):
        while not condition():  # noqa: ASYNC110 - no event to await
            await asyncio.sleep(0.005)


async def exchange(port: int, data: bytes, *, limit: float = 5.0, eof: bool = False) -> bytes:
    """Send ``data`` (then a FIN with ``eof``) and read until the proxy closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = b""
    try:
        writer.write(data)
        if eof:
            writer.write_eof()
        await writer.drain()
        async with asyncio.timeout(limit):
            while chunk := await reader.read(65536):
                got += chunk
    finally:
        writer.close()
    return got


def events(proxy: ChaosProxy, name: str) -> list[dict[str, Any]]:
    return [x for x in proxy.lines if x["event"] == name]


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_connections_over_the_limit_are_a_503_on_either_loop(loop: str) -> None:
    async def main() -> None:
        async with ChaosProxy(max_connections=2, client_timeout=5.0) as proxy:
            port, guard = port_of(proxy), guard_of(proxy)
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            await until(lambda: guard.open == 2)
            for n in range(1, 4):
                started = time.monotonic()
                answer = await exchange(port, GET)
                assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
                assert answer.endswith(b"\r\n\r\ntoo many connections\n"), answer
                assert time.monotonic() - started < 1.0  # at once
                refused = events(proxy, "rejected")
                assert len(refused) == n and guard.refused == n
            assert {x["status"] for x in refused} == {503}
            assert refused[0]["reason"] == "too many connections (max 2)"
            assert not events(proxy, "request")  # nothing of them was forwarded
            held.pop()[1].close()  # room again: the next client is served
            await until(lambda: guard.open == 1)
            assert (await exchange(port, GET)).startswith(b"HTTP/1.1 200 OK\r\n")
            for _, writer in held:
                writer.close()

    on_loop(loop, main)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_request_body_that_stalls_is_ended_on_either_loop(loop: str) -> None:
    """The body timer asks the transport whether it reads: on uvloop too."""

    async def main() -> None:
        async with ChaosProxy(client_timeout=0.3) as proxy:
            port = port_of(proxy)
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
            started = time.monotonic()
            assert await exchange(port, head + b"0123456789") == b""  # closed, no answer
            assert time.monotonic() - started < 3.0
            await until(lambda: bool(events(proxy, "response_end")))
            (end,) = events(proxy, "response_end")
            assert end["outcome"] == "client_gone"

    on_loop(loop, main)


# --------------------------------------------------------------------------- empty lines


@pytest.mark.parametrize("probe", [b"\r\n", b"\n", b"\r\n\r\n"], ids=["crlf", "lf", "crlf2"])
async def test_an_empty_line_is_no_request_and_a_request_after_it_is_served(probe: bytes) -> None:
    async with ChaosProxy(client_timeout=5.0) as proxy:
        port, guard = port_of(proxy), guard_of(proxy)
        # A probe: an empty line, then it leaves. Nothing to answer, nothing to log.
        assert await exchange(port, probe, eof=True) == b""
        await until(lambda: guard.open == 0)
        # An empty line before a request, in the same read and in a read of its own.
        assert (await exchange(port, probe + GET)).startswith(b"HTTP/1.1 200 OK\r\n")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(probe)
        await writer.drain()
        await until(lambda: guard.open == 1)
        writer.write(GET)
        async with asyncio.timeout(5):
            answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        await until(lambda: len(events(proxy, "response_end")) == 2 and guard.open == 0)
        assert not events(proxy, "rejected") and guard.rejected == 0
        # Part of a head after the empty line is still a request cut short.
        await exchange(port, probe + b"GET /v1/mo", eof=True)
        await until(lambda: bool(events(proxy, "rejected")))
        (line,) = events(proxy, "rejected")
        assert line["status"] == 400
        assert line["reason"] == "client left before its request was handled"


# --------------------------------------------------------------------------- holds

CHAT = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'


def chat(scenario: str) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\n"
        b"X-Chaos-Scenario: %b\r\nContent-Length: %d\r\n\r\n%b"
        % (scenario.encode(), len(CHAT), CHAT)
    )


# The hold timeout itself (each way a fault holds, holds in a row, holds with writes
# between them) is timed exactly on virtual time: tests/server/test_timing.py.


async def test_twenty_hangs_at_max_connections_20_leave_room_within_the_hold_timeout(
    tmp_path: Path,
) -> None:
    """``chaosproxy serve`` (uvloop), ``--max-connections 20 --hold-timeout 2s``: twenty
    ``hang-after-last-event`` streams fill it; a 21st client is refused (503) while they
    hang, and served within the hold timeout and a second, once their holds end."""
    hold = 2.0
    log = tmp_path / "frames.jsonl"
    proc, line = await start_serve(
        "--listen", "127.0.0.1:0", "--admin", "off", "--log", str(log),
        "--max-connections", "20", "--hold-timeout", f"{hold:g}s", "--idle-timeout", "10s",
        "--client-timeout", "10s", "--mock-interval-ms", "1", "--grace", "0s",
    )  # fmt: skip
    hangs: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        port = port_in(line)
        for _ in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(chat("hang-after-last-event"))
            hangs.append((reader, writer))
        received = [b""] * 20
        for i, (reader, _) in enumerate(hangs):  # every event, the terminal one too
            async with asyncio.timeout(10):
                while b"data: [DONE]\n\n" not in received[i]:
                    chunk = await reader.read(65536)
                    assert chunk, received[i]
                    received[i] += chunk
        # Full: the 21st client is refused at once, and served once a hold has ended.
        arrived = time.monotonic()
        refused = 0
        while True:
            answer = await exchange(port, GET)
            if not answer.startswith(b"HTTP/1.1 503 "):
                break
            refused += 1
            assert time.monotonic() - arrived < hold + 1.0, "still refused"
            await asyncio.sleep(0.05)  # a client's retry (each attempt is a new client)
        served = time.monotonic() - arrived
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
        assert refused >= 1 and served <= hold + 1.0, (refused, served)
        # The hung streams were aborted: never a clean end.
        for i, (reader, _) in enumerate(hangs):
            async with asyncio.timeout(5):
                received[i] += await reader.read()
            assert not received[i].endswith(b"0\r\n\r\n"), received[i][-40:]
    finally:
        for _, writer in hangs:
            writer.close()
        stderr = await stop_serve(proc)
    assert "Traceback" not in stderr, stderr
    lines = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    ends = [x for x in lines if x["event"] == "response_end" and x["scenario"]]
    assert len(ends) == 20
    assert {(x["outcome"], x.get("reason")) for x in ends} == {("cut", "hold timeout")}
    rejected = [x for x in lines if x["event"] == "rejected"]
    assert len(rejected) == refused and {x["status"] for x in rejected} == {503}


# --------------------------------------------------------------------------- fault budget


async def test_faults_that_multiply_events_are_aborted_by_the_budget_live() -> None:
    """Three ``duplicate: {times: 1000}`` would make 10⁹ events of the first one (the
    audit's 11,352 faults took 24 s of CPU and sent nothing in 30 s). The response is
    aborted at once: its head, nothing of the flood, never a clean end; the ``action``
    line says why; the next request is served as ever."""
    flood = parse_scenario(
        "faults:\n" + "  - duplicate: {times: 1000}\n" * 3, "<flood>", default_name="flood"
    )
    one = parse_scenario("faults: [{duplicate: {nth: 2, times: 1000}}]", "<one>", "one")
    async with ChaosProxy(scenarios=[flood, one], mock_tokens=6) as proxy:
        started = time.process_time()
        got = await exchange(port_of(proxy), chat("flood"))
        assert time.process_time() - started < 1.0
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and b"data:" not in body
        assert not body.endswith(b"0\r\n\r\n")
        await until(lambda: len(events(proxy, "response_end")) == 1)
        (action,) = events(proxy, "action")
        assert {k: action[k] for k in ("action", "how", "fault", "reason")} == {
            "action": "cut",
            "how": "abort",
            "fault": "duplicate",
            "reason": BUDGET_REASON,
        }
        assert events(proxy, "response_end")[0]["outcome"] == "cut"
        # One large amplification fits the reserve: sent whole.
        got = await exchange(port_of(proxy), chat("one"))
        assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        assert got.count(b'"content":"') >= 1000
