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

import re
from typing import Any

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.jsonspan import Path
from chaosproxy.core.providers._wire import OTHER, USAGE, encode_event, mask_table
from chaosproxy.core.providers.base import (
    NOTHING,
    CallRole,
    EventContent,
    JsonProfile,
    MockRoute,
    ProviderSlots,
    RequestShape,
    Slot,
)

_ERROR_BODY = (
    b'{"error": {"message": "The server had an error while processing your request. '
    b'Sorry about that!", "type": "server_error", "param": null, "code": null}}'
)


# A choice's kinds as bits, and each combination as one shared frozenset (classify runs
# per event: no set to build and freeze each time).
_START, _DELTA, _TOOL_DELTA = 1, 2, 4
_BY_MASK = mask_table("start", "delta", "tool_delta")


def _choice_kinds(choice: Any) -> int:
    if not isinstance(choice, dict):
        return 0
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return 0
    mask = _START if delta.get("role") else 0
    content = delta.get("content")
    if isinstance(content, str) and content:
        mask |= _DELTA
    else:
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            mask |= _DELTA
    tool_calls = delta.get("tool_calls")
    if (isinstance(tool_calls, list) and tool_calls) or isinstance(
        delta.get("function_call"), dict
    ):
        mask |= _TOOL_DELTA
    return mask


def _arguments(function: Any) -> str:
    if isinstance(function, dict):
        args = function.get("arguments")
        if isinstance(args, str):
            return args
    return ""


class OpenAIChatSlots(ProviderSlots):
    @staticmethod
    def _choice(frame: Frame) -> tuple[Any, Any] | None:
        payload = frame.json()
        if not isinstance(payload, dict) or payload.get("error"):
            return None
        choices = payload.get("choices")
        if not isinstance(choices, list) or len(choices) != 1:
            return None
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            return None
        return choice, delta

    def text(self, frame: Frame) -> Slot | None:
        found = self._choice(frame)
        if found is None:
            return None
        choice, delta = found
        if delta.get("tool_calls") or delta.get("function_call"):
            return None
        index = choice.get("index", 0)
        texts = [
            f for f in ("content", "refusal") if isinstance(delta.get(f), str) and delta.get(f)
        ]
        if len(texts) != 1:
            return None
        field = texts[0]
        return Slot(("choices", 0, "delta", field), delta[field], str(index))

    def tool(self, frame: Frame) -> Slot | None:
        found = self._choice(frame)
        if found is None:
            return None
        choice, delta = found
        calls = delta.get("tool_calls")
        if not isinstance(calls, list) or len(calls) != 1 or not isinstance(calls[0], dict):
            return None
        call = calls[0]
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
            return None
        if delta.get("content") or delta.get("refusal"):
            return None
        key = f"{choice.get('index', 0)}/{call.get('index', 0)}"
        opens = bool(call.get("id") or function.get("name") or delta.get("role"))
        path: Path = ("choices", 0, "delta", "tool_calls", 0, "function", "arguments")
        return Slot(path, function["arguments"], key, opens=opens)

    def call(self, frame: Frame) -> tuple[CallRole, str] | None:
        slot = self.tool(frame)
        if slot is None:
            return None
        return ("open" if slot.opens else "fragment"), slot.key

    def without_opening(self, payload: Any, slot: Slot) -> Any:
        choice = payload["choices"][0]
        call = choice["delta"]["tool_calls"][0]
        delta = {"tool_calls": [{"index": call.get("index", 0), "function": {"arguments": ""}}]}
        return {**payload, "choices": [{**choice, "delta": delta}]}


class OpenAIChatProfile(JsonProfile):
    name = "openai-chat"
    rank = 10
    paths = (re.compile(r"/chat/completions$"),)
    request = RequestShape(messages=("messages",), tool_wrappers=("function",))
    # ``api-key``: Azure OpenAI's.
    key_headers = frozenset({"authorization", "api-key"})
    key_params = frozenset[str]()
    slots = OpenAIChatSlots()
    mock = "chaosproxy.mock.openai_chat"
    # GET: a browser's EventSource, which cannot send a body (docs/mock.md).
    mock_routes = (MockRoute("/v1/chat/completions"), MockRoute("/v1/chat/completions", "GET"))

    @classmethod
    def recognises_payload(cls, payload: dict[str, Any]) -> bool:
        return payload.get("object") == "chat.completion.chunk"

    def classify_payload(self, payload: dict[str, Any]) -> frozenset[str]:
        choices = payload.get("choices")
        if not isinstance(choices, list):
            return OTHER
        if not choices:
            return USAGE if isinstance(payload.get("usage"), dict) else OTHER
        if len(choices) == 1:
            return _BY_MASK[_choice_kinds(choices[0])]
        mask = 0
        for choice in choices:
            mask |= _choice_kinds(choice)
        return _BY_MASK[mask]

    def content_payload(self, payload: dict[str, Any]) -> EventContent:
        """Text: ``delta.content`` and ``delta.refusal`` per choice ``index``. Tool calls:
        ``delta.tool_calls[].function.arguments`` keyed ``"<choice>/<tool index>"`` (the
        legacy ``function_call``: ``"<choice>/fn"``); a choice's ``finish_reason`` ends its
        calls. Terminal: ``[DONE]`` (read by :class:`JsonProfile`)."""
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices:
            return NOTHING
        text: list[tuple[int, str]] = []
        tools: list[tuple[str, str]] = []
        ends: list[str] = []
        finish: list[tuple[int, str]] = []
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            if not isinstance(index, int):
                index = 0
            delta = choice.get("delta")
            if isinstance(delta, dict):
                for field in ("content", "refusal"):
                    value = delta.get(field)
                    if isinstance(value, str) and value:
                        text.append((index, value))
                tool_calls = delta.get("tool_calls")
                if isinstance(tool_calls, list):
                    for call in tool_calls:
                        if isinstance(call, dict):
                            fragment = _arguments(call.get("function"))
                            tool = call.get("index", 0)
                            tools.append((f"{index}/{tool}", fragment))
                legacy = delta.get("function_call")
                if isinstance(legacy, dict):
                    tools.append((f"{index}/fn", _arguments(legacy)))
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                finish.append((index, reason))
                ends.append(f"{index}/")
        if not (text or tools or finish):
            return NOTHING
        return EventContent(tuple(text), tuple(tools), tuple(ends), False, tuple(finish))

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """``data: {"error": {...}}``: the shape the SDK raises ``APIError`` on."""
        return encode_event(fmt, newline, _ERROR_BODY)
