"""Resume history shared by a fleet (``--state redis://…``: docs/fleet.md).

The replica that reads a stream's upstream (its *owner*) mirrors the stream into Redis:
its events (a Redis stream per stream token, entry ``0-N`` for the stream's N-th event,
trimmed as the owner's history forgets its oldest), how it ended, and what each
connection of its generation sent (for verdicts). Writes are batched per upstream read
and made by one background task, never on a client's write path.

A reconnect that reaches another replica *imports* the stream first: one round trip
(bounded by ``--state-timeout``) reads its events and connections into this replica's
own history, and while the owner still reads the upstream a follower task appends
what the owner mirrors, so the reconnect is answered exactly as the owner would
answer it: from history, then live. A reconnect reaching the owner itself reads only
the other replicas' connections (its events are its own).

Keys are the stream's scenario, tenant key (an HMAC under the fleet's shared secret:
a tenant is one tenant on every replica) and token, so another tenant's id finds
nothing here either.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from chaosproxy.core.answer import piece_of
from chaosproxy.core.framing.sse import SseFramer
from chaosproxy.core.history import HistoryStore, Kept, ResumeConfig, StreamHistory
from chaosproxy.core.providers import Profile, choose_profile, get_profile, provider_for_event
from chaosproxy.core.providers.base import NOTHING, EventContent
from chaosproxy.core.tenancy import apart

if TYPE_CHECKING:
    from chaosproxy.fleet.shared import SharedState

#: How long a follower blocks on Redis for the owner's next events, per call.
FOLLOW_BLOCK_MS = 1000


class _Mirrored:
    """What is mirrored of one stream this replica owns."""

    __slots__ = ("first", "meta", "published")

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.published = 0  # events written to Redis (absolute index)
        self.first = 0  # the oldest kept there


@dataclass(frozen=True, slots=True)
class MirrorKeys:
    """Where the fleet keeps a stream in Redis: its events (a Redis stream), ``:m`` its
    state, ``:s`` its connections' trails; and an upstream's event id to its token."""

    prefix: str

    def stream(self, scenario: str, tenant: str, token: str) -> str:
        return f"{self.prefix}{scenario}:{tenant}:{token}"

    def of(self, stream: StreamHistory) -> str:
        return self.stream(stream.scenario, stream.tenant, stream.token)

    def upstream(self, scenario: str, tenant: str, upstream_id: str) -> str:
        return f"{self.prefix}u:{scenario}:{tenant}:{upstream_id}"


class MirrorWriter:
    """The owner's writes to Redis: what is waiting (streams changed, ended or let go,
    connections' trails), written in batches by one background task, never on a
    client's write path; kept and retried while Redis is away."""

    def __init__(
        self,
        shared: SharedState,
        keys: MirrorKeys,
        owned: weakref.WeakKeyDictionary[StreamHistory, _Mirrored],
    ) -> None:
        self._shared = shared
        self._keys = keys
        #: The streams owned here, as mirrored so far (the mirror's own map).
        self._owned = owned
        self._dirty: dict[int, StreamHistory] = {}
        self._ended: dict[int, StreamHistory] = {}
        self._gone: list[str] = []
        self._trails: list[tuple[str, bytes]] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        #: Writes that failed (Redis away): retried by the next flush.
        self.failures = 0

    def end(self, stream: StreamHistory) -> None:
        """An owned stream ended: its end is written with it."""
        self._ended[id(stream)] = stream
        self.mark(stream)

    def forget(self, stream: StreamHistory) -> None:
        """An owned stream let go: nothing more of it written, its keys deleted."""
        self._dirty.pop(id(stream), None)
        self._ended.pop(id(stream), None)
        self._gone.append(self._keys.of(stream))
        self.kick()

    def trail(self, key: str, encoded: bytes) -> None:
        """A connection's trail, appended to the stream's list of them."""
        self._trails.append((key, encoded))
        self.kick()

    @property
    def waiting(self) -> bool:
        return bool(self._dirty or self._trails or self._gone)

    def mark(self, stream: StreamHistory) -> None:
        """An owned stream changed: written by the next flush."""
        self._dirty[id(stream)] = stream
        self.kick()

    def kick(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name="chaosproxy history mirror")
        self._wake.set()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._shared.status == "local":  # Redis away: kept, written once back
                await asyncio.sleep(0.1)
                if self.waiting:
                    self._wake.set()
                continue
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                await asyncio.sleep(0.1)
                self._wake.set()

    async def flush(self) -> None:
        """Write what is waiting, in one pipeline (put back for the next flush when it
        fails)."""
        dirty, self._dirty = self._dirty, {}
        ended, self._ended = self._ended, {}
        trails, self._trails = self._trails, []
        gone, self._gone = self._gone, []
        redis = self._shared.redis
        written: list[tuple[StreamHistory, _Mirrored, int, int]] = []
        try:
            async with redis.pipeline(transaction=False) as pipe:
                for key in gone:
                    pipe.delete(key, key + ":m", key + ":s")
                for stream in dirty.values():
                    mirrored = self._owned.get(stream)
                    if mirrored is None:
                        continue
                    self._queue(pipe, stream, mirrored, stream in ended.values())
                    written.append((stream, mirrored, stream.total, stream.first))
                for key, encoded in trails:
                    pipe.rpush(key + ":s", encoded)
                await asyncio.wait_for(pipe.execute(), 5.0)
        except BaseException:
            # Put back what was taken (newer marks win), for the next flush.
            self._dirty = {**dirty, **self._dirty}
            self._ended = {**ended, **self._ended}
            self._trails = trails + self._trails
            self._gone = gone + self._gone
            raise
        for _stream, mirrored, total, first in written:
            mirrored.published = max(mirrored.published, total)
            mirrored.first = first

    def _queue(self, pipe: Any, stream: StreamHistory, mirrored: _Mirrored, ended: bool) -> None:
        key = self._keys.of(stream)
        start = max(mirrored.published, stream.first)
        upstream_ids = stream.config.ids == "upstream" and not apart(stream.tenant)
        for index in range(start, stream.total):
            kept = stream.get(index)
            if kept is None:
                continue
            fields: dict[str, Any] = {"raw": kept.raw, "ord": kept.ordinal}
            if kept.id is not None:
                fields["id"] = kept.id
            if kept.upstream_id is not None:
                fields["uid"] = kept.upstream_id
            pipe.xadd(key, fields, id=f"0-{index + 1}")
            if upstream_ids and kept.id is not None:
                pipe.set(
                    self._keys.upstream(stream.scenario, stream.tenant, kept.id),
                    stream.token,
                    px=_ms(stream),
                )
        if stream.first > mirrored.first:
            pipe.xtrim(key, minid=f"0-{stream.first + 1}")
        meta = {
            **mirrored.meta,
            "state": stream.state,
            "first": stream.first,
            "total": stream.total,
        }
        pipe.set(key + ":m", orjson.dumps(meta), px=_ms(stream))
        pipe.pexpire(key, _ms(stream))
        pipe.pexpire(key + ":s", _ms(stream))

    async def close(self) -> None:
        """Stop writing; what is waiting gets one last, short try."""
        if self._writer is not None:
            self._writer.cancel()
        if self.waiting:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.flush(), 0.5)


class HistoryMirror:
    """One replica's side of the fleet's shared history."""

    def __init__(self, shared: SharedState) -> None:
        self._shared = shared
        self._keys = MirrorKeys(shared.prefix + "h:")
        #: Streams this replica owns, mirrored (forgotten with the stream).
        self._owned: weakref.WeakKeyDictionary[StreamHistory, _Mirrored] = (
            weakref.WeakKeyDictionary()
        )
        #: Streams imported from another replica (a copy, replaced at each reconnect).
        self._imported: weakref.WeakSet[StreamHistory] = weakref.WeakSet()
        #: Per stream owned here: the entries of its connections' list in Redis read.
        self._seen: weakref.WeakKeyDictionary[StreamHistory, int] = weakref.WeakKeyDictionary()
        self._followers: dict[int, asyncio.Task[None]] = {}
        #: The owner's writes.
        self.writer = MirrorWriter(shared, self._keys, self._owned)

    # ------------------------------------------------------------------ the owner

    def begin(self, stream: StreamHistory) -> None:
        """A stream this replica keeps (its owner): mirrored from now on."""
        self._owned[stream] = _Mirrored(
            {
                "request_id": stream.request_id,
                "headers": stream.headers,
                "owner": self._shared.member,
            }
        )
        self.writer.mark(stream)

    def appended(self, stream: StreamHistory) -> None:
        """New events in an owned stream (or its oldest forgotten)."""
        if stream in self._owned:
            self.writer.mark(stream)

    def ended(self, stream: StreamHistory) -> None:
        if stream in self._owned:
            self.writer.end(stream)

    def dropped(self, stream: StreamHistory) -> None:
        """The owner's store let the stream go: so does the fleet's."""
        if self._owned.pop(stream, None) is not None:
            self.writer.forget(stream)
        self._imported.discard(stream)
        task = self._followers.pop(id(stream), None)
        if task is not None:
            task.cancel()

    def sent(self, stream: StreamHistory, trail: Sequence[tuple[str | None, EventContent]]) -> None:
        """A connection of the stream's generation ended here, having sent ``trail``:
        the other replicas' ledgers get it too."""
        if stream not in self._owned and stream not in self._imported:
            return
        encoded = orjson.dumps([self._shared.member, [[i, _piece(p)] for i, p in trail]])
        self.writer.trail(self._keys.of(stream), encoded)

    # ------------------------------------------------------------------ a reconnect

    async def refresh(
        self,
        store: HistoryStore,
        scenario: str,
        config: ResumeConfig,
        last_event_id: str,
        tenant: str,
        *,
        provider: str,
        path: str,
        notify: Any,
    ) -> bool | None:
        """Before a reconnect of ``tenant`` is decided here: bring the stream its id
        names into this replica's history as the fleet has it (imported from its owner,
        or its other replicas' connections added). True when the stream is here now,
        False when the fleet has none, None when Redis did not answer in time (the
        decision is then this replica's alone)."""
        found = store.find(scenario, last_event_id, tenant=tenant)
        local = found[0] if found is not None else None
        token = (
            local.token
            if local is not None
            else await self._token_of(scenario, last_event_id, tenant, config)
        )
        if token is None:
            return False
        if local is not None and local in self._owned:
            return await self._add_trails(local)
        key = self._keys.stream(scenario, tenant, token)
        answer = await self._shared.call(self._read(key))
        if answer is None:
            return None
        meta_raw, entries, trails = answer
        if meta_raw is None:
            return False
        meta = orjson.loads(meta_raw)
        if local is not None:  # an imported copy, perhaps stale: replaced
            self.dropped(local)
            store.drop(local)
        stream = store.begin(
            scenario,
            config,
            meta["request_id"],
            [tuple(h) for h in meta["headers"]],
            time.monotonic(),
            tenant=tenant,
            token=token,
        )
        profile = choose_profile(provider, path)
        stream.first = stream.total = int(meta["first"])
        self._append(stream, entries, profile)
        self._imported.add(stream)
        for encoded in trails:  # every connection, this replica's too: a new copy
            stream.ledger.add_sent(_trail(orjson.loads(encoded)[1]))
        if meta["state"] != "live":
            stream.end(meta["state"], time.monotonic())
        else:
            self._followers[id(stream)] = asyncio.create_task(
                self._follow(stream, key, profile, notify), name="chaosproxy history follower"
            )
        return True

    async def _token_of(
        self, scenario: str, last_event_id: str, tenant: str, config: ResumeConfig
    ) -> str | None:
        token, dot, n = last_event_id.rpartition(".")
        if config.ids == "proxy":
            return token if dot and token and n.isdigit() else None
        if apart(tenant):
            return None
        answer = await self._shared.call(
            self._shared.redis.get(self._keys.upstream(scenario, tenant, last_event_id))
        )
        return answer.decode() if isinstance(answer, bytes) else None

    async def _read(self, key: str) -> tuple[Any, Any, Any]:
        async with self._shared.redis.pipeline(transaction=False) as pipe:
            pipe.get(key + ":m")
            pipe.xrange(key)
            pipe.lrange(key + ":s", 0, -1)
            meta, entries, trails = await pipe.execute()
        return meta, entries, trails

    def _append(self, stream: StreamHistory, entries: Any, profile: Profile | None) -> None:
        now = time.monotonic()
        framer = SseFramer()
        for entry_id, fields in entries:
            index = int(entry_id.decode().split("-", 1)[1]) - 1
            if index < stream.total:
                continue  # (already here)
            if index > stream.total:  # a gap: the owner forgot what this copy lacks
                stream.first = stream.total = index
                stream.events.clear()
                stream.bytes = 0
            raw: bytes = fields[b"raw"]
            event_id = fields[b"id"].decode() if b"id" in fields else None
            upstream_id = fields[b"uid"].decode() if b"uid" in fields else None
            stream.append(Kept(event_id, upstream_id, int(fields[b"ord"]), raw), now)
            for frame in framer.feed(raw):
                if frame.data is None:
                    continue
                if profile is None:
                    profile = get_profile(provider_for_event(frame))
                stream.ledger.add_clean(event_id, piece_of(profile, frame))

    async def _add_trails(self, stream: StreamHistory) -> bool | None:
        """The other replicas' connections of a stream owned here, into its ledger."""
        seen = self._seen.get(stream, 0)
        answer = await self._shared.call(
            self._shared.redis.lrange(self._keys.of(stream) + ":s", seen, -1)
        )
        if answer is None:
            return None
        for encoded in answer:
            member, trail = orjson.loads(encoded)
            if member != self._shared.member:  # (its own are in its ledger)
                stream.ledger.add_sent(_trail(trail))
        self._seen[stream] = seen + len(answer)
        return True

    async def _follow(
        self, stream: StreamHistory, key: str, profile: Profile | None, notify: Any
    ) -> None:
        """Append what the owner mirrors of a live stream, until it ends."""
        reader = self._shared.reader
        with contextlib.suppress(asyncio.CancelledError):
            while not stream.finished:
                after = f"0-{stream.total}"
                try:
                    answer: Any = await reader.xread({key: after}, block=FOLLOW_BLOCK_MS)
                    meta_raw = await reader.get(key + ":m")
                except Exception:
                    await asyncio.sleep(0.1)
                    continue
                for _, entries in answer or []:
                    self._append(stream, entries, profile)
                if meta_raw is None:  # the owner let it go
                    stream.end("abandoned", time.monotonic())
                else:
                    meta = orjson.loads(meta_raw)
                    if meta["state"] != "live" and int(meta.get("total", -1)) <= stream.total:
                        stream.end(meta["state"], time.monotonic())
                notify(stream)
        self._followers.pop(id(stream), None)

    async def close(self) -> None:
        for task in self._followers.values():
            task.cancel()
        await self.writer.close()


def _ms(stream: StreamHistory) -> int:
    return max(int(stream.config.retention * 1000), 1)


def _piece(piece: EventContent) -> list[Any]:
    return [piece.text, piece.tools, piece.tool_ends, piece.terminal, piece.finish, piece.error]


def _trail(encoded: list[Any]) -> list[tuple[str | None, EventContent]]:
    return [(event_id, _unpiece(piece)) for event_id, piece in encoded]


def _unpiece(encoded: list[Any]) -> EventContent:
    text, tools, tool_ends, terminal, finish, error = encoded
    piece = EventContent(
        tuple((int(c), str(t)) for c, t in text),
        tuple((str(k), str(f)) for k, f in tools),
        tuple(tool_ends),
        bool(terminal),
        tuple((int(c), str(f)) for c, f in finish),
        bool(error),
    )
    return NOTHING if piece == NOTHING else piece


__all__ = ["HistoryMirror"]
