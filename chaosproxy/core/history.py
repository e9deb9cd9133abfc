"""Reconnection and resume: the bounded history of SSE streams, without I/O.

A scenario with a ``resume:`` key keeps every SSE stream framed under it, so that a
client that reconnects with ``Last-Event-ID`` can be answered by the scenario's policy
(docs/reconnection.md). This module holds the bookkeeping; the shell
(:mod:`chaosproxy.server.resume`) moves the bytes and keeps reading an upstream whose client
was cut. Time is data: every call that needs it takes ``now`` (seconds, monotonic).

* :class:`ResumeConfig` is the ``resume:`` key of a scenario.
* :class:`Recorder` sits between an upstream body and its session: it frames the SSE
  body, gives every event its id (``<token>.<n>`` with ``ids: proxy``, the token an
  unguessable one the shell draws per stream; the upstream's own with ``ids:
  upstream``), keeps the events in a :class:`StreamHistory` and returns the bytes with
  those ids, for the session's own pipeline.
* :class:`HistoryStore` keeps the streams of each scenario, bounded (``streams`` per
  scenario, ``max_bytes`` per stream, ``retention`` after the last activity), each
  belonging to a tenant (:mod:`chaosproxy.core.tenancy`): a ``Last-Event-ID`` is looked
  up among its tenant's streams only, by map, never by a scan. An anonymous request
  kept apart (:data:`~chaosproxy.core.tenancy.STRANGER`) finds a stream by its token
  only, never by an upstream's id, which another anonymous user could name as well.
  :meth:`HistoryStore.decide` answers a reconnect by the policy.
* :func:`shown_event_id` is how a ``Last-Event-ID`` is shown (the log, the admin API):
  a proxy id's token is a capability, so only its first characters are.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from chaosproxy.core.answer import Ledger, piece_of
from chaosproxy.core.faults.base import Duration
from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import DEFAULT_MAX_SIZE, FramingError
from chaosproxy.core.framing.encode import field_name, newline_of, split_bom, split_lines
from chaosproxy.core.framing.sse import SseFramer
from chaosproxy.core.providers import Profile, choose_profile, get_profile, provider_for_event
from chaosproxy.core.tenancy import ANONYMOUS, apart

Policy = Literal["resume", "replay_last", "restart", "new_stream", "unsupported", "expired"]
IdSource = Literal["proxy", "upstream"]
Missing = Literal[204, 404, "new_stream"]
#: How a kept stream's upstream body ended (``live`` while it is still read).
StreamState = Literal["live", "completed", "failed", "abandoned"]

_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2}
_SIZE = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")


def parse_bytes(value: Any) -> Any:
    """A size: an int of bytes, or a string with a unit (``512KiB``, ``4MiB``, ``100kB``)."""
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        unit = m.group(2).lower() if m else ""
        if m is None or unit not in _UNITS:
            raise ValueError(f"not a size: {value!r} (use bytes, or 512KiB, 4MiB)")
        return int(m.group(1)) * _UNITS[unit]
    return value


ByteSize = Annotated[
    int,
    BeforeValidator(parse_bytes),
    PlainSerializer(int, return_type=int, when_used="json"),
    Field(ge=1, strict=True),
    # What a scenario file may give (the scenario JSON Schema): bytes, or a unit.
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {
                    "type": "string",
                    "pattern": r"^\s*\d+\s*([bB]|[kKmMgG][iI][bB]|[kKmM][bB])?\s*$",
                },
            ],
            "description": "bytes, or a string with a unit: 512KiB, 4MiB, 100kB",
        },
        mode="validation",
    ),
]


class ResumeConfig(BaseModel):
    """The ``resume:`` key of a scenario (docs/reconnection.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Policy = "resume"
    ids: IdSource = "proxy"
    #: Seconds a stream stays reconnectable after its last activity.
    retention: Annotated[Duration, Field(gt=0)] = 60.0
    streams: Annotated[int, Field(ge=1, strict=True)] = 100
    max_bytes: ByteSize = 4 * 1024**2
    missing: Missing = 204


@dataclass(frozen=True, slots=True)
class Kept:
    """One event of a kept stream, as it was sent before any fault (ids assigned)."""

    #: The id the client sees (None with ``ids: upstream`` when the event has none).
    id: str | None
    #: The upstream's own ``id:`` field, if it had one.
    upstream_id: str | None
    #: 1-based position among the stream's upstream events.
    ordinal: int
    raw: bytes


class StreamHistory:
    """The kept events of one stream, the oldest forgotten beyond ``max_bytes``.

    Events are numbered by absolute index (0-based, never reused): ``first`` is the
    index of the oldest still kept, ``total`` the number ever appended. ``request_id``
    is the request that began the stream (its generation's first connection);
    ``token`` the unguessable part of its proxy ids; ``tenant`` whose it is.
    """

    def __init__(
        self,
        scenario: str,
        request_id: str,
        config: ResumeConfig,
        headers: Sequence[tuple[str, str]],
        now: float,
        *,
        tenant: str = ANONYMOUS,
        token: str,
    ) -> None:
        if not token or "." in token:
            raise ValueError("a stream token is a non-empty string without dots")
        self.scenario = scenario
        self.request_id = request_id
        self.tenant = tenant
        self.token = token
        self.config = config
        #: The upstream's response headers, for a reconnect answered from history.
        self.headers = list(headers)
        self.events: deque[Kept] = deque()
        self.first = 0
        self.total = 0
        self.bytes = 0
        #: Bytes read but not yet an event (the recorder's framer holds them).
        self.pending = 0
        self.state: StreamState = "live"
        self.last_activity = now
        #: The generation's answer: its clean content (recorded here, across cuts) and
        #: what each connection sent of it (for verdicts, :mod:`chaosproxy.core.answer`).
        self.ledger = Ledger(request_id, limit=config.max_bytes)
        #: ``ids: upstream``: each upstream id kept → the absolute index of its latest
        #: event (the store indexes the stream by these ids).
        self.ids: dict[str, int] = {}
        #: The store that keeps this stream (told of ids coming and going).
        self._store: HistoryStore | None = None
        self._upstream_ids = config.ids == "upstream"

    @property
    def finished(self) -> bool:
        return self.state != "live"

    @property
    def held(self) -> int:
        """Bytes this stream holds: its kept events and what is read of the next."""
        return self.bytes + self.pending

    def append(self, kept: Kept, now: float) -> None:
        index = self.total
        self.events.append(kept)
        self.total += 1
        self.bytes += len(kept.raw)
        self.last_activity = now
        event_id = kept.id
        if event_id is not None and self._upstream_ids:
            self.ids[event_id] = index
            if self._store is not None:
                self._store._id_seen(self, event_id)
        while self.bytes > self.config.max_bytes and self.events:
            old = self.events.popleft()
            self.bytes -= len(old.raw)
            old_id = old.id
            if old_id is not None and self._upstream_ids and self.ids.get(old_id) == self.first:
                del self.ids[old_id]  # its latest event is forgotten: no event has it
                if self._store is not None:
                    self._store._id_gone(self, old_id)
            self.first += 1

    def end(self, state: StreamState, now: float) -> None:
        """The upstream body ended (once; later calls change nothing)."""
        if self.state == "live":
            self.state = state
            self.last_activity = now

    def touch(self, now: float) -> None:
        self.last_activity = now

    def expired(self, now: float) -> bool:
        return now - self.last_activity >= self.config.retention

    def index_of(self, event_id: str) -> int | None:
        """The absolute index of the kept event with that id (the latest, when the
        upstream repeats ids), or None. A map lookup either way: never a scan."""
        if self._upstream_ids:
            return self.ids.get(event_id)
        token, dot, n = event_id.rpartition(".")
        # (an ASCII number of sane length: int() of 5,000 digits raises)
        if not dot or token != self.token or not (n.isascii() and n.isdigit() and len(n) <= 18):
            return None
        index = int(n) - 1
        if self.first <= index < self.total:
            return index
        return None

    def since(self, index: int) -> list[Kept]:
        """The kept events from absolute ``index`` on (``index >= first``)."""
        start = max(index - self.first, 0)
        return [self.events[i] for i in range(start, len(self.events))]

    def get(self, index: int) -> Kept | None:
        if self.first <= index < self.total:
            return self.events[index - self.first]
        return None

    def __repr__(self) -> str:
        return f"<StreamHistory {self.request_id} {self.scenario} {self.state} {self.total}>"


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Resume:
    """Resume the stream: from history, from absolute index ``start``, then live until
    the end."""

    stream: StreamHistory
    start: int


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the reconnect: the proxy answers itself (204 or 404), without asking the
    upstream."""

    status: int
    reason: str
    #: The stream the id named, when it is known.
    stream: StreamHistory | None = None


@dataclass(frozen=True, slots=True)
class Fresh:
    """Forward upstream as a new generation (fresh ids)."""

    reason: str
    stream: StreamHistory | None = None


Decision = Resume | Refuse | Fresh

#: Why a reconnect is ``missing`` when it is anonymous (kept apart) under ``ids:
#: upstream``: nothing tells its stream from another anonymous user's of the same ids.
ANONYMOUS_UPSTREAM_ID = "anonymous upstream id"

#: Seconds between two sweeps of the store for streams past their retention (a
#: lookup checks the stream it finds itself; the sweep only frees memory).
SWEEP_EVERY = 1.0

#: (scenario, tenant, token or upstream id): how the store finds a stream.
_Key = tuple[str, str, str]


class HistoryStore:
    """The kept streams, per scenario, each bounded by its scenario's ``resume:``.

    ``streams`` bounds a scenario's streams of every tenant together (a bound on memory:
    credentials are whatever a client sends, so a bound per tenant would be none), and
    the oldest goes first. A stream is found only by its own tenant: by its token
    (``ids: proxy``) or by an upstream id (``ids: upstream``), in a map. ``on_drop`` is
    called with each stream the store lets go (beyond ``streams``, past ``retention``,
    :meth:`clear`), so the shell can stop reading it.
    """

    def __init__(self, on_drop: Callable[[StreamHistory], None] | None = None) -> None:
        #: Per scenario, the streams by token, oldest first.
        self._streams: dict[str, OrderedDict[str, StreamHistory]] = {}
        self._tokens: dict[_Key, StreamHistory] = {}
        #: ``ids: upstream``: the streams with an event of that id, the one whose event
        #: came last at the end.
        self._ids: dict[_Key, OrderedDict[StreamHistory, None]] = {}
        self.on_drop = on_drop
        self._next_sweep = -math.inf

    def begin(
        self,
        scenario: str,
        config: ResumeConfig,
        request_id: str,
        headers: Sequence[tuple[str, str]],
        now: float,
        *,
        tenant: str = ANONYMOUS,
        token: str,
    ) -> StreamHistory:
        """Keep a new stream; the oldest of the scenario go beyond ``streams``."""
        self._sweep(now)
        kept = self._streams.setdefault(scenario, OrderedDict())
        stream = StreamHistory(
            scenario, request_id, config, headers, now, tenant=tenant, token=token
        )
        old = kept.get(token)
        if old is not None:  # (a token drawn twice: never, with 128 random bits)
            self._drop(old)
        stream._store = self
        kept[token] = stream
        self._tokens[(scenario, tenant, token)] = stream
        while len(kept) > config.streams:
            self._drop(next(iter(kept.values())))
        return stream

    def drop(self, stream: StreamHistory) -> None:
        """Forget ``stream`` (a fleet's copy of another replica's, being replaced)."""
        self._drop(stream)

    def _drop(self, stream: StreamHistory) -> None:
        kept = self._streams.get(stream.scenario)
        if kept is None or kept.get(stream.token) is not stream:
            return
        del kept[stream.token]
        if not kept:
            del self._streams[stream.scenario]
        key = (stream.scenario, stream.tenant, stream.token)
        if self._tokens.get(key) is stream:
            del self._tokens[key]
        for event_id in stream.ids:
            self._id_gone(stream, event_id)
        stream._store = None
        if self.on_drop is not None:
            self.on_drop(stream)

    def _id_seen(self, stream: StreamHistory, event_id: str) -> None:
        if apart(stream.tenant):  # found by its token only: never by a shared name
            return
        holders = self._ids.setdefault((stream.scenario, stream.tenant, event_id), OrderedDict())
        holders[stream] = None
        holders.move_to_end(stream)

    def _id_gone(self, stream: StreamHistory, event_id: str) -> None:
        key = (stream.scenario, stream.tenant, event_id)
        holders = self._ids.get(key)
        if holders is not None:
            holders.pop(stream, None)
            if not holders:
                del self._ids[key]

    def _sweep(self, now: float) -> None:
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_EVERY
            self.expire(now)

    def expire(self, now: float) -> list[StreamHistory]:
        """Forget the streams whose retention has passed; returns them."""
        gone = [s for kept in self._streams.values() for s in kept.values() if s.expired(now)]
        for stream in gone:
            self._drop(stream)
        return gone

    def holds(self, stream: StreamHistory) -> bool:
        """Whether ``stream`` is still kept (not dropped nor expired)."""
        kept = self._streams.get(stream.scenario)
        return kept is not None and kept.get(stream.token) is stream

    def streams(self, scenario: str | None = None) -> Iterator[StreamHistory]:
        for name, kept in self._streams.items():
            if scenario is None or name == scenario:
                yield from kept.values()

    @property
    def bytes(self) -> int:
        """Bytes held by every kept stream (events, and what is read of the next)."""
        return sum(s.held for s in self.streams())

    def clear(self) -> None:
        for stream in list(self.streams()):
            self._drop(stream)

    def find(
        self, scenario: str, event_id: str, *, tenant: str = ANONYMOUS
    ) -> tuple[StreamHistory, int] | None:
        """The kept stream of ``scenario`` and ``tenant`` with an event of that id, and
        its index: a proxy id by its token, an upstream id by the stream whose event of
        that id came last. Two map lookups, whatever the id and however much is kept."""
        token, dot, _ = event_id.rpartition(".")
        if dot:
            stream = self._tokens.get((scenario, tenant, token))
            if stream is not None:
                index = stream.index_of(event_id)
                if index is not None:
                    return stream, index
        if apart(tenant):  # an upstream's id names no anonymous user's stream
            return None
        holders = self._ids.get((scenario, tenant, event_id))
        if holders:
            stream = next(reversed(holders))
            return stream, stream.ids[event_id]
        return None

    def decide(
        self,
        scenario: str,
        config: ResumeConfig,
        last_event_id: str,
        now: float,
        *,
        tenant: str = ANONYMOUS,
    ) -> Decision:
        """How to answer a request of ``scenario`` from ``tenant`` carrying
        ``Last-Event-ID``. Another tenant's id is as unknown as one never given."""
        self._sweep(now)
        found = self.find(scenario, last_event_id, tenant=tenant)
        if found is not None and found[0].expired(now):
            self._drop(found[0])
            found = None
        stream = found[0] if found else None
        if stream is not None:
            stream.touch(now)
        if config.policy == "unsupported":
            return Refuse(204, "resume unsupported", stream)
        if found is None or config.policy == "expired":
            if config.policy == "expired":
                why = "history expired"
            elif config.ids == "upstream" and apart(tenant):
                why = ANONYMOUS_UPSTREAM_ID
            else:
                why = "unknown event id"
            if config.missing == "new_stream":
                return Fresh(why, stream)
            return Refuse(config.missing, why, stream)
        stream, index = found
        if stream.finished and index >= stream.total - 1:
            return Refuse(204, "stream finished", stream)
        policy = config.policy
        if policy == "new_stream":
            return Fresh("new generation", stream)
        start = {"resume": index + 1, "replay_last": index, "restart": stream.first}[policy]
        return Resume(stream, start)


# --------------------------------------------------------------------------- showing

#: Characters of a stream token shown (``9GkT0v…``): 36 of its 128 random bits at
#: most, so what is shown names a stream to whoever holds its id, and opens none.
SHOWN_TOKEN = 6


def shown_event_id(event_id: str) -> str:
    """A ``Last-Event-ID`` as the log and the admin API show it: a proxy id's token
    (``<token>.<n>``: the stream's capability) cut to its first :data:`SHOWN_TOKEN`
    characters and ``…``, the event's number kept (``9GkT0v….7``); an id without a
    dot, the same way. At most 200 characters of what the client sent."""
    token, dot, n = event_id.rpartition(".")
    if not dot:
        token, n = event_id, ""
    if len(token) > SHOWN_TOKEN:
        token = token[:SHOWN_TOKEN] + "\u2026"
    return (token + dot + n)[:200]


# --------------------------------------------------------------------------- recording


def with_id(frame: Frame, event_id: str) -> bytes:
    """The event's bytes with its ``id:`` lines replaced by ``id: <event_id>`` (first),
    without a leading BOM."""
    _, body = split_bom(frame.raw)
    nl = newline_of(frame)
    rest = b"".join(c + t for c, t in split_lines(body) if field_name(c) != b"id")
    return b"id: " + event_id.encode("utf-8") + nl + rest


class Recorder:
    """Frames one upstream SSE body into its :class:`StreamHistory`, assigning ids.

    :meth:`feed` returns the bytes to hand on (to the session): whole events with their
    ids, comments as they came; what ends no event yet is held. After a framing error
    (an event beyond the size limit) the stream ends as ``failed`` and bytes pass on
    unchanged.
    """

    def __init__(
        self,
        stream: StreamHistory,
        max_size: int = DEFAULT_MAX_SIZE,
        *,
        provider: str = "auto",
        path: str = "",
    ) -> None:
        """``provider`` and ``path`` choose the profile that reads each event's
        content for the generation's clean answer (``auto``: the path's provider,
        else the first event's), as the stream's session does."""
        self.stream = stream
        self._framer = SseFramer(max_size)
        self._ordinal = 0
        self._broken = False
        self._profile: Profile | None = choose_profile(provider, path)

    def feed(self, data: bytes, now: float) -> bytes:
        if self._broken:
            return data
        try:
            frames = self._framer.feed(data)
        except FramingError:
            self._broken = True
            self.stream.pending = 0
            self.stream.end("failed", now)
            return data
        out = self._record(frames, now)
        self.stream.pending = self._framer.buffered
        return out

    def eof(self, now: float) -> bytes:
        """The body ended: what was held (an unterminated last event), recorded too."""
        if self._broken:
            return b""
        try:
            frames = self._framer.eof()
        except FramingError:
            return b""
        finally:
            self.stream.pending = 0
        return self._record(frames, now)

    def _record(self, frames: list[Frame], now: float) -> bytes:
        out: list[bytes] = []
        stream = self.stream
        proxy_ids = stream.config.ids == "proxy"
        for frame in frames:
            if frame.data is None:  # a comment or a stray blank line: not an event
                out.append(frame.raw)
                continue
            self._ordinal += 1
            if proxy_ids:
                event_id: str | None = f"{stream.token}.{self._ordinal}"
                assert event_id is not None
                raw = with_id(frame, event_id)
                bom, _ = split_bom(frame.raw)
                out.append(bom + raw)
            else:
                event_id = frame.id
                bom, raw = split_bom(frame.raw)
                out.append(frame.raw)
            stream.append(Kept(event_id, frame.id, self._ordinal, raw), now)
            profile = self._profile
            if profile is None:
                profile = self._profile = get_profile(provider_for_event(frame))
            stream.ledger.add_clean(event_id, piece_of(profile, frame))
        return b"".join(out)


__all__ = [
    "ANONYMOUS_UPSTREAM_ID",
    "SHOWN_TOKEN",
    "ByteSize",
    "Decision",
    "Fresh",
    "HistoryStore",
    "Kept",
    "Recorder",
    "Refuse",
    "Resume",
    "ResumeConfig",
    "StreamHistory",
    "parse_bytes",
    "shown_event_id",
    "with_id",
]
