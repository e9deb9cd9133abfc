"""AWS Bedrock: ``ConverseStream`` (``POST /model/{modelId}/converse-stream``) and
``InvokeModelWithResponseStream`` (``POST /model/{modelId}/invoke-with-response-stream``).

The body is an AWS event stream (``application/vnd.amazon.eventstream``,
:mod:`chaosproxy.core.framing.eventstream`): one binary message per event, named by its
``:event-type`` header (the frame's ``event``), a JSON payload. Kinds, ConverseStream:

- ``start``: ``messageStart``.
- ``delta``: ``contentBlockDelta`` with ``delta.text``.
- ``tool_delta``: ``contentBlockDelta`` with ``delta.toolUse`` (its ``input`` fragment;
  an empty first one still counts, as Anthropic's).
- ``usage`` and ``terminal``: ``metadata`` (usage and metrics), the last event AWS
  sends. ``messageStop`` (the stop reason) comes just before it and is ``other``: a
  terminal event must be the last (integrity's ``after_terminal``).
- ``error``: an ``exception`` (or ``error``) message, whatever its name
  (``throttlingException``, ``modelStreamErrorException``, ...).

``contentBlockStart`` (a tool call's id and name), ``contentBlockStop``, the reasoning
and citation deltas and unknown events are ``other``.

InvokeModelWithResponseStream sends ``chunk`` events whose payload is
``{"bytes": "<base64>"}``, the model vendor's own event: its kinds are the vendor's,
read from the decoded JSON. Anthropic's Messages events (``{"type": ...}``) by
Anthropic's rules; Amazon Nova's, which name a ConverseStream event as their key
(``{"contentBlockDelta": {...}}``), by the rules above; any other vendor's (Llama's
``generation``, Titan's ``outputText``) is a ``delta`` when it carries that text, and
the chunk with ``amazon-bedrock-invocationMetrics`` (every vendor's last) is
``terminal``.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing.eventstream import exception_message, message_headers
from chaosproxy.core.providers._wire import (
    DELTA,
    ERROR,
    OTHER,
    START,
    TERMINAL,
    TOOL_DELTA,
    encode_event,
)
from chaosproxy.core.providers.anthropic import AnthropicProfile
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

USAGE_TERMINAL = frozenset({"usage", "terminal"})

#: ConverseStream's events and their kinds (``contentBlockDelta`` is read by its delta).
_KINDS: dict[str, frozenset[str]] = {
    "messageStart": START,
    "contentBlockStart": OTHER,
    "contentBlockDelta": OTHER,
    "contentBlockStop": OTHER,
    "messageStop": OTHER,
    "metadata": USAGE_TERMINAL,
}
#: The event names that identify the provider in a first event (``metadata`` is too
#: common a name to).
EVENT_NAMES = frozenset(_KINDS) - {"metadata"}
#: InvokeModelWithResponseStream's one event.
CHUNK = "chunk"
#: The key of the last chunk of every vendor's InvokeModel stream.
INVOCATION_METRICS = "amazon-bedrock-invocationMetrics"
#: Where the vendors without a stream of named events put their text.
_VENDOR_TEXT = ("generation", "outputText", "completion")

#: The exception an injected ``error`` event is: what Bedrock sends a client over its
#: quota, mid-stream as at the start.
ERROR_EXCEPTION = "throttlingException"
_ERROR_MESSAGE = b"Too many requests, please wait before trying again."

_ANTHROPIC = AnthropicProfile()


class BedrockSlots(ProviderSlots):
    """ConverseStream's events (InvokeModel's chunks hold their vendor's event in base64:
    none is plain, so they are left as they came)."""

    def text(self, frame: Frame) -> Slot | None:
        delta = _converse_delta(frame)
        text = delta.get("text") if delta is not None else None
        if not isinstance(text, str) or not text:
            return None
        return Slot(("delta", "text"), text, "0")

    def tool(self, frame: Frame) -> Slot | None:
        delta = _converse_delta(frame)
        tool = delta.get("toolUse") if delta is not None else None
        fragment = tool.get("input") if isinstance(tool, dict) else None
        if not isinstance(fragment, str):
            return None
        key = str(frame.json().get("contentBlockIndex"))
        return Slot(("delta", "toolUse", "input"), fragment, key)

    def call(self, frame: Frame) -> tuple[CallRole, str] | None:
        payload = frame.json()
        if not isinstance(payload, dict):
            return None
        key = str(payload.get("contentBlockIndex"))
        if frame.type == "contentBlockStart":
            start = payload.get("start")
            return ("open", key) if isinstance(start, dict) and "toolUse" in start else None
        if frame.type == "contentBlockStop":
            return "close", key  # (a text block's too: the fault keeps only its calls')
        if self.tool(frame) is not None:
            return "fragment", key
        return None


def _converse_delta(frame: Frame) -> dict[str, Any] | None:
    """The ``delta`` of a ConverseStream ``contentBlockDelta`` event, else None."""
    payload = frame.json()
    if frame.type != "contentBlockDelta" or not isinstance(payload, dict):
        return None
    delta = payload.get("delta")
    return delta if isinstance(delta, dict) else None


class BedrockProfile(TypedProfile):
    name = "bedrock"
    rank = 60
    paths = (re.compile(r"/model/[^/]+/(?:converse-stream|invoke-with-response-stream)$"),)
    # The model is in the path (percent-encoded: botocore sends ``:`` as ``%3A``); the
    # Converse body: ``system`` and ``messages`` of content blocks, ``toolConfig.tools``
    # of ``{"toolSpec": {...}}``, a tool's result a ``toolResult`` block.
    request = RequestShape(
        model_in_path=re.compile(
            r"/model/([^/]+)/(?:converse|invoke)(?:-stream|-with-response-stream)?$"
        ),
        stream_in_path=re.compile(r"-stream$"),
        system=("system",),
        messages=("messages",),
        tools=("toolConfig.tools",),
        tool_wrappers=("toolSpec",),
        result_keys=("toolResult",),
        text_keys=("toolResult",),
    )
    # SigV4 (``Authorization: AWS4-HMAC-SHA256 Credential=...``, with a session's
    # ``X-Amz-Security-Token``) or a Bedrock API key (``Authorization: Bearer ...``).
    key_headers = frozenset({"authorization", "x-amz-security-token"})
    key_params = frozenset[str]()
    slots = BedrockSlots()
    mock = "chaosproxy.mock.bedrock"
    mock_routes = (
        MockRoute("/model/{model}/{action:converse-stream|invoke-with-response-stream}"),
    )

    @classmethod
    def recognises_type(cls, type_: str) -> bool:
        return type_ in EVENT_NAMES

    @classmethod
    def recognises(cls, frame: Frame) -> bool:
        # Any event stream message: no other provider speaks the format.
        return ":message-type" in message_headers(frame.raw)

    def classify_type(self, kind: str, frame: Frame) -> frozenset[str]:
        if kind == CHUNK:
            inner = vendor_event(frame)
            return OTHER if inner is None else _vendor_kinds(inner)
        body = _converse_kinds(kind, frame.json())
        if body is not None:
            return body
        return ERROR if is_exception(kind, frame) else OTHER

    def content_type(self, kind: str, frame: Frame) -> EventContent:
        """Text: ``delta.text``. Tool calls: ``delta.toolUse.input`` keyed by the
        ``contentBlockIndex``; ``contentBlockStop`` ends the block's call. Finish
        reason: ``messageStop``'s ``stopReason``. Terminal: ``metadata``. A ``chunk``:
        its vendor event's content."""
        if kind == CHUNK:
            inner = vendor_event(frame)
            return NOTHING if inner is None else _vendor_content(inner)
        if kind in _KINDS:
            return _converse_content(kind, frame.json())
        return ERROR_PIECE if is_exception(kind, frame) else NOTHING

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """A ``throttlingException`` message. Framed as SSE or NDJSON (a scenario that
        forces the format), an event whose name, and JSON ``type``, is the exception."""
        if fmt in ("eventstream", "raw"):
            return exception_message(ERROR_EXCEPTION, b'{"message":"' + _ERROR_MESSAGE + b'"}')
        body = b'{"type":"' + ERROR_EXCEPTION.encode() + b'","message":"' + _ERROR_MESSAGE + b'"}'
        return encode_event(fmt, newline, body, event=ERROR_EXCEPTION)


def is_exception(kind: str, frame: Frame) -> bool:
    """Whether a message that is no known event is an exception: by its
    ``:message-type``, or (an event that is not a message) by an AWS exception's name."""
    headers = message_headers(frame.raw)
    if headers:
        return headers.get(":message-type") in ("exception", "error")
    return kind.endswith("Exception")


def vendor_event(frame: Frame) -> Frame | None:
    """The model vendor's own event a ``chunk`` carries (its base64 ``bytes``), as a
    frame of its JSON; None when the chunk holds none."""
    payload = frame.json()
    if not isinstance(payload, dict):
        return None
    encoded = payload.get("bytes")
    if not isinstance(encoded, str):
        return None
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    return Frame(raw, raw.decode("utf-8", "replace"))


def _vendor_kinds(inner: Frame) -> frozenset[str]:
    payload = inner.json()
    if not isinstance(payload, dict):
        return OTHER
    if isinstance(payload.get("type"), str):
        return _ANTHROPIC.classify(inner)
    for key, body in payload.items():
        kinds = _converse_kinds(key, body)
        if kinds is not None:
            if INVOCATION_METRICS in payload and "terminal" not in kinds:
                return TERMINAL if kinds is OTHER else kinds | TERMINAL
            return kinds
    if INVOCATION_METRICS in payload:
        return TERMINAL
    return DELTA if any(_text(payload, key) for key in _VENDOR_TEXT) else OTHER


def _vendor_content(inner: Frame) -> EventContent:
    payload = inner.json()
    if not isinstance(payload, dict):
        return NOTHING
    if isinstance(payload.get("type"), str):
        return _ANTHROPIC.content(inner)
    for key, body in payload.items():
        if key in _KINDS:
            piece = _converse_content(key, body)
            if INVOCATION_METRICS in payload and not piece.terminal:
                return EventContent(
                    text=piece.text, tools=piece.tools, finish=piece.finish, terminal=True
                )
            return piece
    text = next((t for key in _VENDOR_TEXT if (t := _text(payload, key))), "")
    return EventContent(text=((0, text),) if text else (), terminal=INVOCATION_METRICS in payload)


def _text(payload: dict[str, Any], key: str) -> str:
    value = payload.get(key)
    return value if isinstance(value, str) else ""


def _converse_kinds(kind: str, body: Any) -> frozenset[str] | None:
    """The kinds of a ConverseStream event ``kind`` with payload ``body``; None when
    ``kind`` is none of its events."""
    kinds = _KINDS.get(kind)
    if kinds is None or kind != "contentBlockDelta":
        return kinds
    delta = body.get("delta") if isinstance(body, dict) else None
    if isinstance(delta, dict):
        if isinstance(delta.get("text"), str):
            return DELTA
        if isinstance(delta.get("toolUse"), dict):
            return TOOL_DELTA
    return OTHER


def _converse_content(kind: str, body: Any) -> EventContent:
    if kind == "metadata":
        return TERMINAL_PIECE
    if not isinstance(body, dict):
        return NOTHING
    if kind == "messageStop":
        reason = body.get("stopReason")
        return EventContent(finish=((0, reason),)) if isinstance(reason, str) else NOTHING
    if kind == "contentBlockStop":
        return EventContent(tool_ends=(str(body.get("contentBlockIndex")),))
    if kind != "contentBlockDelta":
        return NOTHING
    delta = body.get("delta")
    if not isinstance(delta, dict):
        return NOTHING
    text = delta.get("text")
    if isinstance(text, str):
        return EventContent(text=((0, text),)) if text else NOTHING
    tool = delta.get("toolUse")
    if isinstance(tool, dict):
        fragment = tool.get("input")
        if isinstance(fragment, str):
            return EventContent(tools=((str(body.get("contentBlockIndex")), fragment),))
    return NOTHING


__all__ = ["BedrockProfile", "BedrockSlots", "is_exception", "vendor_event"]
