"""``corrupt``: make the payload of selected events malformed, keeping the framing.

Modes (all deterministic, applied to the event's data whether or not it is JSON):

* ``truncate_json``: keep the first half of the data's bytes, cut back to a UTF-8
  character boundary;
* ``invalid_json``: drop the final ``}`` or ``]`` (a document missing its closing
  bracket); data not ending in one gets a stray ``}`` appended instead;
* ``invalid_utf8``: insert the byte 0xFF in the middle of the data (at a character
  boundary, so the only bad byte is that one);
* ``empty_data``: SSE: a single empty ``data:`` line; NDJSON (and an event stream's
  payload): ``{}`` (an empty line would be a blank line, which NDJSON readers skip, not
  a payload).

The event's other SSE lines and its terminators stay as they were; a changed event
stream message is re-encoded with its headers, its lengths and CRCs made right.

Two modes break an event stream message's framing instead (an AWS event stream only:
the other framings carry no checksum; elsewhere the fault skips, saying so):

* ``crc``: the message CRC (its last 4 bytes) inverted;
* ``prelude_crc``: the prelude CRC (bytes 8-11) inverted: a decoder that checks it
  refuses the message before believing its lengths.
"""

from __future__ import annotations

from typing import Any, Literal

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, SelectingFault, SelectorConfig
from chaosproxy.core.faults.drawing import Choices, Explore, Within, options, selector
from chaosproxy.core.framing.encode import data_bytes, replace_data, with_raw

Mode = Literal["truncate_json", "invalid_json", "invalid_utf8", "empty_data", "crc", "prelude_crc"]
#: The CRC modes: where each one's 4 bytes start, from the message's end (``crc``) or
#: its start (``prelude_crc``).
_CRC_AT: dict[str, int] = {"crc": -4, "prelude_crc": 8}


class CorruptConfig(SelectorConfig):
    mode: Mode


def char_boundary(data: bytes, at: int) -> int:
    """The largest UTF-8 character boundary at or before ``at``."""
    while 0 < at < len(data) and data[at] & 0xC0 == 0x80:
        at -= 1
    return at


def corrupted(data: bytes, mode: Mode, fmt: str) -> bytes:
    """``data`` (an event's data field, as sent) made malformed as ``mode`` says."""
    if mode == "truncate_json":
        return data[: char_boundary(data, len(data) // 2)]
    if mode == "invalid_json":
        body = data.rstrip()
        if body.endswith((b"}", b"]")):
            return body[:-1] + data[len(body) :]
        return data + b"}"
    if mode == "invalid_utf8":
        mid = char_boundary(data, len(data) // 2)
        return data[:mid] + b"\xff" + data[mid:]
    return b"" if fmt == "sse" else b"{}"


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    modes = options(CorruptConfig, "mode")
    if space.shape.format != "eventstream":  # (only an event stream has CRCs to break)
        modes = tuple(m for m in modes if m not in _CRC_AT)
    return {**selector(c, space), "mode": c.pick(modes)}


class CorruptFault(SelectingFault[CorruptConfig], name="corrupt", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=6),
        example="corrupt: {kind: delta, nth: 2, mode: invalid_json}",
    )

    passes_unselected = True
    #: Parses and re-encodes the event (measured: docs/scenarios.md, Limits).
    cost = 15

    def on_event(self, ev: Event) -> list[Event]:
        if not self.selector.selects(ev) or ev.frame.data is None:
            return [ev]
        fmt = self.ctx.format
        mode = self.config.mode
        if mode in _CRC_AT:
            if fmt != "eventstream" or not ev.frame.complete:
                return [ev]
            raw = ev.frame.raw
            at = _CRC_AT[mode] % len(raw)
            inverted = bytes(b ^ 0xFF for b in raw[at : at + 4])
            self.applied += 1
            return [ev.touched(self.name, with_raw(ev.frame, raw[:at] + inverted + raw[at + 4 :]))]
        data = corrupted(data_bytes(ev.frame, fmt), mode, fmt)
        self.applied += 1
        return [ev.touched(self.name, replace_data(ev.frame, fmt, data))]

    def skipped(self) -> str | None:
        if not self.applied and self.config.mode in _CRC_AT and self.ctx.format != "eventstream":
            return (
                f"mode {self.config.mode} breaks an AWS event stream's checksum; this body is "
                f"{self.ctx.format}, which has none"
            )
        return super().skipped()
