"""Streams for the content-fault tests: an answer (text, tool calls) rendered in each
provider's wire format by the mock's own renderers, and what each provider's Python SDK
makes of a body, offline (the SDK's client over a transport that answers with the body):
its text and its calls' arguments.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import httpx2
import ollama
import openai
import orjson
from anthropic.lib.streaming import MessageStream
from google import genai
from google.genai import types as genai_types

from chaosproxy.core.frames import Format
from chaosproxy.mock import anthropic as mock_anthropic
from chaosproxy.mock import gemini as mock_gemini
from chaosproxy.mock import ollama as mock_ollama
from chaosproxy.mock import openai_chat as mock_chat
from chaosproxy.mock import openai_responses as mock_responses
from chaosproxy.mock.common import Knobs
from chaosproxy.scenario import Fixture

PROVIDERS = ("openai-chat", "openai-responses", "anthropic", "gemini", "ollama")
#: Those whose calls come as argument fragments.
FRAGMENTS = ("openai-chat", "openai-responses", "anthropic")
FORMATS: dict[str, Format] = {p: "ndjson" if p == "ollama" else "sse" for p in PROVIDERS}
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
    "ollama": "/api/chat",
}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}


def render(
    provider: str,
    text: str | None = None,
    calls: Sequence[tuple[str, dict[str, Any]]] = (),
    *,
    per_event: int = 1,
) -> bytes:
    """The mock's streamed answer ``text`` then ``calls`` (name, arguments), in
    ``provider``'s format."""
    spec: dict[str, Any] = {"tokens_per_event": per_event}
    if text is not None:
        spec["text"] = text
    if calls:
        spec["tool_calls"] = [{"name": n, "arguments": a} for n, a in calls]
    fixture = Fixture.model_validate(spec)
    knobs = Knobs(tokens=24, interval=0.0)
    message = [{"role": "user", "content": "hi"}]
    if provider == "openai-chat":
        payload: dict[str, Any] = {"model": "gpt-4o", "messages": message, "stream": True}
        reply = mock_chat.respond(orjson.dumps(payload), payload, knobs, fixture)
    elif provider == "openai-responses":
        payload = {"model": "gpt-4o", "input": "hi", "stream": True}
        reply = mock_responses.respond(orjson.dumps(payload), payload, knobs, fixture)
    elif provider == "anthropic":
        payload = {"model": "claude", "max_tokens": 64, "messages": message, "stream": True}
        reply = mock_anthropic.respond(orjson.dumps(payload), payload, knobs, fixture)
    elif provider == "gemini":
        payload = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        reply = mock_gemini.respond(
            orjson.dumps(payload),
            payload,
            knobs,
            model="gemini-2.0-flash",
            action="streamGenerateContent",
            alt="sse",
            fixture=fixture,
        )
    else:
        payload = {"model": "llama3.2", "messages": message}
        reply = mock_ollama.respond(
            orjson.dumps(payload), payload, knobs, endpoint="chat", fixture=fixture
        )
    return b"".join(reply.chunks)


@dataclass
class Parsed:
    """What an SDK made of a stream: its text, and each call's arguments (raw JSON
    text as assembled from fragments, or the SDK's own parsed object)."""

    text: str = ""
    arguments: list[str] = field(default_factory=list)
    inputs: list[Any] = field(default_factory=list)


def _answer(body: bytes, content_type: str) -> tuple[Any, Any]:
    """An httpx2 and an httpx transport that answer every request with ``body``."""

    def reply2(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=body)

    return httpx2.MockTransport(reply2), httpx.MockTransport(reply)


def parse(provider: str, body: bytes) -> Parsed:
    """``body`` read by ``provider``'s Python SDK, as an application would."""
    return _PARSERS[provider](body)


def _openai(body: bytes) -> openai.OpenAI:
    transport, _ = _answer(body, "text/event-stream")
    return openai.OpenAI(
        base_url="http://mock/v1",
        api_key="k",
        max_retries=0,
        http_client=openai.DefaultHttpxClient(transport=transport),
    )


def _parse_chat(body: bytes) -> Parsed:
    out = Parsed()
    calls: dict[int, str] = {}
    with _openai(body) as client:
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        for chunk in stream:
            for choice in chunk.choices:
                out.text += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    calls[call.index] = calls.get(call.index, "") + (
                        call.function.arguments or "" if call.function else ""
                    )
    out.arguments = [calls[i] for i in sorted(calls)]
    out.inputs = [json.loads(a) for a in out.arguments]
    return out


def _parse_responses(body: bytes) -> Parsed:
    out = Parsed()
    calls: dict[int, str] = {}
    with _openai(body) as client:
        stream = client.responses.create(model="gpt-4o", input="hi", stream=True)
        for event in stream:
            if event.type == "response.output_text.delta":
                out.text += event.delta
            elif event.type == "response.function_call_arguments.delta":
                calls[event.output_index] = calls.get(event.output_index, "") + event.delta
    out.arguments = [calls[i] for i in sorted(calls)]
    out.inputs = [json.loads(a) for a in out.arguments]
    return out


def read_messages_stream(stream: MessageStream) -> tuple[list[str], Parsed]:
    """What an application makes of an Anthropic SDK stream: the text deltas as they came,
    and the final message's text, each call's arguments (as assembled from fragments)
    and its input (as the SDK parsed it)."""
    deltas: list[str] = []
    calls: dict[int, str] = {}
    for event in stream:
        if event.type == "content_block_delta":
            if event.delta.type == "text_delta":
                deltas.append(event.delta.text)
            elif event.delta.type == "input_json_delta":
                calls[event.index] = calls.get(event.index, "") + event.delta.partial_json
    message = stream.get_final_message()
    return deltas, Parsed(
        text="".join(b.text for b in message.content if b.type == "text"),
        arguments=[calls[i] for i in sorted(calls)],
        inputs=[b.input for b in message.content if b.type == "tool_use"],
    )


def _parse_anthropic(body: bytes) -> Parsed:
    transport, _ = _answer(body, "text/event-stream")
    client = anthropic.Anthropic(
        base_url="http://mock",
        api_key="k",
        max_retries=0,
        http_client=anthropic.DefaultHttpxClient(transport=transport),
    )
    with (
        client,
        client.messages.stream(
            model="claude", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        return read_messages_stream(stream)[1]


def _parse_gemini(body: bytes) -> Parsed:
    out = Parsed()
    _, transport = _answer(body, "text/event-stream")
    client = genai.Client(
        api_key="k",
        http_options=genai_types.HttpOptions(
            base_url="http://mock", httpx_client=httpx.Client(transport=transport)
        ),
    )
    for chunk in client.models.generate_content_stream(model="gemini-2.0-flash", contents="hi"):
        for candidate in chunk.candidates or []:
            for part in (candidate.content.parts if candidate.content else None) or []:
                out.text += part.text or ""
                if part.function_call is not None:
                    out.inputs.append(part.function_call.args)
    return out


def _parse_ollama(body: bytes) -> Parsed:
    out = Parsed()
    _, transport = _answer(body, "application/x-ndjson")
    client = ollama.Client(host="http://mock", transport=transport)
    for part in client.chat(
        model="llama3.2", messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        out.text += part.message.content or ""
        for call in part.message.tool_calls or []:
            out.inputs.append(dict(call.function.arguments))
    return out


_PARSERS = {
    "openai-chat": _parse_chat,
    "openai-responses": _parse_responses,
    "anthropic": _parse_anthropic,
    "gemini": _parse_gemini,
    "ollama": _parse_ollama,
}

__all__ = ["FORMATS", "FRAGMENTS", "PATHS", "PROVIDERS", "Parsed", "parse", "render"]
