"""``cut``: end the response early, at an exact point.

Transport part: ``after: N`` (once N events have been sent), ``after: start|terminal``
(once the first such event has been sent), ``before: terminal`` (instead of the write
that carries the first terminal event) or ``after_bytes: N`` (after exactly N body
bytes). With a ``position`` other than ``boundary``, the cut falls part-way into the
next event; with ``seek: true`` as well, into the first event from there on that has
such a place (the first multi-byte character, say), so that a scenario meaning "cut
inside a character where one comes" does so whatever the upstream's text. HTTP part:
``before: headers`` closes or resets before any response byte.

The cut point is found on the writes this fault receives, so it is exact when ``cut``
comes before ``rechunk``/``coalesce`` in the scenario (transport faults run in order).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from chaosproxy.core.actions import Action, Cut, HttpAction, Send
from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, options
from chaosproxy.core.framing.eventstream import OVERHEAD, message_payload

Position = Literal["boundary", "after_id", "after_data", "mid_utf8", "mid_line"]


class CutConfig(FaultConfig):
    """Exactly one of ``after``, ``before``, ``after_bytes``; ``position``; ``seek``;
    ``how``."""

    one_of = ("after", "before", "after_bytes")

    after: Annotated[int, Field(ge=0)] | Literal["start", "terminal"] | None = None
    before: Literal["terminal", "headers"] | None = None
    after_bytes: Annotated[int, Field(ge=0)] | None = None
    position: Position = "boundary"
    #: Search forward from the cut point for the first event that has the
    #: ``position``'s place, instead of falling back to the boundary of the next one.
    seek: bool = False
    how: Literal["close", "abort", "reset"] = "abort"

    @model_validator(mode="after")
    def _consistent(self) -> CutConfig:
        if "position" in self.model_fields_set:
            if self.before == "headers":
                raise ValueError("position is not allowed with before: headers")
            if self.after_bytes is not None:
                raise ValueError("position is not allowed with after_bytes")
        if self.seek:
            if self.position == "boundary":
                raise ValueError("seek needs a position other than boundary to search for")
            if self.after is None:
                raise ValueError("seek searches forward from after: N (or start, terminal)")
        return self


#: What a ``seek`` looks for, per position (its fallback reason names it).
_PLACES: dict[str, str] = {
    "after_id": "an id line",
    "after_data": "a final line terminator",
    "mid_utf8": "a multi-byte UTF-8 character",
    "mid_line": "a first line that is not empty",
}

_EOL = re.compile(rb"\r\n|\r|\n")
_MULTIBYTE_LEAD = re.compile(rb"[\xc0-\xf7](?=[\x80-\xbf])")


def cut_prefix(data: bytes, position: Position, fmt: str = "sse") -> tuple[bytes | None, str]:
    """The bytes of an event to send before cutting at ``position``, or None and the
    reason when the event has no such place (the cut then falls on the boundary)."""
    m: re.Match[bytes] | None
    if fmt == "eventstream":
        return _message_prefix(data, position)
    if position == "after_id":
        start = 0
        for eol in _EOL.finditer(data):
            line = data[start : eol.start()]
            if line == b"id" or line.startswith(b"id:"):
                return data[: eol.end()], ""
            start = eol.end()
        return None, "the event has no id line"
    if position == "after_data":
        m = re.search(rb"(\r\n|\r|\n)\Z", data)
        if m is None:
            return None, "the event has no final line terminator"
        return data[: m.start()], ""
    if position == "mid_utf8":
        m = _MULTIBYTE_LEAD.search(data)
        if m is None:
            return None, "the event has no multi-byte UTF-8 character"
        return data[: m.start() + 1], ""
    if position == "mid_line":
        m = _EOL.search(data)
        line_len = m.start() if m else len(data)
        if line_len == 0:
            return None, "the event's first line is empty"
        return data[: max(1, line_len // 2)], ""
    return b"", ""


def _message_prefix(data: bytes, position: Position) -> tuple[bytes | None, str]:
    """:func:`cut_prefix` for an AWS event stream message (binary: its lines mean
    nothing): ``after_data`` is all of it but its final CRC, ``mid_line`` its first
    half, ``mid_utf8`` up to the lead byte of its payload's first multi-byte
    character; it has no id."""
    if position == "after_id":
        return None, "an event stream message has no id"
    if len(data) < OVERHEAD:
        return None, "the event is no whole event stream message"
    payload = message_payload(data)
    if position == "after_data":
        return data[:-4], ""
    if position == "mid_line":
        return data[: len(data) // 2], ""
    if position == "mid_utf8":
        m = _MULTIBYTE_LEAD.search(payload)
        if m is None:
            return None, "the event has no multi-byte UTF-8 character"
        start = len(data) - 4 - len(payload)
        return data[: start + m.start() + 1], ""
    return b"", ""


def _real(ev: Event) -> bool:
    """An event, as opposed to a comment or a stray blank line."""
    return ev.ordinal > 0 or ev.frame.is_event


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    shape = space.shape
    form = c.below(4, (45, 25, 15, 15))
    out: dict[str, Any]
    if form == 0:
        out = {"after": c.between(0, max(0, shape.events - 1))}
    elif form == 1:
        out = {"before": "terminal"}
    elif form == 2:
        out = {"after": "terminal" if shape.count("terminal") else "start"}
    else:
        out = {"after_bytes": c.between(0, max(0, shape.bytes - 1))}
    if "after_bytes" not in out:
        position = c.pick(options(CutConfig, "position"), (60, 10, 10, 10, 10))
        if position != "boundary":
            out["position"] = position
    out["how"] = c.pick(options(CutConfig, "how"))
    return out


class CutFault(Fault[CutConfig], name="cut", stage="transport"):
    declaration = Declaration(
        needs="any",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=18),
        example="cut: {after: 2, how: reset}",
    )

    def __init__(self, config: CutConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        #: Events (ends of writes carrying real events) and body bytes sent so far.
        self.sent_events = 0
        self.sent_bytes = 0
        #: The cut point is reached: cut now (boundary) or inside the next event.
        self._armed = config.after == 0
        self._done = False
        #: ``seek``: events passed over since the cut point for want of the place.
        self._passed = 0
        #: The position asked for and why it could not be honoured, once it was not.
        self._fell_back: tuple[str, str] | None = None

    # ------------------------------------------------------------------ HTTP

    def before_upstream(self) -> list[HttpAction]:
        if self.config.before != "headers" or self._done:
            return []
        self._done = True
        self.applied += 1
        return [Cut(self.config.how, fault=self.name, detail={"before": "headers"})]

    # ------------------------------------------------------------------ transport

    def _cut(self, **detail: object) -> list[Action]:
        self._done = True
        self.applied += 1
        info: dict[str, object] = {"after_event": self.sent_events, **detail}
        return [Cut(self.config.how, fault=self.name, detail=info)]

    def _count(self, send: Send) -> None:
        self.sent_bytes += len(send.data)
        if any(_real(ev) for ev in send.events):
            self.sent_events += send.ends

    def _reached(self, send: Send) -> bool:
        after = self.config.after
        if isinstance(after, int):
            return self.sent_events >= after
        if after is not None:
            return bool(send.ends) and any(after in ev.kinds for ev in send.events)
        return False

    def on_action(self, action: Action) -> list[Action]:
        if self._done:
            return []
        if not isinstance(action, Send) or self.config.before == "headers":
            return [action]
        if self.config.after_bytes is not None:
            return self._by_bytes(action, self.config.after_bytes)
        if (
            self.config.before == "terminal"
            and not self._armed
            and any("terminal" in ev.kinds for ev in action.events)
        ):
            self._armed = True  # the cut point is just before this write
        if self._armed:
            return self._into(action)
        self._count(action)
        if self._reached(action):
            self._armed = True
            if self.config.position == "boundary":
                return [action, *self._cut(position="boundary")]
        return [action]

    def _into(self, send: Send) -> list[Action]:
        """Cut at the armed point: now, or part-way into ``send`` if it is an event."""
        position = self.config.position
        if position == "boundary":
            return self._cut(position=position)
        if not any(_real(ev) for ev in send.events):
            self._count(send)  # a comment before the next event goes through
            return [send]
        prefix, why = cut_prefix(send.data, position, self.ctx.format)
        if prefix is None and self.config.seek:
            if not any("terminal" in ev.kinds for ev in send.events):
                self._count(send)  # no place in it: the search goes on
                self._passed += send.ends
                return [send]
            why = self._sought("the terminal event")
        if prefix is None:
            return self._boundary_instead(why)
        out: list[Action] = []
        if prefix:
            out.append(Send(prefix, send.events, 0, (*send.faults, self.name)))
            self.sent_bytes += len(prefix)
        return out + self._cut(position=position)

    def _boundary_instead(self, why: str) -> list[Action]:
        """The cut at the boundary, the position asked for having no place (``why``)."""
        self._fell_back = (self.config.position, why)
        return self._cut(position="boundary", requested=self.config.position, fallback=why)

    def _sought(self, until: str) -> str:
        """The fallback reason of a ``seek`` that found no place up to ``until``."""
        first = self.sent_events - self._passed + 1
        return f"no event from event {first} to {until} has {_PLACES[self.config.position]}"

    def _by_bytes(self, send: Send, limit: int) -> list[Action]:
        remaining = limit - self.sent_bytes
        if len(send.data) < remaining:
            self._count(send)
            return [send]
        if len(send.data) == remaining:
            self._count(send)
            return [send, *self._cut(position="after_bytes", bytes=limit)]
        out: list[Action] = []
        if remaining:
            out.append(Send(send.data[:remaining], send.events, 0, (*send.faults, self.name)))
            self.sent_bytes += remaining
        return out + self._cut(position="after_bytes", bytes=limit)

    def on_action_end(self) -> list[Action]:
        if self._done or self.config.before == "headers":
            return []
        # Only a zero cut point on an empty body is still pending here.
        if self.config.after_bytes is not None and self.sent_bytes == self.config.after_bytes:
            return self._cut(position="after_bytes", bytes=self.config.after_bytes)
        if self._armed and self.config.position == "boundary":
            return self._cut(position="boundary")
        if self._armed and self._passed:  # seek: the body ended with no place found
            return self._boundary_instead(self._sought("the end of the body"))
        return []

    # ------------------------------------------------------------------ report

    def fallback(self) -> tuple[str, str, str] | None:
        if self._fell_back is None:
            return None
        requested, why = self._fell_back
        return requested, "boundary", why

    def skipped(self) -> str | None:
        if self.applied:
            return None
        cfg = self.config
        if cfg.before == "headers":
            return "the request never reached the upstream"
        if cfg.after_bytes is not None:
            return f"the body ended after {self.sent_bytes} bytes, before byte {cfg.after_bytes}"
        if self._armed:
            return f"no event came after event {self.sent_events} to cut into ({cfg.position})"
        if cfg.before == "terminal":
            return "no terminal event came"
        if isinstance(cfg.after, int):
            return f"only {self.sent_events} events were sent, fewer than {cfg.after}"
        return f"no {cfg.after} event was sent"
