"""``coalesce``: merge consecutive writes into one, as a buffering gateway does.

``events: N`` merges every N writes; ``window`` holds writes until that long after the
first held one (the pipeline polls :meth:`CoalesceFault.poll` at the deadline);
``all: true`` sends the whole body as one write at the end. A Sleep or Cut arriving
while writes are held first releases them, then passes on.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from chaosproxy.core.actions import Action, Send
from chaosproxy.core.faults.base import Declaration, Duration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, int_range


class CoalesceConfig(FaultConfig):
    """Exactly one of ``events``, ``window`` or ``all``."""

    one_of = ("events", "window", "all")
    one_of_note = " (all: true)"

    events: Annotated[int, Field(ge=2)] | None = None
    window: Annotated[Duration, Field(gt=0)] | None = None
    all: Literal[True] | None = None


def merge_sends(sends: list[Send], fault: str) -> Send:
    """One write carrying all of ``sends``, marked as shaped by ``fault``."""
    if len(sends) == 1:
        return sends[0]
    faults: dict[str, None] = {}
    for s in sends:
        faults.update(dict.fromkeys(s.faults))
    faults[fault] = None
    return Send(
        b"".join(s.data for s in sends),
        tuple(ev for s in sends for ev in s.events),
        sum(s.ends for s in sends),
        tuple(faults),
    )


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    form = c.below(3)
    if form == 0:
        return {"events": c.between(*int_range(CoalesceConfig, "events", 2, 5))}
    if form == 1:
        return {"window": 10 * c.between(1, 20)}  # 10 … 200 ms
    return {"all": True}


class CoalesceFault(Fault[CoalesceConfig], name="coalesce", stage="transport"):
    declaration = Declaration(
        needs="any",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=14),
        example="coalesce: {events: 3}",
    )

    def __init__(self, config: CoalesceConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._held: list[Send] = []
        #: Pipeline time when the first held write arrived (window mode).
        self._since = 0.0

    def _flush(self) -> list[Action]:
        if not self._held:
            return []
        held, self._held = self._held, []
        if len(held) > 1:
            self.applied += 1
        return [merge_sends(held, self.name)]

    def _window_over(self, now: float) -> bool:
        window = self.config.window
        return window is not None and bool(self._held) and now >= self._since + window

    def on_action(self, action: Action) -> list[Action]:
        if not isinstance(action, Send):
            return [*self._flush(), action]
        out: list[Action] = []
        if self._window_over(self.now):
            out += self._flush()  # a late arrival: the window closed before it came
        if not self._held:
            self._since = self.now
        self._held.append(action)
        if self.config.events is not None and len(self._held) >= self.config.events:
            out += self._flush()
        return out

    def on_action_end(self) -> list[Action]:
        return self._flush()

    def deadline(self) -> float | None:
        if self.config.window is None or not self._held:
            return None
        return self._since + self.config.window

    def poll(self, now: float) -> list[Action]:
        return self._flush() if self._window_over(now) else []

    def skipped(self) -> str | None:
        if self.applied:
            return None
        return "never held two writes to merge"
