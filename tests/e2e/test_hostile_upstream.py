"""Hostile upstreams through the live proxy (issue 11: "a sidecar that always stops,
never waits forever").

Each case plays one way an upstream misbehaves, from a raw socket server whose request
path names the behaviour, and asserts what the client gets (status, bytes, a clean end
or not), what the log says (``outcome``, ``reason``, ``error``, exactly one
``response_end``), that the proxy still serves, and that its open file descriptors come
back to where they were. Then property-based fuzzing of whole responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaosproxy.control.start import RunningProxy
from chaosproxy.upstream import UpstreamPool
from tests.support.cli import port_in, start_serve, stop_serve
from tests.support.properties import examples
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.raw_http import dechunk
from tests.support.scripted_upstream import Script, ScriptedUpstream, until

pytestmark = pytest.mark.timeout(60)

#: The proxy's limits in these tests: short, so every case ends in well under a second.
LIMITS: dict[str, Any] = {"head_timeout": 0.3, "idle_timeout": 0.3, "max_event_size": 4096}
FRAMED = {"framed": "faults: []"}
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---------------------------------------------------------------------- the upstream

Behaviour = Callable[["Peer"], Awaitable[None]]


@dataclass
class Peer:
    """One connection from the proxy, its request head read."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    head: bytes

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_body(self) -> bytes:
        for line in self.head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                return await self.reader.readexactly(int(value))
        return b""

    async def hold(self) -> None:
        """Keep the connection open until the proxy closes it (bounded)."""
        async with asyncio.timeout(10):
            with contextlib.suppress(ConnectionError):
                while await self.reader.read(65536):
                    pass

    def reset(self) -> None:
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


@dataclass
class Hostile:
    """A raw upstream: reads each request head, then plays the behaviour of its path."""

    url: str = ""
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    #: Connections the proxy closed on us while we held them.
    dropped: int = 0
    #: Connections served, in all.
    served: int = 0

    def on(self, path: str) -> Callable[[Behaviour], Behaviour]:
        def register(behaviour: Behaviour) -> Behaviour:
            self.behaviours[path] = behaviour
            return behaviour

        return register


async def ok(peer: Peer) -> None:
    await peer.read_body()
    await peer.send(SSE_HEAD + b"Content-Length: 10\r\nConnection: close\r\n\r\ndata: ok\n\n")


@contextlib.asynccontextmanager
async def hostile_upstream() -> AsyncIterator[Hostile]:
    hostile = Hostile()
    hostile.behaviours["/ok"] = ok
    tasks: set[asyncio.Task[Any]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            hostile.served += 1
            await hostile.behaviours[path](Peer(reader, writer, head))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the proxy went, or the test is over
        finally:
            writer.close()
            tasks.discard(task)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    hostile.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield hostile
    finally:
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        server.close()
        await server.wait_closed()


# ---------------------------------------------------------------------- the client


@dataclass
class Got:
    """What the client received."""

    status: int | None
    headers: dict[str, str]
    body: bytes
    #: The body's framing completed (chunked terminator, or Content-Length reached).
    complete: bool
    #: The connection was reset rather than closed.
    reset: bool

    @property
    def clean(self) -> bool:
        return self.complete and not self.reset

    @property
    def request_id(self) -> str:
        return self.headers["x-chaos-request-id"]


def parse(raw: bytes, reset: bool) -> Got:
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return Got(None, {}, b"", False, reset)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", ""):
        body, complete = dechunk(rest)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        body, complete = rest[:length], len(rest) >= length
    else:
        body, complete = rest, not reset
    return Got(status, headers, body, complete, reset)


async def call(
    proxy: RunningProxy,
    path: str,
    *,
    body: bytes = b"",
    scenario: str | None = None,
    limit: float = 10.0,
) -> Got:
    """One request on its own connection (``Connection: close``); reads to the end. The
    body is written while the answer is read (an early answer is read in full)."""
    loop = asyncio.get_running_loop()
    port = int(proxy.url.rsplit(":", 1)[1].rstrip("/"))
    sock = socket.socket()
    sock.setblocking(False)
    head = [f"POST {path} HTTP/1.1", "Host: proxy", f"Content-Length: {len(body)}"]
    head += ["Connection: close", "Content-Type: application/json"]
    if scenario is not None:
        head.append(f"X-Chaos-Scenario: {scenario}")
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    raw = bytearray()
    reset = False
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))

        async def write() -> None:
            with contextlib.suppress(OSError):
                await loop.sock_sendall(sock, request)

        writer = asyncio.ensure_future(write())
        try:
            async with asyncio.timeout(limit):
                while True:
                    try:
                        chunk = await loop.sock_recv(sock, 65536)
                    except ConnectionResetError:
                        reset = True
                        break
                    if not chunk:
                        break
                    raw += chunk
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
    finally:
        sock.close()
    return parse(bytes(raw), reset)


# ---------------------------------------------------------------------- fixtures


@dataclass
class Live:
    proxy: RunningProxy
    upstream: Hostile
    log: LogCapture
    baseline: int

    async def end(self, got: Got) -> dict[str, Any]:
        """The request's one response_end line."""
        return await self.log.wait_end(got.request_id)

    async def still_serving(self) -> None:
        """A healthy request goes through, and every descriptor is back."""
        got = await call(self.proxy, "/ok")
        assert (got.status, got.body, got.clean) == (200, b"data: ok\n\n", True)
        assert (await self.end(got))["outcome"] == "completed"
        pool = self.proxy.state.upstream
        assert isinstance(pool, UpstreamPool)
        await until(lambda: pool.stats.active == 0)
        await until(lambda: open_fds() <= self.baseline)

    def ends(self) -> list[dict[str, Any]]:
        return [line for line in self.log.lines if line["event"] == "response_end"]


@pytest.fixture
async def live(make_proxy: ProxyFactory, log_capture: LogCapture) -> AsyncIterator[Live]:
    async with hostile_upstream() as upstream:
        proxy = await make_proxy(upstream=upstream.url, scenarios=FRAMED, **LIMITS)
        yield Live(proxy, upstream, log_capture, open_fds())


def assert_failed(end: dict[str, Any], reason: str, *, stage: str, error: str) -> None:
    assert end["outcome"] == "upstream_error", end
    assert end["reason"] == reason, end
    assert end["stage"] == stage, end
    assert error in end["error"], end


# ---------------------------------------------------------------------- no answer, silence


async def test_never_answers_is_a_504_after_the_head_timeout(live: Live) -> None:
    @live.upstream.on("/silent")
    async def silent(peer: Peer) -> None:
        await peer.read_body()
        await peer.hold()
        live.upstream.dropped += 1

    started = asyncio.get_running_loop().time()
    got = await call(live.proxy, "/silent")
    waited = asyncio.get_running_loop().time() - started
    assert got.status == 504 and got.clean
    assert b"chaosproxy_error" in got.body and b"no response head within 0.3 s" in got.body
    assert 0.25 < waited < 3
    end = await live.end(got)
    assert_failed(end, "head timeout", stage="connect", error="no response head within 0.3 s")
    await until(lambda: live.upstream.dropped == 1)  # the proxy let go of the upstream
    await live.still_serving()


@pytest.mark.parametrize("scenario", [None, "framed"])
async def test_stalls_mid_body_is_aborted_after_the_idle_timeout(
    live: Live, scenario: str | None
) -> None:
    @live.upstream.on("/stall")
    async def stall(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
        await peer.hold()
        live.upstream.dropped += 1

    got = await call(live.proxy, "/stall", scenario=scenario)
    assert got.status == 200 and got.body == b"data: 1\n\n" and not got.clean
    end = await live.end(got)
    assert_failed(end, "idle timeout", stage="body", error="sent nothing for 0.3 s mid-body")
    assert end["bytes"] == 9
    await until(lambda: live.upstream.dropped == 1)
    await live.still_serving()


async def test_short_content_length_then_holding_the_socket(live: Live) -> None:
    @live.upstream.on("/short")
    async def short(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(SSE_HEAD + b"Content-Length: 100\r\n\r\n" + b"x" * 40)
        await peer.hold()

    got = await call(live.proxy, "/short")
    assert got.status == 200 and got.body == b"x" * 40 and not got.clean
    end = await live.end(got)
    assert_failed(end, "idle timeout", stage="body", error="after 40 of 100 body bytes")
    await live.still_serving()


async def test_a_stall_fault_over_a_healthy_upstream_is_not_upstream_silence(
    make_proxy: ProxyFactory, log_capture: LogCapture, upstream: ScriptedUpstream
) -> None:
    """The pump holds the upstream itself during a stall (or the upstream keeps sending
    into its inbox): neither is upstream silence, though the stall outlasts the limit."""
    events = b"".join(b"data: %d\n\n" % i for i in range(8))
    upstream.route("/slow", Script.events(events, gap=0.05))
    big = b"".join(b"data: " + b"y" * 1000 + b"\n\n" for _ in range(400))  # > INBOX_LIMIT
    upstream.route("/big", Script.events(big))
    stall = "faults:\n  - stall: {after: 2, duration: 900ms}"
    proxy = await make_proxy(upstream=upstream.url, scenarios={"stall": stall}, **LIMITS)
    for path, body in (("/slow", events), ("/big", big)):
        got = await call(proxy, path, scenario="stall")
        assert (got.status, got.clean) == (200, True), path
        assert got.body == body
        end = await log_capture.wait_end(got.request_id)
        assert end["outcome"] == "completed", end
        assert end["faults_applied"] == {"stall": 1}
        assert end["max_gap_ms"] >= 850
        assert "reason" not in end


# ---------------------------------------------------------------------- cut short, broken


async def test_long_content_length_closed_early(live: Live) -> None:
    @live.upstream.on("/long")
    async def long(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(SSE_HEAD + b"Content-Length: 100\r\n\r\n" + b"x" * 40)

    got = await call(live.proxy, "/long")
    assert got.status == 200 and got.body == b"x" * 40 and not got.clean
    end = await live.end(got)
    assert_failed(end, "closed early", stage="body", error="closed the connection after 40 of 100")
    await live.still_serving()


async def test_bad_chunking_is_a_protocol_error(live: Live) -> None:
    @live.upstream.on("/badchunk")
    async def badchunk(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(
            SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\nZZ\r\nnope\r\n"
        )
        await peer.hold()

    got = await call(live.proxy, "/badchunk", scenario="framed")
    assert got.status == 200 and got.body == b"data: 1\n\n" and not got.clean
    end = await live.end(got)
    assert_failed(end, "protocol error", stage="body", error="upstream body broken")
    await live.still_serving()


async def test_reset_mid_head_is_a_502(live: Live) -> None:
    @live.upstream.on("/reset-head")
    async def reset_head(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Ty")
        peer.reset()

    got = await call(live.proxy, "/reset-head")
    assert got.status == 502 and got.clean
    end = await live.end(got)
    assert_failed(end, "closed early", stage="connect", error="before the response head")
    await live.still_serving()


async def test_reset_mid_body(live: Live) -> None:
    @live.upstream.on("/reset-body")
    async def reset_body(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
        await asyncio.sleep(0.05)  # (so that the head is not in the reset's read)
        peer.reset()

    got = await call(live.proxy, "/reset-body")
    assert got.status == 200 and got.body == b"data: 1\n\n" and not got.clean
    end = await live.end(got)
    assert_failed(end, "closed early", stage="body", error="reset the connection")
    await live.still_serving()


async def test_an_endless_line_is_refused(live: Live) -> None:
    """A line that never ends: framed, the proxy gives up past max_event_size."""

    @live.upstream.on("/endless")
    async def endless(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
        await peer.send(b"6\r\ndata: \r\n")
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(10):
                while True:  # until the proxy lets go
                    await peer.send(b"3e8\r\n" + b"z" * 1000 + b"\r\n")
                    await asyncio.sleep(0.005)
        live.upstream.dropped += 1

    got = await call(live.proxy, "/endless", scenario="framed")
    assert got.status == 200 and got.body == b"data: 1\n\n" and not got.clean
    end = await live.end(got)
    assert_failed(end, "event too large", stage="body", error="longer than max_size (4096")
    await until(lambda: live.upstream.dropped == 1)
    await live.still_serving()


@pytest.mark.parametrize("then", ["more", "silence"])
async def test_a_huge_event_is_refused(live: Live, then: str) -> None:
    """An event over max_event_size. Framed, the proxy refuses it once it knows (at
    the next read, or the body's end); an upstream that then goes silent is ended by
    the idle timeout. Either way the client never gets a clean end."""

    @live.upstream.on("/huge")
    async def huge(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
        event = b"data: " + b"z" * 5000 + b"\n\n"
        await peer.send(b"%x\r\n%b\r\n" % (len(event), event))
        if then == "more":
            await asyncio.sleep(0.05)
            await peer.send(b"9\r\ndata: 2\n\n\r\n")
        await peer.hold()

    got = await call(live.proxy, "/huge", scenario="framed")
    assert got.status == 200 and got.body == b"data: 1\n\n" and not got.clean
    end = await live.end(got)
    if then == "more":
        assert_failed(end, "event too large", stage="body", error="longer than max_size (4096")
    else:
        assert end["outcome"] == "upstream_error" and end["stage"] == "body"
        assert end["reason"] in {"event too large", "idle timeout"}
    await live.still_serving()


# ---------------------------------------------------------------------- allowed, if odd


@pytest.mark.parametrize("scenario", [None, "framed"])
async def test_a_drip_is_not_silence(live: Live, scenario: str | None) -> None:
    body = b"data: hi\n\n"

    @live.upstream.on("/drip")
    async def drip(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(body))
        for i in range(len(body)):
            await asyncio.sleep(0.05)
            await peer.send(body[i : i + 1])

    got = await call(live.proxy, "/drip", scenario=scenario)
    assert (got.status, got.body, got.clean) == (200, body, True)
    end = await live.end(got)
    assert end["outcome"] == "completed" and "reason" not in end
    await live.still_serving()


async def test_interim_responses_before_the_real_head(live: Live) -> None:
    @live.upstream.on("/interim")
    async def interim(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        await peer.send(b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n")
        await peer.send(SSE_HEAD + b"Content-Length: 10\r\n\r\ndata: ok\n\n")

    got = await call(live.proxy, "/interim", scenario="framed")
    assert (got.status, got.body, got.clean) == (200, b"data: ok\n\n", True)
    assert "link" not in got.headers
    assert (await live.end(got))["outcome"] == "completed"
    await live.still_serving()


async def test_http_1_0_close_delimited_body(live: Live) -> None:
    body = b"data: a\n\ndata: b\n\n"

    @live.upstream.on("/old")
    async def old(peer: Peer) -> None:
        await peer.read_body()
        await peer.send(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + body)

    for scenario in (None, "framed"):
        got = await call(live.proxy, "/old", scenario=scenario)
        assert (got.status, got.body, got.clean) == (200, body, True)
        assert (await live.end(got))["outcome"] == "completed"
    await live.still_serving()


@pytest.mark.parametrize("size", [3 * 2**20, 600_000])
async def test_an_early_answer_is_delivered(live: Live, size: int) -> None:
    """The upstream answers (and closes) right after the request head, before it has
    read the body the proxy is still writing (streamed above 1 MiB, else buffered):
    HTTP allows it, and the answer is whole every time."""
    answer = b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
    answer += b"Content-Length: 21\r\nConnection: close\r\n\r\n" + b'{"error":"too large"}'

    @live.upstream.on("/early")
    async def early(peer: Peer) -> None:
        await peer.send(answer)

    statuses = []
    for _ in range(40):
        got = await call(live.proxy, "/early", body=b"q" * size)
        statuses.append(got.status)
        end = await live.end(got)
        assert (got.status, got.body) == (413, b'{"error":"too large"}'), end
        assert end["outcome"] == "completed", end
    assert statuses == [413] * 40
    await live.still_serving()


#: How an upstream that answers on accept goes on after its first bytes: it sends its
#: body once it has read the request; or it has sent its whole answer, and reads the
#: request before it closes, or closes without reading it.
CLOSE = b"Connection: close\r\n"
ON_ACCEPT = {
    "head-then-body": SSE_HEAD + b"Transfer-Encoding: chunked\r\n" + CLOSE + b"\r\n",
    "answer-then-read": SSE_HEAD + b"Content-Length: 10\r\n" + CLOSE + b"\r\ndata: ok\n\n",
    "answer-then-close": SSE_HEAD + b"Content-Length: 10\r\n" + CLOSE + b"\r\ndata: ok\n\n",
}


@pytest.mark.parametrize("how", sorted(ON_ACCEPT))
async def test_an_upstream_that_answers_on_accept_is_served_every_time(
    tmp_path: Path, how: str
) -> None:
    """The upstream sends its response head as it accepts the connection, before it has
    read the request (HTTP allows it, DESIGN section 9). ``chaosproxy serve`` (uvloop,
    which delivers those bytes before the proxy has written its request) serves it 40
    times out of 40: no 502 for a connection that spoke first."""
    first = ON_ACCEPT[how]

    async def on_accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(first)
            await writer.drain()
            if how != "answer-then-close":
                await reader.readuntil(b"\r\n\r\n")
            if how == "head-then-body":
                writer.write(b"a\r\ndata: ok\n\n\r\n0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_accept, "127.0.0.1", 0)
    upstream = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    log = tmp_path / "frames.jsonl"
    proc, line = await start_serve(
        "--listen", "127.0.0.1:0", "--admin", "off", "--log", str(log),
        "--upstream", upstream, "--grace", "0s",
    )  # fmt: skip
    try:
        port = port_in(line)
        answers: list[bytes] = []
        for _ in range(40):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /v1/x HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
            async with asyncio.timeout(10):
                answers.append(await reader.read())
            writer.close()
    finally:
        stderr = await stop_serve(proc)
        server.close()
        await server.wait_closed()
    statuses = [a.split(b"\r\n", 1)[0] for a in answers]
    assert statuses == [b"HTTP/1.1 200 OK"] * 40, sorted(set(statuses))
    assert all(parse(a, False).body == b"data: ok\n\n" for a in answers)
    ends = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    ends = [x for x in ends if x["event"] == "response_end"]
    assert [x["outcome"] for x in ends] == ["completed"] * 40
    assert "Traceback" not in stderr, stderr


# ---------------------------------------------------------------------- fuzzing

_HEADER_NAMES = ["Content-Type", "Content-Length", "Transfer-Encoding", "Connection", "X-A"]
_HEADER_VALUES = [
    "text/event-stream",
    "application/x-ndjson",
    "chunked",
    "gzip, chunked",
    "identity",
    "close",
    "keep-alive",
    "0",
    "5",
    "-1",
    "99999",
    "1e3",
    "",
]


@st.composite
def responses(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    """A response's bytes, in writes, and whether to end with a reset (else a close)."""
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTX/1.1", b""]))
    status = draw(st.one_of(st.integers(100, 599), st.integers(0, 1000)))
    line = version + b" " + str(status).encode() + b" " + draw(st.binary(max_size=12))
    if draw(st.booleans()):
        line = draw(st.binary(max_size=40))
    headers = draw(
        st.lists(
            st.tuples(
                st.one_of(st.sampled_from(_HEADER_NAMES), st.text("abcXY-:\x00 ", max_size=8)),
                st.one_of(st.sampled_from(_HEADER_VALUES), st.text(max_size=12)),
            ),
            max_size=5,
        )
    )
    head = line + b"\r\n"
    for name, value in headers:
        head += name.encode("utf-8", "replace") + b": " + value.encode("utf-8", "replace")
        head += b"\r\n"
    head += b"\r\n"
    events = draw(st.lists(st.binary(max_size=300), max_size=6))
    if draw(st.booleans()):  # chunked, more or less
        body = b""
        for data in events:
            sizes = [b"%x" % len(data), b"%X" % len(data), b"%x;e=1" % len(data), b"g"]
            size = draw(st.sampled_from(sizes))
            body += size + b"\r\n" + data + b"\r\n"
        if draw(st.booleans()):
            body += b"0\r\n\r\n"
    else:
        body = b"".join(events)
    whole = head + body
    cuts = sorted(draw(st.lists(st.integers(0, len(whole)), max_size=3)))
    writes = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
    return [w for w in writes if w], draw(st.booleans())


async def test_fuzzed_responses_always_end(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    """Whatever the upstream sends, the proxy answers or closes, logs exactly one
    response_end, and keeps serving. Hypothesis drives a synchronous function from a
    thread; each example runs on this test's loop."""
    loop = asyncio.get_running_loop()
    async with hostile_upstream() as upstream:
        proxy = await make_proxy(upstream=upstream.url, scenarios=FRAMED, **LIMITS)
        live = Live(proxy, upstream, log_capture, open_fds())
        current: list[tuple[list[bytes], bool]] = []

        @upstream.on("/fuzz")
        async def fuzz(peer: Peer) -> None:
            await peer.read_body()
            writes, reset = current[-1]
            for data in writes:
                await peer.send(data)
            if reset:
                peer.reset()

        async def one(framed: bool) -> None:
            before = len(live.ends())
            got = await call(proxy, "/fuzz", scenario="framed" if framed else None, limit=5)
            # One response_end, whatever the client got (perhaps nothing at all).
            await until(lambda: len(live.ends()) == before + 1)
            end = live.ends()[-1]
            assert end["outcome"] in {"completed", "upstream_error"}, end
            if got.status is not None:
                assert got.request_id == end["request_id"]
                assert got.status == end["status"]
            if end["outcome"] == "completed":
                assert got.clean, (got, end)
            elif end["stage"] == "connect":
                assert got.status in (502, 504) and got.clean, (got, end)
                assert end["reason"] in {"closed early", "protocol error", "head timeout"}, end
            else:
                assert not got.clean, (got, end)
                assert end["reason"] in {"closed early", "protocol error", "event too large"}
            ok = await call(proxy, "/ok")  # and the proxy keeps serving
            assert (ok.status, ok.body, ok.clean) == (200, b"data: ok\n\n", True)
            await until(lambda: len(live.ends()) == before + 2)

        @settings(
            max_examples=examples(60),
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(response=responses(), framed=st.booleans())
        def example(response: tuple[list[bytes], bool], framed: bool) -> None:
            current.append(response)
            asyncio.run_coroutine_threadsafe(one(framed), loop).result(timeout=20)

        await asyncio.to_thread(example)
        await live.still_serving()
