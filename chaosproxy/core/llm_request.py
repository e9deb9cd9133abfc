"""What an LLM request asks, read the same way for every provider.

The request journal (docs/mock.md, The request journal) and the mock's fixtures (their
``match:``) both need the same few facts of a request body, whatever the provider
spells them as: its model, its conversation as (role, text) messages, the names of the
tools it offers and whether it streams. :func:`read_request` reads them from the path
and the parsed JSON body, without I/O; a body it does not understand gives what it can
(an empty conversation, no model), never an error.

Shapes understood: OpenAI Chat Completions and Ollama chat (``messages``), OpenAI
Responses (``instructions``, ``input`` as text or items), Anthropic Messages (``system``,
``messages`` with content blocks), Gemini (``systemInstruction``, ``contents`` with
parts; the model is in the path), Ollama generate (``system``, ``prompt``) and Bedrock's
Converse (``system`` and ``messages`` with content blocks, ``toolConfig.tools``; the model
is in the path, percent-encoded).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

#: Gemini's model is in the path: ``/v1beta/models/{model}:streamGenerateContent``.
_GEMINI_MODEL = re.compile(r"/models/([^/:?]+):[A-Za-z]+")
#: Bedrock's too: ``/model/{modelId}/converse-stream``, ``.../invoke-with-response-stream``.
_BEDROCK_MODEL = re.compile(r"/model/([^/]+)/(?:converse|invoke)(-stream|-with-response-stream)?$")
#: Roles spelled otherwise by a provider, as the journal shows them.
_ROLES = {"model": "assistant", "function": "tool"}


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
    bare = path.split("?", 1)[0]
    path_model: str | None = None
    path_stream: bool | None = None
    gemini = _GEMINI_MODEL.search(bare)
    bedrock = _BEDROCK_MODEL.search(bare) if gemini is None else None
    if gemini is not None:
        path_model, path_stream = gemini.group(1), "streamGenerateContent" in bare
    elif bedrock is not None:
        path_model, path_stream = unquote(bedrock.group(1)), bedrock.group(2) is not None
    if not isinstance(body, Mapping):
        if path_model is None:
            return NOTHING
        return RequestView(path_model, (), (), path_stream)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        model = path_model
    stream = body.get("stream")
    if not isinstance(stream, bool):
        stream = path_stream
    tools = body.get("tools")
    config = body.get("toolConfig")
    if tools is None and isinstance(config, Mapping):
        tools = config.get("tools")  # Bedrock's Converse
    return RequestView(model, tuple(_messages(body)), tuple(tool_names(tools)), stream)


def _messages(body: Mapping[str, Any]) -> list[Message]:
    out: list[Message] = []
    for key in ("system", "instructions"):
        system = _text(body.get(key))
        if system:
            out.append(Message("system", system))
    instruction = body.get("systemInstruction", body.get("system_instruction"))
    if instruction is not None:
        out.append(Message("system", _text(instruction)))
    messages = body.get("messages")
    contents = body.get("contents")
    given = body.get("input")
    if isinstance(messages, list):
        out += [_message(m) for m in messages if isinstance(m, Mapping)]
    elif isinstance(contents, list):
        out += [_message(c) for c in contents if isinstance(c, Mapping)]
    elif isinstance(given, str):
        out.append(Message("user", given))
    elif isinstance(given, list):
        out += [_item(i) for i in given if isinstance(i, Mapping)]
    elif isinstance(body.get("prompt"), str):
        out.append(Message("user", body["prompt"]))
    return out


def _message(message: Mapping[str, Any]) -> Message:
    """A chat message (OpenAI, Anthropic, Ollama) or a Gemini content."""
    role = message.get("role")
    role = _ROLES.get(role, role) if isinstance(role, str) else "user"
    parts = message.get("parts")
    content = message.get("content", parts)
    if isinstance(parts, list) and any(
        isinstance(p, Mapping) and ("functionResponse" in p or "function_response" in p)
        for p in parts
    ):
        role = "tool"
    if isinstance(content, list) and any(
        isinstance(b, Mapping) and (b.get("type") == "tool_result" or "toolResult" in b)
        for b in content
    ):
        role = "tool"  # (Anthropic's tool_result block, Bedrock Converse's toolResult)
    return Message(role, _text(content))


def _item(item: Mapping[str, Any]) -> Message:
    """An OpenAI Responses input item."""
    kind = item.get("type")
    if kind == "function_call_output":
        return Message("tool", _text(item.get("output")))
    if kind == "function_call":
        return Message("assistant", "")
    return _message(item)


#: How deep a content value is read for its text: parts in parts in parts are a few
#: levels; a client's body nested hundreds deep is read no further (never past
#: Python's recursion limit).
TEXT_DEPTH = 32


def _text(value: Any, depth: int = 0) -> str:
    """The text in a content value: a string, a list of parts or blocks (their ``text``,
    a tool result's ``content``), a Gemini ``{parts: [...]}``; nothing of what is nested
    deeper than :data:`TEXT_DEPTH`."""
    if isinstance(value, str):
        return value
    if depth >= TEXT_DEPTH:
        return ""
    if isinstance(value, list):
        texts = [_text(v, depth + 1) for v in value]
        return "\n".join(t for t in texts if t)
    if isinstance(value, Mapping):
        for key in ("text", "content", "parts", "output", "toolResult"):
            inner = value.get(key)
            if isinstance(inner, str | list | Mapping):
                return _text(inner, depth + 1)
    return ""


def tool_declarations(raw: Any) -> list[Mapping[str, Any]]:
    """The function tools in any provider's ``tools`` list, each the mapping that holds
    its ``name`` (a string) and its parameters: OpenAI Chat and Ollama (``{"type":
    "function", "function": {"name"}}``), OpenAI Responses and Anthropic (``{"name"}``),
    Gemini (``{"functionDeclarations": [{"name"}]}``), Bedrock's Converse (``{"toolSpec":
    {"name"}}``). Other tools (a web search without
    a name) are left out."""
    found: list[Mapping[str, Any]] = []
    if not isinstance(raw, list):
        return found
    for tool in raw:
        if not isinstance(tool, Mapping):
            continue
        if isinstance(tool.get("function"), Mapping):
            tool = tool["function"]
        elif isinstance(tool.get("toolSpec"), Mapping):
            tool = tool["toolSpec"]  # Bedrock's Converse
        decls = tool.get("functionDeclarations", tool.get("function_declarations"))
        for decl in decls if isinstance(decls, list) else [tool]:
            if isinstance(decl, Mapping) and isinstance(decl.get("name"), str):
                found.append(decl)
    return found


def tool_names(raw: Any) -> list[str]:
    """The names of the function tools in any provider's ``tools`` list
    (:func:`tool_declarations`)."""
    return [decl["name"] for decl in tool_declarations(raw)]


__all__ = ["NOTHING", "Message", "RequestView", "read_request", "tool_declarations", "tool_names"]
