"""``drop``: selected events are not sent."""

from __future__ import annotations

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import SelectingFault, SelectorConfig


class DropConfig(SelectorConfig):
    """Selectors only."""


class DropFault(SelectingFault[DropConfig], name="drop", stage="event"):
    passes_unselected = True

    def on_event(self, ev: Event) -> list[Event]:
        if self.selector.selects(ev):
            self.applied += 1  # every copy an earlier fault made is dropped too
            return []
        return [ev]
