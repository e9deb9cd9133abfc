"""Mock fixtures, the pure layer: what a request asks (every provider's body), a
fixture's validation (located problems, did-you-mean), which fixture answers, and how
the mock renders one answer in each provider's wire format, checked against the real
captures in tests/fixtures/providers/ (the events and their fields, how tool arguments
are fragmented, the terminal event and usage, the in-stream error) and, where no
capture has the case (Responses and Gemini function calls, Ollama tool calls), against
the official SDKs' own types."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter

from chaosproxy.core.llm_request import Message, read_request
from chaosproxy.mock import anthropic, gemini, ollama, openai_chat, openai_responses
from chaosproxy.mock.common import Knobs, MockResponse
from chaosproxy.mock.fixtures import MAX_ADDED, MockFixtures, TooManyFixtures
from chaosproxy.scenario import (
    Fixture,
    ScenarioError,
    load_fixture_files,
    parse_fixtures,
    parse_scenario,
)
from tests.support.repo import fixture_bytes

KNOBS = Knobs(tokens=24, interval=0.0)

# --------------------------------------------------------------------------- helpers


def events(body: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) of each SSE event, LF or CRLF framed (an independent reading:
    no chaosproxy framer involved)."""
    text = body.decode().replace("\r\n", "\n")
    out: list[tuple[str | None, str]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        out.append((name, "\n".join(data)))
    return out


def payloads(body: bytes) -> list[Any]:
    return [json.loads(data) for _, data in events(body) if data != "[DONE]"]


def fixture(text: str) -> Fixture:
    (parsed,) = parse_fixtures(text, "<test>")
    return parsed


def render(provider: str, fx: Fixture | None, payload: dict[str, Any]) -> MockResponse:
    body = orjson.dumps(payload)
    if provider == "openai-chat":
        return openai_chat.respond(body, payload, KNOBS, fx)
    if provider == "openai-responses":
        return openai_responses.respond(body, payload, KNOBS, fx)
    if provider == "anthropic":
        return anthropic.respond(body, payload, KNOBS, fx)
    if provider == "gemini":
        action = "streamGenerateContent" if payload.pop("stream", True) else "generateContent"
        return gemini.respond(
            body, payload, KNOBS, model="gemini-2.0-flash", action=action, alt="sse", fixture=fx
        )
    return ollama.respond(body, payload, KNOBS, endpoint="chat", fixture=fx)


REQUESTS: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "weather?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    "openai-responses": {"model": "gpt-4o", "input": "weather?", "stream": True},
    "anthropic": {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "weather?"}],
        "stream": True,
    },
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "weather?"}]}]},
    "ollama": {"model": "llama3.2", "messages": [{"role": "user", "content": "weather?"}]},
}


def streamed(provider: str, fx: Fixture) -> bytes:
    return b"".join(render(provider, fx, dict(REQUESTS[provider])).chunks)


def shape(value: Any) -> Any:
    """The structure of a JSON value: mappings with their keys (in order), lists item
    by item, scalars as their type."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def collapse(names: list[str]) -> list[str]:
    """Runs of the same name as one (how many deltas differs, not their place)."""
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


# --------------------------------------------------------------------------- requests


def test_every_providers_request_is_read_the_same_way() -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    chat = read_request(
        "/v1/chat/completions",
        {
            "model": "gpt-4o",
            "stream": True,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            ],
            "tools": [tool],
        },
    )
    assert chat.model == "gpt-4o" and chat.stream is True
    assert chat.messages == (
        Message("system", "Be brief."),
        Message("user", "Weather in Paris?"),
    )
    assert chat.tools == ("get_weather",)
    assert chat.last_user_message == "Weather in Paris?"

    claude = read_request(
        "/v1/messages",
        {
            "model": "claude-sonnet-4-5",
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "content": "18 C"}]},
            ],
            "tools": [{"name": "get_weather", "input_schema": {}}],
        },
    )
    assert [m.role for m in claude.messages] == ["system", "user", "assistant", "tool"]
    assert claude.messages[-1].text == "18 C"
    assert claude.last_user_message == "Weather in Paris?"
    assert claude.tools == ("get_weather",)

    responses = read_request(
        "/v1/responses",
        {"model": "o4-mini", "instructions": "Be brief.", "input": "Weather in Paris?"},
    )
    assert responses.messages == (
        Message("system", "Be brief."),
        Message("user", "Weather in Paris?"),
    )
    items = read_request(
        "/v1/responses",
        {
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "18 C"},
            ],
            "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}],
        },
    )
    assert [(m.role, m.text) for m in items.messages] == [
        ("user", "Hi"),
        ("assistant", ""),
        ("tool", "18 C"),
    ]
    assert items.tools == ("f",) and items.model is None

    google = read_request(
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
        {
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "Weather"}, {"text": "in Paris?"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
            ],
            "tools": [{"functionDeclarations": [{"name": "f"}, {"name": "g"}]}],
        },
    )
    assert google.model == "gemini-2.0-flash" and google.stream is True
    assert [(m.role, m.text) for m in google.messages] == [
        ("system", "Be brief."),
        ("user", "Weather\nin Paris?"),
        ("assistant", ""),
    ]
    assert google.tools == ("f", "g")

    generate = read_request("/api/generate", {"model": "llama3.2", "prompt": "Hi"})
    assert generate.messages == (Message("user", "Hi"),) and generate.stream is None
    odds: list[Any] = [None, [], "text", {"messages": "no"}]
    for odd in odds:
        assert read_request("/v1/chat/completions", odd).messages == ()


# --------------------------------------------------------------------------- validation


def test_a_fixture_file_problems_are_located_with_did_you_mean(tmp_path: Path) -> None:
    path = tmp_path / "weather.yaml"
    path.write_text(
        "fixtures:\n"
        "  - match: {model: 'gpt-4o*', mesage: weather}\n"
        "    tool_calls:\n"
        "      - name: get_weather\n"
        "        argumnets: {city: Paris}\n"
        "    finish: stops\n"
        "  - text: hi\n"
        "    interval: 5 parsecs\n"
        "  - error: {status: 429, after: 2}\n"
        "  - match: {message_regex: '(a)\\1'}\n"
        "    text: x\n"
        "  - match: {path: /v1/*}\n"
        "  - tool_calls: [{name: f, arguments: '[1, 2]'}]\n"
    )
    with pytest.raises(ScenarioError) as info:
        load_fixture_files([path])
    allowed = "path, model, message, message_regex, tools, tool_result, headers"
    assert str(info.value).splitlines() == [
        f"{path}:2: fixtures[0].match.mesage: unknown key, did you mean 'message'? "
        f"(allowed: {allowed})",
        f"{path}:5: fixtures[0].tool_calls[0].argumnets: unknown key, did you mean "
        "'arguments'? (allowed: name, arguments, id)",
        f"{path}:6: fixtures[0].finish: must be one of: stop, length, tool_calls, "
        "content_filter, refusal",
        f"{path}:8: fixtures[1].interval: not a duration: '5 parsecs' (use a number of ms, "
        "or 250ms, 2s)",
        f"{path}:9: fixtures[2].error: give exactly one of status (an HTTP error), after "
        "(mid-stream)",
        f"{path}:10: fixtures[3].match.message_regex: backreferences (\\1, (?P=name)) cannot "
        "be searched in linear time; match takes Python's re syntax without these "
        "(docs/scenarios.md, Selectors)",
        f"{path}:12: fixtures[4]: give text, tool_calls or error: what the mock answers",
        f"{path}:13: fixtures[5].tool_calls[0].arguments: must be a JSON object (the "
        "function's arguments)",
    ]


def test_fixture_files_and_directories_load_in_order(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text(json.dumps({"fixtures": [{"text": "from b"}]}))
    (tmp_path / "a.yaml").write_text("fixtures:\n  - text: from a\n  - text: a again\n")
    (tmp_path / "notes.txt").write_text("not a fixture file")
    loaded = load_fixture_files([tmp_path, tmp_path / "a.yaml"])
    assert [f.text for f in loaded] == ["from a", "a again", "from b"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ScenarioError) as info:
        load_fixture_files([empty, tmp_path / "missing.yaml"])
    assert [str(p) for p in info.value.problems] == [
        f"{empty}:0: no fixture files here (*.yaml, *.json)",
        f"{tmp_path / 'missing.yaml'}:0: no such file or directory",
    ]
    (tmp_path / "bad.yaml").write_text("fixtures: []\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml:1: fixtures: must not be empty"):
        load_fixture_files([tmp_path / "bad.yaml"])


def test_a_scenarios_mock_section_is_validated_and_shown_as_it_was_written() -> None:
    text = (
        "faults:\n"
        "  - drop: {kind: delta, nth: 2}\n"
        "mock:\n"
        "  - match: {tools: true}\n"
        "    tool_calls: [{name: get_weather, arguments: {city: Paris}}]\n"
        "    interval: 5ms\n"
    )
    scenario = parse_scenario(text, "<s>", default_name="s")
    (fx,) = scenario.mock
    assert fx.interval == 0.005 and fx.tool_calls[0].argument_object == {"city": "Paris"}
    view = scenario.as_dict()
    assert view["mock"] == [
        {
            "match": {"tools": True},
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
            "interval": "5ms",
        }
    ]
    assert parse_scenario(orjson.dumps(view), "<again>", read_only=True) == scenario.model_copy(
        update={"source": "<again>"}
    )
    with pytest.raises(ScenarioError) as info:
        parse_scenario("faults: []\nmock:\n  - txt: hi\n", "<s>", default_name="s")
    assert str(info.value).startswith("<s>:3: mock[0].txt: unknown key, did you mean 'text'?")


# --------------------------------------------------------------------------- matching


def test_the_first_matching_fixture_answers_and_times_passes_it_over() -> None:
    scenario_fixtures = {"s": (fixture("text: from the scenario\nmatch: {model: gpt-4o}"),)}
    store = MockFixtures(
        files=[fixture("text: from a file")],
        scenarios=lambda name: scenario_fixtures.get(name, ()),
    )
    store.add(
        [
            fixture("error: {status: 429}\ntimes: 1\nmatch: {message: weather}"),
            fixture("name: weather\ntext: sunny\nmatch: {message_regex: '(?i)WEATHER'}"),
            fixture("text: tools\nmatch: {tools: [get_weather, get_time]}"),
            fixture("text: header\nmatch: {headers: {X-Test: 'case-*'}, path: /v1/messages}"),
        ]
    )
    path = "/v1/chat/completions"

    def chosen(body: dict[str, Any], headers: dict[str, str] | None = None, **kw: Any) -> str:
        view = read_request(path, body)
        found = store.choose(kw.get("path", path), view, headers or {}, kw.get("scenario"))
        return "corpus" if found is None else found.label

    weather = {"model": "gpt-4o", "messages": [{"role": "user", "content": "The weather?"}]}
    assert chosen(weather, scenario="s") == "scenario s mock[0]"
    assert chosen(weather) == "added[0]"  # times: 1
    assert chosen(weather) == "weather"  # then the next match
    assert chosen(weather) == "weather"
    tools = [
        {"type": "function", "function": {"name": n}} for n in ("get_time", "get_weather", "x")
    ]
    assert chosen({"messages": [], "tools": tools}) == "added[2]"
    assert chosen({"messages": [], "tools": tools[:1]}) == "files[0]"
    assert chosen({}, {"x-test": "case-7"}, path="/v1/messages") == "added[3]"
    assert chosen({}, {"X-Test": "other"}, path="/v1/messages") == "files[0]"
    store.reset()
    assert chosen(weather) == "files[0]"
    assert MockFixtures().choose(path, read_request(path, weather), {}) is None


# --------------------------------------------------------------------------- rendering

WEATHER_NYC = """
tool_calls:
  - {name: get_weather, arguments: {city: New York City}}
usage: {input_tokens: 44, output_tokens: 16}
"""


def test_openai_chat_tool_call_is_rendered_as_the_capture() -> None:
    capture = payloads(fixture_bytes("openai_chat_tool_call_usage.sse"))
    ours = payloads(streamed("openai-chat", fixture(WEATHER_NYC)))
    assert len(ours) == len(capture)
    for mine, real in zip(ours, capture, strict=True):
        assert list(mine) == list(real)  # the same top-level fields, in the same order
        assert [shape(c) for c in mine["choices"]] == [shape(c) for c in real["choices"]]

    # The arguments are cut where the real model cut them.
    def fragments(chunks: list[Any]) -> list[str]:
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        return [d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d]

    cuts = ["", '{"', "city", '":"', "New", " York", " City", '"}']
    assert fragments(ours) == fragments(capture) == cuts
    assert ours[-1]["usage"]["prompt_tokens"] == 44
    assert ours[-1]["usage"]["completion_tokens"] == 16
    assert set(capture[-1]["usage"]) <= set(ours[-1]["usage"])
    assert events(streamed("openai-chat", fixture(WEATHER_NYC)))[-1] == (None, "[DONE]")


PARALLEL = """
tool_calls:
  - {name: get_weather, arguments: {city: Paris}}
  - {name: get_weather, arguments: '{"city": "Tokyo"}', id: call_tokyo}
"""


def test_openai_chat_parallel_calls_each_open_then_stream_by_index() -> None:
    chunks = payloads(streamed("openai-chat", fixture(PARALLEL)))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    heads = [d["tool_calls"][0] for d in deltas if "id" in d.get("tool_calls", [{}])[0]]
    assert [h["index"] for h in heads] == [0, 1]
    assert heads[1] == {
        "index": 1,
        "id": "call_tokyo",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert deltas[0]["role"] == "assistant" and deltas[0]["content"] is None  # as captured
    args: dict[int, str] = {0: "", 1: ""}
    order = []
    for d in deltas:
        for call in d.get("tool_calls", []):
            args[call["index"]] += call["function"]["arguments"]
            order.append(call["index"])
    assert order == sorted(order)  # call 0 whole, then call 1
    assert {i: json.loads(a) for i, a in args.items()} == {
        0: {"city": "Paris"},
        1: {"city": "Tokyo"},
    }
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


ANTHROPIC_TOOL = """
text: I'll check the current weather in Paris for you.
tool_calls:
  - {name: get_weather, arguments: {location: "Paris, France"}}
"""


def test_anthropic_text_then_tool_use_is_rendered_as_the_sdk_fixture() -> None:
    real = events(fixture_bytes("anthropic_sdkfixture_tool_use_response.txt") + b"\n\n")
    ours = events(streamed("anthropic", fixture(ANTHROPIC_TOOL)))
    assert collapse([n or "" for n, _ in ours]) == collapse([n or "" for n, _ in real])
    assert all(json.loads(data)["type"] == name for name, data in ours)
    mine = {n: json.loads(d) for n, d in ours if n != "content_block_delta"}
    theirs = {n: json.loads(d) for n, d in real if n != "content_block_delta"}
    assert shape(mine["message_delta"]) == shape(theirs["message_delta"])
    assert shape(mine["message_start"]) == shape(theirs["message_start"])
    blocks = [json.loads(d)["content_block"] for n, d in ours if n == "content_block_start"]
    real_block = json.loads([d for n, d in real if n == "content_block_start"][1])
    assert set(blocks[1]) <= set(real_block["content_block"])
    assert blocks[1]["input"] == {} and blocks[1]["type"] == "tool_use"
    partial = [json.loads(d)["delta"] for n, d in ours if n == "content_block_delta"]
    tool = [d["partial_json"] for d in partial if d["type"] == "input_json_delta"]
    assert tool[0] == "" and json.loads("".join(tool)) == {"location": "Paris, France"}
    assert json.loads(dict(ours)["message_delta"])["delta"]["stop_reason"] == "tool_use"


def test_anthropic_parallel_tool_use_blocks_are_numbered_after_the_text() -> None:
    ours = events(streamed("anthropic", fixture("text: Checking.\n" + PARALLEL)))
    starts = [json.loads(d) for n, d in ours if n == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [
        (0, "text"),
        (1, "tool_use"),
        (2, "tool_use"),
    ]
    assert starts[2]["content_block"]["id"] == "call_tokyo"
    args: dict[int, str] = {}
    for n, d in ours:
        if n == "content_block_delta" and json.loads(d)["delta"]["type"] == "input_json_delta":
            body = json.loads(d)
            args[body["index"]] = args.get(body["index"], "") + body["delta"]["partial_json"]
    assert {i: json.loads(a) for i, a in args.items()} == {
        1: {"city": "Paris"},
        2: {"city": "Tokyo"},
    }


def test_openai_responses_text_is_rendered_as_the_o4mini_capture() -> None:
    answer = "The sum of the first 5 positive integers is 15."
    real = events(fixture_bytes("openai_responses_o4mini_reasoning_text.sse"))
    real = [(n, d) for n, d in real if "reasoning" not in (n or "")]
    real = [e for i, e in enumerate(real) if not (i > 2 and 'output_index":0' in e[1])]
    ours = events(streamed("openai-responses", fixture(f"text: {answer}")))
    assert collapse([n or "" for n, _ in ours]) == collapse([n or "" for n, _ in real])
    assert [json.loads(d)["sequence_number"] for _, d in ours] == list(range(len(ours)))
    fields: dict[str | None, list[list[str]]] = {}
    for name, data in real:
        fields.setdefault(name, []).append(list(json.loads(data)))
    for name, data in ours:
        assert list(json.loads(data)) in fields[name], name  # as one of the captured ones
    final = json.loads(ours[-1][1])["response"]
    real_final = json.loads(real[-1][1])["response"]
    assert list(final) == list(real_final)
    assert list(final["usage"]) == list(real_final["usage"])
    for details in ("input_tokens_details", "output_tokens_details"):
        assert set(real_final["usage"][details]) <= set(final["usage"][details])
    assert final["output"][0]["content"][0]["text"] == answer


def test_openai_responses_function_calls_are_valid_sdk_events() -> None:
    from openai.types.responses import ResponseStreamEvent

    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    ours = events(streamed("openai-responses", fixture("text: Checking.\n" + PARALLEL)))
    parsed = [adapter.validate_python(json.loads(d)) for _, d in ours]
    assert [type(e).__name__ for e in parsed][-1] == "ResponseCompletedEvent"
    for name, event in zip((n for n, _ in ours), parsed, strict=True):
        assert event.type == name
        extra = set(json.loads(dict(ours)[name])) - set(type(event).model_fields)
        # Every field is the SDK's, but the padding and the done event's function name
        # (the API sends it; the SDK's type leaves it out).
        assert extra <= {"obfuscation", "name"}, (name, extra)
    args: dict[str, str] = {}
    for e in parsed:
        if e.type == "response.function_call_arguments.delta":
            args[e.item_id] = args.get(e.item_id, "") + e.delta
    final = parsed[-1].response
    calls = [o for o in final.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments), c.call_id == "call_tokyo") for c in calls] == [
        ("get_weather", {"city": "Paris"}, False),
        ("get_weather", {"city": "Tokyo"}, True),
    ]
    assert {c.id: json.loads(args[c.id]) for c in calls} == {
        c.id: json.loads(c.arguments) for c in calls
    }
    assert [o.output_index for o in parsed if o.type == "response.output_item.added"] == [0, 1, 2]


def test_gemini_text_is_rendered_as_the_capture_and_calls_as_whole_parts() -> None:
    from google.genai import types

    capture = fixture_bytes("gemini_2_0_flash_text.crlf.sse")
    body = streamed("gemini", fixture("text: Here you go, in a few words."))
    assert body.count(b"\r\n\r\n") == len(events(body)) and b"\n\n" not in body
    assert capture.count(b"\r\n\r\n") == len(events(capture))
    real = payloads(capture)
    ours = payloads(body)
    assert list(ours[0]) == list(real[0]) + ["responseId"][: len(ours[0]) - len(real[0])]
    assert "finishReason" not in ours[0]["candidates"][0]
    assert ours[-1]["candidates"][0]["finishReason"] == real[-1]["candidates"][0]["finishReason"]
    assert set(real[-1]["usageMetadata"]) <= set(ours[-1]["usageMetadata"])
    assert b'"parts": [' in body  # Google's spacing, as captured
    calls = payloads(streamed("gemini", fixture(PARALLEL)))
    assert len(calls) == 1
    response = types.GenerateContentResponse.model_validate(calls[0])
    assert [(c.name, c.args) for c in response.function_calls or []] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Tokyo"}),
    ]


def test_ollama_text_and_tool_calls_are_rendered_as_the_server_writes_them() -> None:
    from ollama import ChatResponse

    real = [json.loads(line) for line in fixture_bytes("ollama_chat_stream.ndjson").splitlines()]
    body = streamed("ollama", fixture("text: Hello there\n" + PARALLEL))
    ours = [json.loads(line) for line in body.splitlines()]
    assert body.endswith(b"}\n") and body.count(b"\n") == len(ours)
    assert list(ours[0]) == list(real[0])  # model, created_at, message, done
    assert set(real[-1]) <= set(ours[-1]) and ours[-1]["done"] is True
    parsed = [ChatResponse.model_validate(o) for o in ours]
    assert "".join(p.message.content or "" for p in parsed) == "Hello there"
    calls = [c for p in parsed for c in p.message.tool_calls or []]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Tokyo"}),
    ]


ERROR_CAPTURES = {
    "openai-chat": "openai_chat_midstream_error.sse",
    "openai-responses": "openai_responses_error_events.sse",
    "anthropic": "anthropic_error_overloaded.sse",
    "gemini": "gemini_midstream_error.crlf.sse",
    "ollama": "ollama_midstream_error.ndjson",
}


@pytest.mark.parametrize("provider", list(ERROR_CAPTURES))
def test_an_error_after_n_deltas_is_the_providers_error_event_and_the_end(provider: str) -> None:
    fx = fixture("text: one two three four five\nerror: {after: 2}")
    body = streamed(provider, fx)
    capture = fixture_bytes(ERROR_CAPTURES[provider])
    if provider == "ollama":
        ours = [json.loads(line) for line in body.splitlines()]
        real = [json.loads(line) for line in capture.splitlines()]
        texts = [o["message"]["content"] for o in ours[:-1]]
    else:
        ours_events = events(body)
        real_events = events(capture)
        assert ours_events[-1][0] == real_events[-1][0]  # the same event name (or none)
        ours = [json.loads(d) for _, d in ours_events]
        real = [json.loads(d) for _, d in real_events]
        texts = [t for o in ours[:-1] for t in _texts(provider, o)]
    assert texts == ["one", " two"]  # two deltas, then the error: no terminal event
    assert shape(ours[-1]) == shape(real[-1]) or list(ours[-1]) == list(real[-1])


def _texts(provider: str, event: dict[str, Any]) -> list[str]:
    if provider == "openai-chat":
        choices = event.get("choices", [])
        return [c["delta"]["content"] for c in choices if c["delta"].get("content")]
    if provider == "openai-responses":
        return [event["delta"]] if event["type"] == "response.output_text.delta" else []
    if provider == "anthropic":
        delta = event.get("delta", {})
        return [delta["text"]] if delta.get("type") == "text_delta" else []
    return [p["text"] for c in event.get("candidates", []) for p in c["content"].get("parts", [])]


FINISHES: list[tuple[str, str, Callable[[bytes], Any]]] = [
    ("openai-chat", "content_filter", lambda b: payloads(b)[-2]["choices"][0]["finish_reason"]),
    ("openai-responses", "response.incomplete", lambda b: events(b)[-1][0]),
    ("anthropic", "refusal", lambda b: json.loads(events(b)[-2][1])["delta"]["stop_reason"]),
    ("gemini", "SAFETY", lambda b: payloads(b)[-1]["candidates"][0]["finishReason"]),
    ("ollama", "stop", lambda b: json.loads(b.splitlines()[-1])["done_reason"]),
]


@pytest.mark.parametrize(("provider", "expected", "read"), FINISHES, ids=[f[0] for f in FINISHES])
def test_a_content_filter_finish_is_each_providers_own(
    provider: str, expected: str, read: Callable[[bytes], Any]
) -> None:
    body = streamed(provider, fixture("text: blocked\nfinish: content_filter"))
    assert read(body) == expected


def test_a_refusal_is_sent_in_the_refusal_fields() -> None:
    fx = fixture("text: I can't help with that.\nfinish: refusal")
    chat = payloads(streamed("openai-chat", fx))
    assert chat[0]["choices"][0]["delta"] == {"role": "assistant", "content": None, "refusal": ""}
    assert "".join(c["choices"][0]["delta"].get("refusal") or "" for c in chat if c["choices"]) == (
        "I can't help with that."
    )
    responses = events(streamed("openai-responses", fx))
    assert "response.refusal.delta" in [n for n, _ in responses]
    assert json.loads(responses[-1][1])["response"]["output"][0]["content"][0] == {
        "type": "refusal",
        "refusal": "I can't help with that.",
    }


def test_tokens_per_event_groups_text_and_arguments() -> None:
    fx = fixture("text: one two three four five\ntokens_per_event: 2\n" + WEATHER_NYC)
    chunks = payloads(streamed("openai-chat", fx))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    texts = [d["content"] for d in deltas if d.get("content")]
    assert texts == ["one two", " three four", " five"]
    args = [d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d]
    assert args == ["", '{"city', '":"New', " York City", '"}']


def test_a_non_streamed_answer_carries_the_whole_fixture() -> None:
    fx = fixture("text: Checking.\n" + PARALLEL)
    request = dict(REQUESTS["openai-chat"], stream=False)
    (chat,) = render("openai-chat", fx, request).chunks
    message = json.loads(chat)["choices"][0]["message"]
    assert message["content"] == "Checking."
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        {"city": "Paris"},
        {"city": "Tokyo"},
    ]
    request = dict(REQUESTS["anthropic"], stream=False)
    (claude,) = render("anthropic", fx, request).chunks
    assert [b["type"] for b in json.loads(claude)["content"]] == ["text", "tool_use", "tool_use"]
    broken = fixture("text: a b c\nerror: {after: 1, message: boom}")
    reply = render("anthropic", broken, request)
    assert reply.status == 500 and json.loads(reply.chunks[0])["error"]["message"] == "boom"


def test_fixtures_added_at_run_time_are_bounded_all_or_none() -> None:
    one = fixture("text: x\n")
    fixtures = MockFixtures()
    fixtures.add([one] * (MAX_ADDED - 1))
    with pytest.raises(TooManyFixtures) as info:
        fixtures.add([one, one])
    assert (info.value.held, info.value.adding, info.value.alone) == (MAX_ADDED - 1, 2, False)
    assert len(fixtures.added) == MAX_ADDED - 1  # none of the two
    fixtures.add([one])
    fixtures.clear()
    with pytest.raises(TooManyFixtures) as info:
        fixtures.add([one] * (MAX_ADDED + 1))
    assert info.value.alone
    assert str(info.value) == (
        f"{MAX_ADDED + 1} fixtures at once: a mock holds at most {MAX_ADDED} fixtures added "
        "at run time; nothing was added"
    )
    assert fixtures.added == ()
