"""What an LLM request asks, read the same way for every provider.

The request journal (docs/mock.md, The request journal) and the mock's fixtures (their
``match:``) both need the same few facts of a request body, whatever the provider
spells them as: its model, its conversation as (role, text) messages, the names of the
tools it offers and whether it streams. :func:`read_request` reads them from the path
and the parsed JSON body, without I/O; a body it does not understand gives what it can
(an empty conversation, no model), never an error.

Where a body says each fact is each provider's declaration (its ``request``, a
:class:`~chaosproxy.core.providers.base.RequestShape`: OpenAI Chat's ``messages``,
Responses' ``instructions`` and ``input``, Anthropic's ``system``, Gemini's
``systemInstruction`` and ``contents`` with the model in the path, Ollama's ``prompt``...).
Every registered provider's keys are read, in rank order, whatever the path: a gateway
may put any body behind any path. What the contents hold (text parts, content blocks, a
tool's result) is read the same for every provider.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import unquote

from chaosproxy.core.providers import ProviderProfile, declarations

#: The keys of a block that hold its text, for every provider (in this order).
TEXT_KEYS = ("text", "content", "parts", "output")


@dataclass(frozen=True, slots=True)
class _Keys:
    """Every registered provider's request keys, each field in rank order, once each."""

    model: tuple[str, ...]
    path_models: tuple[tuple[re.Pattern[str], re.Pattern[str] | None], ...]
    system: tuple[tuple[str, ...], ...]
    messages: tuple[str, ...]
    items: tuple[str, ...]
    prompt: tuple[str, ...]
    tools: tuple[str, ...]
    tool_wrappers: tuple[str, ...]
    tool_groups: tuple[str, ...]
    roles: dict[str, str]
    result_keys: frozenset[str]
    result_types: frozenset[str]
    text_keys: tuple[str, ...]


def _once(keys: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(keys))


def _union(providers: tuple[ProviderProfile, ...]) -> _Keys:
    shapes = [p.request for p in providers]
    system: list[tuple[str, ...]] = []
    for shape in shapes:  # a provider's keys are alternatives; a key is read once
        keys = tuple(k for k in shape.system if all(k not in seen for seen in system))
        if keys:
            system.append(keys)
    return _Keys(
        model=_once([k for s in shapes for k in s.model]),
        path_models=tuple(
            (s.model_in_path, s.stream_in_path) for s in shapes if s.model_in_path is not None
        ),
        system=tuple(system),
        messages=_once([k for s in shapes for k in s.messages]),
        items=_once([k for s in shapes for k in s.items]),
        prompt=_once([k for s in shapes for k in s.prompt]),
        tools=_once([k for s in shapes for k in s.tools]),
        tool_wrappers=_once([k for s in shapes for k in s.tool_wrappers]),
        tool_groups=_once([k for s in shapes for k in s.tool_groups]),
        roles={spelled: role for s in shapes for spelled, role in s.roles},
        result_keys=frozenset(k for s in shapes for k in s.result_keys),
        result_types=frozenset(t for s in shapes for t in s.result_types),
        text_keys=_once([*TEXT_KEYS, *(k for s in shapes for k in s.text_keys)]),
    )


def _get(body: Mapping[str, Any], key: str) -> Any:
    """The value of ``key`` in ``body`` (a dotted key: a key in a key), None if absent."""
    value: Any = body
    for part in key.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


_KEYS: list[tuple[tuple[ProviderProfile, ...], _Keys]] = []


def _keys() -> _Keys:
    """The request keys of the providers registered now (made again when they change)."""
    providers = declarations()
    if not _KEYS or _KEYS[0][0] is not providers:
        _KEYS[:] = [(providers, _union(providers))]
    return _KEYS[0][1]


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation: its role (``system``, ``user``, ``assistant``,
    ``tool``) and its text (text parts joined by newlines; other parts left out)."""

    role: str
    text: str


@dataclass(frozen=True, slots=True)
class RequestView:
    """What a request asks, provider-neutral."""

    #: The model asked for (from the body, or Gemini's path), if any.
    model: str | None
    #: The conversation, a system prompt first (as one ``system`` message).
    messages: tuple[Message, ...]
    #: The names of the function tools offered, in order.
    tools: tuple[str, ...]
    #: ``stream`` of the body (Gemini: whether the path streams), if said.
    stream: bool | None

    @property
    def last_user_message(self) -> str | None:
        """The text of the last ``user`` message (None when there is none)."""
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text
        return None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able view: ``model``, ``stream``, ``messages`` (role and text each),
        ``tools`` (names)."""
        return {
            "model": self.model,
            "stream": self.stream,
            "messages": [{"role": m.role, "text": m.text} for m in self.messages],
            "tools": list(self.tools),
        }


#: What a request with no body (or one that is not a JSON object) asks.
NOTHING = RequestView(None, (), (), None)


def read_request(path: str, body: Any) -> RequestView:
    """The view of a request to ``path`` (query allowed) whose body parsed to ``body``
    (anything: only a JSON object is read)."""
    keys = _keys()
    bare = path.split("?", 1)[0]
    in_path: str | None = None
    streams: bool | None = None
    for pattern, says_stream in keys.path_models:
        found = pattern.search(bare)
        if found is not None:
            in_path = unquote(found.group(1))
            streams = says_stream is not None and says_stream.search(bare) is not None
            break
    if not isinstance(body, Mapping):
        if in_path is None:
            return NOTHING
        return RequestView(in_path, (), (), streams)
    model = next((v for v in map(partial(_get, body), keys.model) if v is not None), None)
    if not isinstance(model, str) or not model:
        model = in_path
    stream = body.get("stream")
    if not isinstance(stream, bool):
        stream = streams
    tools = next((v for v in map(partial(_get, body), keys.tools) if v is not None), None)
    return RequestView(model, tuple(_messages(body, keys)), tuple(tool_names(tools)), stream)


def _messages(body: Mapping[str, Any], keys: _Keys) -> list[Message]:
    out: list[Message] = []
    for alternatives in keys.system:
        value = next((v for v in map(partial(_get, body), alternatives) if v is not None), None)
        system = _text(value, keys.text_keys)
        if system:
            out.append(Message("system", system))
    for key in keys.messages:
        messages = _get(body, key)
        if isinstance(messages, list):
            return out + [_message(m, keys) for m in messages if isinstance(m, Mapping)]
    for key in keys.items:
        given = _get(body, key)
        if isinstance(given, str):
            return [*out, Message("user", given)]
        if isinstance(given, list):
            return out + [_item(i, keys) for i in given if isinstance(i, Mapping)]
    for key in keys.prompt:
        prompt = _get(body, key)
        if isinstance(prompt, str):
            return [*out, Message("user", prompt)]
    return out


def _message(message: Mapping[str, Any], keys: _Keys) -> Message:
    """A chat message (OpenAI, Anthropic, Ollama) or a Gemini content: a tool's when a
    block of it is a tool's result (a provider's ``result_keys``, ``result_types``)."""
    role = message.get("role")
    role = keys.roles.get(role, role) if isinstance(role, str) else "user"
    parts = message.get("parts")
    content = message.get("content", parts)
    for blocks in (parts, content):
        if isinstance(blocks, list) and any(_is_result(b, keys) for b in blocks):
            role = "tool"
    return Message(role, _text(content, keys.text_keys))


def _is_result(block: Any, keys: _Keys) -> bool:
    if not isinstance(block, Mapping):
        return False
    return block.get("type") in keys.result_types or any(k in block for k in keys.result_keys)


def _item(item: Mapping[str, Any], keys: _Keys) -> Message:
    """An OpenAI Responses input item."""
    kind = item.get("type")
    if kind == "function_call_output":
        return Message("tool", _text(item.get("output"), keys.text_keys))
    if kind == "function_call":
        return Message("assistant", "")
    return _message(item, keys)


#: How deep a content value is read for its text: parts in parts in parts are a few
#: levels; a client's body nested hundreds deep is read no further (never past
#: Python's recursion limit).
TEXT_DEPTH = 32


def _text(value: Any, keys: tuple[str, ...], depth: int = 0) -> str:
    """The text in a content value: a string, a list of parts or blocks (their ``text``,
    a tool result's ``content``), a Gemini ``{parts: [...]}`` (the first of ``keys`` a
    block has); nothing of what is nested deeper than :data:`TEXT_DEPTH`."""
    if isinstance(value, str):
        return value
    if depth >= TEXT_DEPTH:
        return ""
    if isinstance(value, list):
        texts = [_text(v, keys, depth + 1) for v in value]
        return "\n".join(t for t in texts if t)
    if isinstance(value, Mapping):
        for key in keys:
            inner = value.get(key)
            if isinstance(inner, str | list | Mapping):
                return _text(inner, keys, depth + 1)
    return ""


def tool_declarations(raw: Any) -> list[Mapping[str, Any]]:
    """The function tools in any provider's ``tools`` list, each the mapping that holds
    its ``name`` (a string) and its parameters: OpenAI Chat and Ollama (``{"type":
    "function", "function": {"name"}}``: their ``tool_wrappers``), OpenAI Responses and
    Anthropic (``{"name"}``), Gemini (``{"functionDeclarations": [{"name"}]}``: its
    ``tool_groups``). Other tools (a web search without a name) are left out."""
    found: list[Mapping[str, Any]] = []
    if not isinstance(raw, list):
        return found
    keys = _keys()
    for tool in raw:
        if not isinstance(tool, Mapping):
            continue
        for key in keys.tool_wrappers:
            if isinstance(tool.get(key), Mapping):
                tool = tool[key]
                break
        decls = next((v for v in map(tool.get, keys.tool_groups) if v is not None), None)
        for decl in decls if isinstance(decls, list) else [tool]:
            if isinstance(decl, Mapping) and isinstance(decl.get("name"), str):
                found.append(decl)
    return found


def tool_names(raw: Any) -> list[str]:
    """The names of the function tools in any provider's ``tools`` list
    (:func:`tool_declarations`)."""
    return [decl["name"] for decl in tool_declarations(raw)]


__all__ = ["NOTHING", "Message", "RequestView", "read_request", "tool_declarations", "tool_names"]
