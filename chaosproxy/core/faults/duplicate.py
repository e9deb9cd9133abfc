"""``duplicate``: a selected event is sent 1 + ``times`` times, adjacent."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, FaultContext, SelectingFault, SelectorConfig
from chaosproxy.core.faults.drawing import Choices, Explore, Within, int_range, selector


class DuplicateConfig(SelectorConfig):
    #: How many extra copies follow the original.
    times: Annotated[int, Field(ge=1, le=1000, strict=True)] = 1


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    return {**selector(c, space), "times": c.between(*int_range(DuplicateConfig, "times", 1, 3))}


class DuplicateFault(SelectingFault[DuplicateConfig], name="duplicate", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=2),
        example="duplicate: {kind: delta, nth: 2, times: 2}",
    )

    passes_unselected = True

    def __init__(self, config: DuplicateConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._selects = self.selector.selects

    def on_event(self, ev: Event) -> list[Event]:
        if not self._selects(ev):
            return [ev]
        self.applied += 1
        # The original goes out as it came; the copies carry the fault's name.
        copy = ev.touched(self.name)
        return [ev] + [copy] * self.config.times
