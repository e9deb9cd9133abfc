"""Events: frames as they travel through the fault pipeline."""

from __future__ import annotations

from dataclasses import dataclass

from chaosproxy.core.frames import Frame


# Not frozen, for the cost of construction (see Frame); immutable by convention. An
# ``__init__`` of our own, compiled (see Frame).
@dataclass(slots=True, unsafe_hash=True, init=False)
class Event:
    """A frame plus what the pipeline knows about it (treat it as immutable).

    ``ordinal`` is the 1-based position among the *upstream* events, fixed before any
    fault runs; it is 0 for frames that are not events (SSE comments, blank lines) and
    for events a fault made up. ``kinds`` comes from the provider profile.
    """

    frame: Frame
    ordinal: int
    kinds: frozenset[str]
    #: Names of the faults that made or changed this event, in order.
    faults: tuple[str, ...] = ()
    #: The request id of the stream a ``splice`` took this event from.
    splice_from: str | None = None
    #: The upstream ordinals ``(first, last)`` this event was sent among when a content
    #: fault rewrote them as one group (merged them into one event, interleaved two
    #: calls' events): a client sees the group whole, so no gap or disorder inside it.
    group: tuple[int, int] | None = None

    def __init__(
        self,
        frame: Frame,
        ordinal: int,
        kinds: frozenset[str],
        faults: tuple[str, ...] = (),
        splice_from: str | None = None,
        group: tuple[int, int] | None = None,
    ) -> None:
        self.frame = frame
        self.ordinal = ordinal
        self.kinds = kinds
        self.faults = faults
        self.splice_from = splice_from
        self.group = group

    @property
    def raw(self) -> bytes:
        return self.frame.raw

    def touched(self, fault: str, frame: Frame | None = None) -> Event:
        """This event, marked as shaped by ``fault`` (with a new frame if given)."""
        return Event(
            frame or self.frame,
            self.ordinal,
            self.kinds,
            (*self.faults, fault),
            self.splice_from,
            self.group,
        )
