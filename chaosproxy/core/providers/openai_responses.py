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
from chaosproxy.core.providers.base import ERROR_PIECE, NOTHING, EventContent, TypedProfile

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


class OpenAIResponsesProfile(TypedProfile):
    name = "openai-responses"
    rank = 20
    # POST /v1/responses, and GET /v1/responses/{id}?stream=true (which streams too).
    paths = (re.compile(r"/responses(?:/resp_[^/]*)?$"),)

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
