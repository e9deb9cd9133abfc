"""The upstream client's own timing, on virtual time (tests/support/playbook.py's loop):
the head timeout, the idle timeout mid-body, the head's clock stopped while the
caller's body is awaited, a paused response not idle, each read after its pause; each
at its exact time, over the in-memory double (the real pool, connections and
responses). What only a socket shows (the errors' wording over TCP, a server that
closes, keep-alive races) stays in test_connection.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import pytest

from chaosproxy.upstream import UpstreamError, UpstreamHeadTimeout, UpstreamIdleTimeout
from chaosproxy.upstream.testing import Answer, MockUpstream, Request
from tests.support.playbook import virtual_loop

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")


def on_virtual_time(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with asyncio.Runner(loop_factory=virtual_loop) as runner:
        return runner.run(main())


class Timeline:
    """A reply's sink: each body read and the end, at its virtual time (seconds)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.beats: list[tuple[float, bytes | UpstreamError | None]] = []
        self.ended = self.loop.create_future()

    def body_data(self, data: bytes) -> None:
        self.beats.append((self.loop.time(), data))

    def body_end(self, error: UpstreamError | None) -> None:
        self.beats.append((self.loop.time(), error))
        self.ended.set_result(None)


async def never(request: Request) -> Answer:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def test_no_head_within_the_head_timeout_fails_at_the_timeout() -> None:
    async def main() -> float:
        upstream = MockUpstream(never)
        loop = asyncio.get_running_loop()
        with pytest.raises(UpstreamHeadTimeout, match=r"no response head within 0\.2 s$"):
            await upstream.request("GET", "/", [], head_timeout=0.2)
        failed = loop.time()
        await upstream.close()
        return failed

    assert on_virtual_time(main) == 0.2


def test_the_head_clock_stops_while_the_callers_body_is_awaited() -> None:
    async def slow_body() -> AsyncIterator[bytes]:
        for piece in (b"a", b"b", b"c"):
            await asyncio.sleep(0.15)  # the caller is slow, not the upstream
            yield piece

    async def main() -> tuple[float, bytes]:
        upstream = MockUpstream(lambda request: Answer(body=[request.body]))
        await upstream.request("POST", "/", [], slow_body(), head_timeout=0.1)
        at = asyncio.get_running_loop().time()
        await upstream.close()
        return at, upstream.requests[0].body

    at, body = on_virtual_time(main)
    assert (round(at, 6), body) == (0.45, b"abc")  # 3 x 0.15 s, past 0.1 s, no timeout


@pytest.mark.parametrize("end", ["hold", "eof"])
def test_silence_mid_body_fails_at_the_idle_timeout(end: str) -> None:
    answer = Answer(body=[b"a", 0.05, b"b", 5.0, b"c"], end=end)  # type: ignore[arg-type]

    async def main() -> list[tuple[float, Any]]:
        upstream = MockUpstream(lambda request: answer)
        reply = await upstream.request("GET", "/", [], idle_timeout=0.2)
        sink = Timeline()
        reply.start(sink)
        await sink.ended
        await upstream.close()
        return sink.beats

    (t1, a), (t2, b), (t3, error) = on_virtual_time(main)
    assert (round(t1, 6), a, round(t2, 6), b) == (0.0, b"a", 0.05, b"b")
    assert round(t3, 6) == 0.25  # 0.2 s after the last read
    assert isinstance(error, UpstreamIdleTimeout) and error.body_bytes == 2


def test_a_paused_response_is_not_idle() -> None:
    async def main() -> list[tuple[float, Any]]:
        upstream = MockUpstream(lambda request: Answer(body=[b"abcd", 0.3, b"efgh"]))
        reply = await upstream.request("GET", "/", [], idle_timeout=0.1)
        sink = Timeline()
        reply.start(sink)
        reply.pause_reading()  # paused by us for 0.4 s: the silence does not count
        await asyncio.sleep(0.4)
        reply.resume_reading()
        await sink.ended
        await upstream.close()
        return sink.beats

    beats = on_virtual_time(main)
    # Held while paused (the upstream's 0.3 s pause within it), delivered on resume.
    assert [(round(t, 6), x) for t, x in beats] == [(0.4, b"abcdefgh"), (0.4, None)]


def test_reads_come_after_their_pauses_and_the_end_after_the_last_pause() -> None:
    async def main() -> list[tuple[float, Any]]:
        upstream = MockUpstream(lambda request: Answer(body=[b"a", 0.05, b"b", 0.05, b"c", 0.05]))
        reply = await upstream.request("GET", "/", [])
        sink = Timeline()
        reply.start(sink)
        await sink.ended
        await upstream.close()
        return sink.beats

    beats = on_virtual_time(main)
    assert [(round(t, 6), x) for t, x in beats] == [
        (0.0, b"a"),
        (0.05, b"b"),
        (0.1, b"c"),
        (0.15, None),  # the end after the last pause
    ]
