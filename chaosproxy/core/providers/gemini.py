"""Google Gemini (``…:streamGenerateContent?alt=sse``).

SSE with ``data:`` lines only, usually CRLF line endings; every chunk is a whole
``GenerateContentResponse`` holding only the new parts. No sentinel: the stream ends
after the chunk with ``finishReason``. Kinds:

- ``delta``: a candidate part with a non-empty ``text`` (thought-summary parts,
  ``"thought": true``, are not answer text and do not count).
- ``tool_delta``: a candidate part with ``functionCall`` (Gemini sends whole calls).
- ``error``: a top-level ``error`` (the Google API error envelope).
- ``terminal``: any candidate with ``finishReason``.

A chunk can be several of these: the last text chunk usually carries ``finishReason``
too and is ``{delta, terminal}``. There is no ``start``, ``usage`` or ``ping``
(``usageMetadata`` rides on every chunk).
"""

from __future__ import annotations

from typing import Any

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import (
    ERROR,
    OTHER,
    TERMINAL,
    encode_event,
    is_done_marker,
)

_ERROR_BODY = (
    b'{"error": {"code": 503, "message": "The model is overloaded. Please try again later.", '
    b'"status": "UNAVAILABLE"}}'
)


def _candidate_kinds(candidate: Any, kinds: set[str]) -> None:
    if not isinstance(candidate, dict):
        return
    if candidate.get("finishReason"):
        kinds.add("terminal")
    content = candidate.get("content")
    if not isinstance(content, dict):
        return
    parts = content.get("parts")
    if not isinstance(parts, list):
        return
    for part in parts:
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if isinstance(text, str) and text and not part.get("thought"):
            kinds.add("delta")
        if "functionCall" in part:
            kinds.add("tool_delta")


class GeminiProfile:
    name = "gemini"

    def classify(self, frame: Frame) -> frozenset[str]:
        if frame.data is None:
            return OTHER
        payload = frame.json()
        if not isinstance(payload, dict):
            return TERMINAL if is_done_marker(frame) else OTHER
        if payload.get("error"):
            return ERROR
        candidates = payload.get("candidates")
        if not isinstance(candidates, list):
            return OTHER
        kinds: set[str] = set()
        for candidate in candidates:
            _candidate_kinds(candidate, kinds)
        if not kinds:
            return OTHER
        if kinds == {"terminal"}:
            return TERMINAL
        return frozenset(kinds)

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """``data: {"error": {"code": 503, ..., "status": "UNAVAILABLE"}}``; pass
        ``newline=b"\\r\\n"`` to match Gemini's CRLF framing."""
        return encode_event(fmt, newline, _ERROR_BODY)
