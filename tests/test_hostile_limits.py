"""Limits that must hold in front of real traffic (issue 21), each case a script of raw
sockets against the live proxy.

- Connections over ``--max-connections`` are answered 503, with one ``rejected`` line
  and nothing for the event loop's exception handler (a traceback on stderr, in
  ``serve``), on asyncio's loop and on uvloop's (``chaosproxy serve`` runs on uvloop,
  whose transports are not :class:`asyncio.Transport` instances); the guard's body
  timer works on both.
- A probe that sends an empty line (CRLF) and leaves is no request: no ``rejected``
  line; an empty line before a request is ignored (RFC 9112 section 2.2).

The loop-specific cases run their own loop (``asyncio.Runner`` with the loop's
factory, as ``serve`` does with uvloop); the others run on the test's loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from chaosproxy.api import ChaosProxy
from chaosproxy.guard import ClientGuard, GuardedRunner

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
