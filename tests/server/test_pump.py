"""The body pump: flow control and ordering between the upstream's reads (callbacks)
and the client's writes, through real sockets.

A client that does not read must stop the upstream (the proxy holds a bounded amount,
never the whole body), and once it reads again it must get every byte, in order.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from typing import Any

import aiohttp
import pytest

from chaosproxy.core.actions import Cut, Send
from chaosproxy.core.session import Session
from chaosproxy.scenario import parse_scenario
from chaosproxy.server.pump import BodyPump
from chaosproxy.upstream.response import BodySink
from tests.support.proxies import LogCapture, ProxyFactory, upstream_pool
from tests.support.raw_http import dechunk, raw_http
from tests.support.scripted_upstream import (
    BIG_EVENT,
    BIG_MIB,
    BigUpstream,
    Script,
    ScriptedUpstream,
    raw_upstream,
    until,
)


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


@pytest.mark.parametrize("scenario", [None, "framed"])
async def test_a_client_that_does_not_read_stops_the_upstream_then_gets_everything(
    big_upstream: BigUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    scenario: str | None,
) -> None:
    proxy = await make_proxy(upstream=big_upstream.url, scenarios={"framed": "faults: []"})
    port = int(proxy.url.rsplit(":", 1)[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=2**20)
    pick = f"X-Chaos-Scenario: {scenario}\r\n" if scenario else ""
    writer.write(f"GET /big HTTP/1.1\r\nHost: x\r\n{pick}Connection: close\r\n\r\n".encode())
    head = await read_head(reader)
    assert b" 200 " in head.split(b"\r\n")[0]
    request_id = head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()

    # Not reading: the upstream must come to a standstill well before the end of its
    # body. (A proxy that buffered without limit would let it write all of it.)
    total = BIG_MIB * 2**20
    stalled = await standstill(big_upstream)
    assert stalled < total // 2, stalled

    # Reading again: everything arrives, in order, and the stream ends cleanly.
    body = bytearray()
    async with asyncio.timeout(60):
        while chunk := await reader.read(2**20):
            body += chunk
    writer.close()
    decoded, terminated = dechunk(bytes(body))
    assert terminated
    assert len(decoded) == total
    expected = BIG_EVENT * (total // len(BIG_EVENT))
    assert hashlib.sha256(decoded).digest() == hashlib.sha256(expected).digest()
    end = await log_capture.wait_end(request_id)
    assert (end["outcome"], end["bytes"]) == ("completed", total)
    if scenario:
        assert end["frames"] == total // len(BIG_EVENT)  # still one write per event


async def standstill(upstream: BigUpstream, *, every: float = 0.1, polls: int = 5) -> int:
    """How much the upstream had written once it made no progress for ``polls``
    consecutive looks ``every`` seconds apart (fails if it finished instead)."""
    last, same = -1, 0
    async with asyncio.timeout(60):
        while same < polls:
            assert not upstream.finished.is_set(), "the upstream wrote its whole body"
            same = same + 1 if upstream.written == last else 0
            last = upstream.written
            await asyncio.sleep(every)
    return last


async def test_upstream_connections_are_reused_and_dropped_when_the_client_leaves(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    upstream.route("/v1/s", Script.events(b"data: 1\n\ndata: 2\n\n"))
    upstream.route("/v1/hold", Script(writes=[(b"data: 1\n\n", 0)], end="hold"))
    proxy = await make_proxy(upstream=upstream.url, scenarios={"s": "faults: []"})
    pool = upstream_pool(proxy)
    async with aiohttp.ClientSession() as session:
        for pick in ({}, {"X-Chaos-Scenario": "s"}) * 3:
            async with session.get(proxy.url + "/v1/s", headers=pick) as resp:
                assert await resp.read() == b"data: 1\n\ndata: 2\n\n"
    # One after the other, six requests share one upstream connection.
    assert (pool.stats.opened, pool.stats.reused) == (1, 5)

    # Clients that leave mid-stream: their upstream connections are dropped, not pooled
    # half-read and not left open.
    port = int(proxy.url.rsplit(":", 1)[1])
    ids = []
    for _ in range(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/hold HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        ids.append(head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode())
        assert await reader.readuntil(b"data: 1\n\n\r\n")
        writer.close()
    for request_id in ids:
        assert (await log_capture.wait_end(request_id))["outcome"] == "client_gone"
    # (The first of them took the idle pooled connection; the other four opened their own.)
    await until(lambda: pool.stats.active == 0)
    assert (pool.stats.opened, pool.stats.reused, pool.stats.idle) == (5, 6, 0)


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
BROKEN_CHUNKS = (
    SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\nzz\r\n"
)
SHORT_LENGTH = SSE_HEAD + b"Content-Length: 100\r\n\r\ndata: 1\n\ndata: 2\n\n"


@pytest.mark.parametrize("scenario", [None, "framed"])
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (BROKEN_CHUNKS, "upstream body broken: "),
        (SHORT_LENGTH, "upstream failed mid-body: "),
    ],
    ids=["bad-chunk-size", "short-content-length"],
)
async def test_an_upstream_that_breaks_http_mid_body_is_an_explained_unclean_end(
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    answer: bytes,
    error: str,
    scenario: str | None,
) -> None:
    async with raw_upstream(answer) as url:
        proxy = await make_proxy(upstream=url, scenarios={"framed": "faults: []"})
        port = int(proxy.url.rsplit(":", 1)[1])
        pick = f"X-Chaos-Scenario: {scenario}\r\n" if scenario else ""
        raw = await raw_http(port, f"GET /v1/s HTTP/1.1\r\nHost: x\r\n{pick}\r\n".encode())
    head, _, body = raw.partition(b"\r\n\r\n")
    # What did arrive reaches the client, and the body never ends cleanly.
    if b"Content-Length: 100" in head:
        assert body == b"data: 1\n\ndata: 2\n\n"  # 18 of the 100 promised bytes
    else:
        assert dechunk(body) == (b"data: 1\n\ndata: 2\n\n", False)  # never terminated
    request_id = head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()
    end = await log_capture.wait_end(request_id)
    assert (end["outcome"], end["bytes"]) == ("upstream_error", 18)
    assert end["error"].startswith(error)


# --------------------------------------------------------------------------- batches


class RecordingTransport:
    """A client transport that records each call that would reach the socket."""

    def __init__(self) -> None:
        self.calls: list[list[bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append([data])

    def writelines(self, lines: list[bytes]) -> None:
        self.calls.append(list(lines))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (16384, 65536)

    def get_write_buffer_size(self) -> int:
        return 0


class Host:
    """A PumpHost that records the batches it is asked to account for, and what the
    pump's task awaited of it (and of its writer: :class:`Writer`)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.batches: list[list[bytes]] = []
        self.awaited: list[str] = []

    def log_frame(self, send: Send, now: float) -> None:
        self.log_frames([send], now)

    def log_frames(self, sends: list[Send], now: float) -> None:
        self.session_lines = [self.session.wrote(s, now) for s in sends]
        self.batches.append([s.data for s in sends])

    def hold_begin(self, seconds: float, fault: str) -> tuple[float, bool]:
        return seconds, False

    def hold_end(self) -> None:
        pass

    async def hold_expired(self, fault: str) -> None:
        self.awaited.append("expired")

    async def cut(self, cut: Cut) -> None:
        self.awaited.append("cut")
        self.session.cut(cut)

    async def abort(self) -> None:
        self.awaited.append("abort")

    async def write_eof(self) -> None:
        self.awaited.append("eof")


class Writer:
    """The response's writer, as far as the pump uses it: what it awaits is recorded."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def drain(self) -> None:
        self.host.awaited.append("drain")


class Body:
    """An upstream reply whose reads the test hands over."""

    status, reason, complete = 200, "OK", True

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    def start(self, sink: BodySink) -> None:
        loop = asyncio.get_running_loop()
        for data in self.reads:
            loop.call_soon(sink.body_data, data)
        loop.call_soon(sink.body_end, None)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


THREE = b"data: 1\n\ndata: 2\n\ndata: 3\n\n"


def framed(faults: str) -> Session:
    """A session under ``faults``, past a 200 SSE head: ready for its body."""
    session = Session(
        "r-1",
        scenario=parse_scenario(f"faults: {faults}", "<s>", default_name="s"),
        seed=1,
        path="/s",
    )
    session.start(0.0)
    session.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    return session


@pytest.mark.parametrize(
    ("faults", "socket_writes", "batches"),
    [
        # No fault shapes the writes: the three events of the read leave together, each
        # its own chunk and frame line, in one write to the socket.
        ("[]", [[b"9\r\ndata: 1\n\n\r\n", b"9\r\ndata: 2\n\n\r\n", b"9\r\ndata: 3\n\n\r\n"]], 1),
        (
            "[{duplicate: {nth: 2}}]",
            [[b"9\r\ndata: 1\n\n\r\n"] + [b"9\r\ndata: 2\n\n\r\n"] * 2 + [b"9\r\ndata: 3\n\n\r\n"]],
            1,
        ),
        # A transport fault decides the writes: each its own.
        (
            "[{rechunk: {size: 9}}]",
            [[b"9\r\ndata: 1\n\n\r\n"], [b"9\r\ndata: 2\n\n\r\n"], [b"9\r\ndata: 3\n\n\r\n"]],
            3,
        ),
    ],
    ids=["no-faults", "event-fault", "transport-fault"],
)
async def test_the_events_of_one_read_leave_together_unless_a_fault_shapes_the_writes(
    faults: str, socket_writes: list[list[bytes]], batches: int
) -> None:
    session = framed(faults)
    transport = RecordingTransport()
    host = Host(session)
    pump = BodyPump(host, transport, None, Body([THREE]), chunked=True)  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        await pump.run()
    assert transport.calls == socket_writes
    assert len(host.batches) == batches
    assert session.outcome == "completed" and session.frames == sum(map(len, socket_writes))


# --------------------------------------------------------------------------- callbacks


class HoldingHost(Host):
    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.holds: list[tuple[float, str]] = []

    def hold_begin(self, seconds: float, fault: str) -> tuple[float, bool]:
        self.holds.append((seconds, fault))
        return seconds, False


async def test_holds_are_timers_and_the_task_awaits_only_the_end() -> None:
    """Delays, a stall and a throttle hold the response with timers that resume the
    pump: its task is woken for the last chunk alone."""
    session = framed(
        "[{delay: {per_event: 5ms}}, {stall: {after: 2, duration: 20ms}},"
        " {throttle: {bytes_per_second: 2000}}]"
    )
    transport = RecordingTransport()
    host = HoldingHost(session)
    pump = BodyPump(host, transport, Writer(host), Body([THREE]), chunked=True)  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        await pump.run()
    assert host.awaited == ["eof"]
    assert session.outcome == "completed"
    assert b"".join(b"".join(call) for call in transport.calls) == (
        b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n9\r\ndata: 3\n\n\r\n"
    )
    faults = [fault for _, fault in host.holds]
    assert faults.count("delay") == 3 and faults.count("stall") == 1 and "throttle" in faults


class FlowTransport(RecordingTransport):
    """A transport whose protocol tells of its flow control, and whose buffer the test
    fills and drains."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered = 0
        self.listener: Any = None
        self.writing_paused = False

    def get_protocol(self) -> FlowTransport:
        return self

    def set_write_listener(self, listener: Any) -> None:
        self.listener = listener

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def writelines(self, lines: list[bytes]) -> None:
        super().writelines(lines)
        self.buffered += sum(map(len, lines))
        if self.buffered > 65536 and not self.writing_paused:
            self.writing_paused = True
            self.listener(False)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def drain(self) -> None:
        self.buffered = 0
        self.writing_paused = False
        self.listener(True)


class PausingBody(Body):
    def __init__(self, reads: list[bytes]) -> None:
        super().__init__(reads)
        self.paused: list[bool] = []

    def pause_reading(self) -> None:
        self.paused.append(True)

    def resume_reading(self) -> None:
        self.paused.append(False)


async def test_a_full_client_buffer_pauses_the_upstream_until_it_drains() -> None:
    session = framed("[]")
    transport = FlowTransport()
    host = Host(session)
    big = b"data: " + b"x" * 40000 + b"\n\n"
    body = PausingBody([big, big, big])
    pump = BodyPump(host, transport, Writer(host), body, chunked=True)  # type: ignore[arg-type]
    task = asyncio.create_task(pump.run())
    await until(lambda: transport.writing_paused)
    assert body.paused == [True]  # the upstream is paused: nothing more is read
    written = len(transport.calls)
    await asyncio.sleep(0)  # (the reads already handed over wait in the inbox)
    assert len(transport.calls) == written
    transport.drain()  # the client reads: writing resumes, so does the upstream
    async with asyncio.timeout(5):
        await task
    assert body.paused[:2] == [True, False]
    assert host.awaited == ["eof"]  # no drain awaited: the protocol said when
    assert session.outcome == "completed" and session.frames == 3


async def test_a_broken_framing_ends_the_response_once_in_the_pump() -> None:
    """An event past the framer's bound (a FramingError in the read callback): the pump
    hands it to its task, which ends the response as any upstream failure mid-body,
    with one abort and nothing salvaged; ``run`` itself returns (the exchange does no
    more)."""
    session = Session(
        "r-1",
        scenario=parse_scenario("faults: []", "<s>", default_name="s"),
        seed=1,
        path="/s",
        max_event_size=16,
    )
    session.start(0.0)
    session.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    transport = RecordingTransport()
    host = Host(session)
    body = Body([b"data: 1\n\n", b"data: " + b"z" * 40])
    pump = BodyPump(host, transport, Writer(host), body, chunked=True)  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        await pump.run()
    assert host.awaited == ["abort"]
    assert transport.calls == [[b"9\r\ndata: 1\n\n\r\n"]]
    assert (session.outcome, session.reason) == ("upstream_error", "event too large")
    assert session.error is not None
    assert session.error.startswith("upstream broke its framing: ")
