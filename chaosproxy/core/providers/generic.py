"""The generic profile: knows only the two universal terminal markers.

Every event is ``other``, except ``data: [DONE]`` and a JSON object with ``"done": true``,
which are ``terminal``: the fault engine relies on ``kind: terminal`` (``cut: {before:
terminal}``, ``inject: {after: terminal}``) for unknown providers too.
"""

from __future__ import annotations

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import DONE_MARKER, OTHER, TERMINAL, encode_event
from chaosproxy.core.providers.base import NOTHING, TERMINAL_PIECE, EventContent, ProviderProfile


class GenericProfile(ProviderProfile):
    name = "generic"
    #: Last: ``generic`` is also what detection falls back to.
    rank = 100

    def classify(self, frame: Frame) -> frozenset[str]:
        data = frame.data
        if data is None:
            return OTHER
        if data == DONE_MARKER or data.strip() == DONE_MARKER:  # is_done_marker, inlined
            return TERMINAL
        # ``"done": true`` needs the literal ``true`` and the key spelled out (or
        # escaped): without them no parse can find it. Most events stop here.
        if "true" not in data or ("done" not in data and "\\" not in data):
            return OTHER
        payload = frame.json()
        if isinstance(payload, dict) and payload.get("done") is True:
            return TERMINAL
        return OTHER

    def content(self, frame: Frame) -> EventContent:
        """Only the terminal markers: a generic stream's text is unknown."""
        return TERMINAL_PIECE if "terminal" in self.classify(frame) else NOTHING

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        body = b'{"error":{"type":"chaosproxy_injected","message":"injected error"}}'
        return encode_event(fmt, newline, body, native="ndjson")
