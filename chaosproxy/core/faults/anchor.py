"""Where ``after: N`` / ``before: N`` falls in the stream a fault receives (``inject``,
``splice``, ``oversize``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from chaosproxy.core.events import Event

#: A fault's ``after:`` or ``before:`` key: an upstream ordinal (from 1), or the
#: stream's ``terminal`` or ``start`` event.
Anchor = Annotated[int, Field(ge=1, strict=True)] | Literal["terminal", "start"]

#: Which side of an event a position is on.
Placement = Literal["after", "before"]


class OrdinalAnchor:
    """Where ``after: N`` / ``before: N`` (N an upstream ordinal) falls in the stream a
    fault receives.

    Faults listed earlier may have removed or moved event N: then the position is just
    before the first event with a later ordinal that arrives, or the end of the stream
    if upstream had N events but none of them came after it.
    """

    __slots__ = ("fired", "ordinal", "seen", "target")

    def __init__(self, target: int | str | None) -> None:
        #: What the scenario named: an upstream ordinal, or a kind (``terminal``,
        #: ``start``) whose first upstream event gives the ordinal.
        self.target = target
        #: The upstream ordinal (None: not known yet, e.g. ``terminal`` before it came).
        self.ordinal = target if isinstance(target, int) else None
        #: Upstream events observed so far.
        self.seen = 0
        self.fired = False

    def observe(self, ev: Event) -> None:
        if ev.ordinal > 0:
            self.seen = max(self.seen, ev.ordinal)
        target = self.target
        if self.ordinal is None and isinstance(target, str) and target in ev.kinds:
            self.ordinal = ev.ordinal

    def at(self, ev: Event, where: Placement) -> Placement | None:
        """Whether the position is right ``before`` or right ``after`` ``ev`` (fires once)."""
        n = self.ordinal
        if self.fired or n is None or ev.ordinal <= 0:
            return None
        if ev.ordinal == n:
            self.fired = True
            return where
        if ev.ordinal > n:
            self.fired = True
            return "before"
        return None

    def at_end(self) -> bool:
        """True when the position was in the stream but nothing fired it (fires once)."""
        if self.fired or self.ordinal is None or self.seen < self.ordinal:
            return False
        self.fired = True
        return True

    def never_reached(self, where: str) -> str:
        """Why nothing fired, for a fault's skipped reason; ``where`` is how the scenario
        put the position (``after: terminal``)."""
        if isinstance(self.target, str) and self.ordinal is None:
            return f"{where} never reached: the stream had no {self.target} event"
        return f"{where} never reached: the stream had {self.seen} events"
