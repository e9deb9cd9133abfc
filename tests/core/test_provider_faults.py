"""Every kind-aware fault on every provider's real captures, sans-IO (``simulate``).

For each capture in tests/fixtures/providers/ (OpenAI chat text, tool call and
``n=3``; OpenAI Responses; Anthropic text and tool_use; Gemini CRLF; Ollama chat and
generate) the scenario runs offline with the provider set explicitly, and the output
is compared, write for write, with what the test derives from the capture itself: the
file is split into events here, each event is classified here by the rules of
docs/providers.md (independently of the profiles), and the expected body is those
event bytes with one removed, repeated or inserted. Nothing is typed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from chaosproxy.core.actions import Cut, Send, Sleep
from chaosproxy.core.frames import Format
from chaosproxy.core.records import CutHow
from chaosproxy.scenario import parse_scenario
from chaosproxy.tools.simulate import Simulation, simulate
from tests.support.captures import ANTHROPIC, CAPTURES, GEMINI, OPENAI_CHAT, Capture, data_of

SEED = 20240611

# --------------------------------------------------------------------------- captures


N3 = OPENAI_CHAT[2]

captures = pytest.mark.parametrize("capture", CAPTURES, ids=[c.file for c in CAPTURES])


# --------------------------------------------------------------------------- reading events


def test_the_captures_have_what_the_tables_claim() -> None:
    """Guards the derivations below: every capture has deltas and one terminal event,
    tool deltas exactly where a tool call streams in fragments, and a start event
    exactly for the providers that have one."""
    tool_call = OPENAI_CHAT[1]
    for capture in CAPTURES:
        # The chat tool-call capture has no text: only tool fragments.
        assert bool(capture.where("delta")) == (capture != tool_call), capture.file
        assert len(capture.where("terminal")) == 1, capture.file
        has_tools = capture in (tool_call, ANTHROPIC[1])
        assert bool(capture.where("tool_delta")) == has_tools, capture.file
        has_start = capture.provider in {"openai-chat", "openai-responses", "anthropic"}
        assert bool(capture.where("start")) == has_start, capture.file
    assert GEMINI[0].newline == GEMINI[1].newline == b"\r\n"


# --------------------------------------------------------------------------- running


def run(capture: Capture, *faults: dict[str, Any]) -> Simulation:
    """``faults`` (each written as JSON, which is YAML) over the capture, offline."""
    text = "faults:\n" + "".join(f"  - {json.dumps(f)}\n" for f in faults)
    scenario = parse_scenario(text, "<test>", default_name="test")
    sim = simulate(scenario, capture.body, seed=SEED, fmt=capture.fmt, provider=capture.provider)
    assert sim.provider == capture.provider
    assert sim.format == capture.fmt
    return sim


def skipped_reason(sim: Simulation, fault: str) -> str:
    [skipped] = sim.skipped
    assert skipped["fault"] == fault
    reason = skipped["reason"]
    assert isinstance(reason, str)
    return reason


# --------------------------------------------------------------------------- drop, duplicate


def edited(events: list[bytes], op: str, at: int) -> list[bytes]:
    """``events`` without the one at ``at`` (drop), or with a copy right after it."""
    if op == "drop":
        return events[:at] + events[at + 1 :]
    return events[: at + 1] + events[at:]


@captures
@pytest.mark.parametrize("kind", ["delta", "tool_delta"])
@pytest.mark.parametrize("nth", [1, 2])
@pytest.mark.parametrize("op", ["drop", "duplicate"])
def test_drop_or_duplicate_the_nth_of_a_kind(
    capture: Capture, kind: str, nth: int, op: str
) -> None:
    events = capture.events
    positions = capture.where(kind)
    sim = run(capture, {op: {"kind": kind, "nth": nth}})
    if nth > len(positions):
        assert sim.writes == events
        assert sim.applied == {}
        assert skipped_reason(sim, op) == (
            f"ordinal {nth} never reached: the stream had {len(positions)} {kind} events"
        )
        return
    at = positions[nth - 1]
    assert sim.writes == edited(events, op, at)
    assert sim.applied == {op: 1}
    assert sim.skipped == []
    touched = [
        (i, a.faults) for i, (_, a) in enumerate(sim.actions) if isinstance(a, Send) and a.faults
    ]
    assert touched == ([] if op == "drop" else [(at + 1, ("duplicate",))])


def texts_by_choice(events: list[bytes]) -> dict[int, str]:
    """The text each choice of an OpenAI chat stream assembles to."""
    texts: dict[int, str] = {}
    for event in events:
        if data_of(event) == "[DONE]":
            continue
        for choice in json.loads(data_of(event))["choices"]:
            piece = choice["delta"].get("content") or ""
            texts[choice["index"]] = texts.get(choice["index"], "") + piece
    return texts


def test_n3_drop_the_second_delta_whichever_choice_it_belongs_to() -> None:
    """With ``n=3`` the choices interleave: the 2nd delta chunk is choice 1's first piece,
    not choice 0's second. `nth` counts delta events in the stream, across choices."""
    events = N3.events
    first, second, *_ = N3.where("delta")
    [[one], [two]] = [json.loads(data_of(events[i]))["choices"] for i in (first, second)]
    assert one["index"] != two["index"]
    sim = run(N3, {"drop": {"kind": "delta", "nth": 2}})
    assert sim.writes == edited(events, "drop", second)
    assert sim.applied == {"drop": 1}
    # That choice lost its first piece; the others are whole.
    before, after = texts_by_choice(events), texts_by_choice(sim.writes)
    assert len(before) == 3
    piece = two["delta"]["content"]
    assert before[two["index"]] == piece + after[two["index"]]
    assert {i: t for i, t in after.items() if i != two["index"]} == {
        i: t for i, t in before.items() if i != two["index"]
    }


# --------------------------------------------------------------------------- terminal


@captures
@pytest.mark.parametrize("how", ["close", "abort", "reset"])
def test_cut_before_terminal(capture: Capture, how: CutHow) -> None:
    events = capture.events
    [terminal] = capture.where("terminal")
    sim = run(capture, {"cut": {"before": "terminal", "how": how}})
    assert sim.writes == events[:terminal]
    assert sim.body == b"".join(events[:terminal])
    _, last = sim.actions[-1]
    assert last == Cut(how, fault="cut")
    assert isinstance(last, Cut) and last.detail["after_event"] == terminal
    assert [type(a) for _, a in sim.actions] == [Send] * terminal + [Cut]
    assert sim.applied == {"cut": 1}
    if capture.provider == "gemini":  # the finishReason chunk, CRLF framing kept
        assert b"finishReason" in events[terminal]
        assert sim.body.endswith(b"\r\n\r\n") and b"finishReason" not in sim.body


@captures
def test_duplicate_terminal(capture: Capture) -> None:
    events = capture.events
    [terminal] = capture.where("terminal")
    sim = run(capture, {"duplicate": {"kind": "terminal"}})
    assert sim.writes == edited(events, "duplicate", terminal)
    assert sim.applied == {"duplicate": 1}


#: A text delta that arrives after completion, in each provider's own shape.
LATE_DELTA: dict[str, dict[str, Any]] = {
    "openai-chat": {"data": {"choices": [{"index": 0, "delta": {"content": "late"}}]}},
    "openai-responses": {
        "event": "response.output_text.delta",
        "data": {
            "type": "response.output_text.delta",
            "sequence_number": 30,
            "item_id": "msg_late",
            "output_index": 1,
            "content_index": 0,
            "delta": "late",
        },
    },
    "anthropic": {
        "event": "content_block_delta",
        "data": {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "late"},
        },
    },
    "gemini": {"data": {"candidates": [{"content": {"parts": [{"text": "late"}]}}]}},
    "ollama": {
        "data": {
            "model": "llama3.2",
            "created_at": "2023-08-04T19:22:46Z",
            "message": {"role": "assistant", "content": "late"},
            "done": False,
        }
    },
}


def event_bytes(spec: dict[str, Any], fmt: Format, newline: bytes) -> bytes:
    """What an injected ``{event:, data:}`` must look like on the wire."""
    data = json.dumps(spec["data"], separators=(",", ":")).encode()
    if fmt == "ndjson":
        return data + b"\n"
    head = b"event: " + spec["event"].encode() + newline if "event" in spec else b""
    return head + b"data: " + data + newline + newline


@captures
def test_inject_a_delta_after_terminal(capture: Capture) -> None:
    events = capture.events
    [terminal] = capture.where("terminal")
    spec = LATE_DELTA[capture.provider]
    sim = run(capture, {"inject": {"after": "terminal", "event": spec}})
    late = event_bytes(spec, capture.fmt, capture.newline)
    assert sim.writes == [*events[: terminal + 1], late, *events[terminal + 1 :]]
    assert sim.applied == {"inject": 1}
    # The profile classifies the made-up event: it is a delta, ordinal 0.
    injected = [a for _, a in sim.actions if isinstance(a, Send) and a.faults == ("inject",)]
    [send] = injected
    [event] = send.events
    assert event.ordinal == 0 and "delta" in event.kinds
    if capture.provider == "gemini":
        assert late.endswith(b"}\r\n\r\n") and b"\n\n" not in late


# --------------------------------------------------------------------------- stall


@captures
def test_stall_after_start(capture: Capture) -> None:
    events = capture.events
    starts = capture.where("start")
    sim = run(capture, {"stall": {"after": "start", "duration": "1s"}})
    if not starts:  # Gemini and Ollama have no start kind
        assert sim.writes == events
        assert not [a for _, a in sim.actions if isinstance(a, Sleep)]
        assert sim.applied == {}
        assert skipped_reason(sim, "stall") == "a start event never came: the stream ended first"
        return
    first = starts[0]
    timeline = [(t, a.data if isinstance(a, Send) else a) for t, a in sim.actions]
    assert timeline == [
        *((0.0, e) for e in events[: first + 1]),
        (0.0, Sleep(1.0, fault="stall")),
        *((1.0, e) for e in events[first + 1 :]),
    ]
    assert sim.applied == {"stall": 1}


# --------------------------------------------------------------------------- mutate


@dataclass(frozen=True)
class Mutation:
    #: The selectors, and the one key set.
    select: dict[str, Any]
    key: str
    value: Any

    def picks(self, capture: Capture) -> int:
        """The 0-based position of the event the selectors pick."""
        nth = int(self.select.get("nth", 1))
        if "type" in self.select:
            hits = [
                i
                for i, e in enumerate(capture.events)
                if json.loads(data_of(e)).get("type") == self.select["type"]
            ]
        elif "kind" in self.select:
            hits = capture.where(self.select["kind"])
        else:
            hits = list(range(len(capture.events)))
        return hits[nth - 1]


MUTATIONS = {
    # A client that checks the numbers sees a jump.
    "openai-responses": Mutation(
        {"type": "response.output_text.delta", "nth": 2}, "sequence_number", 999
    ),
    # A chunk from another completion.
    "openai-chat": Mutation({"kind": "start", "nth": 1}, "id", "chatcmpl-FOREIGN"),
    # A delta for a content block that was never started.
    "anthropic": Mutation({"type": "content_block_delta", "nth": 2}, "index", 7),
    "gemini": Mutation({"kind": "delta", "nth": 1}, "responseId", "FOREIGN-response"),
    "ollama": Mutation({"nth": 1}, "model", "other-model:7b"),
}


@captures
def test_mutate_one_field(capture: Capture) -> None:
    events = capture.events
    mutation = MUTATIONS[capture.provider]
    at = mutation.picks(capture)
    sim = run(capture, {"mutate": {**mutation.select, "set": {mutation.key: mutation.value}}})
    assert sim.applied == {"mutate": 1}
    writes = sim.writes
    assert len(writes) == len(events)
    # Every other event is byte-identical.
    assert writes[:at] == events[:at] and writes[at + 1 :] == events[at + 1 :]
    # The edited one parses, with the new value and nothing else changed.
    before = json.loads(data_of(events[at]))
    after = json.loads(data_of(writes[at]))
    assert before[mutation.key] != mutation.value
    assert after == {**before, mutation.key: mutation.value}
    assert list(after) == list(before)  # key order kept
    # Its framing is kept: the same event line and line endings; compact JSON.
    data = json.dumps(after, separators=(",", ":"), ensure_ascii=False).encode()
    if capture.fmt == "ndjson":
        assert writes[at] == data + b"\n"
    else:
        nl = capture.newline
        head = b"".join(line + nl for line in events[at].split(nl) if line.startswith(b"event:"))
        assert writes[at] == head + b"data: " + data + nl + nl
