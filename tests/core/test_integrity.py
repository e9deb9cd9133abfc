"""Stream integrity (``core/integrity.py``), sans-IO, on every provider's real captures.

Each capture in tests/fixtures/providers/ is fed through a :class:`Session` (the same
core the proxy runs) with one fault at a time, every write accounted as the shell
would (``Session.wrote``), and the ``response_end`` summary read back. What each
capture *means* (its text, its tool arguments, its finish reason) is derived here from
the capture's bytes by the rules of docs/providers.md, independently of the profiles.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaosproxy.core.actions import Send
from chaosproxy.core.integrity import Envelope, EnvelopeCheck
from chaosproxy.core.recent import RecentStreams
from chaosproxy.core.session import Session
from chaosproxy.scenario import parse_scenario
from tests.support.captures import (
    ANTHROPIC,
    CAPTURES,
    GEMINI,
    OLLAMA,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    Capture,
    data_of,
    sse_field,
)
from tests.support.drive import TOOL_ONLY, drive
from tests.support.properties import examples

N3 = OPENAI_CHAT[2]

captures = pytest.mark.parametrize("capture", CAPTURES, ids=[c.file for c in CAPTURES])


# --------------------------------------------------------------------------- driving


def integrity(session: Session) -> str:
    line = session.summary(0.0)
    return str(line["integrity"])


def sha(text: str) -> str:
    return hashlib.sha256(text.rstrip().encode()).hexdigest()


# --------------------------------------------------------------------------- what a capture means


def meaning(capture: Capture) -> tuple[str, dict[str, str], str | None]:
    """The capture's text (choices in index order), tool arguments by call, and last
    finish reason, read off its bytes by the rules of docs/providers.md."""
    texts: dict[int, str] = {}
    tools: dict[str, str] = {}
    finish: str | None = None
    for event in capture.events:
        data = data_of(event)
        if data == "[DONE]":
            continue
        payload = json.loads(data)
        if capture.provider == "openai-chat":
            for choice in payload["choices"]:
                i = choice["index"]
                delta = choice["delta"]
                if delta.get("content"):
                    texts[i] = texts.get(i, "") + delta["content"]
                for call in delta.get("tool_calls") or ():
                    key = f"{i}/{call['index']}"
                    tools[key] = tools.get(key, "") + call["function"]["arguments"]
                finish = choice.get("finish_reason") or finish
        elif capture.provider == "openai-responses":
            [name] = sse_field(event, "event")
            if name == "response.output_text.done":  # the whole text, as the API says
                texts[0] = texts.get(0, "") + payload["text"]
            if name == "response.completed":
                finish = payload["response"]["status"]
        elif capture.provider == "anthropic":
            if payload["type"] == "content_block_delta":
                delta = payload["delta"]
                if delta["type"] == "text_delta":
                    texts[0] = texts.get(0, "") + delta["text"]
                elif delta["type"] == "input_json_delta":
                    key = str(payload["index"])
                    tools[key] = tools.get(key, "") + delta["partial_json"]
            elif payload["type"] == "message_delta":
                finish = payload["delta"]["stop_reason"]
        elif capture.provider == "gemini":
            for candidate in payload["candidates"]:
                for part in candidate["content"].get("parts", []):
                    texts[0] = texts.get(0, "") + part.get("text", "")
                finish = candidate.get("finishReason") or finish
        else:
            texts[0] = (
                texts.get(0, "")
                + payload.get("message", {}).get("content", "")
                + payload.get("response", "")
            )
            finish = payload.get("done_reason") or finish
    return "".join(texts[i] for i in sorted(texts)), tools, finish


@captures
def test_each_profile_reads_the_text_tool_arguments_and_terminal(capture: Capture) -> None:
    session = drive(capture, [])
    content = session.content
    assert content is not None
    text, tools, finish = meaning(capture)
    for side in (content.upstream, content.sent):
        assert side.text == text
        assert side.tool_args() == tools
        assert side.terminals == 1
        assert side.events == len(capture.events)
        assert (list(side.finish.values())[-1] if side.finish else None) == finish
    assert integrity(session) == "intact"
    assert session.summary(0.0)["text_sha256"] == {"upstream": sha(text), "sent": sha(text)}
    assert session.violations() == []


def test_the_tables_hold_content_for_every_provider() -> None:
    """Guards the test above: it reads text, tool calls and finish reasons, not blanks."""
    assert meaning(TOOL_ONLY) == ("", {"0/0": '{"city":"New York City"}'}, "tool_calls")
    assert json.loads(meaning(ANTHROPIC[1])[1]["1"]) == {
        "location": "San Francisco, CA",
        "unit": "fahrenheit",
    }
    assert meaning(OPENAI_RESPONSES[0])[0] == "The sum of the first 5 positive integers is 15."
    for capture in [*OPENAI_CHAT[::2], *ANTHROPIC, *GEMINI, *OLLAMA]:
        assert meaning(capture)[0], capture.file


def test_parallel_choices_keep_their_text_apart() -> None:
    content = drive(N3, []).content
    assert content is not None
    texts = content.upstream.texts()
    assert sorted(texts) == [0, 1, 2]
    for i, text in texts.items():
        expected = "".join(
            choice["delta"].get("content") or ""
            for event in N3.events
            if data_of(event) != "[DONE]"
            for choice in json.loads(data_of(event))["choices"]
            if choice["index"] == i
        )
        assert text == expected


def test_parallel_tool_calls_are_kept_apart() -> None:
    """Two calls streamed interleaved (OpenAI Chat ``index`` 0 and 1)."""

    def chunk(index: int, args: str) -> bytes:
        call = {"index": index, "function": {"arguments": args}}
        delta = {"tool_calls": [call]}
        payload = {"choices": [{"index": 0, "delta": delta}]}
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    body = b"".join(
        [chunk(0, '{"a":'), chunk(1, '{"b":'), chunk(0, "1}"), chunk(1, "2}"), b"data: [DONE]\n\n"]
    )
    content = drive(body, [], provider="openai-chat").content
    assert content is not None
    assert content.upstream.tool_args() == {"0/0": '{"a":1}', "0/1": '{"b":2}'}


# --------------------------------------------------------------------------- the faults


def target(capture: Capture) -> str:
    """The kind the altering faults select: text deltas, or tool fragments."""
    return "tool_delta" if capture is TOOL_ONLY else "delta"


#: A path that edits the first selected event's content, per capture.
MUTATE = {
    "openai-chat": "choices.0.delta.content",
    "openai-responses": "delta",
    "anthropic": "delta.text",
    "gemini": "candidates.0.content.parts.0.text",
}


def mutate_path(capture: Capture) -> str:
    if capture is TOOL_ONLY:
        return "choices.0.delta.tool_calls.0.function.arguments"
    if capture.provider == "ollama":
        return "message.content" if "chat" in capture.file else "response"
    return MUTATE[capture.provider]


KEEP_INTACT: dict[str, list[dict[str, Any]]] = {
    "rechunk-1": [{"rechunk": {"size": 1}}],
    "rechunk-random": [{"rechunk": {"random": [1, 40]}}],
    "rechunk-hostile": [{"rechunk": {"boundaries": "hostile"}}],
    "coalesce-3": [{"coalesce": {"events": 3}}],
    "coalesce-all": [{"coalesce": {"all": True}}],
    "delay": [{"delay": {"per_event": "5ms", "jitter": "3ms"}}],
    "throttle": [{"throttle": {"bytes_per_second": 2000}}],
    "compress-each": [{"compress": {"flush": "each"}}],
    "compress-end": [{"rechunk": {"size": 5}}, {"compress": {"flush": "end"}}],
    "rechunk-coalesce": [{"rechunk": {"size": 7}}, {"coalesce": {"events": 4}}],
    "cut-after-terminal-close": [{"cut": {"after": "terminal", "how": "close"}}],
}


@captures
@pytest.mark.parametrize("name", list(KEEP_INTACT))
def test_transport_faults_keep_a_stream_intact(capture: Capture, name: str) -> None:
    session = drive(capture, KEEP_INTACT[name], chunk=17)
    assert session.summary(0.0)["faults_applied"], "the fault must have acted"
    assert integrity(session) == "intact"
    content = session.content
    assert content is not None
    assert content.sent.text == content.upstream.text == meaning(capture)[0]


def altering(capture: Capture) -> dict[str, list[dict[str, Any]]]:
    kind = target(capture)
    # The first tool fragment is "" (it names the call): take the first that has text.
    nth = 2 if capture is TOOL_ONLY else 1
    # Reorder swaps two events of the same choice: the n=3 capture interleaves choices.
    window = 7 if capture is N3 else 2
    return {
        "duplicate": [{"duplicate": {"kind": kind, "nth": nth}}],
        "drop": [{"drop": {"kind": kind, "nth": nth}}],
        "reorder": [{"reorder": {"kind": kind, "nth": nth, "window": window}}],
        "mutate": [{"mutate": {"kind": kind, "nth": nth, "set": {mutate_path(capture): "~"}}}],
        "inject-error": [{"inject": {"after": 1, "event": {"kind": "error"}}}],
        "duplicate-terminal": [{"duplicate": {"kind": "terminal"}}],
    }


ALTERING = list(altering(CAPTURES[0]))


@captures
@pytest.mark.parametrize("name", ALTERING)
def test_event_faults_make_a_stream_altered(capture: Capture, name: str) -> None:
    session = drive(capture, altering(capture)[name], chunk=17)
    assert session.summary(0.0)["faults_applied"], "the fault must have acted"
    assert integrity(session) == "altered"


@captures
def test_splice_makes_a_stream_altered(capture: Capture) -> None:
    # The previous stream is another answer of the same provider: its events carry
    # text of their own, which the splice adds to this stream's content.
    streams = RecentStreams()
    drive(capture, [], streams=streams, request_id="r-0")
    kind = target(capture)
    session = drive(
        capture, [{"splice": {"from": "previous", "after": 1, "kind": kind}}], streams=streams
    )
    assert session.summary(0.0)["faults_applied"] == {"splice": 1}
    assert integrity(session) == "altered"
    content = session.content
    assert content is not None
    assert content.upstream.text == meaning(capture)[0]


CUTS = {
    "before-terminal-close": ({"before": "terminal", "how": "close"}, "incomplete"),
    "before-terminal-abort": ({"before": "terminal", "how": "abort"}, "broken"),
    "before-terminal-reset": ({"before": "terminal", "how": "reset"}, "broken"),
    "after-2-mid-line-close": ({"after": 1, "position": "mid_line", "how": "close"}, "incomplete"),
    "after-terminal-abort": ({"after": "terminal", "how": "abort"}, "broken"),
}


@captures
@pytest.mark.parametrize("name", list(CUTS))
def test_cuts_make_a_stream_incomplete_or_broken(capture: Capture, name: str) -> None:
    config, expected = CUTS[name]
    session = drive(capture, [{"cut": config}])
    assert session.outcome == "cut"
    assert integrity(session) == expected


@captures
@pytest.mark.parametrize("end", ["client_gone", "shutdown", "upstream_failed"])
def test_an_unclean_end_is_broken(capture: Capture, end: str) -> None:
    session = drive(capture, [], end=end)
    assert integrity(session) == "broken"


@captures
@pytest.mark.parametrize(
    ("faults", "content"),
    [
        ([], "intact"),
        ([{"duplicate": {"kind": "terminal"}}], "altered"),
        ([{"drop": {"kind": "terminal"}}], "incomplete"),
    ],
)
def test_content_integrity_says_what_was_sent_whatever_the_end(
    capture: Capture, faults: list[dict[str, Any]], content: str
) -> None:
    """``content_integrity``: what ``integrity`` would be had the connection ended
    cleanly (so a client that leaves after a second terminal event is told apart from
    one that leaves after an intact stream)."""
    for end, integrity_ in (("finish", content), ("client_gone", "broken")):
        line = drive(capture, faults, end=end).summary(0.0)
        assert (line["integrity"], line["content_integrity"]) == (integrity_, content)


def test_an_event_cut_part_way_was_not_sent() -> None:
    """The write of the second event is cut mid-event: only the first one counts, and
    the text hash of the sent side is that of the first delta alone."""
    e1 = b'data: {"choices":[{"index":0,"delta":{"content":"Hello "}}]}\n\n'
    e2 = b'data: {"choices":[{"index":0,"delta":{"content":"world"}}]}\n\n'
    done = b"data: [DONE]\n\n"
    session = drive(
        e1 + e2 + done,
        [{"cut": {"after_bytes": len(e1) + 10, "how": "close"}}],
        provider="openai-chat",
    )
    content = session.content
    assert content is not None
    assert (content.sent.events, content.sent.text) == (1, "Hello ")
    line = session.summary(0.0)
    assert line["integrity"] == "incomplete"
    assert line["text_sha256"] == {"upstream": sha("Hello world"), "sent": sha("Hello")}


def test_the_text_hash_ignores_trailing_whitespace_only() -> None:
    e1 = b'data: {"choices":[{"index":0,"delta":{"content":"  Hi\\n"}}]}\n\n'
    session = drive(e1 + b"data: [DONE]\n\n", [], provider="openai-chat")
    hashes = session.summary(0.0)["text_sha256"]
    assert hashes["sent"] == hashlib.sha256(b"  Hi").hexdigest() == hashes["upstream"]


def test_no_terminal_upstream_is_incomplete_and_the_upstreams_fault() -> None:
    body = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    session = drive(body, [], provider="openai-chat")
    assert integrity(session) == "incomplete"
    rules = [(v.side, v.rule, v.at_event) for v in session.violations()]
    assert rules == [("upstream", "terminal_missing", 1), ("sent", "terminal_missing", 1)]


def test_unframed_and_passthrough_bodies_have_no_integrity() -> None:
    raw = drive(b"hello", [{"rechunk": {"size": 2}}], fmt="sse")
    assert "integrity" in raw.summary(0.0)  # (an SSE body with no events: still framed)
    session = Session("r-2", scenario=None, seed=1, path="/")
    session.start(0.0)
    session.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    [send] = session.feed(b"data: x\n\n", 0.0)
    assert isinstance(send, Send)
    session.wrote(send, 0.0)
    session.finish()
    assert "integrity" not in session.summary(0.0) and session.content is None
    scenario = parse_scenario("faults: [{rechunk: {size: 2}}]", "<r>", default_name="r")
    unframed = Session("r-3", scenario=scenario, seed=1, path="/")
    unframed.start(0.0)
    unframed.response_head(200, "OK", [("Content-Type", "application/octet-stream")])
    unframed.finish()
    assert "integrity" not in unframed.summary(0.0)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capture=st.sampled_from(CAPTURES),
    read=st.integers(min_value=1, max_value=300),
    sizes=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=5),
    merge=st.integers(min_value=2, max_value=6),
    compress=st.sampled_from([None, "each", "end"]),
)
def test_any_chunking_of_any_capture_stays_intact(
    capture: Capture, read: int, sizes: list[int], merge: int, compress: str | None
) -> None:
    """Upstream reads of any size, writes split and merged any way, compressed or not:
    the client is sent every event whole, so the content is the upstream's."""
    faults: list[dict[str, Any]] = [
        {"rechunk": {"sizes": sizes}},
        {"coalesce": {"events": merge}},
    ]
    if compress is not None:
        faults.append({"compress": {"flush": compress}})
    session = drive(capture, faults, chunk=read)
    assert integrity(session) == "intact"
    content = session.content
    assert content is not None
    assert content.sent.events == content.upstream.events == len(capture.events)
    assert session.violations() == []


# --------------------------------------------------------------------------- the envelope


def test_the_envelope_check_reads_each_event_alone() -> None:
    """One side's envelope part (``EnvelopeCheck``): the rules each event's JSON breaks,
    in order; events without the pointed-to values, or not JSON, are not checked."""
    check = EnvelopeCheck(Envelope.parse("stream=/id,sequence=/seq"))
    events: list[Any] = [
        {"id": "a", "seq": 1},
        {"id": "a", "seq": 2},
        {"seq": 4},  # a gap; no id: the stream is not checked
        None,  # not JSON
        {"id": "b", "seq": 4},  # the stream changed, the number repeats
        {"id": "a", "seq": 3},  # back below the highest
        {"id": "a", "seq": True},  # not a number
        {"id": "a", "seq": 5},
    ]
    assert [check.check(event) for event in events] == [
        [],
        [],
        ["sequence_gap"],
        [],
        ["stream_changed", "sequence_repeat"],
        ["sequence_backwards"],
        [],
        [],
    ]


def test_an_envelope_of_one_pointer_checks_only_that() -> None:
    stream = EnvelopeCheck(Envelope.parse("stream=/s"))
    assert [stream.check({"s": s, "seq": 9}) for s in ("x", "x", "y")] == [
        [],
        [],
        ["stream_changed"],
    ]
    sequence = EnvelopeCheck(Envelope.parse("sequence=/n"))
    assert [sequence.check({"s": s, "n": n}) for s, n in (("x", 7), ("y", 8), ("z", 10))] == [
        [],
        [],
        ["sequence_gap"],
    ]
