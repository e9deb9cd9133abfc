"""The request journal shared by a fleet (``--state redis://…``: docs/fleet.md).

Each replica publishes what its request store knows of each of its requests (the
summary ``GET /requests`` lists, and the detail ``GET /requests/{id}`` shows) into
Redis when the request begins and when it ends, by one background task: never on a
client's write path. Every replica's admin then answers ``GET /requests``,
``GET /requests/{id}`` and ``POST /requests/{id}/verdict`` from the fleet's journal, so
``verify``, ``summary``, ``frames``, ``last`` and verdicts give the same answer on every
replica.

Bounded per tenant (docs/fleet.md, The journal): each tenant keeps its newest
``history`` requests, so one busy tenant of a shared staging fleet never pushes out
another's; and the whole journal holds at most ``max_bytes`` (``--history-bytes``),
made room for by the tenant holding the most bytes giving up its oldest request. Each
entry is at most :data:`ENTRY_BYTES` (frames beyond dropped from the fleet's copy, said
in ``frames_in_fleet``; the replica that served the request keeps them all).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import orjson

from chaosproxy.core.tenancy import ANONYMOUS
from chaosproxy.observe.journal import Criteria, matches

if TYPE_CHECKING:
    from chaosproxy.core.records import RecordedVerdict, RequestSummary
    from chaosproxy.fleet.shared import SharedState
    from chaosproxy.observe.store import RequestRecord, RequestStore

#: The most one request's entry holds in Redis (its frames are cut to fit).
ENTRY_BYTES = 128 * 1024
#: Entries read from Redis at a time while a page is built.
BATCH = 200
#: Requests whose tenant is held at most, waiting for their end to be published.
TENANTS_HELD = 10_000

# KEYS: the sequence, the fleet's order (a sorted set), the entry, its tenant's order,
# the owners (request id -> tenant), the bytes each tenant holds (a sorted set), the
# bytes held in all. ARGV: request id, entry, history, the entries' key prefix, tenant,
# the tenants' orders' key prefix, the bytes the journal may hold. The first
# publication of a request takes its place in the fleet's and its tenant's order; the
# tenant's oldest beyond ``history`` go; then, while the journal holds too much, the
# tenant holding the most gives up its oldest.
_PUBLISH = """
local id, tenant, prefix, orders = ARGV[1], ARGV[5], ARGV[4], ARGV[6]
local seq = redis.call('ZSCORE', KEYS[2], id)
if not seq then
  seq = redis.call('INCR', KEYS[1])
  redis.call('ZADD', KEYS[2], seq, id)
  redis.call('ZADD', KEYS[4], seq, id)
  redis.call('HSET', KEYS[5], id, tenant)
else
  tenant = redis.call('HGET', KEYS[5], id) or tenant
end
local grown = string.len(ARGV[2]) - redis.call('STRLEN', KEYS[3])
redis.call('SET', KEYS[3], ARGV[2])
redis.call('ZINCRBY', KEYS[6], grown, tenant)
redis.call('INCRBY', KEYS[7], grown)
local function forget(gone, owner)
  local held = redis.call('STRLEN', prefix .. gone)
  redis.call('DEL', prefix .. gone)
  redis.call('ZREM', KEYS[2], gone)
  redis.call('ZREM', orders .. owner, gone)
  redis.call('HDEL', KEYS[5], gone)
  redis.call('DECRBY', KEYS[7], held)
  if tonumber(redis.call('ZINCRBY', KEYS[6], -held, owner)) <= 0
     and redis.call('EXISTS', orders .. owner) == 0 then
    redis.call('ZREM', KEYS[6], owner)
  end
end
local mine = orders .. tenant
local over = redis.call('ZCARD', mine) - tonumber(ARGV[3])
if over > 0 then
  for _, gone in ipairs(redis.call('ZRANGE', mine, 0, over - 1)) do forget(gone, tenant) end
end
local budget = tonumber(ARGV[7])
while tonumber(redis.call('GET', KEYS[7]) or '0') > budget do
  local top = redis.call('ZREVRANGE', KEYS[6], 0, 0)[1]
  if not top then break end
  local oldest = redis.call('ZRANGE', orders .. top, 0, 0)[1]
  if oldest then forget(oldest, top) else redis.call('ZREM', KEYS[6], top) end
end
return seq
"""
# KEYS: the entry, the owners, the bytes each tenant holds, the bytes held in all; ARGV:
# request id, entry. An entry still kept is replaced (a verdict recorded), its bytes
# counted; one forgotten meanwhile stays forgotten.
_REPLACE = """
local tenant = redis.call('HGET', KEYS[2], ARGV[1])
if not tenant then return 0 end
local grown = string.len(ARGV[2]) - redis.call('STRLEN', KEYS[1])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('ZINCRBY', KEYS[3], grown, tenant)
redis.call('INCRBY', KEYS[4], grown)
return 1
"""


class FleetJournal:
    """One replica's side of the fleet's journal."""

    def __init__(
        self, shared: SharedState, store: RequestStore, history: int, max_bytes: int
    ) -> None:
        self._shared = shared
        self._store = store
        self._history = max(history, 1)
        self._max_bytes = max(max_bytes, ENTRY_BYTES)
        prefix = shared.prefix
        self._seq_key = prefix + "journal:seq"
        self._order_key = prefix + "journal:order"
        self._entry_prefix = prefix + "journal:r:"
        self._tenant_prefix = prefix + "journal:t:"
        self._owners_key = prefix + "journal:owners"
        self._held_key = prefix + "journal:held"
        self._total_key = prefix + "journal:bytes"
        #: Each request's tenant, from when it begins until its end is published
        #: (bounded: a request that never ends is forgotten with the oldest).
        self._tenants: OrderedDict[str, str] = OrderedDict()
        self._publish = shared.redis.register_script(_PUBLISH)
        self._replace = shared.redis.register_script(_REPLACE)
        self._queued: dict[str, None] = {}
        self._wake = asyncio.Event()
        #: Set while nothing waits to be published.
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        #: Publications that failed (Redis away): retried with the next.
        self.failures = 0

    # ------------------------------------------------------------------ publishing

    def __call__(self, line: Any) -> None:
        """A ``request`` or ``response_end`` line of this replica (the request store's
        ``flights``, before the store has taken it): published soon after."""
        self.changed(line["request_id"])

    def whose(self, request_id: str, tenant: str) -> None:
        """Request ``request_id`` is ``tenant``'s (told as it begins, before its
        ``request`` line): its entries count against that tenant's bound."""
        tenants = self._tenants
        tenants[request_id] = tenant
        while len(tenants) > TENANTS_HELD:
            tenants.popitem(last=False)

    def changed(self, request_id: str) -> None:
        self._queued[request_id] = None
        self._idle.clear()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name="chaosproxy fleet journal")
        self._wake.set()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0)  # (the store takes the line first)
            queued, self._queued = self._queued, {}
            if self._shared.status == "local":
                self._queued = {**queued, **self._queued}
                await asyncio.sleep(0.1)
                self._wake.set()
                continue
            for request_id in queued:
                record = self._store.get(request_id)
                if record is None:
                    continue
                try:
                    await asyncio.wait_for(self._put(request_id, entry_of(record)), 5.0)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self.failures += 1
                    self._queued[request_id] = None
                    continue
                if record.summary is not None:  # its end is in: its last publication
                    self._tenants.pop(request_id, None)
            if self._queued:
                await asyncio.sleep(0.1)
                self._wake.set()
            else:
                self._idle.set()

    async def published(self) -> None:
        """Return once every request queued so far is in Redis (the admin's answers
        then include them): waits while Redis is away."""
        await self._idle.wait()

    async def _put(self, request_id: str, entry: bytes) -> None:
        tenant = self._tenants.get(request_id, ANONYMOUS)
        await self._publish(
            keys=[
                self._seq_key,
                self._order_key,
                self._entry_prefix + request_id,
                self._tenant_prefix + tenant,
                self._owners_key,
                self._held_key,
                self._total_key,
            ],
            args=[
                request_id,
                entry,
                self._history,
                self._entry_prefix,
                tenant,
                self._tenant_prefix,
                self._max_bytes,
            ],
        )

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(BaseException):
                await self._writer
        queued, self._queued = self._queued, {}
        for request_id in queued:  # the last ends, as far as Redis takes them at once
            record = self._store.get(request_id)
            if record is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._put(request_id, entry_of(record)), 0.5)

    # ------------------------------------------------------------------ reading

    async def page(
        self,
        limit: int,
        scenario: str | None,
        criteria: Criteria | None,
        cursor: int | None,
        max_bytes: int,
    ) -> tuple[list[bytes], int | None]:
        """One page of the fleet's requests, newest first: their summaries' JSON and
        the cursor of the next page (None: no more)."""
        redis = self._shared.redis
        found: list[bytes] = []
        size = 0
        last = 0.0
        top = "+inf" if cursor is None else f"({cursor}"
        while True:
            ids: list[tuple[bytes, float]] = await redis.zrevrangebyscore(
                self._order_key, top, "-inf", start=0, num=BATCH, withscores=True
            )
            if not ids:
                return found, None
            entries = await redis.mget([self._entry_prefix + i.decode() for i, _ in ids])
            for (_, seq), raw in zip(ids, entries, strict=True):
                if raw is None:
                    continue
                view = orjson.loads(raw)["view"]
                if scenario is not None and view.get("scenario") != scenario:
                    continue
                if criteria is not None and not matches(view, criteria):
                    continue
                encoded = orjson.dumps(view)
                if found and (size + len(encoded) > max_bytes or len(found) >= limit):
                    return found, int(last)
                found.append(encoded)
                size += len(encoded) + 1
                last = seq
            top = f"({int(ids[-1][1])}"

    async def detail(self, request_id: str) -> dict[str, Any] | None:
        raw = await self._shared.redis.get(self._entry_prefix + request_id)
        if raw is None:
            return None
        detail: dict[str, Any] = orjson.loads(raw)["detail"]
        return detail

    async def summaries(self) -> list[tuple[str, RequestSummary | None]]:
        """Every request the fleet keeps, in the order they began: (its id, its summary;
        None while in flight)."""
        redis = self._shared.redis
        ids = [i.decode() for i in await redis.zrange(self._order_key, 0, -1)]
        if not ids:
            return []
        entries = await redis.mget([self._entry_prefix + i for i in ids])
        return [
            (i, orjson.loads(raw)["summary"])
            for i, raw in zip(ids, entries, strict=True)
            if raw is not None
        ]

    async def record_verdict(self, request_id: str, verdict: RecordedVerdict) -> None:
        """A verdict recorded here on a request of the fleet: its entry shows it."""
        key = self._entry_prefix + request_id
        raw = await self._shared.redis.get(key)
        if raw is None:
            return
        entry = orjson.loads(raw)
        entry["view"]["verdict"] = verdict
        entry["detail"]["summary"]["verdict"] = verdict
        await self._replace(
            keys=[key, self._owners_key, self._held_key, self._total_key],
            args=[request_id, orjson.dumps(entry)],
        )


def entry_of(record: RequestRecord) -> bytes:
    """What the fleet keeps of one request: its summary as listed and as judged, and its
    detail, its frames cut to fit :data:`ENTRY_BYTES`."""
    view = record.view()
    detail = record.detail()
    entry = {"view": view, "summary": record.summary, "detail": detail}
    encoded = orjson.dumps(entry)
    if len(encoded) <= ENTRY_BYTES:
        return encoded
    frames = detail["frames"]
    kept = len(frames)
    while kept and len(encoded) > ENTRY_BYTES:
        kept //= 2
        detail["frames"] = frames[:kept]
        detail["frames_in_fleet"] = f"the first {kept} of {len(frames)}"
        encoded = orjson.dumps(entry)
    return encoded


__all__ = ["ENTRY_BYTES", "FleetJournal", "entry_of"]
