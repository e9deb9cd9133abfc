"""The recorded provider captures (tests/fixtures/providers/) as the provider tests
read them: each capture's provider and format, its events, and the fields of an event."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from chaosproxy.core.frames import Format
from tests.support.repo import fixture_bytes


@dataclass(frozen=True)
class Capture:
    file: str
    provider: str
    fmt: Format

    @property
    def body(self) -> bytes:
        return _read(self.file)

    @property
    def events(self) -> list[bytes]:
        """The capture's events, as bytes: SSE blocks with their blank line, or NDJSON
        lines with their terminator. Joined, they are the file."""
        body = self.body
        if self.fmt == "ndjson":
            parts = body.splitlines(keepends=True)
        else:
            parts = re.findall(rb".*?(?:\r\n\r\n|\n\n)", body, re.S)
        assert b"".join(parts) == body, f"{self.file} does not split into whole events"
        return parts

    @property
    def newline(self) -> bytes:
        return b"\r\n" if b"\r\n" in self.body else b"\n"

    def kinds(self) -> list[set[str]]:
        return [kinds_of(self.provider, event) for event in self.events]

    def where(self, kind: str) -> list[int]:
        """0-based positions of the events of ``kind``, in order."""
        return [i for i, kinds in enumerate(self.kinds()) if kind in kinds]


@cache
def _read(name: str) -> bytes:
    return fixture_bytes(name)


# One table per provider.
OPENAI_CHAT = [
    Capture("openai_chat_text_usage.sse", "openai-chat", "sse"),
    Capture("openai_chat_tool_call_usage.sse", "openai-chat", "sse"),
    Capture("openai_chat_n3_usage.sse", "openai-chat", "sse"),
]
OPENAI_RESPONSES = [
    Capture("openai_responses_o4mini_reasoning_text.sse", "openai-responses", "sse"),
]
ANTHROPIC = [
    Capture("anthropic_docs_basic.sse", "anthropic", "sse"),
    Capture("anthropic_docs_tool_use.sse", "anthropic", "sse"),
]
GEMINI = [
    Capture("gemini_2_0_flash_text.crlf.sse", "gemini", "sse"),
    Capture("gemini_2_5_flash_short.crlf.sse", "gemini", "sse"),
]
OLLAMA = [
    Capture("ollama_chat_stream.ndjson", "ollama", "ndjson"),
    Capture("ollama_generate_stream.ndjson", "ollama", "ndjson"),
]
CAPTURES = [*OPENAI_CHAT, *OPENAI_RESPONSES, *ANTHROPIC, *GEMINI, *OLLAMA]


def sse_field(event: bytes, name: str) -> list[str]:
    """The values of field ``name`` in one SSE block (one optional space stripped)."""
    values = []
    for line in event.decode("utf-8").splitlines():
        field, colon, value = line.partition(":")
        if field == name and colon:
            values.append(value.removeprefix(" "))
    return values


def data_of(event: bytes) -> str:
    """An SSE block's data, or an NDJSON line without its terminator."""
    if event.startswith((b"data:", b"event:")):
        return "\n".join(sse_field(event, "data"))
    return event.decode("utf-8").rstrip("\r\n")


def nonempty(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def kinds_of(provider: str, event: bytes) -> set[str]:
    """The kinds this test needs (start, delta, tool_delta, terminal), by the rules of
    docs/providers.md, read straight off the bytes."""
    data = data_of(event)
    kinds: set[str] = set()
    if data == "[DONE]":
        return {"terminal"}
    payload = json.loads(data)
    if provider == "openai-chat":
        for choice in payload["choices"]:
            delta = choice["delta"]
            if delta.get("role"):
                kinds.add("start")
            if nonempty(delta.get("content")) or nonempty(delta.get("refusal")):
                kinds.add("delta")
            if delta.get("tool_calls"):
                kinds.add("tool_delta")
    elif provider == "openai-responses":
        [name] = sse_field(event, "event")
        kinds |= {
            "response.created": {"start"},
            "response.output_text.delta": {"delta"},
            "response.function_call_arguments.delta": {"tool_delta"},
            "response.completed": {"terminal"},
        }.get(name, set())
    elif provider == "anthropic":
        [name] = sse_field(event, "event")
        if name == "message_start":
            kinds.add("start")
        elif name == "message_stop":
            kinds.add("terminal")
        elif name == "content_block_delta":
            delta_type = payload["delta"]["type"]
            kinds |= {"text_delta": {"delta"}, "input_json_delta": {"tool_delta"}}.get(
                delta_type, set()
            )
    elif provider == "gemini":
        for candidate in payload["candidates"]:
            if candidate.get("finishReason"):
                kinds.add("terminal")
            for part in candidate["content"].get("parts", []):
                if nonempty(part.get("text")):
                    kinds.add("delta")
                if "functionCall" in part:
                    kinds.add("tool_delta")
    elif provider == "ollama":
        message = payload.get("message", {})
        if nonempty(message.get("content")) or nonempty(payload.get("response")):
            kinds.add("delta")
        if message.get("tool_calls"):
            kinds.add("tool_delta")
        if payload["done"] is True:
            kinds.add("terminal")
    return kinds
