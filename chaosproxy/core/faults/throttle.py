"""``throttle``: cap the bandwidth.

Each write is cut into pieces of ``max(1, bytes_per_second // 20)`` bytes, each followed
by a Sleep of ``len(piece) / bytes_per_second``: the cap holds exactly, and the client
sees a write about every 50 ms. Deterministic.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from chaosproxy.core.actions import Action, Send, Sleep
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, int_range
from chaosproxy.core.faults.rechunk import split_send

#: Writes per second at the cap (one every 50 ms).
WRITES_PER_SECOND = 20


class ThrottleConfig(FaultConfig):
    bytes_per_second: Annotated[int, Field(ge=1)]


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    # Slow, but never so slow that the stream (and an oversize event) outlasts a run:
    # at least its own bytes a second, and 16 kB/s.
    floor = max(16, -(-space.shape.bytes // 1000))
    low, high = int_range(ThrottleConfig, "bytes_per_second", 1000 * floor, 4000 * floor)
    return {"bytes_per_second": 1000 * c.between(low // 1000, high // 1000)}


class ThrottleFault(Fault[ThrottleConfig], name="throttle", stage="transport"):
    declaration = Declaration(
        needs="any",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=16),
        example="throttle: {bytes_per_second: 200}",
    )

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
