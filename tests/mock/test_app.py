"""The mock LLM upstream (chaosproxy/mock/app.py), through real sockets, as the official
SDKs see it."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from aiohttp import web
from anthropic.types import Message, ToolParam
from google import genai
from google.genai import types
from openai.types.chat import ChatCompletionChunk

from chaosproxy.mock import (
    INTERVAL_HEADER,
    MOCK_REQUESTS,
    TOKENS_HEADER,
    create_mock_app,
)
from chaosproxy.mock.corpus import ANSWERS, take_tokens

TOKENS = 12
INTERVAL = 0.001

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location"],
}

CLAUDE_WEATHER_TOOL: Any = {"name": "get_weather", "input_schema": WEATHER_SCHEMA}


def corpus_texts(tokens: int) -> set[str]:
    """Every text the mock can answer with ``tokens`` tokens (one per start answer)."""
    return {"".join(take_tokens(start, tokens)) for start in range(len(ANSWERS))}


def text_for(body: bytes, tokens: int, choice: int = 0) -> str:
    """The text the mock promises for this exact body: picked by its sha256."""
    start = int.from_bytes(hashlib.sha256(body).digest()[:8], "big")
    return "".join(take_tokens(start + choice, tokens))


@dataclass
class Mock:
    app: web.Application
    url: str
    #: How each handler ended: None when it returned, else what it raised.
    finished: list[BaseException | None]
    handler_done: asyncio.Event

    @property
    def counts(self) -> dict[str, int]:
        counts: Counter[str] = self.app[MOCK_REQUESTS]
        return dict(counts)


@pytest.fixture
async def mock() -> AsyncIterator[Mock]:
    app = create_mock_app(tokens=TOKENS, interval=INTERVAL)
    finished: list[BaseException | None] = []
    handler_done = asyncio.Event()

    @web.middleware
    async def record(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        # Records how each handler ended, so tests can wait for it instead of sleeping.
        try:
            response = await handler(request)
        except BaseException as exc:
            finished.append(exc)
            raise
        finally:
            handler_done.set()
        finished.append(None)
        return response

    app.middlewares.append(record)
    # AppRunner with its defaults, as run_mock() uses it (aiohttp's TestServer would
    # cancel handlers when a client leaves, which hides how the mock copes on its own).
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield Mock(app, f"http://{host}:{port}", finished, handler_done)
    finally:
        await runner.cleanup()


@pytest.fixture
async def http(mock: Mock) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mock.url, timeout=10, verify=False) as client:
        yield client


def sse_data(body: bytes) -> list[str]:
    """The data of each event of an SSE body with LF or CRLF line endings."""
    text = body.decode().replace("\r\n", "\n")
    return [
        "\n".join(line[6:] for line in block.split("\n") if line.startswith("data: "))
        for block in text.split("\n\n")
        if block.strip()
    ]


# --- OpenAI ------------------------------------------------------------------------------


def openai_client(mock: Mock) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=mock.url + "/v1", api_key="test", max_retries=0)


async def chat_chunks(mock: Mock, prompt: str, **options: Any) -> list[ChatCompletionChunk]:
    """Every chunk of one streamed chat completion of ``prompt`` (``options`` added)."""
    async with openai_client(mock) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": prompt}],
            stream=True,
            **options,
        )
        return [chunk async for chunk in stream]


async def test_openai_chat_stream_assembles_the_mock_text(mock: Mock) -> None:
    chunks = await chat_chunks(mock, "Tell me about coffee.")
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(deltas) == TOKENS
    assert "".join(deltas) in corpus_texts(TOKENS)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert mock.counts == {"/v1/chat/completions": 1}


async def test_openai_chat_usage_chunk_only_with_include_usage(mock: Mock) -> None:
    chunks = await chat_chunks(mock, "Hi", stream_options={"include_usage": True})
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == TOKENS
    assert last.usage.total_tokens == last.usage.prompt_tokens + TOKENS
    assert all(c.usage is None for c in chunks[:-1])


async def test_openai_chat_tool_call_arguments_assemble_to_json(mock: Mock) -> None:
    tools: Any = [
        {"type": "function", "function": {"name": "get_time", "parameters": {}}},
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}},
    ]
    chunks = await chat_chunks(
        mock,
        "Weather in Kyoto?",
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    first = calls[0]
    assert first.id is not None and first.id.startswith("call_")
    assert first.function is not None and first.function.name == "get_weather"
    assert first.function.arguments == ""
    fragments = [tc.function.arguments or "" for tc in calls[1:] if tc.function]
    assert len(fragments) > 3  # streamed in pieces, not whole
    arguments = json.loads("".join(fragments))
    assert set(arguments) == {"location", "unit"}
    assert arguments["unit"] in ("celsius", "fahrenheit")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert all(not (c.choices and c.choices[0].delta.content) for c in chunks)


async def test_openai_chat_n2_interleaves_two_choices(mock: Mock) -> None:
    chunks = await chat_chunks(mock, "Hi", n=2)
    texts: dict[int, str] = {0: "", 1: ""}
    order = []
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            order.append(choice.index)
    assert texts[0] != texts[1]
    assert {texts[0], texts[1]} <= corpus_texts(TOKENS)
    assert order[:4] == [0, 1, 0, 1]  # interleaved by index, not one after the other


async def test_openai_chat_non_stream(mock: Mock) -> None:
    async with openai_client(mock) as client:
        completion = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}], max_tokens=5
        )
    assert completion.object == "chat.completion"
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content in corpus_texts(5)
    assert completion.usage is not None and completion.usage.completion_tokens == 5


async def test_openai_responses_stream_ends_with_completed(mock: Mock) -> None:
    async with openai_client(mock) as client:
        stream = await client.responses.create(
            model="gpt-4o-mini", input="Write a haiku.", stream=True
        )
        events = [event async for event in stream]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:4]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert [e.type for e in events[-4:]] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == TOKENS
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.output_text == "".join(deltas)
    assert final.response.output_text in corpus_texts(TOKENS)
    assert final.response.id.startswith("resp_")


async def test_openai_responses_function_call(mock: Mock) -> None:
    tool: Any = {"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}
    async with openai_client(mock) as client:
        stream = await client.responses.create(
            model="gpt-4o-mini", input="Weather?", tools=[tool], stream=True
        )
        events = [event async for event in stream]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert "".join(deltas) == done.arguments
    assert set(json.loads(done.arguments)) == {"location", "unit"}
    final = events[-1]
    assert final.type == "response.completed"
    item = final.response.output[0]
    assert item.type == "function_call" and item.name == "get_weather"


# --- Anthropic ---------------------------------------------------------------------------


def anthropic_client(mock: Mock) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=mock.url, api_key="test", max_retries=0)


async def anthropic_stream(
    mock: Mock, prompt: str, tools: list[ToolParam] | None = None
) -> tuple[list[str], Message]:
    """One streamed message through the SDK: the text pieces it yields, its final message."""
    client = anthropic_client(mock)
    async with (
        client,
        client.messages.stream(
            model="claude-mock",
            max_tokens=256,
            messages=[{"role": "user", "content": prompt}],
            tools=anthropic.NOT_GIVEN if tools is None else tools,
        ) as stream,
    ):
        pieces = [text async for text in stream.text_stream]
        return pieces, await stream.get_final_message()


async def test_anthropic_stream_final_text(mock: Mock) -> None:
    pieces, message = await anthropic_stream(mock, "Plan my week.")
    assert len(pieces) == TOKENS
    assert message.content[0].type == "text"
    assert message.content[0].text == "".join(pieces)
    assert message.content[0].text in corpus_texts(TOKENS)
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == TOKENS
    assert message.id.startswith("msg_")


async def test_anthropic_tool_use_gives_parsed_input(mock: Mock) -> None:
    pieces, message = await anthropic_stream(mock, "Weather?", [CLAUDE_WEATHER_TOOL])
    assert pieces == []
    block = message.content[0]
    assert block.type == "tool_use"
    assert block.name == "get_weather"
    assert block.id.startswith("toolu_")
    assert isinstance(block.input, dict) and set(block.input) == {"location", "unit"}
    assert message.stop_reason == "tool_use"


async def test_anthropic_answers_a_tool_result_with_text(mock: Mock) -> None:
    async with anthropic_client(mock) as client:
        message = await client.messages.create(
            model="claude-mock",
            max_tokens=256,
            tools=[CLAUDE_WEATHER_TOOL],
            messages=[
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
                    ],
                },
            ],
        )
    assert message.content[0].type == "text"
    assert message.stop_reason == "end_turn"


# --- Gemini ------------------------------------------------------------------------------

# google-genai subclasses aiohttp.ClientSession, which aiohttp warns about; not ours.
sdk_warning = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession:DeprecationWarning"
)


@sdk_warning
async def test_gemini_generate_content_stream(mock: Mock) -> None:
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=mock.url))
    try:
        stream = await client.aio.models.generate_content_stream(
            model="gemini-2.0-flash", contents="Tell me about Tokyo."
        )
        chunks = [chunk async for chunk in stream]
    finally:
        await client.aio.aclose()
    text = "".join(chunk.text or "" for chunk in chunks)
    assert len(chunks) == TOKENS
    assert text in corpus_texts(TOKENS)
    last = chunks[-1]
    assert last.candidates and last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata is not None
    assert last.usage_metadata.candidates_token_count == TOKENS
    assert len({c.response_id for c in chunks}) == 1
    # google-genai picks the API version; the mock serves /v1beta/ and /v1/ alike.
    [(path, count)] = mock.counts.items()
    assert path.endswith("/models/gemini-2.0-flash:streamGenerateContent") and count == 1


async def test_gemini_function_call_and_crlf_framing(http: httpx.AsyncClient) -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "Weather?"}]}],
        "tools": [
            {"functionDeclarations": [{"name": "get_weather", "parameters": WEATHER_SCHEMA}]}
        ],
    }
    response = await http.post(
        "/v1/models/gemini-2.0-flash:streamGenerateContent", params={"alt": "sse"}, json=body
    )
    assert response.headers["content-type"] == "text/event-stream"
    raw = response.content
    assert raw.endswith(b"}\r\n\r\n") and b"\n\n" not in raw.replace(b"\r\n", b"")
    assert raw.count(b"\r\n\r\n") == 1  # a function call is one whole chunk
    chunk = json.loads(sse_data(raw)[0])
    candidate = chunk["candidates"][0]
    call = candidate["content"]["parts"][0]["functionCall"]
    assert call["name"] == "get_weather" and set(call["args"]) == {"location", "unit"}
    assert candidate["finishReason"] == "STOP"


@sdk_warning
async def test_gemini_generate_content_non_stream(mock: Mock) -> None:
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=mock.url))
    try:
        result = await client.aio.models.generate_content(
            model="gemini-2.0-flash",
            contents="Hi",
            config=types.GenerateContentConfig(max_output_tokens=4),
        )
    finally:
        await client.aio.aclose()
    assert result.text in corpus_texts(4)
    assert result.candidates and result.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS


# --- Ollama ------------------------------------------------------------------------------


async def test_ollama_chat_stream(mock: Mock) -> None:
    client = ollama.AsyncClient(host=mock.url)
    parts = [
        part
        async for part in await client.chat(
            model="llama3.2", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
    ]
    text = "".join(p.message.content or "" for p in parts)
    assert len(parts) == TOKENS + 1
    assert text in corpus_texts(TOKENS)
    final = parts[-1]
    assert final.done and final.done_reason == "stop"
    assert final.eval_count == TOKENS and (final.total_duration or 0) > 0
    assert not any(p.done for p in parts[:-1])


async def test_ollama_generate_stream_and_chat_tools(mock: Mock) -> None:
    client = ollama.AsyncClient(host=mock.url)
    parts = [
        part async for part in await client.generate(model="llama3.2", prompt="Hi", stream=True)
    ]
    assert "".join(p.response or "" for p in parts) in corpus_texts(TOKENS)
    assert parts[-1].done and parts[-1].context
    tools: Any = [
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}
    ]
    reply = await client.chat(
        model="llama3.2", messages=[{"role": "user", "content": "Weather?"}], tools=tools
    )
    assert reply.message.tool_calls
    call = reply.message.tool_calls[0].function
    assert call.name == "get_weather" and set(call.arguments) == {"location", "unit"}


async def test_ollama_raw_ndjson_shape(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/api/generate",
        json={"model": "llama3.2", "prompt": "Hi", "options": {"num_predict": 3}},
    )
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.headers["cache-control"] == "no-cache"
    lines = response.content.split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3 + 2
    objects = [json.loads(line) for line in lines[:-1]]
    assert all(b": " not in line and b", " not in line.replace(b", ", b"") for line in lines)
    assert objects[-1]["done"] is True and objects[-1]["done_reason"] == "length"


# --- behaviour shared by every provider ------------------------------------------------

REQUESTS: list[tuple[str, dict[str, Any]]] = [
    (
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "{p}"}], "stream": True},
    ),
    ("/v1/responses", {"model": "m", "input": "{p}", "stream": True}),
    (
        "/v1/messages",
        {
            "model": "m",
            "max_tokens": 99,
            "messages": [{"role": "user", "content": "{p}"}],
            "stream": True,
        },
    ),
    (
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
        {"contents": [{"parts": [{"text": "{p}"}]}]},
    ),
    ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "{p}"}]}),
    ("/api/generate", {"model": "m", "prompt": "{p}"}),
]


def body_for(template: dict[str, Any], prompt: str) -> bytes:
    return json.dumps(template).replace("{p}", prompt).encode()


def delta_texts(path: str, raw: bytes) -> list[str]:
    """The text deltas of a raw streamed body, per provider."""
    if path.startswith("/api/"):
        objects = [json.loads(line) for line in raw.splitlines()]
        key = "message" if path == "/api/chat" else "response"
        pieces = [o[key]["content"] if key == "message" else o[key] for o in objects]
        return [p for p, o in zip(pieces, objects, strict=True) if not o["done"]]
    out = []
    for data in sse_data(raw):
        if data == "[DONE]":
            continue
        event = json.loads(data)
        if event.get("choices"):
            content = event["choices"][0]["delta"].get("content")
            if content:
                out.append(content)
        elif event.get("type") == "response.output_text.delta":
            out.append(event["delta"])
        elif event.get("type") == "content_block_delta":
            out.append(event["delta"]["text"])
        elif "candidates" in event:
            out.extend(p["text"] for p in event["candidates"][0]["content"].get("parts", []))
    return out


@pytest.mark.parametrize(("path", "template"), REQUESTS, ids=[p for p, _ in REQUESTS])
async def test_deterministic_per_request(
    http: httpx.AsyncClient, path: str, template: dict[str, Any]
) -> None:
    first_body = body_for(template, "Tell me something nice.")
    first = await http.post(path, content=first_body)
    again = await http.post(path, content=first_body)
    other = await http.post(path, content=body_for(template, "Something else, please."))
    assert first.status_code == 200
    assert first.content == again.content
    texts = delta_texts(path, first.content)
    assert len(texts) == TOKENS
    assert "".join(texts) == text_for(first_body, TOKENS)
    assert "".join(delta_texts(path, other.content)) != "".join(texts)


async def test_events_are_paced_not_burst(http: httpx.AsyncClient) -> None:
    interval = 0.05
    headers = {TOKENS_HEADER: "6", INTERVAL_HEADER: "50"}
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    arrivals: list[float] = []
    async with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
    assert len(arrivals) == 1 + 6 + 1 + 1  # role, tokens, finish, [DONE]
    assert arrivals[-1] - arrivals[0] >= 4 * interval
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert sum(gap >= interval / 2 for gap in gaps) >= 4


async def test_header_knobs_and_max_tokens(http: httpx.AsyncClient) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    three = await http.post("/v1/chat/completions", json=chat, headers={TOKENS_HEADER: "3"})
    assert len(delta_texts("/v1/chat/completions", three.content)) == 3
    assert json.loads(sse_data(three.content)[-2])["choices"][0]["finish_reason"] == "stop"
    limited = await http.post("/v1/chat/completions", json={**chat, "max_completion_tokens": 2})
    assert len(delta_texts("/v1/chat/completions", limited.content)) == 2
    assert json.loads(sse_data(limited.content)[-2])["choices"][0]["finish_reason"] == "length"
    claude = {"model": "m", "max_tokens": 2, "messages": chat["messages"], "stream": True}
    events = [
        json.loads(d) for d in sse_data((await http.post("/v1/messages", json=claude)).content)
    ]
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"
    responses = await http.post(
        "/v1/responses", json={"model": "m", "input": "Hi", "stream": True, "max_output_tokens": 2}
    )
    assert json.loads(sse_data(responses.content)[-1])["type"] == "response.incomplete"
    for bad in ({TOKENS_HEADER: "many"}, {INTERVAL_HEADER: "-5"}):
        refused = await http.post("/v1/chat/completions", json=chat, headers=bad)
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "invalid_request_error"


async def test_counts_health_models_and_unknown_paths(mock: Mock, http: httpx.AsyncClient) -> None:
    assert (await http.get("/health")).json() == {"status": "ok"}
    models = (await http.get("/v1/models")).json()
    assert models["object"] == "list" and models["data"]
    missing = await http.post("/v2/nowhere", json={})
    assert missing.status_code == 404
    assert set(missing.json()["error"]) == {"message", "type", "param", "code"}
    assert (await http.get("/v1/responses")).status_code == 405
    bad_json = await http.post("/v1/messages", content=b"{not json")
    assert bad_json.status_code == 400 and bad_json.json()["type"] == "error"
    assert mock.counts == {
        "/health": 1,
        "/v1/models": 1,
        "/v2/nowhere": 1,
        "/v1/responses": 1,
        "/v1/messages": 1,
    }


async def test_get_chat_completions_streams_the_same_answer_as_the_post(
    mock: Mock, http: httpx.AsyncClient
) -> None:
    # For a browser's EventSource, which can only GET: the answer a POST with that one
    # user message and ``stream: true`` gets, byte for byte.
    got = await http.get("/v1/chat/completions", params={"q": "Hello there", "model": "m"})
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Hello there"}]}
    posted = await http.post("/v1/chat/completions", json=body)
    assert got.status_code == 200 and got.headers["content-type"] == "text/event-stream"
    assert got.content == posted.content and got.content.endswith(b"data: [DONE]\n\n")


async def test_client_going_away_stops_the_stream_quietly(
    mock: Mock, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    # 1000 tokens at 20 ms would take 20 s if the mock did not notice the client leaving.
    headers = {TOKENS_HEADER: "1000", INTERVAL_HEADER: "20"}
    async with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                break
    async with asyncio.timeout(5):
        await mock.handler_done.wait()
    assert mock.finished == [None]  # the handler returned, it did not raise
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert (await http.get("/health")).status_code == 200
