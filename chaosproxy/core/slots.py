"""Where each provider keeps the content of an event, for the faults that rewrite it
(``resegment``, ``snapshot``, ``split_tool_args``, ``interleave_tool_calls``): the JSON
path of a text delta's string and of a tool-call fragment's, the channel or call each
belongs to, the role of an event in a tool call (it opens, fills or closes one), the
stream's sequence numbers, and how to make new events of the same shape.

Only what a provider's format can carry is offered: Gemini and Ollama send every tool
call whole, so they have no tool fragments (:attr:`ProviderSlots.fragments` is False);
``generic`` knows no content at all (no :class:`ProviderSlots`). An event is rewritten
only when it is plain: a text delta with exactly one text string (a chunk with several
choices, candidates or parts is left as it came), a tool fragment of exactly one call.

Every new event is the template event with its string (and sequence number) replaced
in place (:mod:`chaosproxy.core.jsonspan`): its other bytes are the upstream's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import orjson

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import parse_block
from chaosproxy.core.framing.encode import field_name, replace_data, split_bom, split_lines
from chaosproxy.core.jsonspan import (
    Path,
    SpanError,
    encode_string,
    escapes_non_ascii,
    replace_many,
    span,
)
from chaosproxy.core.providers.openai_responses import TEXT_DELTAS, TOOL_DELTAS, TOOL_DONES

#: What an event does in a tool call.
CallRole = Literal["open", "fragment", "close"]


@dataclass(frozen=True, slots=True)
class Slot:
    """One string of an event's content: where it is, what it says, whose it is."""

    #: The JSON path of the string in the event's data.
    path: Path
    #: The string (decoded).
    value: str
    #: Its channel (text: the choice or candidate index) or its call (tool fragments).
    key: str
    #: The event also ends the stream (a Gemini chunk with ``finishReason``, Ollama's
    #: ``done: true``): only its last piece may keep that.
    terminal: bool = False
    #: The event also opens its call (an OpenAI Chat chunk with the call's id and name):
    #: only its first piece may keep that.
    opens: bool = False


def _get(payload: Any, path: Path) -> Any:
    node = payload
    for step in path:
        if isinstance(step, str):
            if not isinstance(node, dict) or step not in node:
                return None
            node = node[step]
        else:
            if not isinstance(node, list) or not 0 <= step < len(node):
                return None
            node = node[step]
    return node


class ProviderSlots:
    """A provider's content slots. Stateless; one instance per provider."""

    name: ClassVar[str]
    #: The path of the stream's sequence number in every event (None: it has none).
    sequence: ClassVar[Path | None] = None
    #: Whether tool calls come as argument fragments (False: each call whole).
    fragments: ClassVar[bool] = True

    def text(self, frame: Frame) -> Slot | None:
        """The text string of a plain text delta event, else None."""
        raise NotImplementedError

    def tool(self, frame: Frame) -> Slot | None:
        """The arguments fragment of an event that carries one call's, else None."""
        return None

    def call(self, frame: Frame) -> tuple[CallRole, str] | None:
        """What the event does in a tool call, and the call's key; None for others."""
        return None

    def without_end(self, payload: Any) -> Any:
        """A copy of a terminal text event's payload that does not end the stream."""
        return payload

    def without_opening(self, payload: Any, slot: Slot) -> Any:
        """A copy of a call-opening fragment event's payload that only continues it."""
        return payload


class OpenAIChatSlots(ProviderSlots):
    name = "openai-chat"

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


class OpenAIResponsesSlots(ProviderSlots):
    name = "openai-responses"
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


class AnthropicSlots(ProviderSlots):
    name = "anthropic"

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


class BedrockSlots(ProviderSlots):
    """ConverseStream's events (InvokeModel's chunks hold their vendor's event in base64:
    none is plain, so they are left as they came)."""

    name = "bedrock"

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


class GeminiSlots(ProviderSlots):
    name = "gemini"
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


class OllamaSlots(ProviderSlots):
    name = "ollama"
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


_SLOTS: dict[str, ProviderSlots] = {
    cls.name: cls()
    for cls in (
        OpenAIChatSlots,
        OpenAIResponsesSlots,
        AnthropicSlots,
        GeminiSlots,
        OllamaSlots,
        BedrockSlots,
    )
}

#: The providers whose text the content faults can rewrite (every one but ``generic``).
TEXT_PROVIDERS: tuple[str, ...] = tuple(_SLOTS)
#: The providers whose tool calls come as argument fragments.
FRAGMENT_PROVIDERS: tuple[str, ...] = tuple(n for n, s in _SLOTS.items() if s.fragments)


def fragments_problem(provider: str) -> str | None:
    """Why ``provider``'s tool calls have no argument fragments to cut or interleave,
    or None when they have."""
    if provider in FRAGMENT_PROVIDERS:
        return None
    if provider in _SLOTS:
        return f"{provider} sends each tool call whole: there are no argument fragments"
    return f"a {provider} stream's tool calls are unknown: there are no argument fragments"


def text_problem(provider: str) -> str | None:
    """Why ``provider``'s text cannot be rewritten, or None when it can."""
    if provider in TEXT_PROVIDERS:
        return None
    return f"a {provider} stream's text is unknown: there are no text deltas to rewrite"


def slots_for(provider: str) -> ProviderSlots | None:
    """The content slots of ``provider`` (None for ``generic`` and unknown ones)."""
    return _SLOTS.get(provider)


# --------------------------------------------------------------------------- new events


def string_style(frame: Frame, slot: Slot) -> bool | None:
    """Whether the event writes characters beyond ASCII escaped in its string (None:
    the string has none to tell by)."""
    data = frame.data or ""
    try:
        start, end = span(data, slot.path)
    except SpanError:
        return None
    return escapes_non_ascii(data[start:end])


def rebuild(
    frame: Frame,
    fmt: Format,
    edits: list[tuple[Path, str]],
    *,
    payload: Any = None,
    keep_id: bool = True,
) -> Frame:
    """A new event: ``frame`` with the JSON values at the edits' paths replaced (each
    a JSON text), from its own data, or from ``payload`` (a changed copy of its parsed
    data, written compactly) when given. ``keep_id=False`` leaves out its SSE ``id:``
    lines (a piece of an event that is not its last: a client that resumes from the
    id must have had all of it)."""
    data = (frame.data or "") if payload is None else orjson.dumps(payload).decode()
    new = replace_many(data, edits) if edits else data
    out = replace_data(frame, fmt, new.encode("utf-8"))
    if not keep_id and out.id is not None and fmt == "sse":
        out = _without_id(out, fmt)
    return out


def _without_id(frame: Frame, fmt: Format) -> Frame:
    bom, body = split_bom(frame.raw)
    kept = [c + t for c, t in split_lines(body) if field_name(c) != b"id"]
    return parse_block(bom + b"".join(kept), fmt)


def string_json(value: str, escaped: bool | None) -> str:
    """``value`` as a JSON string in the stream's style (raw unless it escapes)."""
    return encode_string(value, escape_non_ascii=bool(escaped))


def number_at(frame: Frame, path: Path) -> int | None:
    """The integer at ``path`` in the event's JSON, else None."""
    value = _get(frame.json(), path)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = [
    "FRAGMENT_PROVIDERS",
    "TEXT_PROVIDERS",
    "CallRole",
    "ProviderSlots",
    "Slot",
    "fragments_problem",
    "number_at",
    "rebuild",
    "slots_for",
    "string_json",
    "string_style",
    "text_problem",
]
