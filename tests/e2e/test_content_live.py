"""The content faults through the live proxy, with the Python SDKs (issue 23, "Done
means"): the ``openai`` SDK (Chat Completions and Responses) and the ``anthropic`` SDK
each assemble exactly the mock's text under every ``resegment`` mode, and exactly its
tool arguments under ``split_tool_args`` and ``interleave_tool_calls``; a per-delta
scanner misses a phrase under ``moderation-phrase-split`` where an accumulating one finds
it; and the verdicts: a correct client is ``tolerated``, one that raises on a valid
re-segmentation is a ``false_alarm`` (those faults keep a stream sound), one that raises
on cumulative snapshots has ``detected`` something.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest

from chaosproxy import ChaosProxy
from chaosproxy.core.records import RunVerdict
from tests.support.content_streams import read_messages_stream

#: Every hazard at once: a skin tone, a combining mark, a ZWJ family, right to left with
#: its points, CJK, a character beyond the BMP, a fence, escapes.
TEXT = 'Hi 👍🏽 café e\u0301, 👩\u200d👩\u200d👧 שָׁלוֹם 日本語 😀 "quoted"\\ ```py\nx = 1\n``` done.'
CALLS = [
    {"name": "get_weather", "arguments": {"city": "São Paulo", "note": 'say "hi"\n'}},
    {"name": "get_time", "arguments": {"zone": "Asia/Tokyo", "ünïcode": "日本 😀"}},
]
#: The requests' parts as JSON, for the SDKs to send (each SDK types its own params).
TOOLS_OPENAI: list[Any] = [
    {"type": "function", "function": {"name": c["name"], "parameters": {"type": "object"}}}
    for c in CALLS
]
TOOLS_RESPONSES = [
    {"type": "function", "name": c["name"], "parameters": {"type": "object"}} for c in CALLS
]
TOOLS_ANTHROPIC = [{"name": c["name"], "input_schema": {"type": "object"}} for c in CALLS]
ASK: list[Any] = [{"role": "user", "content": "hello"}]

MODES: list[dict[str, Any]] = [
    {"at": "graphemes"},
    {"at": "codepoints"},
    {"at": "bytes"},
    {"at": "words"},
    {"every": 3},
    {"phrase": "שָׁלוֹם 日本語", "parts": 4},
    {"merge": 3},
    {"empty": 2},
    {"merge": 2, "empty": 1},
]


@pytest.fixture(scope="module")
def proxy() -> Iterator[ChaosProxy]:
    with ChaosProxy(mock_interval=0.0, admin=("127.0.0.1", 0)) as running:
        running.add_fixture({"match": {"tools": False}, "text": TEXT})
        running.add_fixture({"match": {"tools": True}, "text": "On it.", "tool_calls": CALLS})
        yield running


@dataclass
class Answer:
    text: str = ""
    deltas: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)  # raw JSON text, per call
    inputs: list[Any] = field(default_factory=list)  # as the SDK parsed them


def chat(proxy: ChaosProxy, tools: bool = False) -> Answer:
    out = Answer()
    calls: dict[int, str] = {}
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="test", max_retries=0) as client:
        extra: dict[str, Any] = {"tools": TOOLS_OPENAI} if tools else {}
        for chunk in client.chat.completions.create(
            model="gpt-4o", messages=ASK, stream=True, **extra
        ):
            for choice in chunk.choices:
                if choice.delta.content is not None:
                    out.deltas.append(choice.delta.content)
                for call in choice.delta.tool_calls or []:
                    fragment = (call.function.arguments if call.function else None) or ""
                    calls[call.index] = calls.get(call.index, "") + fragment
    out.text = "".join(out.deltas)
    out.arguments = [calls[i] for i in sorted(calls)]
    out.inputs = [json.loads(a) for a in out.arguments]
    return out


def responses(proxy: ChaosProxy, tools: bool = False) -> Answer:
    out = Answer()
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="test", max_retries=0) as client:
        extra: dict[str, Any] = {"tools": TOOLS_RESPONSES} if tools else {}
        with client.responses.stream(model="gpt-4o", input="hello", **extra) as stream:
            calls: dict[int, str] = {}
            for event in stream:
                if event.type == "response.output_text.delta":
                    out.deltas.append(event.delta)
                elif event.type == "response.function_call_arguments.delta":
                    calls[event.output_index] = calls.get(event.output_index, "") + event.delta
            final = stream.get_final_response()
    out.text = "".join(out.deltas)
    assert final.output_text == out.text  # (from response.completed: the upstream's)
    out.arguments = [calls[i] for i in sorted(calls)]
    out.inputs = [json.loads(a) for a in out.arguments]
    return out


def messages(proxy: ChaosProxy, tools: bool = False) -> Answer:
    with anthropic.Anthropic(base_url=proxy.url, api_key="test", max_retries=0) as client:
        extra: dict[str, Any] = {"tools": TOOLS_ANTHROPIC} if tools else {}
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=256, messages=ASK, **extra
        ) as stream:
            deltas, parsed = read_messages_stream(stream)
    return Answer(parsed.text, deltas, parsed.arguments, parsed.inputs)


CLIENTS: dict[str, Callable[..., Answer]] = {
    "openai chat": chat,
    "openai responses": responses,
    "anthropic": messages,
}


def judged(proxy: ChaosProxy, text: str, error: str | None = None) -> RunVerdict:
    return proxy.verdict(proxy.last()["request_id"], text=text, error=error)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()))
@pytest.mark.parametrize("client", CLIENTS)
def test_every_resegment_mode_gives_each_sdk_exactly_the_text(
    proxy: ChaosProxy, client: str, mode: dict[str, Any]
) -> None:
    with proxy.scenario({"faults": [{"resegment": mode}]}):
        answer = CLIENTS[client](proxy)
    assert answer.text == TEXT
    assert len(answer.deltas) > 1 or "merge" in mode
    last = proxy.last()
    assert last["faults_applied"] == {"resegment": last["faults_applied"]["resegment"]}
    assert (last["integrity"], last["answer"]["sound"]) == ("intact", True)
    assert judged(proxy, answer.text)["verdict"] == "tolerated"


@pytest.mark.parametrize(
    "fault",
    [
        {"split_tool_args": {"at": ["keys", "escapes"]}},
        {"split_tool_args": {"every": 1}},
        {"interleave_tool_calls": {}},
        {"interleave_tool_calls": {"step": 2}},
    ],
    ids=["keys+escapes", "every-1", "interleave", "interleave-step-2"],
)
@pytest.mark.parametrize("client", CLIENTS)
def test_tool_faults_give_each_sdk_exactly_the_arguments(
    proxy: ChaosProxy, client: str, fault: dict[str, Any]
) -> None:
    clean = CLIENTS[client](proxy, tools=True)
    with proxy.scenario({"faults": [fault]}):
        answer = CLIENTS[client](proxy, tools=True)
    assert answer.inputs == [c["arguments"] for c in CALLS]
    assert answer.arguments == clean.arguments  # the same JSON text, byte for byte
    last = proxy.last()
    assert last["faults_applied"] == {next(iter(fault)): last["faults_applied"][next(iter(fault))]}
    assert (last["integrity"], last["answer"]["sound"]) == ("intact", True)
    assert judged(proxy, answer.text)["verdict"] == "tolerated"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_per_delta_scanner_misses_the_split_phrase_an_accumulating_one_finds_it(
    proxy: ChaosProxy, client: str
) -> None:
    phrase = "ignore previous instructions"

    def per_delta(answer: Answer) -> bool:
        return any(phrase in delta for delta in answer.deltas)

    def accumulating(answer: Answer) -> bool:
        seen = ""
        for delta in answer.deltas:
            seen += delta
            if phrase in seen:
                return True
        return False

    with proxy.scenario("moderation-phrase-split"):
        split = CLIENTS[client](proxy)
    assert phrase in split.text
    assert not per_delta(split)
    assert accumulating(split)
    assert judged(proxy, split.text)["verdict"] == "tolerated"
    # The scenario's own mock answer without the fault: one delta, found either way.
    unsplit = {"faults": [], "mock": [{"text": split.text, "tokens_per_event": 100}]}
    with proxy.scenario(unsplit):
        whole = CLIENTS[client](proxy)
    assert whole.text == split.text
    assert per_delta(whole) and accumulating(whole)


def test_raising_on_a_valid_resegmentation_is_a_false_alarm(proxy: ChaosProxy) -> None:
    """An empty delta, a lone skin tone: a provider may send them; a client that raises
    on them raised on a clean answer (docs/verdicts.md, What sound means)."""
    for mode in ({"empty": 1}, {"at": "graphemes"}):
        with proxy.scenario({"faults": [{"resegment": mode}]}):
            answer = chat(proxy)
        verdict = judged(proxy, answer.text[:5], error="ValueError: empty delta")
        assert verdict["verdict"] == "false_alarm", verdict


def test_cumulative_snapshots_an_appender_shows_garbage_a_snapshot_reader_is_tolerated(
    proxy: ChaosProxy,
) -> None:
    with proxy.scenario("cumulative-snapshots"):
        answer = chat(proxy)
    assert answer.deltas[-1] == TEXT and answer.text != TEXT
    assert judged(proxy, answer.text)["verdict"] == "silent_corruption"  # the appender
    assert judged(proxy, answer.deltas[-1])["verdict"] == "tolerated"  # the snapshot reader
    verdict = judged(proxy, "", error="ValueError: a delta repeats the text")
    assert verdict["verdict"] == "detected"  # the stream is not what its format says
    assert proxy.last()["answer"]["defect"] == "snapshot"


def test_the_chat_stream_helper_takes_a_new_call_index_for_the_end_of_the_last(
    proxy: ChaosProxy,
) -> None:
    """What docs/scenario-library.md says of two-tool-calls-interleaved: the openai Chat
    stream helper declares call 0 done, with half its arguments, when call 1's first
    fragment arrives (its final completion still has both calls whole)."""
    with (
        proxy.scenario({"faults": [{"interleave_tool_calls": {}}]}),
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="test", max_retries=0) as client,
        client.chat.completions.stream(model="gpt-4o", messages=ASK, tools=TOOLS_OPENAI) as stream,
    ):
        done = [
            (e.index, e.arguments) for e in stream if e.type == "tool_calls.function.arguments.done"
        ]
        final = stream.get_final_completion()
    whole = [json.dumps(c["arguments"], ensure_ascii=False, separators=(",", ":")) for c in CALLS]
    assert done[0][0] == 0 and done[0][1] != whole[0] and whole[0].startswith(done[0][1])
    calls = final.choices[0].message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in calls] == [c["arguments"] for c in CALLS]
