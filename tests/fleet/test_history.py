"""The fleet's shared resume history (chaosproxy/fleet/history.py), its parts against a
real ``redis-server`` without a proxy: where a stream is kept (``MirrorKeys``), the
owner's writes (``MirrorWriter``: its events, state and trails, held while Redis is
away, deleted when the owner lets the stream go), and another replica's import of
what was written. Reconnects across a live fleet are tests/e2e/test_fleet_resume.py's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from chaosproxy.core.history import HistoryStore, Kept, ResumeConfig, StreamHistory
from chaosproxy.core.providers.base import EventContent
from chaosproxy.fleet.history import HistoryMirror, MirrorKeys
from chaosproxy.fleet.shared import SharedState
from tests.support.fleet_parts import REDIS, redis_server

pytestmark = [
    pytest.mark.skipif(REDIS is None, reason="needs Debian's redis-server"),
    pytest.mark.xdist_group("fleet"),
]

SSE = [("Content-Type", "text/event-stream")]
KEY = "chaosproxy:t:h:s:ten:tok1"


def test_the_keys_of_a_stream() -> None:
    keys = MirrorKeys("chaosproxy:t:h:")
    stream = StreamHistory("s", "r-1", ResumeConfig(), SSE, 0.0, tenant="ten", token="tok1")
    assert keys.of(stream) == keys.stream("s", "ten", "tok1") == KEY
    assert keys.upstream("s", "ten", "up-7") == "chaosproxy:t:h:u:s:ten:up-7"


async def until(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    """Ask until ``check`` holds (the writer is a background task of its own)."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "not written in time"
        await asyncio.sleep(0.005)


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[Callable[[str], SharedState]]:
    made: list[SharedState] = []
    with redis_server(tmp_path) as redis:

        def replica(name: str) -> SharedState:
            made.append(SharedState(redis.url, "t", name, 1.0))
            return made[-1]

        yield replica
        for shared in made:
            await shared.close()


def events(stream: StreamHistory, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        raw = f'id: tok1.{n + 1}\ndata: {{"n": {n}}}\n\n'.encode()
        stream.append(Kept(f"tok1.{n + 1}", None, n + 1, raw), float(n))


async def test_the_owner_writes_its_stream_and_another_replica_imports_it(
    replicas: Callable[[str], SharedState],
) -> None:
    owner_state = replicas("pod-a")
    owner = HistoryMirror(owner_state)
    redis = owner_state.redis
    stream = HistoryStore().begin("s", ResumeConfig(), "r-1", SSE, 0.0, tenant="ten", token="tok1")
    owner.begin(stream)
    events(stream, 3)
    owner.appended(stream)
    stream.end("completed", 3.0)
    owner.ended(stream)
    owner.sent(stream, [("tok1.1", EventContent(text=((0, "hi"),)))])

    async def written() -> bool:
        meta = await redis.get(KEY + ":m")
        return meta is not None and orjson.loads(meta)["state"] == "completed"

    await until(written)
    entries = await redis.xrange(KEY)
    assert [(i.decode(), f[b"ord"], f[b"id"]) for i, f in entries] == [
        ("0-1", b"1", b"tok1.1"),
        ("0-2", b"2", b"tok1.2"),
        ("0-3", b"3", b"tok1.3"),
    ]
    assert orjson.loads(await redis.get(KEY + ":m")) == {
        "request_id": "r-1",
        "headers": [["Content-Type", "text/event-stream"]],
        "owner": "pod-a",
        "state": "completed",
        "first": 0,
        "total": 3,
    }
    trails = [orjson.loads(t) for t in await redis.lrange(KEY + ":s", 0, -1)]
    assert trails == [["pod-a", [["tok1.1", [[[0, "hi"]], [], [], False, [], False]]]]]
    assert 0 < await redis.pttl(KEY) <= 60_000

    other = HistoryMirror(replicas("pod-b"))
    store = HistoryStore()
    notified: list[Any] = []
    found = await other.refresh(
        store,
        "s",
        ResumeConfig(),
        "tok1.2",
        "ten",
        provider="auto",
        path="/v1/chat/completions",
        notify=notified.append,
    )
    assert found is True
    copy = store.find("s", "tok1.2", tenant="ten")
    assert copy is not None
    imported = copy[0]
    assert [k.raw for k in imported.events] == [k.raw for k in stream.events]
    assert (imported.state, imported.total, imported.request_id) == ("completed", 3, "r-1")
    await other.close()
    await owner.close()


async def test_writes_wait_while_redis_is_away_and_a_stream_let_go_is_deleted(
    replicas: Callable[[str], SharedState],
) -> None:
    shared = replicas("pod-a")
    owner = HistoryMirror(shared)
    redis = shared.redis
    stream = HistoryStore().begin("s", ResumeConfig(), "r-1", SSE, 0.0, tenant="ten", token="tok1")
    shared.status = "local"  # Redis away, as the counters found it
    owner.begin(stream)
    events(stream, 2)
    owner.appended(stream)
    assert owner.writer.waiting  # kept for later
    assert await redis.exists(KEY, KEY + ":m") == 0
    shared.status = "shared"  # back: written by the writer's next look

    async def both() -> bool:
        return int(await redis.xlen(KEY)) == 2

    await until(both)
    owner.dropped(stream)

    async def deleted() -> bool:
        return int(await redis.exists(KEY, KEY + ":m")) == 0

    await until(deleted)
    writer = owner.writer  # (read again: the writer task has run since)
    assert (writer.waiting, writer.failures) == (False, 0)
    await owner.close()
