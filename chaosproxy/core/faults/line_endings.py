"""``line_endings``: re-encode every line terminator of the body as ``style`` says.

SSE: every line of every frame (field lines, comments, the blank line that ends an
event) gets the new terminator; an unterminated last line stays unterminated. NDJSON:
``lf`` and ``crlf`` re-encode each line's terminator; ``cr`` is not an NDJSON line
ending, so on an NDJSON stream that style leaves the body unchanged and is reported
as skipped.
"""

from __future__ import annotations

from typing import Any, Literal

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, options
from chaosproxy.core.framing.encode import ndjson_terminator, split_lines, with_raw

_STYLES = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


class LineEndingsConfig(FaultConfig):
    style: Literal["lf", "crlf", "cr"]


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    return {"style": c.pick(options(LineEndingsConfig, "style"))}


class LineEndingsFault(Fault[LineEndingsConfig], name="line_endings", stage="event"):
    declaration = Declaration(
        needs="sse",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=8),
        example="line_endings: {style: crlf}",
    )

    def __init__(self, config: LineEndingsConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._newline = _STYLES[config.style]

    def on_event(self, ev: Event) -> list[Event]:
        if self.ctx.format == "eventstream" or (
            self.ctx.format != "sse" and self.config.style == "cr"
        ):
            return [ev]
        raw = ev.raw
        if self.ctx.format == "sse":
            new = b"".join(
                content + (self._newline if term else b"") for content, term in split_lines(raw)
            )
        else:  # only the line's own terminator: a lone CR inside an NDJSON line is data
            term = ndjson_terminator(raw)
            new = raw[: len(raw) - len(term)] + (self._newline if term else b"")
        if new == ev.raw:
            return [ev]
        self.applied += 1
        return [ev.touched(self.name, with_raw(ev.frame, new, newline=self._newline))]

    def skipped(self) -> str | None:
        if self.applied:
            return None
        if self.ctx.format == "eventstream":
            return "an event stream has no line endings; the body was left unchanged"
        if self.ctx.format != "sse" and self.config.style == "cr":
            return "style cr is not an NDJSON line ending; the body was left unchanged"
        return f"every line already ended in {self.config.style}"
