"""``delay``: wait before sending.

Transport part: ``first_byte`` before the first write, ``per_event`` (plus a uniform
draw in ``[0, jitter]``) before each write that carries a selected event. HTTP part:
``headers`` holds the response headers back (the shell sleeps before sending them).
"""

from __future__ import annotations

from typing import Any

from chaosproxy.core.actions import Action, HttpAction, Send, Sleep
from chaosproxy.core.faults.base import (
    Declaration,
    Duration,
    FaultContext,
    SelectingFault,
    SelectorConfig,
)
from chaosproxy.core.faults.drawing import Choices, Explore, Within


class DelayConfig(SelectorConfig):
    """At least one of ``first_byte``, ``per_event``, ``jitter``, ``headers``;
    selectors restrict ``per_event``/``jitter`` to writes carrying a selected event."""

    some_of = ("first_byte", "per_event", "jitter", "headers")

    first_byte: Duration | None = None
    per_event: Duration | None = None
    jitter: Duration | None = None
    headers: Duration | None = None


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    form = c.below(3)
    if form == 0:
        return {"first_byte": 10 * c.between(1, 30)}  # 10 … 300 ms
    per_event = 5 * c.between(1, 10)  # 5 … 50 ms a write
    if form == 1:
        return {"per_event": per_event}
    return {"per_event": per_event, "jitter": 5 * c.between(1, 10)}


class DelayFault(SelectingFault[DelayConfig], name="delay", stage="transport"):
    declaration = Declaration(
        needs="any",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=15),
        example="delay: {first_byte: 2s}",
    )

    def __init__(self, config: DelayConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._first_sent = False
        self._per_event = config.per_event is not None or config.jitter is not None

    def _sleep(self, seconds: float) -> list[Action]:
        if seconds <= 0:
            return []
        self.applied += 1
        return [Sleep(seconds, fault=self.name)]

    def before_upstream(self) -> list[HttpAction]:
        if self.config.headers is None or self.config.headers <= 0:
            return []
        self.applied += 1
        return [Sleep(self.config.headers, fault=self.name)]

    def on_action(self, action: Action) -> list[Action]:
        if not isinstance(action, Send):
            return [action]
        out: list[Action] = []
        if not self._first_sent:
            self._first_sent = True
            out += self._sleep(self.config.first_byte or 0.0)
        if self._per_event and any(self.selector.selects(ev) for ev in action.events):
            seconds = self.config.per_event or 0.0
            if self.config.jitter:
                seconds += self.ctx.rng.uniform(0.0, self.config.jitter)
            out += self._sleep(seconds)
        out.append(action)
        return out

    def skipped(self) -> str | None:
        if self.applied:
            return None
        if self._per_event:
            reason = self.selector.unreached()
            if reason:
                return reason
            if self._first_sent and self.selector.matched == 0:
                return "no event matched the selectors"
        if not self._first_sent and (self.config.first_byte or self._per_event):
            return "the body was empty: nothing to delay"
        if self.config.headers:
            return "the response headers were never sent"
        return "every delay was 0"
