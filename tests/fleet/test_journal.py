"""The fleet's journal (chaosproxy/fleet/journal.py) against a real ``redis-server``:
bounded per tenant (each keeps its newest ``history`` requests, whoever else is busy),
and in bytes as a whole (the tenant holding the most gives up its oldest), with the
bytes Redis holds counted exactly through publications, replacements and evictions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from chaosproxy.core.tenancy import ANONYMOUS
from chaosproxy.fleet.journal import ENTRY_BYTES, FleetJournal
from chaosproxy.fleet.shared import SharedState
from chaosproxy.observe.store import RequestStore
from tests.support.fleet_parts import REDIS, redis_server

pytestmark = [
    pytest.mark.skipif(REDIS is None, reason="needs Debian's redis-server"),
    pytest.mark.xdist_group("fleet"),
]


def lines(request_id: str, frames: int) -> list[Any]:
    """A whole request as the store sees it: its request line, ``frames`` frame lines
    of about 250 bytes each, its end."""
    begin = {
        "event": "request",
        "request_id": request_id,
        "scenario": "s",
        "seed": 1,
        "method": "POST",
        "path": "/v1/chat/completions",
        "ts": "2026-01-01T00:00:00Z",
    }
    sent = [
        {
            "event": "frame",
            "request_id": request_id,
            "scenario": "s",
            "seq": n,
            "offset": n * 200,
            "size": 200,
            "t_ms": 1.0,
            "events": [n + 1],
            "kinds": ["delta"],
            "faults": [],
            "ts": "2026-01-01T00:00:01Z",
        }
        for n in range(frames)
    ]
    end = {
        "event": "response_end",
        "request_id": request_id,
        "scenario": "s",
        "outcome": "completed",
        "status": 200,
        "bytes": 200 * frames,
        "frames": frames,
        "duration_ms": 2.0,
        "integrity": "intact",
        "ts": "2026-01-01T00:00:02Z",
    }
    return [begin, *sent, end]


class Fleet:
    """One replica's journal on a real Redis, over a store that keeps everything."""

    def __init__(self, url: str, history: int, max_bytes: int) -> None:
        self.shared = SharedState(url, "test", "r1", 1.0)
        self.store = RequestStore(history=10_000, max_bytes=1 << 30)
        self.journal = FleetJournal(self.shared, self.store, history, max_bytes)
        self.store.flights = self.journal

    async def serve(self, tenant: str, request_id: str, frames: int = 1) -> None:
        self.journal.whose(request_id, tenant)
        for line in lines(request_id, frames):
            self.store(line)
        await self.journal.published()

    async def listed(self) -> list[str]:
        page, _ = await self.journal.page(10_000, None, None, None, 1 << 30)
        return [orjson.loads(view)["request_id"] for view in page]

    async def held(self) -> tuple[int, dict[str, int], int]:
        """(the journal's own count of its bytes, per tenant, the bytes its entries
        really take in Redis)."""
        redis = self.shared.redis
        prefix = self.shared.prefix + "journal:"
        total = int(await redis.get(prefix + "bytes") or 0)
        held = await redis.zrange(prefix + "held", 0, -1, withscores=True)
        tenants = {t.decode(): int(n) for t, n in held}
        real = 0
        async for key in redis.scan_iter(match=prefix + "r:*"):
            real += await redis.strlen(key)
        return total, tenants, real


@pytest.fixture
async def redis_url(tmp_path: Path) -> AsyncIterator[str]:
    with redis_server(tmp_path) as redis:
        yield redis.url


async def test_a_busy_tenant_never_pushes_out_a_quiet_ones_requests(redis_url: str) -> None:
    fleet = Fleet(redis_url, history=3, max_bytes=1 << 30)
    await fleet.serve("t-quiet", "q-1")
    for i in range(1, 11):
        await fleet.serve("t-busy", f"b-{i}")
    await fleet.serve(ANONYMOUS, "a-1")
    listed = await fleet.listed()
    total, tenants, real = await fleet.held()
    keys = [k async for k in fleet.shared.redis.scan_iter(match="chaosproxy:test:journal:r:*")]
    await fleet.shared.close()
    # Newest first; the busy tenant keeps its newest three, the quiet one its one.
    assert listed == ["a-1", "b-10", "b-9", "b-8", "q-1"]
    assert len(keys) == 5
    assert set(tenants) == {"t-quiet", "t-busy", ANONYMOUS}
    assert total == real == sum(tenants.values())


async def test_past_its_bytes_the_tenant_holding_most_gives_up_its_oldest(
    redis_url: str,
) -> None:
    fleet = Fleet(redis_url, history=100, max_bytes=ENTRY_BYTES)  # (its least)
    await fleet.serve("t-quiet", "q-1", frames=20)
    await fleet.serve("t-quiet", "q-2", frames=20)
    for i in range(1, 41):
        await fleet.serve("t-busy", f"b-{i}", frames=20)
    listed = await fleet.listed()
    total, tenants, real = await fleet.held()
    await fleet.shared.close()
    one = real // len(listed)  # (every entry about the same size)
    assert total == real == sum(tenants.values()) <= ENTRY_BYTES
    assert ENTRY_BYTES - total < 2 * one  # (full, give or take an entry)
    # The quiet tenant keeps both; the busy one its newest that fit beside them.
    assert listed[-2:] == ["q-2", "q-1"]
    busy = listed[:-2]
    assert busy == [f"b-{i}" for i in range(40, 40 - len(busy), -1)]
    assert len(busy) > 2


async def test_a_verdict_recorded_is_counted_and_an_entry_forgotten_stays_so(
    redis_url: str,
) -> None:
    fleet = Fleet(redis_url, history=1, max_bytes=1 << 30)
    await fleet.serve("t-a", "a-1")
    verdict: Any = {"verdict": "detected", "reason": "x" * 500, "missed": []}
    await fleet.journal.record_verdict("a-1", verdict)
    detail = await fleet.journal.detail("a-1")
    counted = await fleet.held()
    await fleet.serve("t-a", "a-2")  # (a-1 goes: history 1)
    await fleet.journal.record_verdict("a-1", verdict)
    after = await fleet.held()
    gone = await fleet.journal.detail("a-1")
    await fleet.shared.close()
    assert detail is not None and detail["summary"]["verdict"] == verdict
    assert counted[0] == counted[2] and counted[1] == {"t-a": counted[2]}
    assert gone is None
    assert after[0] == after[2] and after[1] == {"t-a": after[2]}


async def test_a_request_that_never_ended_leaves_no_tenant_held(redis_url: str) -> None:
    """Tenants are held only until a request's end is published: an end published
    forgets it, and one that never comes is forgotten with the oldest."""
    fleet = Fleet(redis_url, history=5, max_bytes=1 << 30)
    await fleet.serve("t-a", "a-1")
    fleet.journal.whose("a-2", "t-a")
    fleet.store(lines("a-2", 1)[0])  # (begun, not ended)
    await fleet.journal.published()
    held = dict(fleet.journal._tenants)
    await fleet.shared.close()
    assert held == {"a-2": "t-a"}
