"""The contract monitor (``core/integrity.py``), sans-IO: every rule on each side, at
the exact event it names.

A breach in the upstream's own stream is seen on both sides (the client was sent it
too); a breach a fault causes is seen on the sent side only. Event ordinals are
1-based per side, so a fault that adds or removes events shifts the sent side's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaosproxy.core.actions import Send
from chaosproxy.core.integrity import MAX_VIOLATIONS, RULES, Envelope, parse_pointer, resolve
from chaosproxy.core.session import Session
from chaosproxy.observe.metrics import Metrics
from chaosproxy.scenario import ScenarioError, parse_scenario
from chaosproxy.server.config import Config, ConfigError
from tests.support.captures import OPENAI_RESPONSES, sse_field
from tests.support.drive import TOOL_ONLY, drive
from tests.support.metrics import value
from tests.support.repo import fixture_bytes

Found = list[tuple[str, str, int]]


def chunk(content: str, **extra: Any) -> bytes:
    payload = {"choices": [{"index": 0, "delta": {"content": content}}], **extra}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def found(session: Session) -> Found:
    return [(v.side, v.rule, v.at_event) for v in session.violations()]


def both(rule: str, at: int) -> Found:
    return [("upstream", rule, at), ("sent", rule, at)]


def chat(body: bytes, faults: list[dict[str, Any]] | None = None, **kw: Any) -> Found:
    return found(drive(body, faults or [], provider="openai-chat", **kw))


# --------------------------------------------------------------------------- in the upstream


def test_a_clean_stream_breaks_no_rule() -> None:
    assert chat(chunk("a") + chunk("b") + DONE) == []


def test_terminal_missing_names_the_last_event() -> None:
    assert chat(chunk("a") + chunk("b")) == both("terminal_missing", 2)


def test_terminal_twice_names_the_second_terminal() -> None:
    assert chat(chunk("a") + DONE + DONE) == both("terminal_twice", 3)


def test_after_terminal_names_each_late_event() -> None:
    body = chunk("a") + DONE + chunk("late") + chunk("later")
    expected = [("upstream", "after_terminal", 3), ("upstream", "after_terminal", 4)]
    expected += [("sent", "after_terminal", 3), ("sent", "after_terminal", 4)]
    assert chat(body) == expected


def test_duplicate_id_names_the_repeat() -> None:
    body = b"id: 1\n" + chunk("a") + b"id: 2\n" + chunk("b") + b"id: 1\n" + chunk("c") + DONE
    assert chat(body) == both("duplicate_id", 3)


def test_invalid_json_names_the_event_and_spares_the_done_marker() -> None:
    assert chat(chunk("a") + b"data: {nope\n\n" + DONE) == both("invalid_json", 2)


def test_a_generic_stream_is_not_held_to_json() -> None:
    body = b"data: plain text\n\ndata: more\n\ndata: [DONE]\n\n"
    assert found(drive(body, [], provider="generic")) == []


def test_tool_args_invalid_when_the_call_ends_on_the_terminal() -> None:
    """Anthropic's own SDK fixture: max_tokens stops the tool JSON half-way, and the
    message ends with no content_block_stop for it (the call ends at message_stop)."""
    body = fixture_bytes("anthropic_sdkfixture_incomplete_partial_json_response.txt") + b"\n\n"
    names = [sse_field(block, "event") for block in body.split(b"\n\n") if block.strip()]
    assert names[-1] == ["message_stop"]
    session = drive(body, [], provider="anthropic")
    assert found(session) == both("tool_args_invalid", len(names))
    assert integrity_of(session) == "intact"  # the client was sent what the upstream sent


def test_valid_tool_arguments_are_quiet() -> None:
    assert found(drive(TOOL_ONLY, [])) == []


def integrity_of(session: Session) -> str:
    return str(session.summary(0.0)["integrity"])


# --------------------------------------------------------------------------- caused by a fault


def test_a_duplicated_terminal_is_a_sent_side_breach() -> None:
    assert chat(chunk("a") + DONE, [{"duplicate": {"kind": "terminal"}}]) == [
        ("sent", "terminal_twice", 3)
    ]


def test_a_delta_injected_after_the_terminal() -> None:
    late = {"data": {"choices": [{"index": 0, "delta": {"content": " late"}}]}}
    faults = [{"inject": {"after": "terminal", "event": late}}]
    assert chat(chunk("a") + DONE, faults) == [("sent", "after_terminal", 3)]


def test_a_cut_before_the_terminal_is_missing_it_on_the_sent_side_only() -> None:
    faults = [{"cut": {"before": "terminal", "how": "close"}}]
    assert chat(chunk("a") + chunk("b") + DONE, faults) == [("sent", "terminal_missing", 2)]


def test_a_duplicated_event_with_an_id() -> None:
    body = b"id: 1\n" + chunk("a") + b"id: 2\n" + chunk("b") + DONE
    assert chat(body, [{"duplicate": {"nth": 2}}]) == [("sent", "duplicate_id", 3)]


def test_a_corrupted_event_is_invalid_json_on_the_sent_side() -> None:
    faults = [{"corrupt": {"kind": "delta", "nth": 2, "mode": "truncate_json"}}]
    assert chat(chunk("a") + chunk("b") + DONE, faults) == [("sent", "invalid_json", 2)]


def test_a_dropped_tool_fragment_leaves_invalid_arguments() -> None:
    """The chat tool-call capture without its fragment '{"': the call's arguments are
    checked when its choice finishes (the finish chunk, event 8 once one is gone)."""
    session = drive(TOOL_ONLY, [{"drop": {"kind": "tool_delta", "nth": 2}}])
    finish = [i for i, e in enumerate(TOOL_ONLY.events) if b'"finish_reason":"tool_calls"' in e]
    assert finish == [8]  # 0-based upstream position: sent ordinal 9 - 1 dropped = 8
    assert found(session) == [("sent", "tool_args_invalid", 8)]


def test_the_upstream_side_says_nothing_of_an_end_it_did_not_read() -> None:
    """The client left mid-stream: the proxy stopped reading the upstream, so a missing
    terminal there is not the upstream's breach; the client still missed it."""
    session = drive(chunk("a") + chunk("b"), [], provider="openai-chat", end="client_gone")
    assert found(session) == [("sent", "terminal_missing", 2)]


def test_an_upstream_that_fails_mid_body_misses_its_terminal() -> None:
    session = drive(chunk("a"), [], provider="openai-chat", end="upstream_failed")
    assert found(session) == both("terminal_missing", 1)


def test_violations_are_capped_per_side() -> None:
    body = chunk("a") + DONE + chunk("x") * (MAX_VIOLATIONS + 5)
    got = chat(body)
    assert len(got) == 2 * MAX_VIOLATIONS
    assert got[MAX_VIOLATIONS - 1] == ("upstream", "after_terminal", MAX_VIOLATIONS + 2)


# --------------------------------------------------------------------------- the envelope

SEQ = {"sequence": "/sequence_number"}


def responses(faults: list[dict[str, Any]], envelope: dict[str, str] | None = SEQ) -> Found:
    return found(drive(OPENAI_RESPONSES[0], faults, envelope=envelope))


def test_the_responses_capture_keeps_its_sequence() -> None:
    assert responses([]) == []


def test_a_dropped_event_is_a_sequence_gap() -> None:
    # Upstream event 5 (sequence_number 4) is gone: sent event 5 carries 5.
    assert responses([{"drop": {"nth": 5}}]) == [("sent", "sequence_gap", 5)]


def test_a_duplicated_event_is_a_sequence_repeat() -> None:
    assert responses([{"duplicate": {"nth": 5}}]) == [("sent", "sequence_repeat", 6)]


def test_reordered_events_go_backwards() -> None:
    # Events 5 and 6 swapped: 0 1 2 3 5 4 6 ... (a gap at 5, then 4 goes back).
    found_ = responses([{"reorder": {"nth": 5, "window": 2}}])
    assert found_ == [("sent", "sequence_gap", 5), ("sent", "sequence_backwards", 6)]


def test_no_envelope_no_sequence_rules() -> None:
    assert responses([{"drop": {"nth": 5}}], envelope=None) == []


def test_stream_changed_and_sequence_rules_in_the_upstream() -> None:
    def ev(stream: str, seq: int) -> bytes:
        body = {"streamId": stream, "meta": {"seq": seq}, "choices": []}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    body = ev("s1", 1) + ev("s1", 2) + ev("s2", 3) + ev("s1", 5) + ev("s1", 5) + ev("s1", 4)
    body += DONE
    envelope = {"stream": "/streamId", "sequence": "/meta/seq"}
    session = drive(body, [], provider="openai-chat", envelope=envelope)
    expected = [
        ("stream_changed", 3),
        ("sequence_gap", 4),
        ("sequence_repeat", 5),
        ("sequence_backwards", 6),
    ]
    assert found(session) == [("upstream", r, n) for r, n in expected] + [
        ("sent", r, n) for r, n in expected
    ]


def test_an_injected_event_of_another_stream_is_a_sent_side_stream_change() -> None:
    def ev(content: str) -> bytes:
        body = {"streamId": "s1", "choices": [{"index": 0, "delta": {"content": content}}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    foreign = {"data": {"streamId": "s2", "choices": []}}
    session = drive(
        ev("a") + ev("b") + DONE,
        [{"inject": {"after": 1, "event": foreign}}],
        provider="openai-chat",
        envelope={"stream": "/streamId"},
    )
    assert found(session) == [("sent", "stream_changed", 2)]


def responses_under_a_sequence_envelope(scenario: str) -> Session:
    """The Responses capture through a session with ``--envelope sequence=…`` under
    ``scenario`` (its fifth event dropped), to the end."""
    envelope = Envelope(sequence="/sequence_number")
    session = Session(
        "r",
        scenario=parse_scenario(scenario, "<s>", default_name="s"),
        seed=1,
        path="/v1/responses",
        envelope=envelope,
    )
    session.start(0.0)
    session.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    for send in session.feed(OPENAI_RESPONSES[0].body, 0.0):
        assert isinstance(send, Send)
        session.wrote(send, 0.0)
    assert session.body_end(0.0) == []
    session.finish()
    return session


def test_the_sessions_envelope_applies_when_the_scenario_has_none() -> None:
    session = responses_under_a_sequence_envelope("faults: [{drop: {nth: 5}}]")
    assert found(session) == [("sent", "sequence_gap", 5)]


@pytest.mark.parametrize(
    ("pointer", "tokens"),
    [("", ()), ("/a", ("a",)), ("/a~1b/~0c/0", ("a/b", "~c", "0")), ("/", ("",))],
)
def test_json_pointers(pointer: str, tokens: tuple[str, ...]) -> None:
    assert parse_pointer(pointer) == tokens


def test_resolving_a_pointer() -> None:
    doc = {"a/b": [10, {"~c": 7}]}
    assert resolve(doc, parse_pointer("/a~1b/1/~0c")) == 7
    missing = resolve(doc, parse_pointer("/a~1b/5"))
    assert missing is resolve(doc, parse_pointer("/x")) and missing is not None
    assert resolve(doc, parse_pointer("/a~1b/01")) is missing  # no leading zeros


@pytest.mark.parametrize("bad", ["a/b", "/a~2", "/~"])
def test_bad_pointers_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="JSON pointer"):
        parse_pointer(bad)


def test_the_envelope_flag_form() -> None:
    assert Envelope.parse("stream=/streamId,sequence=/seq") == Envelope("/streamId", "/seq")
    assert Envelope.parse("sequence=/seq") == Envelope(None, "/seq")
    for bad in ["", "stream", "id=/x", "stream=x"]:
        with pytest.raises(ValueError):
            Envelope.parse(bad)


def test_a_scenario_envelope_wins_over_the_sessions() -> None:
    session = responses_under_a_sequence_envelope(
        "faults: [{drop: {nth: 5}}]\nenvelope: {stream: /response/id}\n"
    )
    assert found(session) == []  # (no sequence rule: the scenario names only a stream)


def test_the_scenario_key_is_checked_with_its_line() -> None:
    text = "faults: []\nenvelope:\n  stream: nope\n"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "s.yaml", default_name="s")
    assert "s.yaml:3: envelope.stream:" in str(info.value)
    assert "must start with '/'" in str(info.value)
    with pytest.raises(ScenarioError, match="give stream, sequence or both"):
        parse_scenario("faults: []\nenvelope: {}\n", "s.yaml", default_name="s")
    ok = parse_scenario("faults: []\nenvelope: {sequence: /seq}\n", "s.yaml", default_name="s")
    assert ok.as_dict()["envelope"] == {"stream": None, "sequence": "/seq"}
    again = parse_scenario(json.dumps(ok.as_dict()), "<again>", read_only=True)
    assert again.envelope == ok.envelope


def test_every_rule_is_tested_here() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    for rule in RULES:
        assert f'"{rule}"' in source, rule


def test_a_violation_line_counts_in_the_metric() -> None:
    metrics = Metrics()
    line = {"event": "violation", "request_id": "r-1", "side": "sent", "rule": "sequence_gap"}
    metrics({**line, "at_event": 5})
    metrics({**line, "at_event": 9})
    metrics({**line, "side": "upstream", "rule": "terminal_twice", "at_event": 3})
    name = "chaosproxy_contract_violations_total"
    assert value(metrics, name, side="sent", rule="sequence_gap") == 2
    assert value(metrics, name, side="upstream", rule="terminal_twice") == 1
    assert not value(metrics, name, side="upstream", rule="sequence_gap")


def test_the_envelope_setting_takes_the_flag_form_in_python_too() -> None:
    config = Config(envelope="stream=/id,sequence=/seq")  # type: ignore[arg-type]
    assert config.envelope == Envelope("/id", "/seq")
    with pytest.raises(ConfigError, match="--envelope: bad envelope item"):
        Config(envelope="seq=/x")  # type: ignore[arg-type]
