"""``throttle``: cap the bandwidth.

Each write is cut into pieces of ``max(1, bytes_per_second // 20)`` bytes, each followed
by a Sleep of ``len(piece) / bytes_per_second``: the cap holds exactly, and the client
sees a write about every 50 ms. Deterministic.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from chaosproxy.core.actions import Action, Send, Sleep
from chaosproxy.core.faults.base import Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.rechunk import split_send

#: Writes per second at the cap (one every 50 ms).
WRITES_PER_SECOND = 20


class ThrottleConfig(FaultConfig):
    bytes_per_second: Annotated[int, Field(ge=1)]


class ThrottleFault(Fault[ThrottleConfig], name="throttle", stage="transport"):
    def __init__(self, config: ThrottleConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self.rate = config.bytes_per_second
        self.piece = max(1, self.rate // WRITES_PER_SECOND)

    def on_action(self, action: Action) -> list[Action]:
        if not isinstance(action, Send) or not action.data:
            return [action]
        self.applied += 1
        cuts = range(self.piece, len(action.data), self.piece)
        out: list[Action] = []
        for piece in split_send(action, cuts, self.name):
            out += (piece, Sleep(len(piece.data) / self.rate, fault=self.name))
        return out

    def skipped(self) -> str | None:
        return None if self.applied else "the body was empty"
