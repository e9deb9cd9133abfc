"""Recent framed streams, for the ``splice`` fault: bounded, sans-IO.

One :class:`RecentStreams` belongs to a proxy (the shell keeps it; offline runs have
none). Every framed stream (``sse`` or ``ndjson``, under an active scenario) is
*opened* in it when its head is decided, *records* each upstream event as it passes
through its pipeline (before any fault: what the upstream sent), and is *closed* when
its request ends, whatever the outcome; the last stream closed is the *previous* one.
``splice`` reads it: ``from: previous`` the previous stream as it stood when its own
request started, ``from: concurrent`` the streams running at the moment it splices.

Memory is bounded three ways: a stream keeps at most ``max_events`` events and
``max_bytes`` bytes of them (the oldest are forgotten first; an event larger than
``max_bytes`` is not kept); at most ``max_running`` streams are recorded at once
(streams beyond that are not recorded, so cannot be a source); and of the finished
ones only the last is kept.
"""

from __future__ import annotations

from collections import deque

from chaosproxy.core.events import Event
from chaosproxy.core.frames import Format, Frame

#: Events a stream keeps at most (every kind together).
DEFAULT_MAX_EVENTS = 256
#: Bytes of events (as sent upstream) a stream keeps at most.
DEFAULT_MAX_BYTES = 64 * 1024
#: Streams recorded at once at most (those running, not counting the previous one).
DEFAULT_MAX_RUNNING = 64

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
    )

    def __init__(self, request_id: str, fmt: Format, max_events: int, max_bytes: int) -> None:
        self.request_id = request_id
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
    """The framed streams running now and the last one that finished; see the module
    docstring."""

    def __init__(
        self,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_running: int = DEFAULT_MAX_RUNNING,
    ) -> None:
        if max_events < 0 or max_bytes < 0 or max_running < 0:
            raise ValueError("the bounds must be >= 0")
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_running = max_running
        #: Streams running now, in the order they were opened.
        self._running: dict[str, StreamRecord] = {}
        self._previous: StreamRecord | None = None
        #: Streams not recorded because ``max_running`` were already recorded.
        self.unrecorded = 0

    def open(self, request_id: str, fmt: Format) -> StreamRecord | None:
        """A framed stream begins: its record (None when too many are recorded)."""
        if len(self._running) >= self.max_running:
            self.unrecorded += 1
            return None
        record = StreamRecord(request_id, fmt, self.max_events, self.max_bytes)
        self._running[request_id] = record
        return record

    def close(self, record: StreamRecord) -> None:
        """Its request ended: the stream becomes the previous one."""
        if self._running.pop(record.request_id, None) is record:
            self._previous = record

    @property
    def previous(self) -> StreamRecord | None:
        """The framed stream that finished last, or None."""
        return self._previous

    def running(self, exclude: str | None = None) -> list[StreamRecord]:
        """The recorded streams running now (but ``exclude``), oldest first."""
        return [r for rid, r in self._running.items() if rid != exclude]

    def clear(self) -> None:
        """Forget every stream (streams still running are no longer recorded)."""
        self._running.clear()
        self._previous = None

    @property
    def bytes(self) -> int:
        """Bytes of events kept, over every stream."""
        kept = sum(r.bytes for r in self._running.values())
        return kept + (self._previous.bytes if self._previous is not None else 0)

    @property
    def events(self) -> int:
        """Events kept, over every stream."""
        kept = sum(len(r) for r in self._running.values())
        return kept + (len(self._previous) if self._previous is not None else 0)

    def __len__(self) -> int:
        """Streams kept: those running and the previous one."""
        return len(self._running) + (self._previous is not None)


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_RUNNING",
    "RecentStreams",
    "StreamRecord",
]
