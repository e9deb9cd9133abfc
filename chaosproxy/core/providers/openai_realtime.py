"""OpenAI Realtime (``GET /v1/realtime``, a WebSocket).

The server's events are WebSocket text messages, each one JSON object named by its
``type``; the proxy frames each message as one event (``core/framing/websocket.py``).
Kinds, by event type:

- ``start``: ``response.created``.
- ``delta``: ``response.output_text.delta`` and ``response.output_audio_transcript.delta``
  (and their beta names, ``response.text.delta`` and ``response.audio_transcript.delta``).
  Audio itself (``response.output_audio.delta``, base64 PCM) is ``other``: it is not
  text a client assembles.
- ``tool_delta``: ``response.function_call_arguments.delta``.
- ``error``: ``error`` (the session goes on after it: not terminal).
- ``terminal``: ``response.done``; with ``response.status`` ``failed`` it is
  ``{error, terminal}``.

Everything else (``session.created``, ``conversation.item.*``, ``response.output_item.*``,
``rate_limits.updated``...) is ``other``. The first event of a session is
``session.created``, which no other provider sends: that and the path recognise it.
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

#: The event types that carry the answer's text (the GA names, then the beta's).
TEXT_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.output_audio_transcript.delta",
        "response.text.delta",
        "response.audio_transcript.delta",
    }
)
TOOL_DELTAS = frozenset({"response.function_call_arguments.delta"})
TOOL_DONES = frozenset({"response.function_call_arguments.done"})
TERMINAL_TYPE = "response.done"

_KINDS: dict[str, frozenset[str]] = {
    "response.created": START,
    **dict.fromkeys(TEXT_DELTAS, DELTA),
    **dict.fromkeys(TOOL_DELTAS, TOOL_DELTA),
    "error": ERROR,
    TERMINAL_TYPE: TERMINAL,
}

#: The documented ``error`` server event.
_ERROR_BODY = (
    b'{"type":"error","event_id":"event_chaos","error":{"type":"server_error",'
    b'"code":"server_error","message":"The server had an error while processing your '
    b'request. Sorry about that!","param":null,"event_id":null}}'
)

#: The first events of a realtime session (no other provider names one so).
_OWN_PREFIXES = ("session.", "conversation.", "input_audio_buffer.", "rate_limits.")


def _status(frame: Frame) -> str | None:
    payload = frame.json()
    response = payload.get("response") if isinstance(payload, dict) else None
    status = response.get("status") if isinstance(response, dict) else None
    return status if isinstance(status, str) else None


def _call_key(payload: dict[str, object]) -> str:
    """A tool call's key: its ``item_id``, else its ``call_id``."""
    key = payload.get("item_id") or payload.get("call_id")
    return key if isinstance(key, str) else "0"


class OpenAIRealtimeSlots(ProviderSlots):
    """Text in the text and transcript deltas' ``delta``; a call's argument fragments in
    ``response.function_call_arguments.delta``, opened and closed by its
    ``function_call`` item (``response.output_item.added``/``.done``) and ended by its
    ``.done``. No sequence number (each event has its own ``event_id``)."""

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
        return Slot(("delta",), delta, _call_key(payload))

    def call(self, frame: Frame) -> tuple[CallRole, str] | None:
        payload = frame.json()
        if not isinstance(payload, dict):
            return None
        kind = frame.type
        if kind in TOOL_DELTAS:
            return "fragment", _call_key(payload)
        if kind in TOOL_DONES:
            return "close", _call_key(payload)
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = payload.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                key = item.get("id")
                role: CallRole = "open" if kind.endswith(".added") else "close"
                return role, key if isinstance(key, str) else "0"
        return None


class OpenAIRealtimeProfile(TypedProfile):
    name = "openai-realtime"
    rank = 25
    # wss://api.openai.com/v1/realtime?model=... (the query is not part of the path)
    paths = (re.compile(r"/realtime$"),)
    # The conversation travels as events, not in one request body: nothing to read.
    request = RequestShape()
    key_headers = frozenset({"authorization", "api-key", "openai-api-key"})
    key_params = frozenset({"api_key"})
    slots = OpenAIRealtimeSlots()
    mock = "chaosproxy.mock.openai_realtime"
    mock_routes = (MockRoute("/v1/realtime", method="GET", websocket=True),)

    @classmethod
    def recognises_type(cls, type_: str) -> bool:
        return type_.startswith(_OWN_PREFIXES)

    @classmethod
    def recognises(cls, frame: Frame) -> bool:
        return False

    def classify_type(self, kind: str, frame: Frame) -> frozenset[str]:
        kinds = _KINDS.get(kind, OTHER)
        if kinds is TERMINAL and _status(frame) == "failed":
            return ERROR_TERMINAL
        return kinds

    def content_type(self, kind: str, frame: Frame) -> EventContent:
        """Text: the text and audio-transcript deltas. Tool calls: the argument deltas
        keyed by ``item_id`` (else ``call_id``), ended by their ``.done``. Terminal:
        ``response.done``, with ``response.status`` as the finish reason."""
        if kind == "error":
            return ERROR_PIECE
        if kind == TERMINAL_TYPE:
            status = _status(frame)
            finish = ((0, status),) if status is not None else ()
            return EventContent(terminal=True, finish=finish, error=status == "failed")
        if kind not in TEXT_DELTAS and kind not in TOOL_DELTAS and kind not in TOOL_DONES:
            return NOTHING
        payload = frame.json()
        if not isinstance(payload, dict):
            return NOTHING
        call = _call_key(payload)
        if kind in TOOL_DONES:
            return EventContent(tool_ends=(call,))
        delta = payload.get("delta")
        if not isinstance(delta, str) or not delta:
            return NOTHING
        if kind in TEXT_DELTAS:
            return EventContent(text=((0, delta),))
        return EventContent(tools=((call, delta),))

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """``{"type":"error","error":{"type":"server_error",...}}``, one message."""
        return encode_event(fmt, newline, _ERROR_BODY, event="error")
