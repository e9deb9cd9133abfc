"""``hang``: after the last event, keep the connection open without ending the body."""

from __future__ import annotations

import math

from chaosproxy.core.actions import Action, Sleep
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig
from chaosproxy.core.faults.drawing import Explore, nothing


class HangConfig(FaultConfig):
    """No parameters (``hang: null`` or ``hang: {}``)."""


class HangFault(Fault[HangConfig], name="hang", stage="transport"):
    declaration = Declaration(
        needs="any",
        keeps_answer=True,
        explore=Explore(draw=nothing, rank=19, endless=True),
        example="hang",
    )

    def on_action_end(self) -> list[Action]:
        self.applied += 1
        return [Sleep(math.inf, fault=self.name)]

    def skipped(self) -> str | None:
        return None if self.applied else "the body never ended (it was cut first)"
