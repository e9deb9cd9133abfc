"""The generic profile: knows only the two universal terminal markers.

Every event is ``other``, except ``data: [DONE]`` and a JSON object with ``"done": true``,
which are ``terminal``: the fault engine relies on ``kind: terminal`` (``cut: {before:
terminal}``, ``inject: {after: terminal}``) for unknown providers too.
"""

from __future__ import annotations

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import OTHER, TERMINAL, encode_event, is_done_marker


class GenericProfile:
    name = "generic"

    def classify(self, frame: Frame) -> frozenset[str]:
        if frame.data is None:
            return OTHER
        if is_done_marker(frame):
            return TERMINAL
        payload = frame.json()
        if isinstance(payload, dict) and payload.get("done") is True:
            return TERMINAL
        return OTHER

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        body = b'{"error":{"type":"chaosproxy_injected","message":"injected error"}}'
        return encode_event(fmt, newline, body, native="ndjson")
