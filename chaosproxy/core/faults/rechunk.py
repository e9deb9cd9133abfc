"""``rechunk``: split the emitted bytes into writes of chosen sizes.

Each incoming write is cut on its own: bytes are never held back waiting for the next
event, so an event's last piece may be shorter than asked. The size sequence (the
``sizes`` cycle, the ``random`` draws) runs on across writes: every piece written,
shortened or not, uses up one entry.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from chaosproxy.core.actions import Action, Send
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, int_range
from chaosproxy.core.framing.eventstream import OVERHEAD, PRELUDE_LENGTH

Size = Annotated[int, Field(ge=1)]


class RechunkConfig(FaultConfig):
    """Exactly one of ``size``, ``sizes``, ``random`` or ``boundaries``."""

    one_of = ("size", "sizes", "random", "boundaries")

    size: Size | None = None
    sizes: Annotated[list[Size], Field(min_length=1)] | None = None
    random: tuple[Size, Size] | None = None
    boundaries: Literal["hostile"] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RechunkConfig:
        if self.random is not None and self.random[0] > self.random[1]:
            raise ValueError("random must be [min, max] with min <= max")
        return self


def split_send(send: Send, cuts: Iterable[int], fault: str) -> list[Send]:
    """``send`` cut at the given offsets (strictly inside its data, ascending).

    Every piece keeps the write's events; only the last one carries its ``ends``.
    """
    pieces: list[Send] = []
    faults = (*send.faults, fault)
    start = 0
    for cut in cuts:
        pieces.append(Send(send.data[start:cut], send.events, 0, faults))
        start = cut
    pieces.append(Send(send.data[start:], send.events, send.ends, faults))
    return pieces


# Hostile boundaries: the places a naive client parser is most likely to get wrong.
_EOL = re.compile(rb"\r\n|\r|\n")
_FIELD = re.compile(rb"[A-Za-z0-9_-]+:")
_MULTIBYTE_LEAD = re.compile(rb"[\xc0-\xf7](?=[\x80-\xbf])")
_BRACE = re.compile(rb"[{}]")


def hostile_cuts(data: bytes) -> list[int]:
    """The offsets where ``boundaries: hostile`` cuts ``data`` (sorted, inside it)."""
    cuts: set[int] = set()
    # Inside every multi-byte UTF-8 character, right after its lead byte.
    cuts.update(m.start() + 1 for m in _MULTIBYTE_LEAD.finditer(data))
    # Around every JSON brace.
    for m in _BRACE.finditer(data):
        cuts.update((m.start(), m.end()))
    # Inside [DONE]: [DO|NE].
    cuts.update(m.start() + 3 for m in re.finditer(rb"\[DONE\]", data))
    # Per line: after "data", after a field name's colon; between CR and LF; between
    # two terminators in a row (the blank line that ends an event).
    line_start = 0
    prev_eol_end = -1
    for m in _EOL.finditer(data):
        _line_cuts(data, line_start, m.start(), cuts)
        if m.group() == b"\r\n":
            cuts.add(m.start() + 1)
        if m.start() == prev_eol_end:
            cuts.add(m.start())
        prev_eol_end = line_start = m.end()
    _line_cuts(data, line_start, len(data), cuts)
    return sorted(c for c in cuts if 0 < c < len(data))


def message_cuts(data: bytes) -> list[int]:
    """The offsets where ``boundaries: hostile`` cuts the AWS event stream messages of
    ``data`` (sorted, inside it): between two messages; in each message's prelude
    (inside its total length, between its two lengths, before and inside its CRC),
    after it, inside the first header's name, between headers and payload, in the
    payload's JSON (as
    :func:`hostile_cuts`), before and inside the message CRC. Bytes that are no
    message (a piece another fault cut) get no cut."""
    cuts: set[int] = set()
    at = 0
    while len(data) - at >= PRELUDE_LENGTH:
        total, headers = struct.unpack_from("!II", data, at)
        if total < OVERHEAD or headers > total - OVERHEAD or at + total > len(data):
            break
        payload = at + PRELUDE_LENGTH + headers
        end = at + total
        cuts.update((at, at + 2, at + 4, at + 8, at + 10, at + PRELUDE_LENGTH, end - 4, end - 2))
        if headers:
            cuts.update((at + PRELUDE_LENGTH + 2, payload))
        cuts.update(payload + c for c in hostile_cuts(data[payload : end - 4]))
        at = end
    return sorted(c for c in cuts if 0 < c < len(data))


def _line_cuts(data: bytes, start: int, end: int, cuts: set[int]) -> None:
    if data.startswith(b"data", start) and start + 4 <= end:
        cuts.add(start + 4)
    m = _FIELD.match(data, start, end)
    if m:
        cuts.add(m.end())


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    low, high = int_range(RechunkConfig, "size", 1, 64)
    form = c.below(4)
    if form == 0:
        return {"size": c.between(low, high)}
    if form == 1:
        return {"sizes": [c.between(low, high) for _ in range(2 + c.below(2))]}
    if form == 2:
        first = c.between(low, high)
        return {"random": [first, first + c.between(0, high - first)]}
    return {"boundaries": "hostile"}


class RechunkFault(Fault[RechunkConfig], name="rechunk", stage="transport"):
    declaration = Declaration(
        needs="any",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=13),
        example="rechunk: {size: 1}",
    )

    def __init__(self, config: RechunkConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._sizes = self._size_sequence()

    def _size_sequence(self) -> Iterator[int]:
        cfg = self.config
        while True:
            if cfg.sizes is not None:
                yield from cfg.sizes
            elif cfg.random is not None:
                yield self.ctx.rng.randint(*cfg.random)
            else:
                yield cfg.size or 1

    def _cuts(self, data: bytes) -> list[int]:
        if self.config.boundaries == "hostile":
            return message_cuts(data) if self.ctx.format == "eventstream" else hostile_cuts(data)
        cuts: list[int] = []
        pos = next(self._sizes)
        while pos < len(data):
            cuts.append(pos)
            pos += next(self._sizes)
        return cuts

    def on_action(self, action: Action) -> list[Action]:
        if not isinstance(action, Send) or not action.data:
            return [action]
        cuts = self._cuts(action.data)
        if not cuts:
            return [action]
        self.applied += 1
        return list(split_send(action, cuts, self.name))

    def skipped(self) -> str | None:
        if self.applied:
            return None
        return "no write was long enough to split"
