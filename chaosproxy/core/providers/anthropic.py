"""Anthropic Messages (``POST /v1/messages``, ``stream: true``).

SSE with ``event:`` and ``data:``; the data repeats the name in ``type``. Kinds, by
event name:

- ``start``: ``message_start``.
- ``delta``: ``content_block_delta`` whose ``delta.type`` is ``text_delta``.
- ``tool_delta``: ``content_block_delta`` whose ``delta.type`` is ``input_json_delta``
  (the first fragment is often ``""``: it still counts).
- ``usage``: ``message_delta`` (stop reason and cumulative usage).
- ``ping``: ``ping``.
- ``error``: ``error``.
- ``terminal``: ``message_stop``.

``content_block_start``/``content_block_stop`` and the other delta types
(``thinking_delta``, ``signature_delta``, ``citations_delta``) are ``other``, as are
unknown event types (Anthropic may add new ones).
"""

from __future__ import annotations

import re

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import (
    DELTA,
    ERROR,
    OTHER,
    PING,
    START,
    TERMINAL,
    TOOL_DELTA,
    USAGE,
    encode_event,
)
from chaosproxy.core.providers.base import (
    ERROR_PIECE,
    NOTHING,
    TERMINAL_PIECE,
    CallRole,
    EventContent,
    MockRoute,
    ProviderSlots,
    RequestShape,
    Slot,
    TypedProfile,
)

_KINDS: dict[str, frozenset[str]] = {
    "message_start": START,
    "message_delta": USAGE,
    "ping": PING,
    "error": ERROR,
    "message_stop": TERMINAL,
}

_DELTA_KINDS: dict[str, frozenset[str]] = {
    "text_delta": DELTA,
    "input_json_delta": TOOL_DELTA,
}

#: The documented error event, byte for byte (the docs' spacing included).
_ERROR_BODY = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'

#: Every event name the Messages stream uses; a first event with one of these names
#: identifies the provider.
EVENT_NAMES = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    }
)


class AnthropicSlots(ProviderSlots):
    def text(self, frame: Frame) -> Slot | None:
        payload = frame.json()
        if frame.type != "content_block_delta" or not isinstance(payload, dict):
            return None
        delta = payload.get("delta")
        if not isinstance(delta, dict) or delta.get("type") != "text_delta":
            return None
        text = delta.get("text")
        if not isinstance(text, str) or not text:
            return None
        return Slot(("delta", "text"), text, "0")

    def tool(self, frame: Frame) -> Slot | None:
        payload = frame.json()
        if frame.type != "content_block_delta" or not isinstance(payload, dict):
            return None
        delta = payload.get("delta")
        if not isinstance(delta, dict) or delta.get("type") != "input_json_delta":
            return None
        fragment = delta.get("partial_json")
        if not isinstance(fragment, str):
            return None
        return Slot(("delta", "partial_json"), fragment, str(payload.get("index")))

    def call(self, frame: Frame) -> tuple[CallRole, str] | None:
        payload = frame.json()
        if not isinstance(payload, dict):
            return None
        key = str(payload.get("index"))
        if frame.type == "content_block_start":
            block = payload.get("content_block")
            if isinstance(block, dict) and block.get("type") in ("tool_use", "server_tool_use"):
                return "open", key
            return None
        if frame.type == "content_block_stop":
            return "close", key  # (a text block's too: the fault keeps only its calls')
        if self.tool(frame) is not None:
            return "fragment", key
        return None


class AnthropicProfile(TypedProfile):
    name = "anthropic"
    rank = 30
    paths = (
        re.compile(r"(?:^|/v1)/messages$"),
        # Claude on Vertex AI speaks the Messages stream.
        re.compile(r"/publishers/anthropic/models/[^/]*:streamRawPredict$"),
    )
    request = RequestShape(
        system=("system",), messages=("messages",), result_types=("tool_result",)
    )
    key_headers = frozenset({"x-api-key"})
    key_params = frozenset[str]()
    slots = AnthropicSlots()
    mock = "chaosproxy.mock.anthropic"
    mock_routes = (MockRoute("/v1/messages"),)

    @classmethod
    def recognises_type(cls, type_: str) -> bool:
        return type_ in EVENT_NAMES

    @classmethod
    def recognises(cls, frame: Frame) -> bool:
        # An error event nests the error (OpenAI Responses' is flat).
        payload = frame.json()
        return (
            frame.type == "error"
            and isinstance(payload, dict)
            and isinstance(payload.get("error"), dict)
        )

    def classify_type(self, kind: str, frame: Frame) -> frozenset[str]:
        if kind == "content_block_delta":
            payload = frame.json()
            if isinstance(payload, dict):
                delta = payload.get("delta")
                if isinstance(delta, dict):
                    delta_type = delta.get("type")
                    if isinstance(delta_type, str):
                        return _DELTA_KINDS.get(delta_type, OTHER)
            return OTHER
        return _KINDS.get(kind, OTHER)

    def content_type(self, kind: str, frame: Frame) -> EventContent:
        """Text: ``text_delta``. Tool calls: ``input_json_delta.partial_json`` keyed by the
        content block ``index``; ``content_block_stop`` ends the block's call. Finish
        reason: ``message_delta``'s ``stop_reason``. Terminal: ``message_stop``."""
        if kind == "message_stop":
            return TERMINAL_PIECE
        if kind == "error":
            return ERROR_PIECE
        if kind not in ("content_block_delta", "content_block_stop", "message_delta"):
            return NOTHING
        payload = frame.json()
        if not isinstance(payload, dict):
            return NOTHING
        if kind == "content_block_stop":
            return EventContent(tool_ends=(str(payload.get("index")),))
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            return NOTHING
        if kind == "message_delta":
            reason = delta.get("stop_reason")
            return EventContent(finish=((0, reason),)) if isinstance(reason, str) else NOTHING
        delta_type = delta.get("type")
        if delta_type == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                return EventContent(text=((0, text),))
        elif delta_type == "input_json_delta":
            fragment = delta.get("partial_json")
            if isinstance(fragment, str):
                return EventContent(tools=((str(payload.get("index")), fragment),))
        return NOTHING

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """``event: error`` with an ``overloaded_error`` (what an HTTP 529 becomes mid-stream)."""
        return encode_event(fmt, newline, _ERROR_BODY, event="error")
