"""What the shell needs of an upstream client (chaosproxy/upstream/interface.py): the
``Reply`` contract, kept the same by the real pool over a socket and by the in-memory
double (chaosproxy/upstream/testing.py) on one paced body: pause holds the body and
resume delivers it from the loop, not from inside the call; a close mid-body ends it
once with what had arrived; a close before the start or after the end changes nothing
more. (That both satisfy the protocols is mypy's check, in the module.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from chaosproxy.upstream import UpstreamClosed, UpstreamPool
from chaosproxy.upstream.interface import Reply, Upstream
from chaosproxy.upstream.testing import Answer, MockUpstream
from tests.support.body_sink import SINKS, Sink, check_sinks
from tests.support.scripted_upstream import until

pytestmark = pytest.mark.timeout(20)


@pytest.fixture(autouse=True)
def sinks_kept_the_contract() -> Iterator[None]:
    SINKS.clear()
    yield
    check_sinks()


# ---------------------------------------------------------------------- the same as the pool

PIECES = [b"a", b"b", b"c"]
GAP = 0.03


async def paced(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    for i, piece in enumerate(PIECES):
        if i:
            await asyncio.sleep(GAP)
        await resp.write(piece)
    await resp.write_eof()
    return resp


@pytest.fixture(params=["pool", "mock"])
async def reply_to(
    request: pytest.FixtureRequest, aiohttp_server: Any
) -> AsyncIterator[Callable[[], Awaitable[Reply]]]:
    """Replies of the same paced body, from the real pool (over a socket) or the double."""
    upstream: Upstream
    if request.param == "pool":
        app = web.Application()
        app.router.add_get("/paced", paced)
        server = await aiohttp_server(app)
        upstream = UpstreamPool(f"http://127.0.0.1:{server.port}")
    else:
        body = [PIECES[0], *(x for p in PIECES[1:] for x in (GAP, p))]
        upstream = MockUpstream(lambda request: Answer(body=body))

    async def get() -> Reply:
        return await upstream.request("GET", "/paced", [])

    yield get
    await upstream.close()


async def test_contract_pause_and_resume(reply_to: Callable[[], Awaitable[Reply]]) -> None:
    def pause_after_first(sink: Sink) -> None:
        if len(sink.calls) == 1:
            reply.pause_reading()

    reply = await reply_to()
    sink = Sink(pause_after_first)
    reply.start(sink)
    await until(lambda: bool(sink.calls))
    await asyncio.sleep(3 * GAP)
    assert len(sink.calls) == 1 and sink.ends == []
    reply.resume_reading()
    assert len(sink.calls) == 1  # not from inside resume_reading()
    assert await sink.ended() is None
    assert b"".join(sink.calls) == b"".join(PIECES) and reply.complete


async def test_contract_close_mid_body(reply_to: Callable[[], Awaitable[Reply]]) -> None:
    reply = await reply_to()
    sink = Sink()
    reply.start(sink)
    await until(lambda: sink.calls == [b"a"])
    reply.close()
    (end,) = sink.ends
    assert isinstance(end, UpstreamClosed) and end.body_bytes == 1
    reply.close()
    await asyncio.sleep(3 * GAP)
    assert sink.calls == [b"a"] and len(sink.ends) == 1 and not reply.complete


async def test_contract_close_before_start_and_after_the_end(
    reply_to: Callable[[], Awaitable[Reply]],
) -> None:
    reply = await reply_to()
    reply.close()
    sink = Sink()
    reply.start(sink)
    assert sink.calls == [] and isinstance(sink.ends[0], UpstreamClosed)

    reply = await reply_to()
    done = Sink()
    reply.start(done)
    assert await done.ended() is None
    reply.close()
    assert done.ends == [None] and reply.complete
