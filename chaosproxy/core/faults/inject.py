"""``inject``: send a made-up event at a chosen place in the stream.

The place is ``after`` or ``before`` an upstream event: an ordinal, or the first
event of kind ``terminal`` / ``start``. The event is ``event`` (``data``, optional
``event:`` name and ``id``), ``raw`` bytes sent verbatim, or ``kind: error``, the
provider's own in-stream error event. Injected events have ordinal 0.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import Field, StrictStr, field_validator, model_validator

from chaosproxy.core.events import Event
from chaosproxy.core.faults.anchor import Anchor, OrdinalAnchor, Placement
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext, made_up
from chaosproxy.core.faults.drawing import Choices, Explore, Within, anchor, int_range
from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import parse_block
from chaosproxy.core.framing.encode import newline_of, sse_event_bytes
from chaosproxy.core.framing.eventstream import event_message


class InjectedEvent(FaultConfig):
    """What to send: exactly one of ``data``, ``raw``, ``kind``."""

    #: SSE ``event:`` name, an event stream message's ``:event-type`` (default
    #: ``chunk``) (with ``data`` only; NDJSON has no such field).
    event: StrictStr | None = None
    #: The payload: a string as is, a mapping or list as compact JSON.
    data: StrictStr | dict[str, Any] | list[Any] | None = None
    #: SSE ``id:`` field (with ``data`` only).
    id: StrictStr | None = None
    #: Bytes sent verbatim (UTF-8); their framing is the scenario author's business.
    raw: StrictStr | None = None
    #: ``error``: the provider profile's own in-stream error event.
    kind: Literal["error"] | None = None

    @field_validator("event", "id")
    @classmethod
    def _one_line(cls, v: str | None) -> str | None:
        if v is not None and ("\n" in v or "\r" in v):
            raise ValueError("must be one line (no CR or LF)")
        return v

    @field_validator("data")
    @classmethod
    def _json_encodable(cls, v: Any) -> Any:
        if isinstance(v, dict | list):
            try:
                orjson.dumps(v)
            except orjson.JSONEncodeError as exc:
                raise ValueError(f"cannot be encoded as JSON: {exc}") from None
        return v

    @model_validator(mode="after")
    def _one_payload(self) -> InjectedEvent:
        given = self.given("data", "raw", "kind")
        if len(given) != 1:
            raise ValueError(
                "give exactly one of data, raw, kind"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if given[0] != "data" and (self.event is not None or self.id is not None):
            raise ValueError("event and id go with data, not with raw or kind")
        return self


class InjectConfig(FaultConfig):
    one_of = ("after", "before")

    after: Anchor | None = None
    before: Anchor | None = None
    event: InjectedEvent
    #: How many copies to send at that place, adjacent.
    times: Annotated[int, Field(ge=1, le=1000, strict=True)] = 1


#: Made-up events explore has ``inject`` send, besides the provider's own error event:
#: for the providers whose wire format it knows.
INJECTED_EVENTS: dict[str, tuple[dict[str, Any], ...]] = {
    "openai-chat": (
        {"data": "[DONE]"},
        {"data": {"choices": [{"index": 0, "delta": {"content": " (injected)"}}]}},
    ),
}


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    shape = space.shape
    events = ({"kind": "error"}, *INJECTED_EVENTS.get(shape.provider, ()))
    place = c.pick(("after", "before"))
    return {
        place: anchor(c, space, shape.events),
        "event": c.pick(events),
        "times": c.between(*int_range(InjectConfig, "times", 1, 2)),
    }


class InjectFault(Fault[InjectConfig], name="inject", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=4),
        example="inject: {before: terminal, event: {kind: error}}",
    )

    def __init__(self, config: InjectConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        where: Placement = "after" if config.after is not None else "before"
        self._where = where
        self._anchor = OrdinalAnchor(config.after if config.after is not None else config.before)
        self._newline = b"\n"

    def observe(self, ev: Event) -> None:
        self._anchor.observe(ev)

    def on_event(self, ev: Event) -> list[Event]:
        self._newline = newline_of(ev.frame)
        place = self._anchor.at(ev, self._where)
        if place is None:
            return [ev]
        made = self._made(self._newline)
        return [ev, *made] if place == "after" else [*made, ev]

    def on_event_end(self) -> list[Event]:
        if self._anchor.at_end():
            return self._made(self._newline)
        return []

    def _made(self, newline: bytes) -> list[Event]:
        self.applied += 1
        frame = self._frame(newline)
        return [made_up(frame, self.ctx.profile, self.name)] * self.config.times

    def _frame(self, newline: bytes) -> Frame:
        spec = self.config.event
        fmt = self.ctx.format
        if spec.raw is not None:
            return parse_block(spec.raw.encode("utf-8"), fmt)
        if spec.kind == "error":
            return parse_block(self.ctx.profile.error_event(fmt, newline), fmt)
        data = spec.data
        text = data if isinstance(data, str) else orjson.dumps(data).decode("utf-8")
        if fmt == "sse":
            raw = sse_event_bytes(text, event=spec.event, id=spec.id, newline=newline)
        elif fmt == "eventstream":  # one message, named ``event`` (else ``chunk``)
            raw = event_message(spec.event or "chunk", text.encode("utf-8"))
        else:
            raw = text.encode("utf-8") + b"\n"
        return parse_block(raw, fmt)

    def skipped(self) -> str | None:
        if self.applied:
            return None
        return self._anchor.never_reached(f"{self._where}: {self._anchor.target}")
