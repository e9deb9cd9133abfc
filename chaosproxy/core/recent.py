"""Recent framed streams, for the ``splice`` fault: bounded, sans-IO.

One :class:`RecentStreams` belongs to a proxy (the shell keeps it; offline runs have
none). Every framed stream (``sse`` or ``ndjson``, under an active scenario) is
*opened* in it when its head is decided, as its tenant's (:mod:`chaosproxy.core.
tenancy`), *records* each upstream event as it passes through its pipeline (before any
fault: what the upstream sent), and is *closed* when its request ends, whatever the
outcome; the last stream closed is the *previous* one, and each tenant's last stream
closed is that tenant's previous one. ``splice`` reads it: ``from: previous`` its
tenant's previous stream as it stood when its own request started, ``from:
concurrent`` its tenant's streams running at the moment it splices (every tenant's,
with ``across_tenants: true``). An anonymous request kept apart (the
:data:`~chaosproxy.core.tenancy.STRANGER` tenant) has no tenant to share with: it is
nobody's previous stream and finds none, and no running stream is its tenant's (only
``across_tenants: true`` takes from it, as from anyone).

Memory is bounded four ways: a stream keeps at most ``max_events`` events and
``max_bytes`` bytes of them (the oldest are forgotten first; an event larger than
``max_bytes`` is not kept); at most ``max_running`` streams are recorded at once
(streams beyond that are not recorded, so cannot be a source); and of the finished
ones only the last of each of the ``max_previous`` tenants that finished one most
recently is kept.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from chaosproxy.core.events import Event
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.tenancy import ANONYMOUS, apart

#: Events a stream keeps at most (every kind together).
DEFAULT_MAX_EVENTS = 256
#: Bytes of events (as sent upstream) a stream keeps at most.
DEFAULT_MAX_BYTES = 64 * 1024
#: Streams recorded at once at most (those running, not counting the previous ones).
DEFAULT_MAX_RUNNING = 64
#: Tenants whose previous stream is kept at most (the least recent forgotten first).
DEFAULT_MAX_PREVIOUS = 64

_NO_FRAMES: tuple[Frame, ...] = ()


class StreamRecord:
    """The kept events of one framed stream, oldest first.

    Recording runs for every upstream event of every framed stream, and reading (a
    ``splice``) is rare: an event is kept as the few fields a splice needs, in one
    queue, and made into frames of a kind only when asked for."""

    __slots__ = (
        "_max_bytes",
        "_max_events",
        "_order",
        "bytes",
        "forgotten",
        "format",
        "request_id",
        "tenant",
    )

    def __init__(
        self,
        request_id: str,
        fmt: Format,
        max_events: int,
        max_bytes: int,
        tenant: str = ANONYMOUS,
    ) -> None:
        self.request_id = request_id
        #: Whose the stream is.
        self.tenant = tenant
        #: The stream's framing (``sse`` or ``ndjson``).
        self.format = fmt
        self._max_events = max_events
        self._max_bytes = max_bytes
        #: (raw, data, event, newline, kinds) of each kept event: only what a splice
        #: needs (not the frame, which holds the parsed JSON the profile cached).
        self._order: deque[tuple[bytes, str, str | None, bytes, frozenset[str]]] = deque()
        #: Bytes of the kept events.
        self.bytes = 0
        #: Events recorded then forgotten (or never kept) to stay within the bounds.
        self.forgotten = 0

    def record(self, ev: Event) -> None:
        """One upstream event of the stream (the pipeline calls this for each)."""
        frame = ev.frame
        data = frame.data
        if data is None or ev.ordinal <= 0 or not frame.complete:
            return  # an unterminated final event is no event to reuse
        raw = frame.raw
        size = len(raw)
        if size > self._max_bytes or self._max_events == 0:
            self.forgotten += 1
            return
        order = self._order
        order.append((raw, data, frame.event, frame.newline, ev.kinds))
        self.bytes += size
        if len(order) > self._max_events or self.bytes > self._max_bytes:
            self._forget()

    def _forget(self) -> None:
        order = self._order
        while len(order) > self._max_events or self.bytes > self._max_bytes:
            self.bytes -= len(order.popleft()[0])
            self.forgotten += 1

    def events(self, kind: str) -> tuple[Frame, ...]:
        """The kept events of ``kind``, oldest first (new frames, a snapshot)."""
        return (
            tuple(
                Frame(raw, data, event, newline=newline)
                for raw, data, event, newline, kinds in self._order
                if kind in kinds
            )
            or _NO_FRAMES
        )

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        return f"<StreamRecord {self.request_id} {self.format} {len(self)} events>"


class RecentStreams:
    """The framed streams running now and the last ones that finished (the proxy's
    last, and each recent tenant's); see the module docstring."""

    def __init__(
        self,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_running: int = DEFAULT_MAX_RUNNING,
        max_previous: int = DEFAULT_MAX_PREVIOUS,
    ) -> None:
        if min(max_events, max_bytes, max_running, max_previous) < 0:
            raise ValueError("the bounds must be >= 0")
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_running = max_running
        self.max_previous = max_previous
        #: Streams running now, in the order they were opened.
        self._running: dict[str, StreamRecord] = {}
        self._previous: StreamRecord | None = None
        #: Each tenant's previous stream, the tenant that finished one last at the end.
        self._previous_of: OrderedDict[str, StreamRecord] = OrderedDict()
        #: Streams not recorded because ``max_running`` were already recorded.
        self.unrecorded = 0

    def open(self, request_id: str, fmt: Format, tenant: str = ANONYMOUS) -> StreamRecord | None:
        """A framed stream of ``tenant`` begins: its record (None when too many are
        recorded)."""
        if len(self._running) >= self.max_running:
            self.unrecorded += 1
            return None
        record = StreamRecord(request_id, fmt, self.max_events, self.max_bytes, tenant)
        self._running[request_id] = record
        return record

    def close(self, record: StreamRecord) -> None:
        """Its request ended: the stream becomes the previous one (its tenant's too,
        unless its request was anonymous and kept apart: nobody's)."""
        if self._running.pop(record.request_id, None) is record:
            self._previous = record
            if apart(record.tenant):
                return
            previous = self._previous_of
            previous[record.tenant] = record
            previous.move_to_end(record.tenant)
            while len(previous) > self.max_previous:
                previous.popitem(last=False)

    @property
    def previous(self) -> StreamRecord | None:
        """The framed stream that finished last, whoever's, or None."""
        return self._previous

    def previous_of(self, tenant: str) -> StreamRecord | None:
        """The framed stream of ``tenant`` that finished last, or None (always for an
        anonymous request kept apart)."""
        return self._previous_of.get(tenant)

    def running(self, exclude: str | None = None, tenant: str | None = None) -> list[StreamRecord]:
        """The recorded streams running now (but ``exclude``; only ``tenant``'s when
        given; none of an anonymous tenant kept apart), oldest first. At most
        ``max_running`` to look at."""
        if tenant is not None and apart(tenant):
            return []
        return [
            r
            for rid, r in self._running.items()
            if rid != exclude and (tenant is None or r.tenant == tenant)
        ]

    def clear(self) -> None:
        """Forget every stream (streams still running are no longer recorded)."""
        self._running.clear()
        self._previous = None
        self._previous_of.clear()

    def _finished(self) -> list[StreamRecord]:
        """The finished streams kept, each once."""
        kept = list(self._previous_of.values())
        last = self._previous
        if last is not None and self._previous_of.get(last.tenant) is not last:
            kept.append(last)
        return kept

    @property
    def bytes(self) -> int:
        """Bytes of events kept, over every stream."""
        streams = [*self._running.values(), *self._finished()]
        return sum(r.bytes for r in streams)

    @property
    def events(self) -> int:
        """Events kept, over every stream."""
        streams = [*self._running.values(), *self._finished()]
        return sum(len(r) for r in streams)

    def __len__(self) -> int:
        """Streams kept: those running and the previous ones."""
        return len(self._running) + len(self._finished())


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_PREVIOUS",
    "DEFAULT_MAX_RUNNING",
    "RecentStreams",
    "StreamRecord",
]
