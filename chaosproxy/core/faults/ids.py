"""``ids``: add ``id:`` (and ``retry:``) fields to SSE events that have none.

Events without an ``id`` field get ``id: N``, N counting from ``start`` and going up
by one per event that gets one (events that carry their own id keep it and use no
number). With ``retry``, the first event also gets ``retry: R`` (unless it has a
retry field). The new lines go at the start of the event block, ``id`` first, in the
event's own line ending, so a cut ``after_id`` sends them before the data. NDJSON has
no fields: there the fault changes nothing and reports itself skipped.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, int_range
from chaosproxy.core.framing.encode import prepend_lines


class IdsConfig(FaultConfig):
    start: Annotated[int, Field(ge=0, strict=True)] = 0
    #: Reconnection time, in milliseconds, for the first event's ``retry:`` field.
    retry: Annotated[int, Field(ge=0, strict=True)] | None = None


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    return {"start": c.between(*int_range(IdsConfig, "start", 0, 3))}


class IdsFault(Fault[IdsConfig], name="ids", stage="event"):
    declaration = Declaration(
        needs="sse",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=11),
        example="ids: {start: 1}",
    )

    def __init__(self, config: IdsConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        #: The next id to hand out.
        self.next_id = config.start
        self._first = True

    def on_event(self, ev: Event) -> list[Event]:
        frame = ev.frame
        if self.ctx.format != "sse" or not frame.is_event:
            return [ev]
        lines: list[bytes] = []
        new_id: str | None = None
        retry: int | None = None
        if frame.id is None:
            new_id = str(self.next_id)
            lines.append(b"id: " + new_id.encode("ascii"))
            self.next_id += 1
        if self._first and self.config.retry is not None and frame.retry is None:
            retry = self.config.retry
            lines.append(b"retry: %d" % retry)
        self._first = False
        if not lines:
            return [ev]
        self.applied += 1
        return [ev.touched(self.name, prepend_lines(frame, lines, id=new_id, retry=retry))]

    def skipped(self) -> str | None:
        if self.applied:
            return None
        if self.ctx.format != "sse":
            if self.ctx.format == "eventstream":
                return "ids need SSE; an event stream has no id field"
            return "ids need SSE; NDJSON has no id field"
        return "no event lacked an id"
