"""The mock's Bedrock routes through real sockets, as boto3's ``bedrock-runtime`` sees
them, and byte for byte as botocore's own decoder reads them."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import boto3
import httpx
import pytest
from aiohttp import web
from botocore.config import Config
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import ClientError, EventStreamError

from chaosproxy.mock import MockFixtures, create_mock_app
from chaosproxy.mock.corpus import take_tokens
from chaosproxy.scenario import parse_fixtures

TOKENS = 9
CLAUDE = "anthropic.claude-3-5-haiku-20241022-v1:0"
NOVA = "amazon.nova-lite-v1:0"
WEATHER: Any = {
    "toolSpec": {
        "name": "get_weather",
        "inputSchema": {
            "json": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            }
        },
    }
}


def tokens_for(body: bytes, tokens: int = TOKENS) -> list[str]:
    """The text tokens the mock promises for this exact body (picked by its sha256)."""
    return take_tokens(int.from_bytes(hashlib.sha256(body).digest()[:8], "big"), tokens)


def text_for(body: bytes, tokens: int = TOKENS) -> str:
    return "".join(tokens_for(body, tokens))


@pytest.fixture
async def mock_url() -> AsyncIterator[tuple[str, MockFixtures]]:
    fixtures = MockFixtures()
    runner = web.AppRunner(create_mock_app(tokens=TOKENS, interval=0.0, fixtures=fixtures))
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}", fixtures
    finally:
        await runner.cleanup()


class Client:
    """A boto3 ``bedrock-runtime`` client at ``url`` with dummy credentials, keeping
    the bodies it sends."""

    def __init__(self, url: str) -> None:
        self.sent: list[bytes] = []
        self.client = boto3.client(
            "bedrock-runtime",
            region_name="us-east-1",
            endpoint_url=url,
            aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
            aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            config=Config(retries={"max_attempts": 1}),
        )
        self.client.meta.events.register("before-send.bedrock-runtime.*", self._keep)

    def _keep(self, request: Any, **_: Any) -> None:
        self.sent.append(bytes(request.body))

    async def run(self, call: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(call)


def converse_events(client: Client, model: str = CLAUDE, **options: Any) -> list[dict[str, Any]]:
    reply = client.client.converse_stream(
        modelId=model,
        messages=[{"role": "user", "content": [{"text": options.pop("prompt", "Hi there")}]}],
        **options,
    )
    return list(reply["stream"])


def invoke_chunks(client: Client, model: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    reply = client.client.invoke_model_with_response_stream(modelId=model, body=json.dumps(body))
    return [json.loads(event["chunk"]["bytes"]) for event in reply["body"]]


async def test_converse_stream_text(mock_url: tuple[str, MockFixtures]) -> None:
    client = Client(mock_url[0])
    events = await client.run(lambda: converse_events(client))
    assert [next(iter(e)) for e in events] == [
        "messageStart",
        *["contentBlockDelta"] * TOKENS,
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    (body,) = client.sent
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events[1 : 1 + TOKENS])
    assert text == text_for(body)
    assert events[0] == {"messageStart": {"role": "assistant"}}
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    usage = events[-1]["metadata"]["usage"]
    assert usage["outputTokens"] == TOKENS
    assert usage["totalTokens"] == usage["inputTokens"] + TOKENS


async def test_converse_stream_tool_call_as_tool_use_deltas(
    mock_url: tuple[str, MockFixtures],
) -> None:
    client = Client(mock_url[0])
    events = await client.run(
        lambda: converse_events(
            client,
            NOVA,
            prompt="Weather in Kyoto?",
            toolConfig={"tools": [WEATHER], "toolChoice": {"tool": {"name": "get_weather"}}},
        )
    )
    start = events[1]["contentBlockStart"]
    assert start["contentBlockIndex"] == 0
    assert start["start"]["toolUse"]["name"] == "get_weather"
    assert start["start"]["toolUse"]["toolUseId"].startswith("tooluse_")
    fragments = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "contentBlockDelta" in e
    ]
    assert len(fragments) > 3  # streamed in pieces, not whole
    arguments = json.loads("".join(fragments))
    assert set(arguments) == {"city", "days"} and isinstance(arguments["days"], int)
    assert events[-3] == {"contentBlockStop": {"contentBlockIndex": 0}}
    assert events[-2] == {"messageStop": {"stopReason": "tool_use"}}


async def test_converse_stream_max_tokens_and_a_tool_result(
    mock_url: tuple[str, MockFixtures],
) -> None:
    client = Client(mock_url[0])
    events = await client.run(
        lambda: converse_events(
            client,
            inferenceConfig={"maxTokens": 3},
            toolConfig={"tools": [WEATHER]},
            prompt="again",
        )
    )
    # (a tool on offer, the first turn calls it; a tool result is answered with text)
    assert "contentBlockStart" in events[1]
    turn: Any = [
        {"role": "user", "content": [{"text": "Weather?"}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {}}}],
        },
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "18 C"}]}}],
        },
    ]
    reply = await client.run(
        lambda: list(
            client.client.converse_stream(
                modelId=CLAUDE,
                messages=turn,
                toolConfig={"tools": [WEATHER]},
                inferenceConfig={"maxTokens": 3},
            )["stream"]
        )
    )
    deltas = [e["contentBlockDelta"]["delta"]["text"] for e in reply if "contentBlockDelta" in e]
    assert deltas == tokens_for(client.sent[-1], 3)
    assert reply[-2] == {"messageStop": {"stopReason": "max_tokens"}}


async def test_invoke_anthropic_model_streams_messages_events(
    mock_url: tuple[str, MockFixtures],
) -> None:
    client = Client(mock_url[0])
    request = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "Plan my week."}],
    }
    chunks = await client.run(lambda: invoke_chunks(client, CLAUDE, request))
    assert [c["type"] for c in chunks] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * TOKENS,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    (body,) = client.sent
    assert "".join(c["delta"]["text"] for c in chunks[2 : 2 + TOKENS]) == text_for(body)
    assert chunks[0]["message"]["model"] == CLAUDE
    metrics = chunks[-1]["amazon-bedrock-invocationMetrics"]
    assert metrics["outputTokenCount"] == TOKENS
    assert metrics["inputTokenCount"] == chunks[0]["message"]["usage"]["input_tokens"]


async def test_invoke_nova_model_streams_converse_shaped_chunks(
    mock_url: tuple[str, MockFixtures],
) -> None:
    client = Client(mock_url[0])
    request = {"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}
    chunks = await client.run(lambda: invoke_chunks(client, NOVA, request))
    assert [next(iter(c)) for c in chunks] == [
        "messageStart",
        *["contentBlockDelta"] * TOKENS,
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    text = "".join(c["contentBlockDelta"]["delta"]["text"] for c in chunks[1 : 1 + TOKENS])
    assert text == text_for(client.sent[0])
    assert chunks[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] == TOKENS


async def test_invoke_other_models_and_bad_bodies_are_validation_exceptions(
    mock_url: tuple[str, MockFixtures],
) -> None:
    client = Client(mock_url[0])
    with pytest.raises(ClientError) as caught:
        await client.run(lambda: invoke_chunks(client, "meta.llama3-8b-instruct-v1:0", {}))
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert "not 'meta.llama3-8b-instruct-v1:0'" in caught.value.response["Error"]["Message"]
    async with httpx.AsyncClient(base_url=mock_url[0]) as http:
        reply = await http.post("/model/m/converse-stream", content=b"{not json")
        assert reply.status_code == 400
        assert reply.json()["__type"] == "ValidationException"
        assert reply.json()["message"].startswith("The request body is not valid JSON")
        reply = await http.post("/model/m/converse-stream", json={"no": "messages"})
        assert reply.json() == {
            "__type": "ValidationException",
            "message": "messages: Field required",
        }
        reply = await http.post("/model/m/converse", json={})
        assert reply.status_code == 404


async def test_a_fixtures_error_is_an_exception_message_mid_stream(
    mock_url: tuple[str, MockFixtures],
) -> None:
    url, fixtures = mock_url
    fixtures.add(
        parse_fixtures(
            "fixtures:\n"
            "  - name: breaks\n"
            "    text: one two three four five\n"
            "    error: {after: 2, type: throttlingException, message: Too many requests}\n",
            "<test>",
        )
    )
    client = Client(url)
    seen: list[dict[str, Any]] = []

    def read() -> None:
        reply = client.client.converse_stream(
            modelId=CLAUDE, messages=[{"role": "user", "content": [{"text": "x"}]}]
        )
        for event in reply["stream"]:
            seen.append(event)

    with pytest.raises(EventStreamError) as caught:
        await client.run(read)
    assert caught.value.response["Error"] == {
        "Code": "throttlingException",
        "Message": "Too many requests",
    }
    assert [e["contentBlockDelta"]["delta"]["text"] for e in seen[1:]] == ["one", " two"]


async def test_the_wire_is_what_botocore_decodes(mock_url: tuple[str, MockFixtures]) -> None:
    """Every message of the raw body: both CRCs right (botocore checks), AWS's three
    headers, a JSON payload; a chunk's bytes are base64."""
    async with httpx.AsyncClient(base_url=mock_url[0]) as http:
        reply = await http.post(
            f"/model/{CLAUDE}/invoke-with-response-stream",
            json={"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert reply.headers["content-type"] == "application/vnd.amazon.eventstream"
    buffer = EventStreamBuffer()
    buffer.add_data(reply.content)
    messages = list(buffer)
    assert sum(m.prelude.total_length for m in messages) == len(reply.content)
    for message in messages:
        assert message.headers == {
            ":event-type": "chunk",
            ":content-type": "application/json",
            ":message-type": "event",
        }
        json.loads(base64.b64decode(json.loads(message.payload)["bytes"]))
