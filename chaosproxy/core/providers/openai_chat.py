"""OpenAI Chat Completions (``POST /v1/chat/completions``, ``stream: true``).

SSE with ``data:`` lines only; every chunk is a ``chat.completion.chunk`` object and the
stream ends with ``data: [DONE]``. Kinds:

- ``start``: a chunk whose ``delta`` carries ``role`` (the first chunk of each choice;
  with ``n > 1`` every choice has one, since a profile is stateless).
- ``delta``: ``delta.content`` or ``delta.refusal`` is a non-empty string.
- ``tool_delta``: ``delta.tool_calls`` is a non-empty list (or the legacy
  ``delta.function_call`` object). The first tool chunk also carries ``role``, so it is
  ``{start, tool_delta}``.
- ``usage``: ``"choices": []`` with a ``usage`` object (``stream_options.include_usage``).
- ``error``: a top-level, truthy ``error`` (what the SDK checks).
- ``terminal``: ``data: [DONE]``.

The finish chunk (``delta: {}`` with ``finish_reason``) is ``other``; a chunk that carries
both content and ``finish_reason`` is ``delta``. A chunk with several choices gets the
union of its choices' kinds.
"""

from __future__ import annotations

from typing import Any

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import (
    ERROR,
    OTHER,
    TERMINAL,
    USAGE,
    encode_event,
    is_done_marker,
)

_ERROR_BODY = (
    b'{"error": {"message": "The server had an error while processing your request. '
    b'Sorry about that!", "type": "server_error", "param": null, "code": null}}'
)


def _choice_kinds(choice: Any, kinds: set[str]) -> None:
    if not isinstance(choice, dict):
        return
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return
    if delta.get("role"):
        kinds.add("start")
    content = delta.get("content")
    refusal = delta.get("refusal")
    if (isinstance(content, str) and content) or (isinstance(refusal, str) and refusal):
        kinds.add("delta")
    tool_calls = delta.get("tool_calls")
    if (isinstance(tool_calls, list) and tool_calls) or isinstance(
        delta.get("function_call"), dict
    ):
        kinds.add("tool_delta")


class OpenAIChatProfile:
    name = "openai-chat"

    def classify(self, frame: Frame) -> frozenset[str]:
        if frame.data is None:
            return OTHER
        if is_done_marker(frame):
            return TERMINAL
        payload = frame.json()
        if not isinstance(payload, dict):
            return OTHER
        if payload.get("error"):
            return ERROR
        choices = payload.get("choices")
        if not isinstance(choices, list):
            return OTHER
        if not choices:
            return USAGE if isinstance(payload.get("usage"), dict) else OTHER
        kinds: set[str] = set()
        for choice in choices:
            _choice_kinds(choice, kinds)
        return frozenset(kinds) if kinds else OTHER

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """``data: {"error": {...}}``: the shape the SDK raises ``APIError`` on."""
        return encode_event(fmt, newline, _ERROR_BODY)
