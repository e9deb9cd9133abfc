"""Property-based fuzzing of raw request heads through the live proxy (issue 11).

Whatever arrives, the proxy answers or closes, gives an account of it in the log (a
``rejected`` line, or a ``request`` and its one ``response_end``), logs no traceback,
and keeps serving: a normal request succeeds after every example.

The proxy runs in a thread with its own event loop, so hypothesis drives plain
blocking sockets and one proxy serves every example.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.start import RunningProxy, start_proxy
from chaosproxy.observe.logs import FrameLog
from chaosproxy.server.guard import GuardedRunner
from tests.support.properties import examples
from tests.support.proxies import LogCapture
from tests.support.scripted_upstream import ScriptedUpstream, scripted_upstream

T = TypeVar("T")
TIMEOUT = 0.25


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Lab:
    """A proxy (and its scripted upstream) on an event loop of its own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.log = LogCapture()
        self.complaints = Collect()
        self._stack = contextlib.AsyncExitStack()
        self.proxy: RunningProxy
        self.upstream: ScriptedUpstream

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        self.upstream = await self._stack.enter_async_context(scripted_upstream())
        log = FrameLog(None)
        log.add_listener(self.log)
        config = EMBEDDED.replace(
            upstream=self.upstream.url + "/base", client_timeout=TIMEOUT, max_connections=64
        )
        self.proxy = await start_proxy(config, scenarios={}, log=log)

    async def _stop(self) -> None:
        await self.proxy.close()
        await self._stack.aclose()

    def __enter__(self) -> Lab:
        self.thread.start()
        self.run(self._start())
        logging.getLogger("aiohttp").addHandler(self.complaints)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("aiohttp").removeHandler(self.complaints)
        self.run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    @property
    def port(self) -> int:
        return int(self.proxy.url.rsplit(":", 1)[1])

    @property
    def open_connections(self) -> int:
        [guard] = [r.guard for r in self.proxy.runners if isinstance(r, GuardedRunner)]
        return guard.open


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with Lab() as running:
        yield running


def wait_for(condition: Callable[[], bool], limit: float = 5.0) -> None:
    """Poll (bounded) for state another thread changes."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


# --------------------------------------------------------------------------- strategies

METHODS = ["GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "CONNECT", "PRI", "get", "G(T", ""]
TARGETS = [
    "/",
    "/v1/chat",
    "/../x",
    "/%2e%2e/x",
    "/%2E./x",
    "/a/../../x",
    "/..%2fx",
    "/..;/x",
    "/a%0Ab",
    "/a%00b",
    "/%zz",
    "//x",
    "/?q=../../x",
    "*",
    "http://evil.example/x",
    "evil.example:443",
    "/a b",
    "/a\tb",
]
VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ", "http/1.1", "HTTP/1.x", "", "HTTP/0.9"]
NAMES = [
    "Host",
    "Content-Length",
    "Transfer-Encoding",
    "Expect",
    "Connection",
    "X-Chaos-Scenario",
    "X-Chaos-Seed",
    "Upgrade",
    "Content-Type",
    "Host ",
    " Host",
    "X:Y",
    "",
]
VALUES = [
    "x",
    "0",
    "5",
    "-1",
    "+5",
    "99999999999999999999999",
    "chunked",
    "Chunked",
    " chunked",
    "chunked, identity",
    "gzip, chunked",
    "100-continue",
    "close",
    "keep-alive",
    "upgrade",
    "websocket",
    "nope",
    "",
]
BODIES = [
    b"",
    b"hello",
    b"0\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\r\n",
    b"ffffffffffffffffffff\r\nx\r\n",
    b"5\r\nhel",
    b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
]
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x17F), max_size=12)


def mostly(draw: st.DrawFn, usual: st.SearchStrategy[T], odd: st.SearchStrategy[T]) -> T:
    """Three times in four the usual, else the odd: most heads get past the request line
    and the framing headers, so the fuzzing reaches what follows them."""
    odd_one = draw(st.booleans()) and draw(st.booleans())  # (integers lean to the ends)
    return draw(odd if odd_one else usual)


@st.composite
def header(draw: st.DrawFn) -> tuple[str, str]:
    name = mostly(draw, st.sampled_from(NAMES[:9]), st.sampled_from(NAMES) | TEXT)
    value = mostly(draw, st.sampled_from(VALUES), TEXT)
    return name, value


@st.composite
def raw_requests(draw: st.DrawFn) -> bytes:
    method = mostly(draw, st.sampled_from(["GET", "POST"]), st.sampled_from(METHODS) | TEXT)
    target = mostly(
        draw, st.sampled_from(TARGETS), TEXT.map(lambda t: "/" + t) | st.sampled_from(TARGETS)
    )
    version = mostly(draw, st.just("HTTP/1.1"), st.sampled_from(VERSIONS))
    eol = mostly(draw, st.just("\r\n"), st.sampled_from(["\n", "\r", "\r\n"]))
    headers = draw(st.lists(header(), max_size=5))
    if mostly(draw, st.just(True), st.booleans()):
        headers.insert(0, ("Host", "x"))
    lines = [f"{method} {target} {version}"] + [f"{n}: {v}" for n, v in headers]
    head = eol.join(lines) + eol
    if mostly(draw, st.just(True), st.booleans()):  # mostly a complete head
        head += eol
    body = draw(st.sampled_from(BODIES) | st.binary(max_size=24))
    return head.encode("utf-8", "surrogateescape") + body


# --------------------------------------------------------------------------- the property


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data``; read until the proxy closes, or until one whole answer with a
    Content-Length is in (then leave: the proxy would keep the connection a while)."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(data)
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                got += chunk
                head, sep, body = got.partition(b"\r\n\r\n")
                if sep and b"\r\nContent-Length: " in head:
                    length = int(head.split(b"\r\nContent-Length: ")[1].split(b"\r\n")[0])
                    if len(body) >= length:
                        break
    return got


def normal_request(lab: Lab) -> int:
    """A normal request's status, once its ``response_end`` is logged."""
    conn = http.client.HTTPConnection("127.0.0.1", lab.port, timeout=5)
    try:
        conn.request("GET", "/v1/normal", headers={"Connection": "close"})
        resp = conn.getresponse()
        resp.read()
        request_id = resp.headers["X-Chaos-Request-Id"]
    finally:
        conn.close()
    wait_for(
        lambda: any(
            x["event"] == "response_end" and x["request_id"] == request_id
            for x in lab.log.lines[-50:]
        )
    )
    wait_for(lambda: lab.open_connections == 0)
    return resp.status


def settled(lab: Lab, start: int) -> list[dict[str, Any]]:
    """The lines logged since ``start``, once no connection is open and every request
    among them has ended."""

    def done() -> bool:
        if lab.open_connections:
            return False
        lines = lab.log.lines[start:]
        started = {x["request_id"] for x in lines if x["event"] == "request"}
        ended = {x["request_id"] for x in lines if x["event"] == "response_end"}
        return started <= ended

    wait_for(done)
    return lab.log.lines[start:]


@settings(
    max_examples=examples(80),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=raw_requests())
def test_whatever_arrives_is_answered_or_closed_and_logged_once(lab: Lab, data: bytes) -> None:
    start = len(lab.log.lines)
    seen = len(lab.upstream.seen)
    answer = exchange(lab.port, data)
    lines = settled(lab, start)
    if answer:
        assert answer.startswith(b"HTTP/1."), answer[:100]
    refusals = [x for x in lines if x["event"] == "rejected"]
    asked = [x for x in lines if x["event"] == "request"]
    ends = [x for x in lines if x["event"] == "response_end"]
    # An account of it: at least one; one per request head (pipelined ones may follow
    # in a body the proxy did not take as one), and never a request without its end.
    assert 1 <= len(refusals) + len(asked) <= data.count(b"\n\n") + data.count(b"\n\r\n") + 1
    assert sorted(x["request_id"] for x in asked) == sorted(x["request_id"] for x in ends)
    # (--hypothesis-show-statistics shows what the examples came to.)
    for kind in {"handled"} if asked else set():
        event(kind)
    for line in refusals:
        event(f"rejected {line['status']}: {line['reason'][:50]}")
    for line in refusals:
        assert line["status"] in (400, 408, 414, 417, 431, 503, 505), line
        assert line["reason"] and line["peer"].startswith("127.0.0.1:")
    # Nothing climbed above the upstream's prefix. (A request after a bodiless one is
    # pipelining, not smuggling: tests/e2e/test_hostile_client.py has the smuggling cases.)
    for request in lab.upstream.seen[seen:]:
        assert request.path_qs.startswith("/base/"), request.path_qs
    assert not lab.complaints.records, lab.complaints.records[0].getMessage()
    assert normal_request(lab) == 200
