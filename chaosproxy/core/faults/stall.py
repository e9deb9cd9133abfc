"""``stall``: send nothing for a while (or for ever), connection open.

The stall starts right after the write that ends the named event: upstream ordinal
``N`` (0: before the first byte), or the first ``start``/``terminal`` event. It fires
once.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field

from chaosproxy.core.actions import Action, Send, Sleep
from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, Duration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, anchor


class StallConfig(FaultConfig):
    """``after`` and exactly one of ``duration`` or ``forever: true``."""

    one_of = ("duration", "forever")
    one_of_note = " (forever: true)"

    after: Annotated[int, Field(ge=0)] | Literal["start", "terminal"]
    duration: Duration | None = None
    forever: Literal[True] | None = None


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    after = anchor(c, space, max(1, space.shape.events - 1))
    if space.endless and c.coin(0.15):
        return {"after": after, "forever": True}
    return {"after": after, "duration": 50 * c.between(1, 20)}  # 50 ms … 1 s


class StallFault(Fault[StallConfig], name="stall", stage="transport"):
    declaration = Declaration(
        needs="any",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=17),
        example="stall: {after: 2, duration: 30s}",
    )

    def __init__(self, config: StallConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self.seconds = math.inf if config.forever else (config.duration or 0.0)

    def _named(self, ev: Event) -> bool:
        after = self.config.after
        if isinstance(after, int):
            return ev.ordinal == after
        return after in ev.kinds

    def _stall(self) -> Sleep:
        self.applied += 1
        return Sleep(self.seconds, fault=self.name)

    def on_action(self, action: Action) -> list[Action]:
        if self.applied or not isinstance(action, Send):
            return [action]
        if self.config.after == 0:
            return [self._stall(), action]
        if action.ends and any(self._named(ev) for ev in action.events):
            return [action, self._stall()]
        return [action]

    def on_action_end(self) -> list[Action]:
        if not self.applied and self.config.after == 0:
            return [self._stall()]  # an empty body still stalls before its (absent) first byte
        return []

    def skipped(self) -> str | None:
        if self.applied:
            return None
        after = self.config.after
        what = f"event {after}" if isinstance(after, int) else f"a {after} event"
        return f"{what} never came: the stream ended first"
