"""``drop``: selected events are not sent."""

from __future__ import annotations

from typing import Any

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, SelectingFault, SelectorConfig
from chaosproxy.core.faults.drawing import Choices, Explore, Within, selector


class DropConfig(SelectorConfig):
    """Selectors only."""


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    return selector(c, space)


class DropFault(SelectingFault[DropConfig], name="drop", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=1),
        example="drop: {kind: delta, nth: 3}",
    )

    passes_unselected = True

    def on_event(self, ev: Event) -> list[Event]:
        if self.selector.selects(ev):
            self.applied += 1  # every copy an earlier fault made is dropped too
            return []
        return [ev]
