"""The generic profile: knows only the two universal terminal markers."""

from __future__ import annotations

from chaosproxy.core.frames import Format, Frame

_OTHER = frozenset({"other"})
_TERMINAL = frozenset({"terminal"})


class GenericProfile:
    name = "generic"

    def classify(self, frame: Frame) -> frozenset[str]:
        data = frame.data
        if data is None:
            return _OTHER
        if data.strip() == "[DONE]":
            return _TERMINAL
        payload = frame.json()
        if isinstance(payload, dict) and payload.get("done") is True:
            return _TERMINAL
        return _OTHER

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        body = b'{"error":{"type":"chaosproxy_injected","message":"injected error"}}'
        if fmt == "sse":
            return b"data: " + body + newline + newline
        return body + b"\n"
