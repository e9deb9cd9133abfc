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

import re
from typing import Any

import orjson

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.jsonspan import Path
from chaosproxy.core.providers._wire import OTHER, encode_event, mask_table
from chaosproxy.core.providers.base import (
    NOTHING,
    EventContent,
    JsonProfile,
    MockRoute,
    ProviderSlots,
    RequestShape,
    Slot,
)

_ERROR_BODY = (
    b'{"error": {"code": 503, "message": "The model is overloaded. Please try again later.", '
    b'"status": "UNAVAILABLE"}}'
)


# A candidate's kinds as bits, and each combination as one shared frozenset (classify
# runs per event: no set to build and freeze each time).
_DELTA, _TOOL_DELTA, _TERMINAL = 1, 2, 4
_BY_MASK = mask_table("delta", "tool_delta", "terminal")


def _candidate_kinds(candidate: Any) -> int:
    if not isinstance(candidate, dict):
        return 0
    mask = _TERMINAL if candidate.get("finishReason") else 0
    content = candidate.get("content")
    if not isinstance(content, dict):
        return mask
    parts = content.get("parts")
    if not isinstance(parts, list):
        return mask
    for part in parts:
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if isinstance(text, str) and text and not part.get("thought"):
            mask |= _DELTA
        if "functionCall" in part:
            mask |= _TOOL_DELTA
    return mask


class GeminiSlots(ProviderSlots):
    fragments = False

    def text(self, frame: Frame) -> Slot | None:
        payload = frame.json()
        if not isinstance(payload, dict) or payload.get("error"):
            return None
        candidates = payload.get("candidates")
        if not isinstance(candidates, list) or len(candidates) != 1:
            return None
        candidate = candidates[0]
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            return None
        found = [
            j
            for j, part in enumerate(parts)
            if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]
        ]
        if len(found) != 1 or len(parts) != 1 or parts[0].get("thought"):
            return None
        if any("functionCall" in part for part in parts if isinstance(part, dict)):
            return None
        path: Path = ("candidates", 0, "content", "parts", found[0], "text")
        terminal = bool(candidate.get("finishReason"))
        return Slot(path, parts[found[0]]["text"], str(candidate.get("index", 0)), terminal)

    def without_end(self, payload: Any) -> Any:
        candidates = [
            {k: v for k, v in c.items() if k not in ("finishReason", "finishMessage")}
            for c in payload["candidates"]
        ]
        return {**payload, "candidates": candidates}


class GeminiProfile(JsonProfile):
    name = "gemini"
    rank = 40
    paths = (re.compile(r":(?:stream)?[gG]enerateContent$"),)
    # The model is in the path: /v1beta/models/{model}:streamGenerateContent.
    request = RequestShape(
        model_in_path=re.compile(r"/models/([^/:?]+):[A-Za-z]+"),
        stream_in_path=re.compile("streamGenerateContent"),
        system=("systemInstruction", "system_instruction"),
        messages=("contents",),
        tool_groups=("functionDeclarations", "function_declarations"),
        roles=(("model", "assistant"), ("function", "tool")),
        result_keys=("functionResponse", "function_response"),
    )
    key_headers = frozenset({"x-goog-api-key"})
    key_params = frozenset({"key"})
    slots = GeminiSlots()
    mock = "chaosproxy.mock.gemini"
    mock_routes = (MockRoute(r"/{version:v1beta|v1alpha|v1}/models/{target}"),)

    @classmethod
    def recognises_payload(cls, payload: dict[str, Any]) -> bool:
        return "candidates" in payload or "promptFeedback" in payload

    def classify_payload(self, payload: dict[str, Any]) -> frozenset[str]:
        candidates = payload.get("candidates")
        if not isinstance(candidates, list):
            return OTHER
        mask = 0
        for candidate in candidates:
            mask |= _candidate_kinds(candidate)
        return _BY_MASK[mask]

    def content_payload(self, payload: dict[str, Any]) -> EventContent:
        """Text: the non-thought ``text`` parts, per candidate ``index``. Tool calls:
        each ``functionCall`` part is a whole call (its ``args`` as compact JSON, keyed by
        its ``id`` when it has one). Terminal: a candidate with ``finishReason``."""
        candidates = payload.get("candidates")
        if not isinstance(candidates, list):
            return NOTHING
        text: list[tuple[int, str]] = []
        tools: list[tuple[str, str]] = []
        finish: list[tuple[int, str]] = []
        for candidate in candidates:
            if not isinstance(candidate, dict):
                continue
            index = candidate.get("index", 0)
            if not isinstance(index, int):
                index = 0
            reason = candidate.get("finishReason")
            if isinstance(reason, str) and reason:
                finish.append((index, reason))
            content = candidate.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            if not isinstance(parts, list):
                continue
            for part in parts:
                if not isinstance(part, dict):
                    continue
                value = part.get("text")
                if isinstance(value, str) and value and not part.get("thought"):
                    text.append((index, value))
                call = part.get("functionCall")
                if isinstance(call, dict):
                    key = call.get("id")
                    args = orjson.dumps(call.get("args", {}), option=orjson.OPT_SORT_KEYS)
                    tools.append((key if isinstance(key, str) and key else "", args.decode()))
        if not (text or tools or finish):
            return NOTHING
        return EventContent(tuple(text), tuple(tools), (), bool(finish), tuple(finish))

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """``data: {"error": {"code": 503, ..., "status": "UNAVAILABLE"}}``; pass
        ``newline=b"\\r\\n"`` to match Gemini's CRLF framing."""
        return encode_event(fmt, newline, _ERROR_BODY)
