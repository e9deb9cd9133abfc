"""``pong``: the client's pings answered late, or never.

Exactly one of ``delay`` (each pong that long after its ping) or ``drop: true`` (no
pong at all: a client that checks its connection with pings decides it is dead);
``after: N`` pings are answered as usual first. The messages keep flowing.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from chaosproxy.core.faults._websocket import Pong, WebSocketFault
from chaosproxy.core.faults.base import Declaration, Duration, FaultConfig, FaultContext


class PongConfig(FaultConfig):
    """Exactly one of ``delay``, ``drop``; ``after``."""

    one_of = ("delay", "drop")

    delay: Duration | None = None
    drop: Literal[True] | None = None
    after: Annotated[int, Field(ge=0)] = 0


class PongFault(WebSocketFault[PongConfig], name="pong", stage="websocket"):
    declaration = Declaration(
        needs="websocket",
        keeps_answer=True,
        explore=None,
        example="pong: {drop: true}",
    )

    def __init__(self, config: PongConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self.pings = 0

    def on_ping(self, pong: Pong) -> Pong | None:
        self.pings += 1
        if self.pings <= self.config.after:
            return pong
        self.applied += 1
        if self.config.drop:
            return None
        return Pong(pong.delay + (self.config.delay or 0.0), self.name)
