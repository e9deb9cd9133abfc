"""``compress``: compress the body and set ``Content-Encoding``, as a CDN would.

``flush: each`` compresses every write and flushes it (``Z_SYNC_FLUSH``), so the body
still streams, one compressed write per write; ``flush: end`` lets the compressor
buffer, writing only when zlib's buffers overflow (on a typical LLM stream: nothing
until the final ``Z_FINISH`` tail). A Cut passes through as it is: the compressed
body stays truncated.
"""

from __future__ import annotations

import zlib
from typing import Any, Literal

from chaosproxy.core.actions import Action, Send
from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, options

#: zlib ``wbits`` per encoding: 31 writes a gzip wrapper; 15 the zlib format, which is
#: what HTTP's ``deflate`` means (RFC 9110 section 8.4.1.2).
WBITS = {"gzip": 31, "deflate": 15}
#: The size of the stream header zlib writes first (gzip without name or extra; zlib).
HEADER_SIZE = {"gzip": 10, "deflate": 2}


class CompressConfig(FaultConfig):
    encoding: Literal["gzip", "deflate"] = "gzip"
    flush: Literal["each", "end"] = "each"


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    return {
        "encoding": c.pick(options(CompressConfig, "encoding")),
        "flush": c.pick(options(CompressConfig, "flush")),
    }


class CompressFault(Fault[CompressConfig], name="compress", stage="transport"):
    declaration = Declaration(
        needs="any",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=20),
        example="compress: {encoding: gzip}",
    )

    def __init__(self, config: CompressConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._z = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, WBITS[config.encoding]
        )
        # flush: end — the events whose bytes are inside the compressor, not yet written.
        self._pending: list[Event] = []
        self._pending_ends = 0
        self._pending_faults: dict[str, None] = {}
        # flush: end — output not written yet: zlib writes the bare stream header at once,
        # which is held back until compressed data follows, so the client sees nothing.
        self._out = b""

    edits_headers = True

    def response_headers(self, status: int, headers: dict[str, str]) -> dict[str, str]:
        out = {
            k: v
            for k, v in headers.items()
            if k.lower() not in ("content-encoding", "content-length")
        }
        out["Content-Encoding"] = self.config.encoding
        return out

    def on_action(self, action: Action) -> list[Action]:
        if not isinstance(action, Send):
            return [action]
        self.applied += 1
        faults = (*action.faults, self.name)
        if self.config.flush == "each":
            data = self._z.compress(action.data) + self._z.flush(zlib.Z_SYNC_FLUSH)
            return [Send(data, action.events, action.ends, faults)]
        self._pending += action.events
        self._pending_ends += action.ends
        self._pending_faults.update(dict.fromkeys(faults))
        self._out += self._z.compress(action.data)
        if len(self._out) > HEADER_SIZE[self.config.encoding]:
            return [self._release()]
        return []

    def _release(self) -> Send:
        send = Send(
            self._out, tuple(self._pending), self._pending_ends, tuple(self._pending_faults)
        )
        self._pending, self._pending_ends, self._pending_faults = [], 0, {}
        self._out = b""
        return send

    def on_action_end(self) -> list[Action]:
        if not self._pending_faults:
            self._pending_faults[self.name] = None
        self._out += self._z.flush(zlib.Z_FINISH)
        return [self._release()]

    def skipped(self) -> str | None:
        return None if self.applied else "the body was empty"
