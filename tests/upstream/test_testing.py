"""chaosproxy.upstream.testing: the scripted upstream is the real client (pool, connection,
response) over in-memory sockets: what a test scripts arrives as reads, ends as the
connection ends, and the real proxy runs on it. The Reply contract it keeps as the pool
over a socket does is test_interface.py's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal

import aiohttp
import orjson
import pytest

from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.start import RunningProxy, start_proxy
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import parse_scenario
from chaosproxy.upstream import (
    UpstreamClosed,
    UpstreamConnectError,
    UpstreamError,
    UpstreamHeadTimeout,
    UpstreamIdleTimeout,
    UpstreamResponse,
    UpstreamTimeout,
)
from chaosproxy.upstream.testing import Answer, MockUpstream, Request
from tests.support.body_sink import SINKS, Sink, check_sinks
from tests.support.markdown import python_block
from tests.support.proxies import LogCapture
from tests.support.scripted_upstream import until

pytestmark = pytest.mark.timeout(20)


@pytest.fixture(autouse=True)
def sinks_kept_the_contract() -> Iterator[None]:
    """A broken contract is seen in a loop callback, where an assert would be lost."""
    SINKS.clear()
    yield
    check_sinks()


def answering(answer: Answer) -> MockUpstream:
    return MockUpstream(lambda request: answer)


async def started(upstream: MockUpstream, sink: Sink, target: str = "/v1/s") -> UpstreamResponse:
    reply = await upstream.request("GET", target, [])
    reply.start(sink)
    return reply


# ---------------------------------------------------------------------- requests


async def test_the_handler_sees_the_request_the_pool_sent_and_the_reply_carries_the_answer() -> (
    None
):
    seen: list[Request] = []

    def handler(request: Request) -> Answer:
        seen.append(request)
        return Answer(
            status=201,
            headers=[("Content-Type", "text/plain"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")],
            body=[b"one", b"two"],
        )

    upstream = MockUpstream(handler)
    reply = await upstream.request(
        "POST", "/v1/x?q=1", [("Authorization", "Bearer k"), ("X-A", "1")], b'{"a":1}'
    )
    assert seen == upstream.requests
    (request,) = seen
    assert (request.method, request.target, request.body) == ("POST", "/v1/x?q=1", b'{"a":1}')
    # The head as the pool wrote it: its Host and framing, the caller's headers in order.
    assert list(request.headers.items()) == [
        ("Host", "mock.invalid"),
        ("Authorization", "Bearer k"),
        ("X-A", "1"),
        ("Content-Length", "7"),
    ]
    assert (reply.status, reply.reason, reply.version) == (201, "Created", (1, 1))
    assert reply.headers["content-type"] == "text/plain"
    assert reply.headers.getall("Set-Cookie") == ["a=1", "b=2"]
    assert reply.headers["Transfer-Encoding"] == "chunked"  # the body goes chunked
    assert not reply.complete

    sink = Sink()
    reply.start(sink)
    assert sink.calls == []  # never from inside start(): each read is its own callback
    assert await sink.ended() is None
    assert sink.calls == [b"one", b"two"]  # one body_data per read, not joined
    assert reply.complete
    assert reply.body_bytes == 6
    await upstream.close()


async def test_a_streamed_request_body_goes_chunked_and_arrives_whole() -> None:
    upstream = answering(Answer())

    async def chunks() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"cd"

    await upstream.request("PUT", "/u", [], chunks())
    (request,) = upstream.requests
    assert (request.body, request.headers["Transfer-Encoding"]) == (b"abcd", "chunked")
    await upstream.request("PUT", "/u", [], chunks(), content_length=4)
    assert (upstream.requests[-1].body, upstream.requests[-1].headers["Content-Length"]) == (
        b"abcd",
        "4",
    )
    with pytest.raises(ValueError, match="request body was 4 bytes, content_length=5"):
        await upstream.request("PUT", "/u", [], chunks(), content_length=5)  # the pool's check
    await upstream.close()


async def test_an_async_handler_and_failures_at_request_time() -> None:
    slow = asyncio.Event()

    async def handler(request: Request) -> Answer:
        await asyncio.sleep(0)  # (an awaited answer)
        if request.target == "/timeout":
            raise UpstreamTimeout("connect to upstream mock:80 timed out after 10 s")
        if request.target == "/refused":
            raise UpstreamConnectError("upstream mock:80 unreachable: Connection refused")
        if request.target == "/bug":
            raise KeyError("oops")
        if request.target == "/empty":
            return Answer(body=[b"a", b""])
        if request.target == "/slow":
            await slow.wait()
        return Answer(body=[b"ok"])

    upstream = MockUpstream(handler)
    with pytest.raises(UpstreamTimeout):
        await upstream.request("GET", "/timeout", [])
    with pytest.raises(UpstreamConnectError) as info:
        await upstream.request("GET", "/refused", [])
    assert not isinstance(info.value, UpstreamTimeout)
    with pytest.raises(UpstreamError, match=r"^KeyError\('oops'\)$"):
        await upstream.request("GET", "/bug", [])  # a bug in the handler: said as an error
    with pytest.raises(UpstreamError, match=r"an answer's read cannot be empty"):
        await upstream.request("GET", "/empty", [])
    with pytest.raises(
        UpstreamHeadTimeout, match=r"^upstream mock.invalid:80 sent no response head within 0.05 s$"
    ):
        await upstream.request("GET", "/slow", [], head_timeout=0.05)  # the connection's timer
    sink = Sink()
    await started(upstream, sink, "/ok")
    assert await sink.ended() is None
    assert sink.calls == [b"ok"]
    targets = [r.target for r in upstream.requests]
    assert targets == ["/timeout", "/refused", "/bug", "/empty", "/slow", "/ok"]
    await upstream.close()


async def test_the_readmes_example_plays_as_it_says() -> None:
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(python_block("## Development"), "README.md", "exec"), namespace)
    upstream = MockUpstream(namespace["handler"])
    reply = await upstream.request("GET", "/v1/chat/completions", [])
    sink = Sink()
    reply.start(sink)
    error = await sink.ended()
    assert reply.headers["Content-Type"] == "text/event-stream"
    assert sink.calls == [b"data: 1\n\n", b"data: 2\n\n"]
    assert sink.times[1] - sink.times[0] >= 0.045
    assert str(error) == "upstream mock.invalid:80 reset the connection after 18 body bytes"
    await upstream.close()


# ---------------------------------------------------------------------- the body's timeline


# (Each read after its pause, the end after the last one: on virtual time, exactly,
# in test_upstream_timing.py.)


@pytest.mark.parametrize(
    ("end", "message"),
    [
        ("close", "upstream mock.invalid:80 closed the connection after 2 body bytes"),
        ("reset", "upstream mock.invalid:80 reset the connection after 2 body bytes"),
    ],
)
async def test_a_body_cut_short_by_the_connection(
    end: Literal["close", "reset"], message: str
) -> None:
    upstream = answering(Answer(body=[b"a", b"b"], end=end))
    sink = Sink()
    reply = await started(upstream, sink)
    error = await sink.ended()
    assert isinstance(error, UpstreamClosed)
    assert (str(error), error.body_bytes) == (message, 2)
    assert sink.calls == [b"a", b"b"]
    assert not reply.complete
    assert upstream.stats.active == 0  # the connection went with it
    await upstream.close()


async def test_a_clean_end_keeps_the_connection_and_a_cut_one_does_not() -> None:
    answers = iter([Answer(body=[b"1"]), Answer(body=[b"2"], end="close"), Answer(body=[b"3"])])
    upstream = MockUpstream(lambda request: next(answers))
    for expected in (b"1", b"2", b"3"):
        sink = Sink()
        await started(upstream, sink)
        await sink.ended()
        assert sink.calls == [expected]
        await until(lambda: upstream.stats.active == upstream.stats.idle)
    assert (upstream.stats.opened, upstream.stats.reused) == (2, 1)
    await upstream.close()


async def test_hold_never_ends_until_closed_and_the_idle_timeout_is_the_connections() -> None:
    upstream = answering(Answer(body=[b"a"], end="hold"))
    sink = Sink()
    reply = await started(upstream, sink)
    await until(lambda: sink.calls == [b"a"])
    assert sink.ends == [] and not reply.complete
    reply.close()
    (end,) = sink.ends
    assert isinstance(end, UpstreamClosed) and end.body_bytes == 1
    assert str(end) == (
        "response from upstream mock.invalid:80 closed by the caller after 1 body bytes"
    )

    for answer in (Answer(body=[b"a"], end="hold"), Answer(body=[b"a", 5, b"b"])):
        mock = answering(answer)
        reply = await mock.request("GET", "/", [], idle_timeout=0.05)
        sink = Sink()
        reply.start(sink)
        error = await sink.ended()
        assert isinstance(error, UpstreamIdleTimeout) and error.body_bytes == 1
        assert sink.calls == [b"a"]
        await mock.close()
    await upstream.close()


# ---------------------------------------------------------------------- pause and resume


async def test_pause_holds_the_body_and_resume_delivers_it_from_the_loop() -> None:
    def pause_after_first(sink: Sink) -> None:
        if len(sink.calls) == 1:
            reply.pause_reading()

    sink = Sink(pause_after_first)
    upstream = answering(Answer(body=[b"a", b"b", 0.01, b"c"]))
    reply = await upstream.request("GET", "/", [])
    reply.start(sink)
    await until(lambda: reply.complete)  # all of it arrived, and the end
    assert sink.calls == [b"a"] and sink.ends == []  # paused: the response holds the rest
    assert reply.body_bytes == 3
    reply.resume_reading()
    assert sink.calls == [b"a"]  # not from inside resume_reading()
    assert await sink.ended() is None
    assert sink.calls == [b"a", b"bc"]  # what was held, in one call
    await upstream.close()


# ---------------------------------------------------------------------- close


async def test_a_closed_reply_delivers_nothing_more_and_drops_its_connection() -> None:
    sink = Sink()
    upstream = answering(Answer(body=[b"a", 0.02, b"b", 0.02, b"c"]))
    reply = await started(upstream, sink)
    await until(lambda: sink.calls == [b"a"])
    reply.close()
    (end,) = sink.ends
    assert isinstance(end, UpstreamClosed) and end.body_bytes == 1
    reply.close()  # idempotent
    reply.resume_reading()
    await until(lambda: upstream.stats.active == 0)
    assert sink.calls == [b"a"] and len(sink.ends) == 1
    assert not reply.complete
    await upstream.close()


async def test_close_from_inside_body_data_and_a_held_read_lost() -> None:
    sink = Sink(lambda s: reply.close())
    upstream = answering(Answer(body=[b"a", b"b"]))
    reply = await upstream.request("GET", "/", [])
    reply.start(sink)
    assert isinstance(await sink.ended(), UpstreamClosed)
    await until(lambda: upstream.stats.active == 0)
    assert sink.calls == [b"a"]

    # A read arrived while paused and was never delivered: closing loses it.
    other = Sink()
    reply = await upstream.request("GET", "/", [])
    reply.pause_reading()
    reply.start(other)
    await until(lambda: reply.body_bytes == 2)
    reply.close()
    assert other.calls == [] and isinstance(other.ends[0], UpstreamClosed)
    assert not reply.complete
    await upstream.close()


async def test_close_before_start_and_after_a_clean_end() -> None:
    upstream = answering(Answer(body=[b"a"]))
    reply = await upstream.request("GET", "/", [])
    reply.close()
    sink = Sink()
    reply.start(sink)  # the end is said at once
    assert sink.calls == [] and isinstance(sink.ends[0], UpstreamClosed)
    with pytest.raises(RuntimeError):
        reply.start(Sink())

    done = Sink()
    reply = await started(upstream, done)
    assert await done.ended() is None
    reply.close()
    assert done.ends == [None] and reply.complete
    await upstream.close()


async def test_closing_the_upstream_ends_open_replies_and_refuses_requests() -> None:
    upstream = answering(Answer(body=[b"a"], end="hold"))
    sink = Sink()
    await started(upstream, sink)
    await until(lambda: sink.calls == [b"a"])
    await upstream.close()
    end = await sink.ended()
    assert isinstance(end, UpstreamClosed) and end.body_bytes == 1
    assert str(end) == "the pool for upstream mock.invalid:80 was closed after 1 body bytes"
    with pytest.raises(UpstreamConnectError, match="is closed"):
        await upstream.request("GET", "/", [])


# ---------------------------------------------------------------------- under the proxy


PATH = "/v1/chat/completions"


def chunk(content: str) -> bytes:
    payload = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


EVENTS = [chunk("He"), chunk("ll"), chunk("o"), b"data: [DONE]\n\n"]
SSE = {"Content-Type": "text/event-stream"}


@pytest.fixture
async def serve(log_capture: LogCapture) -> AsyncIterator[Callable[..., Any]]:
    """Serve a proxy app whose upstream is ``upstream``; returns its base URL."""
    proxies: list[RunningProxy] = []

    async def start(upstream: MockUpstream, scenarios: dict[str, str] | None = None) -> str:
        log = FrameLog(None)
        log.add_listener(log_capture)
        parsed = {
            name: parse_scenario(text, f"<{name}>", default_name=name)
            for name, text in (scenarios or {}).items()
        }
        proxy = await start_proxy(
            EMBEDDED.replace(upstream="http://mock.invalid", seed=7),
            scenarios=parsed,
            log=log,
            upstream_factory=lambda: upstream,
        )
        proxies.append(proxy)
        return proxy.url

    yield start
    for proxy in proxies:
        await proxy.close()


async def test_a_request_through_the_proxy_with_a_scenario(
    serve: Callable[..., Any], log_capture: LogCapture
) -> None:
    upstream = answering(
        Answer(headers=SSE, body=[EVENTS[0], *(x for e in EVENTS[1:] for x in (0.01, e))])
    )
    url = await serve(upstream, {"drop": "faults:\n  - drop: {kind: delta, nth: 2}"})
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + PATH,
            json={"stream": True},
            headers={"X-Chaos-Scenario": "drop", "Authorization": "Bearer sk-test"},
        ) as resp,
    ):
        assert resp.status == 200
        body = await resp.read()
        request_id = resp.headers["X-Chaos-Request-Id"]
    assert body == EVENTS[0] + EVENTS[2] + EVENTS[3]  # the second delta was dropped
    (request,) = upstream.requests
    assert (request.method, request.target) == ("POST", PATH)
    assert orjson.loads(request.body) == {"stream": True}
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.headers["Accept-Encoding"] == "identity"
    assert "X-Chaos-Scenario" not in request.headers
    end = await log_capture.wait_end(request_id)
    assert end["outcome"] == "completed"
    assert end["faults_applied"] == {"drop": 1}
    assert (end["events_in"], end["events_out"]) == (4, 3)


async def test_upstream_failures_through_the_proxy(
    serve: Callable[..., Any], log_capture: LogCapture
) -> None:
    def handler(request: Request) -> Answer:
        if request.target == "/timeout":
            raise UpstreamTimeout("connect to upstream mock:80 timed out after 10 s")
        if request.target == "/refused":
            raise UpstreamConnectError("upstream mock:80 unreachable: Connection refused")
        if request.target == "/dies":
            return Answer(headers=SSE, body=[b"data: 1\n\n"], end="reset")
        return Answer(headers=SSE, body=[b"data: 1\n\n"], end="hold")

    upstream = MockUpstream(handler)
    url = await serve(upstream)
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/timeout") as resp:
            assert resp.status == 504
        async with session.get(url + "/refused") as resp:
            assert resp.status == 502
            assert "Connection refused" in resp.headers["X-Chaos-Proxy-Error"]
        async with session.get(url + "/dies") as resp:
            request_id = resp.headers["X-Chaos-Request-Id"]
            assert await resp.content.readexactly(9) == b"data: 1\n\n"
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()  # no clean end
        end = await log_capture.wait_end(request_id)
        assert end["outcome"] == "upstream_error"
        assert "upstream mock.invalid:80 reset the connection after 9 body bytes" in end["error"]

        # A client that leaves mid-stream: the proxy closes the reply it held.
        async with session.get(url + "/holds") as resp:
            request_id = resp.headers["X-Chaos-Request-Id"]
            assert await resp.content.readexactly(9) == b"data: 1\n\n"
        assert (await log_capture.wait_end(request_id))["outcome"] == "client_gone"
        await until(lambda: upstream.stats.active == 0)  # closed, not left streaming
