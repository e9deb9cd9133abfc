"""``reorder``: from a selected event, hold ``window`` events and send them reversed or
shuffled.

The group is the selected event and the next ``window - 1`` frames that reach this
fault, whatever they are (other events, comments, events made up by earlier faults).
When upstream ends first, the partial group is released in the same mode.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, FaultContext, SelectingFault, SelectorConfig
from chaosproxy.core.faults.drawing import Choices, Explore, Within, int_range, options, selector


class ReorderConfig(SelectorConfig):
    #: How many frames one group holds (the selected event included).
    window: Annotated[int, Field(ge=2, le=10_000, strict=True)] = 2
    mode: Literal["reverse", "shuffle"] = "reverse"


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    return {
        **selector(c, space, ("delta", "other", "start", "usage", "tool_delta")),
        "window": c.between(*int_range(ReorderConfig, "window", 2, 4)),
        "mode": c.pick(options(ReorderConfig, "mode")),
    }


class ReorderFault(SelectingFault[ReorderConfig], name="reorder", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=3),
        example="reorder: {kind: delta, nth: 2, window: 3}",
    )

    def __init__(self, config: ReorderConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._held: list[Event] = []
        #: Groups released, whether or not their order changed.
        self.groups = 0

    def on_event(self, ev: Event) -> list[Event]:
        if self._held:
            self._held.append(ev)
            if len(self._held) >= self.config.window:
                return self._release()
            return []
        if self.selector.selects(ev):
            self._held.append(ev)
            return []
        return [ev]

    def on_event_end(self) -> list[Event]:
        return self._release() if self._held else []

    def _release(self) -> list[Event]:
        held, self._held = self._held, []
        self.groups += 1
        order = list(range(len(held)))
        if self.config.mode == "reverse":
            order.reverse()
        else:
            self.ctx.rng.shuffle(order)
        if order == sorted(order):
            return held
        self.applied += 1
        return [held[i].touched(self.name) for i in order]

    def skipped(self) -> str | None:
        if not self.applied and self.groups:
            return (
                f"{self.groups} group(s) held, none changed order"
                " (a group of one at the end of the stream, or a shuffle that kept it)"
            )
        return super().skipped()
