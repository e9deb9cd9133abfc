"""The request journal shared by a fleet (``--state redis://…``: docs/fleet.md).

Each replica publishes what its request store knows of each of its requests (the
summary ``GET /requests`` lists, and the detail ``GET /requests/{id}`` shows) into
Redis when the request begins and when it ends, by one background task: never on a
client's write path. Every replica's admin then answers ``GET /requests``,
``GET /requests/{id}`` and ``POST /requests/{id}/verdict`` from the fleet's journal, so
``verify``, ``summary``, ``frames``, ``last`` and verdicts give the same answer on every
replica.

Bounded as one replica's store is: the newest ``history`` requests of the fleet, each
entry at most :data:`ENTRY_BYTES` (frames beyond dropped from the fleet's copy, said in
``frames_in_fleet``; the replica that served the request keeps them all).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import orjson

from chaosproxy.observe.journal import Criteria, matches

if TYPE_CHECKING:
    from chaosproxy.core.records import RecordedVerdict, RequestSummary
    from chaosproxy.fleet.shared import SharedState
    from chaosproxy.observe.store import RequestRecord, RequestStore

#: The most one request's entry holds in Redis (its frames are cut to fit).
ENTRY_BYTES = 128 * 1024
#: Entries read from Redis at a time while a page is built.
BATCH = 200

# KEYS: the sequence, the order (a sorted set), the entry; ARGV: request id, entry,
# history, the entries' key prefix. The first publication of a request takes its place
# in the fleet's order; the oldest beyond ``history`` go, with their entries.
_PUBLISH = """
local seq = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not seq then
  seq = redis.call('INCR', KEYS[1])
  redis.call('ZADD', KEYS[2], seq, ARGV[1])
end
redis.call('SET', KEYS[3], ARGV[2])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if over > 0 then
  local gone = redis.call('ZRANGE', KEYS[2], 0, over - 1)
  for _, id in ipairs(gone) do redis.call('DEL', ARGV[4] .. id) end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
return seq
"""


class FleetJournal:
    """One replica's side of the fleet's journal."""

    def __init__(self, shared: SharedState, store: RequestStore, history: int) -> None:
        self._shared = shared
        self._store = store
        self._history = max(history, 1)
        prefix = shared.prefix
        self._seq_key = prefix + "journal:seq"
        self._order_key = prefix + "journal:order"
        self._entry_prefix = prefix + "journal:r:"
        self._publish = shared.redis.register_script(_PUBLISH)
        self._queued: dict[str, None] = {}
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        #: Publications that failed (Redis away): retried with the next.
        self.failures = 0

    # ------------------------------------------------------------------ publishing

    def __call__(self, line: Any) -> None:
        """A ``request`` or ``response_end`` line of this replica (the request store's
        ``flights``, before the store has taken it): published soon after."""
        self.changed(line["request_id"])

    def changed(self, request_id: str) -> None:
        self._queued[request_id] = None
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
            if self._queued:
                await asyncio.sleep(0.1)
                self._wake.set()

    async def _put(self, request_id: str, entry: bytes) -> None:
        await self._publish(
            keys=[self._seq_key, self._order_key, self._entry_prefix + request_id],
            args=[request_id, entry, self._history, self._entry_prefix],
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
        await self._shared.redis.set(key, orjson.dumps(entry), xx=True)


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
