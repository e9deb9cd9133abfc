"""``fragment``: a WebSocket message sent as several frames, a text frame and its
continuation frames, cut at chosen or hostile boundaries.

Exactly one of ``size`` (a frame every N payload bytes), ``at`` (the payload offsets to
cut at) or ``mid_utf8: true`` (cut inside the message's first multi-byte UTF-8
character: no frame of a text message need be valid UTF-8 alone, RFC 6455, 5.6). Only
messages carrying an event of ``kind`` when given, else every message. A message with
no such place (``mid_utf8`` in ASCII, offsets past its end) goes out whole.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from chaosproxy.core.faults._websocket import WebSocketFault, WsMessage, WsOut
from chaosproxy.core.faults.base import Declaration, FaultConfig, known_kind
from chaosproxy.core.framing.websocket import CONTINUATION, WsFrame

_MULTIBYTE_LEAD = re.compile(rb"[\xc2-\xf4](?=[\x80-\xbf])")


class FragmentConfig(FaultConfig):
    """Exactly one of ``size``, ``at``, ``mid_utf8``; ``kind``."""

    one_of = ("size", "at", "mid_utf8")

    size: Annotated[int, Field(ge=1)] | None = None
    at: list[Annotated[int, Field(ge=1)]] | None = None
    mid_utf8: Literal[True] | None = None
    kind: Annotated[str, AfterValidator(known_kind)] | None = None


def cut_points(payload: bytes, config: FragmentConfig) -> list[int]:
    """The offsets inside ``payload`` where one frame ends and the next begins."""
    end = len(payload)
    if config.size is not None:
        return list(range(config.size, end, config.size))
    if config.at is not None:
        return sorted({offset for offset in config.at if offset < end})
    lead = _MULTIBYTE_LEAD.search(payload)
    return [] if lead is None else [lead.start() + 1]


def fragments(frame: WsFrame, points: list[int], fault: str) -> list[WsFrame]:
    """``frame`` cut at ``points``: its opcode first, continuations after, FIN last."""
    bounds = [0, *points, len(frame.payload)]
    pieces = [frame.payload[a:b] for a, b in itertools.pairwise(bounds)]
    return [
        WsFrame(
            frame.opcode if i == 0 else CONTINUATION,
            piece,
            fin=i == len(pieces) - 1,
            fault=fault,
        )
        for i, piece in enumerate(pieces)
    ]


class FragmentFault(WebSocketFault[FragmentConfig], name="fragment", stage="websocket"):
    declaration = Declaration(
        needs="websocket",
        keeps_answer=True,
        explore=None,
        example="fragment: {mid_utf8: true, kind: delta}",
    )

    def on_message(self, message: WsMessage) -> list[WsOut]:
        kind = self.config.kind
        if (kind is not None and kind not in message.kinds) or len(message.frames) != 1:
            return list(message.frames)  # (not its kind, or fragmented already)
        (frame,) = message.frames
        points = cut_points(frame.payload, self.config)
        if not points:
            return [frame]
        self.applied += 1
        return list(fragments(frame, points, self.name))
