"""The realtime clients the WebSocket tests drive in-process: the ``websockets``
library and the ``openai`` SDK's realtime client (``client.realtime.connect``, which
connects to ``websocket_base_url`` with no account), each sending one user message and
``response.create``, then assembling the text deltas until ``response.done``; and the
mock's own answer to the same conversation, as the mock module renders it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field

import openai
import orjson
import websockets

from chaosproxy.mock.common import Knobs, MockCall
from chaosproxy.mock.openai_realtime import Conversation, serve

PROMPT = "What is the weather like?"
#: The mock's knobs, per connection: short answers, no pacing.
MOCK_HEADERS = {"X-Mock-Tokens": "4", "X-Mock-Interval-Ms": "0"}
ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}


@dataclass
class Seen:
    """What a client made of one response: the text it assembled, the event types it
    read, whether it read ``response.done``, and what it raised (type, close code)."""

    text: str = ""
    types: list[str] = field(default_factory=list)
    done: bool = False
    raised: str | None = None
    code: int | None = None
    reason: str | None = None


def _headers(scenario: str | None) -> dict[str, str]:
    return {**MOCK_HEADERS, **({"X-Chaos-Scenario": scenario} if scenario else {})}


def _read(seen: Seen, event: dict[str, object]) -> bool:
    kind = str(event.get("type"))
    seen.types.append(kind)
    if kind == "response.output_text.delta":
        seen.text += str(event["delta"])
    seen.done = kind == "response.done"
    return seen.done


def _closed(seen: Seen, exc: websockets.ConnectionClosed) -> None:
    seen.raised = type(exc).__name__
    frame = exc.rcvd
    seen.code = frame.code if frame is not None else 1006
    seen.reason = frame.reason if frame is not None else None


async def with_websockets(url: str, scenario: str | None, wait: float = 5.0) -> Seen:
    """The ``websockets`` library at ``url`` (``ws://HOST:PORT``)."""
    seen = Seen()
    try:
        async with asyncio.timeout(wait):
            async with websockets.connect(
                url + "/v1/realtime?model=gpt-realtime", additional_headers=_headers(scenario)
            ) as ws:
                await ws.send(json.dumps({"type": "conversation.item.create", "item": ITEM}))
                await ws.send(json.dumps({"type": "response.create"}))
                async for message in ws:
                    if _read(seen, json.loads(message)):
                        break
    except websockets.ConnectionClosed as exc:
        _closed(seen, exc)
    except TimeoutError:
        seen.raised = "TimeoutError"
    return seen


async def with_openai(url: str, scenario: str | None, wait: float = 5.0) -> Seen:
    """The ``openai`` SDK's realtime client, its ``websocket_base_url`` at ``url``."""
    seen = Seen()
    client = openai.AsyncOpenAI(
        api_key="sk-test-realtime",
        base_url=url.replace("ws://", "http://") + "/v1",
        websocket_base_url=url + "/v1",
    )
    try:
        async with asyncio.timeout(wait):
            async with client.realtime.connect(
                model="gpt-realtime", extra_headers=_headers(scenario)
            ) as conn:
                await conn.conversation.item.create(item=ITEM)  # type: ignore[arg-type]
                await conn.response.create()
                async for event in conn:
                    if _read(seen, event.model_dump()):
                        break
    except websockets.ConnectionClosed as exc:
        _closed(seen, exc)
    except TimeoutError:
        seen.raised = "TimeoutError"
    return seen


Client = Callable[[str, str | None, float], Coroutine[None, None, Seen]]
CLIENTS: dict[str, Client] = {"websockets": with_websockets, "openai": with_openai}


def mock_text(tokens: int = 4, model: str = "gpt-realtime") -> str:
    """The text the mock answers the clients' conversation with (no fixture)."""
    conversation = Conversation(model)
    conversation.receive(orjson.dumps({"type": "conversation.item.create", "item": ITEM}).decode())
    _, payload = conversation.receive('{"type":"response.create"}')
    assert payload is not None
    call = MockCall(orjson.dumps(payload), payload, Knobs(tokens, 0.0), None, {}, {})
    text = ""
    for chunk in serve(call).chunks:
        event = orjson.loads(chunk)
        if event["type"] == "response.output_text.done":
            text = event["text"]
    return text


__all__ = ["CLIENTS", "MOCK_HEADERS", "PROMPT", "Client", "Seen", "mock_text"]
