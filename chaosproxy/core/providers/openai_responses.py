"""OpenAI Responses (``POST /v1/responses``, ``stream: true``).

SSE with ``event:`` and ``data:``; the data repeats the name in ``type`` and carries a
``sequence_number``. There is no ``[DONE]``: the stream ends after its terminal event.
Kinds, by event type:

- ``start``: ``response.created``.
- ``delta``: ``response.output_text.delta`` (and ``response.refusal.delta``, the refusal
  text, as in openai-chat). Reasoning deltas (``response.reasoning_*``) are ``other``.
- ``tool_delta``: ``response.function_call_arguments.delta`` (and the other tool-input
  fragments: ``response.custom_tool_call_input.delta``, ``response.mcp_call_arguments.delta``).
- ``error``: ``error`` and ``response.failed``.
- ``terminal``: ``response.completed``, ``response.incomplete``, ``response.failed``
  (so ``response.failed`` is ``{error, terminal}``).

Everything else (``response.in_progress``, ``response.output_item.*``, ...) is ``other``.
"""

from __future__ import annotations

import re
from typing import Any

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import (
    DELTA,
    ERROR,
    ERROR_TERMINAL,
    OTHER,
    START,
    TERMINAL,
    TOOL_DELTA,
    encode_event,
)
from chaosproxy.core.providers.base import (
    ERROR_PIECE,
    NOTHING,
    CallRole,
    EventContent,
    MockRoute,
    ProviderSlots,
    RequestShape,
    Slot,
    TypedProfile,
)

_KINDS: dict[str, frozenset[str]] = {
    "response.created": START,
    "response.output_text.delta": DELTA,
    "response.refusal.delta": DELTA,
    "response.function_call_arguments.delta": TOOL_DELTA,
    "response.custom_tool_call_input.delta": TOOL_DELTA,
    "response.mcp_call_arguments.delta": TOOL_DELTA,
    "error": ERROR,
    "response.failed": ERROR_TERMINAL,
    "response.completed": TERMINAL,
    "response.incomplete": TERMINAL,
}

#: The documented flat ``ResponseErrorEvent``. A profile is stateless, so it cannot know
#: the stream's next ``sequence_number``: the injected event always says 0.
_ERROR_BODY = (
    b'{"type":"error","code":"server_error","message":"The server had an error while '
    b'processing your request. Sorry about that!","param":null,"sequence_number":0}'
)


#: The event types that carry text, tool-call fragments, and end a tool call's
#: fragments (``core/slots.py`` rewrites the same events).
TEXT_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
TOOL_DELTAS = frozenset(
    {
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
    }
)
TOOL_DONES = frozenset(
    {
        "response.function_call_arguments.done",
        "response.custom_tool_call_input.done",
        "response.mcp_call_arguments.done",
    }
)
_TERMINALS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _call_key(payload: dict[str, object]) -> str:
    """A tool call's key: its ``item_id``, else its ``output_index``."""
    item = payload.get("item_id")
    return item if isinstance(item, str) else str(payload.get("output_index"))


class OpenAIResponsesSlots(ProviderSlots):
    sequence = ("sequence_number",)

    _CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "mcp_call"})

    @staticmethod
    def _key(payload: dict[str, Any]) -> str:
        return str(payload.get("output_index"))

    def text(self, frame: Frame) -> Slot | None:
        payload = frame.json()
        if frame.type not in TEXT_DELTAS or not isinstance(payload, dict):
            return None
        delta = payload.get("delta")
        if not isinstance(delta, str) or not delta:
            return None
        return Slot(("delta",), delta, "0")

    def tool(self, frame: Frame) -> Slot | None:
        payload = frame.json()
        if frame.type not in TOOL_DELTAS or not isinstance(payload, dict):
            return None
        delta = payload.get("delta")
        if not isinstance(delta, str):
            return None
        return Slot(("delta",), delta, self._key(payload))

    def call(self, frame: Frame) -> tuple[CallRole, str] | None:
        payload = frame.json()
        if not isinstance(payload, dict):
            return None
        kind = frame.type
        if kind in TOOL_DELTAS:
            return "fragment", self._key(payload)
        if kind in TOOL_DONES:
            return "close", self._key(payload)
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = payload.get("item")
            if isinstance(item, dict) and item.get("type") in self._CALL_ITEMS:
                role: CallRole = "open" if kind.endswith(".added") else "close"
                return role, self._key(payload)
        return None


class OpenAIResponsesProfile(TypedProfile):
    name = "openai-responses"
    rank = 20
    # POST /v1/responses, and GET /v1/responses/{id}?stream=true (which streams too).
    paths = (re.compile(r"/responses(?:/resp_[^/]*)?$"),)
    request = RequestShape(system=("instructions",), items=("input",))
    key_headers = frozenset({"authorization", "api-key"})
    key_params = frozenset[str]()
    slots = OpenAIResponsesSlots()
    mock = "chaosproxy.mock.openai_responses"
    mock_routes = (MockRoute("/v1/responses"),)

    @classmethod
    def recognises_type(cls, type_: str) -> bool:
        return type_.startswith("response.")

    @classmethod
    def recognises(cls, frame: Frame) -> bool:
        # A flat error carries a sequence number (Anthropic's nests the error).
        payload = frame.json()
        return frame.type == "error" and isinstance(payload, dict) and "sequence_number" in payload

    def classify_type(self, kind: str, frame: Frame) -> frozenset[str]:
        return _KINDS.get(kind, OTHER)

    def content_type(self, kind: str, frame: Frame) -> EventContent:
        """Text: ``response.output_text.delta`` (and ``response.refusal.delta``). Tool
        calls: the argument deltas keyed by ``item_id`` (else ``output_index``), ended by
        their ``.done``. Terminal: ``response.completed|incomplete|failed``, with the
        response's ``status`` as the finish reason."""
        if kind == "error":
            return ERROR_PIECE
        if not (kind in TEXT_DELTAS or kind in TOOL_DELTAS or kind in TOOL_DONES):
            if kind not in _TERMINALS:
                return NOTHING
            payload = frame.json()
            response = payload.get("response") if isinstance(payload, dict) else None
            status = response.get("status") if isinstance(response, dict) else None
            finish = ((0, status),) if isinstance(status, str) else ()
            return EventContent(terminal=True, finish=finish, error=kind == "response.failed")
        payload = frame.json()
        if not isinstance(payload, dict):
            return NOTHING
        if kind in TOOL_DONES:
            return EventContent(tool_ends=(_call_key(payload),))
        delta = payload.get("delta")
        if not isinstance(delta, str):
            return NOTHING
        if kind in TEXT_DELTAS:
            return EventContent(text=((0, delta),)) if delta else NOTHING
        return EventContent(tools=((_call_key(payload), delta),))

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """``event: error`` with the flat ``{"type":"error","code",..,"sequence_number":0}``."""
        return encode_event(fmt, newline, _ERROR_BODY, event="error")
