"""``duplicate``: a selected event is sent 1 + ``times`` times, adjacent."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import FaultContext, SelectingFault, SelectorConfig


class DuplicateConfig(SelectorConfig):
    #: How many extra copies follow the original.
    times: Annotated[int, Field(ge=1, le=1000, strict=True)] = 1


class DuplicateFault(SelectingFault[DuplicateConfig], name="duplicate", stage="event"):
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
