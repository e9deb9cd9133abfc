"""Ollama (``/api/chat``, ``/api/generate``): NDJSON, one JSON object per line.

Kinds:

- ``delta``: a non-empty ``message.content`` (chat) or ``response`` (generate).
- ``tool_delta``: a non-empty ``message.tool_calls`` (Ollama sends whole calls).
- ``error``: an ``error`` key (``{"error":"..."}``).
- ``terminal``: ``"done": true`` (the object with ``done_reason`` and the timings).

The final object is ``{delta, terminal}`` if it still carries text, else ``terminal``.
``message.thinking`` (reasoning models) is ``other``. There is no ``start``, ``usage`` or
``ping``: the counts ride on the terminal object.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import ERROR, encode_event, mask_table
from chaosproxy.core.providers.base import (
    ERROR_PIECE,
    NOTHING,
    EventContent,
    JsonProfile,
    MockRoute,
    ProviderSlots,
    RequestShape,
    Slot,
)

_ERROR_BODY = b'{"error":"an error was encountered while running the model"}'

# Kinds as bits, each combination one shared frozenset (no set built per event).
_DELTA, _TOOL_DELTA, _TERMINAL = 1, 2, 4
_BY_MASK = mask_table("delta", "tool_delta", "terminal")


class OllamaSlots(ProviderSlots):
    fragments = False
    #: What only the final object carries.
    _FINAL = frozenset(
        {
            "done_reason",
            "total_duration",
            "load_duration",
            "prompt_eval_count",
            "prompt_eval_duration",
            "eval_count",
            "eval_duration",
            "context",
        }
    )

    def text(self, frame: Frame) -> Slot | None:
        payload = frame.json()
        if not isinstance(payload, dict) or "error" in payload:
            return None
        terminal = payload.get("done") is True
        message = payload.get("message")
        if isinstance(message, dict):
            if message.get("tool_calls") or message.get("thinking"):
                return None
            content = message.get("content")
            if isinstance(content, str) and content:
                return Slot(("message", "content"), content, "0", terminal)
            return None
        response = payload.get("response")
        if isinstance(response, str) and response:
            return Slot(("response",), response, "0", terminal)
        return None

    def without_end(self, payload: Any) -> Any:
        out = {k: v for k, v in payload.items() if k not in self._FINAL}
        out["done"] = False
        return out


class OllamaProfile(JsonProfile):
    name = "ollama"
    rank = 50
    paths = (re.compile(r"/api/(?:chat|generate)$"),)
    request = RequestShape(
        system=("system",), messages=("messages",), prompt=("prompt",), tool_wrappers=("function",)
    )
    # A local server: no API key (a gateway in front of it brings its own).
    key_headers = frozenset[str]()
    key_params = frozenset[str]()
    slots = OllamaSlots()
    mock = "chaosproxy.mock.ollama"
    mock_routes = (
        MockRoute("/api/chat", params=(("endpoint", "chat"),)),
        MockRoute("/api/generate", params=(("endpoint", "generate"),)),
    )

    @classmethod
    def recognises_payload(cls, payload: dict[str, Any]) -> bool:
        return "model" in payload and "created_at" in payload and "done" in payload

    def classify_payload(self, payload: dict[str, Any]) -> frozenset[str]:
        if "error" in payload:  # whatever its value (a truthy one is JsonProfile's)
            return ERROR
        mask = 0
        message = payload.get("message")
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str) and content:
                mask = _DELTA
            tool_calls = message.get("tool_calls")
            if isinstance(tool_calls, list) and tool_calls:
                mask |= _TOOL_DELTA
        response = payload.get("response")
        if isinstance(response, str) and response:
            mask |= _DELTA
        if payload.get("done") is True:
            mask |= _TERMINAL
        return _BY_MASK[mask]

    def content_payload(self, payload: dict[str, Any]) -> EventContent:
        """Text: ``message.content`` (chat) or ``response`` (generate). Tool calls: each
        of ``message.tool_calls`` is a whole call (``function.arguments`` as compact
        JSON). Terminal: ``"done": true``, with ``done_reason``."""
        if "error" in payload:
            return ERROR_PIECE
        text: list[tuple[int, str]] = []
        tools: list[tuple[str, str]] = []
        message = payload.get("message")
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str) and content:
                text.append((0, content))
            calls = message.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    function = call.get("function") if isinstance(call, dict) else None
                    args = function.get("arguments", {}) if isinstance(function, dict) else {}
                    tools.append(("", orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()))
        response = payload.get("response")
        if isinstance(response, str) and response:
            text.append((0, response))
        terminal = payload.get("done") is True
        reason = payload.get("done_reason")
        finish = ((0, reason),) if terminal and isinstance(reason, str) else ()
        if not (text or tools or terminal):
            return NOTHING
        return EventContent(tuple(text), tuple(tools), (), terminal, finish)

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """``{"error":"..."}`` and a newline, as the Ollama server writes it."""
        return encode_event(fmt, newline, _ERROR_BODY, native="ndjson")
