"""Kind-aware faults on tool calls, sequence numbers, late events and resets, through the
live proxy in front of the mock, as each official client sees them.

tests/e2e/test_providers_e2e.py covers the text-stream basics (a dropped text delta, a
duplicated terminal, cuts before the terminal, an injected error, a stall). This file
covers what it leaves out: tool-call fragments dropped or repeated (openai chat,
anthropic tool_use), a wrong Responses ``sequence_number``, a delta after the
terminal event (Anthropic, raw SSE and SDK), and a TCP reset before the terminal event
(anthropic, google-genai).

Every faulted run is compared with the same request passed through
(``X-Chaos-Scenario: none``): the mock answers a given body with the same bytes every
time, so expected fragments and texts come from that reference, never typed in.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import anthropic
import httpx
import httpx2
import jiter
import openai
import pydantic
import pytest
from anthropic.types import InputJSONDelta, RawContentBlockDeltaEvent, TextDelta, ToolUseBlock
from google import genai
from google.genai import types as genai_types
from httpx_sse import aconnect_sse
from openai.lib.streaming.chat import ChunkEvent
from openai.types.responses import ResponseTextDeltaEvent

from tests.support.proxies import LogCapture, ProxyFactory

#: Mock knobs, per request: short answers, no pacing.
MOCK_HEADERS = {"X-Mock-Tokens": "4", "X-Mock-Interval-Ms": "0"}
PROMPT = "What is the weather like?"

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "location": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location", "unit"],
}


class GetWeather(pydantic.BaseModel):
    """The same tool as a strict pydantic function tool (openai.pydantic_function_tool)."""

    location: str
    unit: Literal["celsius", "fahrenheit"]


#: A text delta for block 0, sent after message_stop.
LATE_DELTA = {
    "type": "content_block_delta",
    "index": 0,
    "delta": {"type": "text_delta", "text": " late"},
}

SCENARIOS = {
    "drop": "faults:\n  - drop: {kind: tool_delta, nth: 2}\n",
    "duplicate": "faults:\n  - duplicate: {kind: tool_delta, nth: 2}\n",
    "responses-sequence": (
        "faults:\n  - mutate: {type: response.output_text.delta, nth: 2,"
        " set: {sequence_number: 999}}\n"
    ),
    "late-delta": (
        "faults:\n  - inject: {after: terminal, event: {event: content_block_delta, data: "
        + json.dumps(LATE_DELTA)
        + "}}\n"
    ),
    "reset-before-terminal": "faults:\n  - cut: {before: terminal, how: reset}\n",
}

# google-genai subclasses aiohttp.ClientSession, which aiohttp warns about; not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession:DeprecationWarning"
)


@dataclass
class Lab:
    url: str
    log: LogCapture

    def headers(self, scenario: str) -> dict[str, str]:
        return {**MOCK_HEADERS, "X-Chaos-Scenario": scenario}

    def openai_client(self, scenario: str) -> openai.AsyncOpenAI:
        """The OpenAI SDK through the proxy under ``scenario``, never retrying."""
        return openai.AsyncOpenAI(
            base_url=self.url + "/v1",
            api_key="test",
            max_retries=0,
            default_headers=self.headers(scenario),
        )

    def anthropic_client(self, scenario: str) -> anthropic.AsyncAnthropic:
        """The Anthropic SDK through the proxy under ``scenario``, never retrying."""
        return anthropic.AsyncAnthropic(
            base_url=self.url, api_key="test", max_retries=0, default_headers=self.headers(scenario)
        )

    async def ran(self, before: int, scenario: str) -> dict[str, Any]:
        """The response_end line of the one request made since log line ``before``
        (exactly one: no client retried)."""
        [request] = [ln for ln in self.log.lines[before:] if ln["event"] == "request"]
        assert request["scenario"] == (None if scenario == "none" else scenario)
        return await self.log.wait_end(request["request_id"])


@pytest.fixture
async def lab(make_proxy: ProxyFactory, log_capture: LogCapture) -> Lab:
    proxy = await make_proxy(scenarios=SCENARIOS)
    return Lab(proxy.url, log_capture)


# --------------------------------------------------------------------------- tool calls


@dataclass
class ToolRun:
    """One streamed tool call, as the SDK's stream helper reported it."""

    #: The argument fragments the client yielded, in order (the head's "" included).
    fragments: list[str] = field(default_factory=list)
    #: The SDK's assembled arguments (openai: the string; anthropic: the parsed input).
    arguments: str | None = None
    parsed: object = None
    error: Exception | None = None
    end: dict[str, Any] = field(default_factory=dict)


ToolClient = Callable[[Lab, str, ToolRun], Awaitable[None]]


async def openai_plain(lab: Lab, scenario: str, run: ToolRun) -> None:
    await _openai_tool_call(lab, scenario, run, strict=False)


async def openai_strict(lab: Lab, scenario: str, run: ToolRun) -> None:
    await _openai_tool_call(lab, scenario, run, strict=True)


async def _openai_tool_call(lab: Lab, scenario: str, run: ToolRun, *, strict: bool) -> None:
    tool: Any = (
        openai.pydantic_function_tool(GetWeather, name="get_weather")
        if strict
        else {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}
    )
    async with (
        lab.openai_client(scenario) as client,
        client.chat.completions.stream(
            model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}], tools=[tool]
        ) as stream,
    ):
        async for event in stream:
            if isinstance(event, ChunkEvent):
                for choice in event.chunk.choices:
                    for call in choice.delta.tool_calls or []:
                        assert call.function is not None
                        run.fragments.append(call.function.arguments or "")
        completion = await stream.get_final_completion()
    [tool_call] = completion.choices[0].message.tool_calls or []
    run.arguments = tool_call.function.arguments
    run.parsed = tool_call.function.parsed_arguments


async def anthropic_tool_use(lab: Lab, scenario: str, run: ToolRun) -> None:
    async with (
        lab.anthropic_client(scenario) as client,
        client.messages.stream(
            model="claude-haiku-4-5",
            max_tokens=256,
            messages=[{"role": "user", "content": PROMPT}],
            tools=[{"name": "get_weather", "input_schema": WEATHER_SCHEMA}],
        ) as stream,
    ):
        async for event in stream:
            if isinstance(event, RawContentBlockDeltaEvent) and isinstance(
                event.delta, InputJSONDelta
            ):
                run.fragments.append(event.delta.partial_json)
        message = await stream.get_final_message()
    [block] = message.content
    assert isinstance(block, ToolUseBlock)
    run.parsed = block.input


async def tool_run(lab: Lab, client: ToolClient, scenario: str) -> ToolRun:
    run = ToolRun()
    before = len(lab.log.lines)
    try:
        await client(lab, scenario, run)
    except Exception as exc:
        run.error = exc
    run.end = await lab.ran(before, scenario)
    return run


def faulted(fragments: list[str], op: str, at: int) -> list[str]:
    """``fragments`` with the one at ``at`` dropped or sent twice."""
    if op == "drop":
        return fragments[:at] + fragments[at + 1 :]
    return fragments[: at + 1] + fragments[at:]


#: ``{kind: tool_delta, nth: 2}`` is the second fragment (the first is the call's head,
#: with arguments "", for both providers).
AT = 1
ops = pytest.mark.parametrize("op", ["drop", "duplicate"])


async def reference(lab: Lab, client: ToolClient) -> ToolRun:
    ref = await tool_run(lab, client, "none")
    assert ref.error is None
    assert ref.fragments[0] == "" and len(ref.fragments) > 4
    assert ref.end["outcome"] == "completed" and "faults_applied" not in ref.end
    return ref


@ops
async def test_openai_chat_tool_fragment_plain_tool(lab: Lab, op: str) -> None:
    """A non-strict tool: the stream helper assembles the arguments without a word; the
    JSON it hands over is broken."""
    ref = await reference(lab, openai_plain)
    assert ref.arguments == "".join(ref.fragments)
    assert isinstance(json.loads(ref.arguments), dict)
    assert ref.parsed is None  # non-strict tools are not parsed by the SDK

    run = await tool_run(lab, openai_plain, op)
    assert run.end["faults_applied"] == {op: 1}
    assert run.end["outcome"] == "completed"
    assert run.error is None
    expected = faulted(ref.fragments, op, AT)
    assert run.fragments == expected
    # Exactly that fragment is missing, or there twice.
    head, piece, tail = (
        "".join(ref.fragments[:AT]),
        ref.fragments[AT],
        "".join(ref.fragments[AT + 1 :]),
    )
    assert run.arguments == head + (piece * 2 if op == "duplicate" else "") + tail
    assert run.parsed is None
    # The caller's json.loads is where it breaks.
    with pytest.raises(json.JSONDecodeError):
        json.loads(run.arguments)


def broke_at_the_damage(run: ToolRun, ref: ToolRun, op: str) -> tuple[str, ValueError]:
    """``op`` applied once, and the client's parser raised a bare ValueError at the
    fragment right after the damage, before yielding it: the buffer it parsed then and
    what the partial-JSON parser says of that buffer."""
    assert run.end["faults_applied"] == {op: 1}
    expected = faulted(ref.fragments, op, AT)
    after = AT + (2 if op == "duplicate" else 0)  # the first fragment after the damage
    assert run.fragments == expected[:after]
    assert type(run.error) is ValueError
    buffer = "".join(expected[: after + 1])
    with pytest.raises(ValueError) as parsed:
        jiter.from_json(buffer.encode(), partial_mode=True)
    return buffer, parsed.value


@ops
async def test_openai_chat_tool_fragment_strict_tool(lab: Lab, op: str) -> None:
    """A strict pydantic tool: the helper parses the arguments as they stream, and the
    parser's bare ValueError escapes (not an openai error) with the fragment right after
    the damage, before that chunk is yielded."""
    ref = await reference(lab, openai_strict)
    assert ref.parsed == GetWeather.model_validate_json("".join(ref.fragments))

    run = await tool_run(lab, openai_strict, op)
    _, parsed = broke_at_the_damage(run, ref, op)
    assert not isinstance(run.error, openai.OpenAIError)
    assert str(run.error) == str(parsed)  # the partial-JSON parser's own message
    assert run.arguments is None


@ops
async def test_anthropic_tool_use_fragment(lab: Lab, op: str) -> None:
    """The anthropic helper parses ``partial_json`` as it streams: a lost or repeated
    fragment makes it raise a plain ValueError (not an anthropic error) that quotes the
    broken JSON, at the fragment right after the damage; no final message."""
    ref = await reference(lab, anthropic_tool_use)
    assert ref.parsed == json.loads("".join(ref.fragments))

    run = await tool_run(lab, anthropic_tool_use, op)
    buffer, parsed = broke_at_the_damage(run, ref, op)
    assert not isinstance(run.error, anthropic.AnthropicError)
    assert str(run.error) == (
        "Unable to parse tool parameter JSON from model. Please retry your request or "
        f"adjust your prompt. Error: {parsed}. JSON: {buffer}"
    )
    assert run.error is not None
    assert type(run.error.__cause__) is ValueError
    assert run.parsed is None


# --------------------------------------------------------------------------- responses


@dataclass
class ResponsesRun:
    events: list[tuple[str, int]] = field(default_factory=list)
    deltas: list[str] = field(default_factory=list)
    final_text: str | None = None
    end: dict[str, Any] = field(default_factory=dict)


async def responses_run(lab: Lab, scenario: str) -> ResponsesRun:
    run = ResponsesRun()
    before = len(lab.log.lines)
    async with (
        lab.openai_client(scenario) as client,
        client.responses.stream(model="gpt-4o-mini", input=PROMPT) as stream,
    ):
        async for event in stream:
            run.events.append((event.type, event.sequence_number))
            if isinstance(event, ResponseTextDeltaEvent):
                run.deltas.append(event.delta)
        run.final_text = (await stream.get_final_response()).output_text
    run.end = await lab.ran(before, scenario)
    return run


async def test_responses_wrong_sequence_number_goes_unnoticed(lab: Lab) -> None:
    """The openai SDK passes ``sequence_number`` through and never checks it: a jump to
    999 in the middle of the deltas raises nothing and changes no text."""
    ref = await responses_run(lab, "none")
    assert [seq for _, seq in ref.events] == list(range(len(ref.events)))
    run = await responses_run(lab, "responses-sequence")
    assert run.end["faults_applied"] == {"mutate": 1}
    second = [i for i, (kind, _) in enumerate(ref.events) if kind == "response.output_text.delta"][
        1
    ]
    expected = list(ref.events)
    expected[second] = (ref.events[second][0], 999)
    assert run.events == expected
    assert run.deltas == ref.deltas
    assert run.final_text == ref.final_text == "".join(ref.deltas)


# --------------------------------------------------------------------------- late delta


def anthropic_body() -> dict[str, Any]:
    return {
        "model": "claude-haiku-4-5",
        "max_tokens": 256,
        "stream": True,
        "messages": [{"role": "user", "content": PROMPT}],
    }


async def raw_sse(lab: Lab, scenario: str) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    before = len(lab.log.lines)
    async with (
        httpx.AsyncClient(base_url=lab.url, headers=lab.headers(scenario)) as http,
        aconnect_sse(http, "POST", "/v1/messages", json=anthropic_body()) as source,
    ):
        events = [(sse.event, sse.data) async for sse in source.aiter_sse()]
    return events, await lab.ran(before, scenario)


async def sdk_text(lab: Lab, scenario: str) -> tuple[list[str], str]:
    """The event types the anthropic helper yields, and its final message's text."""
    async with (
        lab.anthropic_client(scenario) as client,
        client.messages.stream(
            **{k: v for k, v in anthropic_body().items() if k != "stream"}
        ) as stream,
    ):
        types: list[str] = [event.type async for event in stream]
        message = await stream.get_final_message()
    [block] = message.content
    assert block.type == "text"
    return types, block.text


async def test_anthropic_delta_after_message_stop(lab: Lab) -> None:
    """An event after ``message_stop`` reaches a raw SSE consumer as one more event; the
    anthropic helper does not stop at ``message_stop`` either: it yields the late delta
    and appends its text to the final message."""
    ref, _ = await raw_sse(lab, "none")
    assert ref[-1][0] == "message_stop"
    events, end = await raw_sse(lab, "late-delta")
    assert end["faults_applied"] == {"inject": 1}
    late = ("content_block_delta", json.dumps(LATE_DELTA, separators=(",", ":")))
    assert events == [*ref, late]

    ref_types, ref_text = await sdk_text(lab, "none")
    types, text = await sdk_text(lab, "late-delta")
    assert ref_types[-1] == "message_stop"
    assert types == [*ref_types, "content_block_delta", "text"]
    delta = LATE_DELTA["delta"]
    assert isinstance(delta, dict)
    assert text == ref_text + delta["text"]


# --------------------------------------------------------------------------- reset


@dataclass
class Seen:
    items: list[str] = field(default_factory=list)
    error: Exception | None = None
    end: dict[str, Any] = field(default_factory=dict)


async def anthropic_items(lab: Lab, scenario: str, seen: Seen) -> None:
    async with (
        lab.anthropic_client(scenario) as client,
        client.messages.stream(
            **{k: v for k, v in anthropic_body().items() if k != "stream"}
        ) as stream,
    ):
        async for event in stream:
            text = (
                event.delta.text
                if isinstance(event, RawContentBlockDeltaEvent)
                and isinstance(event.delta, TextDelta)
                else ""
            )
            seen.items.append(f"{event.type}:{text}")


async def gemini_items(lab: Lab, scenario: str, seen: Seen) -> None:
    client = genai.Client(
        api_key="test",
        http_options=genai_types.HttpOptions(base_url=lab.url, headers=lab.headers(scenario)),
    )
    try:
        stream = await client.aio.models.generate_content_stream(
            model="gemini-2.0-flash", contents=PROMPT
        )
        async for chunk in stream:
            finish = chunk.candidates[0].finish_reason if chunk.candidates else None
            seen.items.append(f"{chunk.text}:{finish}")
    finally:
        await client.aio.aclose()


@dataclass(frozen=True)
class ResetCase:
    name: str
    items: Callable[[Lab, str, Seen], Awaitable[None]]
    #: What the client raises when the proxy resets the connection before the terminal.
    error: type[Exception]
    #: The item that means "finished" (message_stop; the finishReason chunk).
    is_terminal: Callable[[str], bool]


RESETS = [
    # anthropic >= 2.17 wraps it (its cause: httpx2's ReadError, not the
    # RemoteProtocolError an abort gives); earlier versions let the ReadError through.
    ResetCase(
        "anthropic",
        anthropic_items,
        anthropic.APIConnectionError,
        lambda i: i.startswith("message_stop"),
    ),
    # Not a google.genai error: aiohttp's own, the reset named in its message.
    ResetCase(
        "gemini", gemini_items, aiohttp.ClientPayloadError, lambda i: not i.endswith(":None")
    ),
]


@pytest.mark.parametrize("case", RESETS, ids=[c.name for c in RESETS])
async def test_reset_before_terminal(lab: Lab, case: ResetCase) -> None:
    async def observe(scenario: str) -> Seen:
        seen = Seen()
        before = len(lab.log.lines)
        try:
            await case.items(lab, scenario, seen)
        except Exception as exc:
            seen.error = exc
        seen.end = await lab.ran(before, scenario)
        return seen

    ref = await observe("none")
    assert ref.error is None and case.is_terminal(ref.items[-1])
    run = await observe("reset-before-terminal")
    assert run.end["outcome"] == "cut"
    assert run.end["faults_applied"] == {"cut": 1}
    assert type(run.error) is case.error, repr(run.error)
    if isinstance(run.error, aiohttp.ClientPayloadError):
        assert "ConnectionResetError" in str(run.error)
    if isinstance(run.error, anthropic.APIConnectionError):
        assert type(run.error.__cause__) is httpx2.ReadError
    # Whatever arrived is the reference up to, never including, the terminal. (A reset
    # may discard bytes the client had not read yet, so it can be fewer.)
    assert run.items == ref.items[: len(run.items)]
    assert not any(case.is_terminal(item) for item in run.items)
