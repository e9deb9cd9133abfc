"""``comment``: interleave SSE comment blocks (keepalives) between events.

After every ``every``-th upstream event (by ordinal, once per ordinal even when an
earlier fault duplicated it) a comment block ``: <text>`` and its blank line is sent,
with the line ending of the event before it. Not after an unterminated final event:
the comment would become part of its last line. NDJSON has no comment syntax: there
the fault leaves the stream unchanged and reports itself skipped.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictStr

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, int_range
from chaosproxy.core.framing import parse_block
from chaosproxy.core.framing.encode import comment_bytes, newline_of


class CommentConfig(FaultConfig):
    every: Annotated[int, Field(ge=1, strict=True)] = 1
    #: The comment text; each of its lines becomes one ``:`` line.
    text: StrictStr = "keepalive"


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    return {"every": c.between(*int_range(CommentConfig, "every", 1, 5))}


class CommentFault(Fault[CommentConfig], name="comment", stage="event"):
    declaration = Declaration(
        needs="sse",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=10),
        example="comment: {every: 2}",
    )

    def __init__(self, config: CommentConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._last = 0  # the ordinal a comment last followed
        self._seen = 0

    def observe(self, ev: Event) -> None:
        self._seen = max(self._seen, ev.ordinal)

    def on_event(self, ev: Event) -> list[Event]:
        n = ev.ordinal
        if (
            self.ctx.format != "sse"
            or n <= 0
            or n % self.config.every
            or n == self._last
            or not ev.frame.complete
        ):
            return [ev]
        self._last = n
        self.applied += 1
        frame = parse_block(comment_bytes(self.config.text, newline_of(ev.frame)), "sse")
        return [ev, Event(frame, 0, frozenset(), (self.name,))]

    def skipped(self) -> str | None:
        if self.applied:
            return None
        if self.ctx.format != "sse":
            if self.ctx.format == "eventstream":
                return "comments need SSE; an event stream has no comment syntax"
            return "comments need SSE; NDJSON has no comment syntax"
        return f"the stream had {self._seen} events, fewer than every: {self.config.every}"
