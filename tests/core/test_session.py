"""The request lifecycle (``core/session.py``) driven with no event loop: every
transition of the table, the illegal ones included, and what each decision returns,
as inputs → outputs with exact expectations."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import orjson
import pytest

from chaosproxy.core.actions import Cut, CutRequest, HoldRequest, Respond, Send, Sleep
from chaosproxy.core.lifecycle import SessionEvent
from chaosproxy.core.session import (
    RAW_SKIP_REASON,
    TRANSITIONS,
    Phase,
    Session,
    SessionError,
    forwarded_request_headers,
)
from chaosproxy.scenario import Scenario, parse_scenario

SSE = [("Content-Type", "text/event-stream")]
E1 = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
E2 = b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
CHAT = "/v1/chat/completions"


def scenario(text: str, name: str = "s") -> Scenario:
    return parse_scenario(text, f"<{name}>", default_name=name)


def session(
    text: str | None = "faults: []", *, path: str = CHAT, active: bool = True, seed: int = 7
) -> Session:
    chosen = None if text is None else scenario(text)
    return Session("r-1", scenario=chosen, active=active, seed=seed, path=path)


def at_body(text: str | None = "faults: []", headers: list[tuple[str, str]] = SSE) -> Session:
    s = session(text)
    assert s.start(0.0) == []
    s.response_head(200, "OK", headers)
    return s


# --------------------------------------------------------------------------- the table

#: A session brought to each phase.
PHASES: dict[Phase, Callable[[], Session]] = {
    Phase.START: lambda: session(),
    Phase.HTTP: lambda: _started(),
    Phase.BODY: lambda: at_body(),
    Phase.ENDED: lambda: _ended(),
}


def _started() -> Session:
    s = session()
    s.start(0.0)
    return s


def _ended() -> Session:
    s = at_body()
    s.finish()
    return s


#: Each event, as the shell reports it.
EVENTS: dict[str, Callable[[Session], object]] = {
    "start": lambda s: s.start(0.0),
    "refuse": lambda s: s.refuse(400, "no", 0.0),
    "respond": lambda s: s.respond(Respond(503, {}, b"")),
    "head": lambda s: s.response_head(200, "OK", SSE),
    "unavailable": lambda s: s.unavailable(502, "down"),
    "cut": lambda s: s.cut(Cut("abort")),
    "request_cut": lambda s: s.request_cut(CutRequest("reset"), 0),
    "hold_timeout": lambda s: s.hold_timeout("stall", 300.0),
    "upstream_failed": lambda s: s.upstream_failed("broke", 0.0),
    "finish": lambda s: s.finish(),
    "client_gone": lambda s: s.client_gone(),
    "shutdown": lambda s: s.shutdown(),
    "internal_error": lambda s: s.internal_error("bug"),
}


def test_every_event_is_in_the_table_or_refused_in_every_phase() -> None:
    assert {event for _, event in TRANSITIONS} == set(EVENTS)
    for phase, make in PHASES.items():
        for event, report in EVENTS.items():
            s = make()
            assert s.phase is phase
            before = s.outcome
            if (phase, event) not in TRANSITIONS:
                with pytest.raises(SessionError, match=f"{event} is not allowed in phase"):
                    report(s)
                assert (s.phase, s.outcome) == (phase, before), (phase, event)
                continue
            report(s)
            if phase is Phase.ENDED:  # the first end stands
                assert (s.phase, s.outcome) == (Phase.ENDED, "completed"), event
            else:
                assert s.phase is TRANSITIONS[(phase, SessionEvent(event))], (phase, event)


@pytest.mark.parametrize(
    ("phase", "event", "outcome"),
    [
        (Phase.START, "refuse", "proxy_error"),
        (Phase.START, "client_gone", "client_gone"),
        (Phase.HTTP, "unavailable", "upstream_error"),
        (Phase.HTTP, "cut", "cut"),
        (Phase.HTTP, "request_cut", "cut"),
        (Phase.HTTP, "hold_timeout", "cut"),
        (Phase.HTTP, "shutdown", "shutdown"),
        (Phase.BODY, "finish", "completed"),
        (Phase.BODY, "cut", "cut"),
        (Phase.BODY, "hold_timeout", "cut"),
        (Phase.BODY, "upstream_failed", "upstream_error"),
        (Phase.BODY, "client_gone", "client_gone"),
        (Phase.BODY, "shutdown", "shutdown"),
        (Phase.BODY, "internal_error", "proxy_error"),
    ],
)
def test_each_ending_sets_its_outcome_once(phase: Phase, event: str, outcome: str) -> None:
    s = PHASES[phase]()
    EVENTS[event](s)
    assert (s.phase, s.outcome) == (Phase.ENDED, outcome)
    for later in ("client_gone", "shutdown", "internal_error"):
        EVENTS[later](s)
        assert s.outcome == outcome


def test_body_calls_outside_the_body_are_refused() -> None:
    s = session()
    with pytest.raises(SessionError):
        s.feed(b"x", 0.0)
    s.start(0.0)
    calls: list[Callable[[], object]] = [
        lambda: s.feed(b"x", 0.0),
        lambda: s.poll(0.0),
        lambda: s.body_end(0.0),
    ]
    for call in calls:
        with pytest.raises(SessionError, match="not allowed in phase HTTP"):
            call()
    with pytest.raises(SessionError, match="a write is not allowed"):
        s.wrote(Send(b"x"), 0.0)
    with pytest.raises(SessionError, match="summary"):
        s.summary(0.0)
    s.response_head(200, "OK", SSE)
    s.finish()
    with pytest.raises(SessionError):
        s.feed(b"x", 0.0)


# --------------------------------------------------------------------------- passthrough


def test_passthrough_keeps_the_body_and_its_length_and_frames_nothing() -> None:
    s = session(None)
    assert s.start(0.0) == []
    head = s.response_head(
        200,
        "OK",
        [
            ("Content-Type", "text/event-stream"),
            ("Content-Length", "12"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "close"),
            ("X-Upstream", "1"),
        ],
    )
    assert head.framed is False
    assert head.headers == [
        ("Content-Type", "text/event-stream"),
        ("X-Upstream", "1"),
        ("Content-Length", "12"),
        ("X-Chaos-Request-Id", "r-1"),
        ("X-Chaos-Scenario", "none"),
        ("X-Chaos-Seed", "7"),
    ]
    assert s.feed(E1 + E2[:5], 0.001) == [Send(E1 + E2[:5])]
    assert s.body_end(0.002) == []
    s.finish()
    assert s.summary(0.003) == {
        "outcome": "completed",
        "status": 200,
        "bytes": 0,
        "frames": 0,
        "content_type": "text/event-stream",
        "ttfb_ms": None,
        "max_gap_ms": 0.0,
        "duration_ms": 3.0,
    }


def test_an_inactive_scenario_is_reported_and_checked_but_not_applied() -> None:
    # Framed (its answer is known to the verdicts), but the drop does not apply.
    s = session("faults: [{drop: {nth: 1}}]", active=False)
    assert s.start(0.0) == []
    head = s.response_head(200, "OK", SSE)
    assert head.framed is True
    assert ("X-Chaos-Scenario", "s") in head.headers
    [send] = s.feed(E1, 0.0)
    assert isinstance(send, Send)
    assert send.data == E1 and send.faults == ()
    s.wrote(send, 0.0)
    s.finish()
    summary = s.summary(0.0)
    assert "faults_applied" not in summary and "faults_skipped" not in summary
    assert summary["events_in"] == summary["events_out"] == 1
    assert summary["answer"]["sound"] is False  # it ended without a terminal event


# --------------------------------------------------------------------------- the HTTP stage


def test_a_canned_answer_is_the_http_stage_and_nothing_after_it_runs() -> None:
    s = session(
        "faults:\n"
        "  - delay: {headers: 250ms}\n"
        "  - status: {code: 429, headers: {Retry-After: 1}, body: slow down}\n"
        "  - cut: {before: headers}\n"
    )
    actions = s.start(0.0)
    assert actions == [
        Sleep(0.25, "delay"),
        Respond(
            429, {"Retry-After": "1", "Content-Type": "text/plain; charset=utf-8"}, b"slow down"
        ),
    ]
    head = s.respond(actions[1])  # type: ignore[arg-type]
    assert head.status == 429
    assert ("Content-Length", "9") in head.headers
    assert s.wrote(Send(b"slow down"), 0.3) == {"seq": 0, "offset": 0, "size": 9, "t_ms": 300.0}
    s.finish()
    end = s.summary(0.3)
    assert (end["outcome"], end["status"], end["bytes"], end["frames"]) == ("completed", 429, 9, 1)
    assert end["faults_applied"] == {"delay": 1, "status": 1}
    assert end["faults_skipped"] == [
        {"fault": "cut", "position": 2, "reason": "the request never reached the upstream"}
    ]


def test_a_cut_before_headers_ends_the_request_as_cut() -> None:
    s = session("faults: [{cut: {before: headers, how: reset}}]")
    (cut,) = s.start(0.0)
    assert isinstance(cut, Cut)
    assert s.cut(cut) == {"action": "cut", "how": "reset", "fault": "cut", "before": "headers"}
    end = s.summary(0.0)
    assert (end["outcome"], end["status"], end["faults_applied"]) == ("cut", 0, {"cut": 1})


def test_request_faults_come_first_and_a_request_cut_ends_the_request_there() -> None:
    s = session(
        "faults:\n"
        "  - delay: {headers: 2s}\n"
        "  - request_delay: {duration: 500ms}\n"
        "  - request_cut: {after_bytes: 10, how: close}\n"
        "  - status: {code: 503}\n"
    )
    assert s.start(0.0) == [
        HoldRequest(0.5, fault="request_delay"),
        CutRequest("close", 10, fault="request_cut"),
    ]
    assert s.request_held(HoldRequest(0.5)) == {
        "action": "request_delay",
        "seconds": 0.5,
        "fault": "request_delay",
    }
    assert s.phase is Phase.HTTP  # a hold changes nothing
    assert s.request_cut(CutRequest("close", 10), 4) == {
        "action": "request_cut",
        "how": "close",
        "fault": "request_cut",
        "after_bytes": 10,
        "received": 4,
    }
    s.client_gone()  # the connection it cut, reported again: the cut stands
    summary = s.summary(1.0)
    assert (summary["outcome"], summary["stage"], summary["status"]) == ("cut", "request", 0)
    assert summary["faults_applied"] == {"request_delay": 1, "request_cut": 1}
    assert [f["fault"] for f in summary["faults_skipped"]] == ["delay", "status"]
    assert "answer" not in summary and "integrity" not in summary


def test_a_held_request_goes_on_to_the_http_faults() -> None:
    s = session("faults:\n  - status: {code: 429}\n  - request_delay: {duration: 1s}\n")
    actions = s.start(0.0)
    assert [type(a).__name__ for a in actions] == ["HoldRequest", "Respond"]


def test_an_unreachable_upstream_is_the_upstreams_fault_with_a_reason() -> None:
    s = session()
    s.start(0.0)
    answer = s.unavailable(502, "upstream unreachable: refused", "unreachable")
    assert answer.status == 502
    assert orjson.loads(answer.body) == {
        "error": {"type": "chaosproxy_error", "message": "upstream unreachable: refused"}
    }
    assert answer.headers["X-Chaos-Proxy-Error"] == "upstream unreachable: refused"
    assert answer.headers["X-Chaos-Request-Id"] == "r-1"
    end = s.summary(0.01)
    assert (end["outcome"], end["status"], end["error"], end["stage"], end["reason"]) == (
        "upstream_error",
        502,
        "upstream unreachable: refused",
        "connect",
        "unreachable",
    )


def test_a_refused_request_is_labelled_with_the_name_it_asked_for() -> None:
    s = Session("r-2", scenario=None, seed=1, path="/", active=False, label="nope")
    answer = s.refuse(400, "unknown scenario 'nope'", 5.0)
    assert answer.status == 400
    assert answer.headers["X-Chaos-Scenario"] == "nope"
    end = s.summary(5.0)
    assert (end["outcome"], end["status"]) == ("proxy_error", 400)


def test_an_internal_error_is_a_500_before_the_head_and_unclean_after() -> None:
    s = session()
    s.start(0.0)
    assert s.internal_error("internal error: RuntimeError: x") is False
    assert s.error_answer().status == 500
    assert s.summary(0.0)["status"] == 500
    t = at_body()
    assert t.internal_error("internal error: RuntimeError: y") is True
    with pytest.raises(SessionError):
        t.error_answer()  # the head is out: no answer, only an unclean end
    assert t.summary(0.0)["status"] == 200


# --------------------------------------------------------------------------- the body


def test_a_framed_body_is_decided_once_and_accounted_per_write() -> None:
    s = at_body("faults: [{duplicate: {kind: delta, nth: 2}}]")
    assert (s.format, s.provider) == ("sse", "openai-chat")
    sends = s.feed(E1 + E2 + DONE[:4], 0.010)
    assert [a.data for a in sends if isinstance(a, Send)] == [E1, E2, E2]
    lines = [s.wrote(a, t) for a, t in zip(sends, (0.010, 0.012, 0.020), strict=True)]  # type: ignore[arg-type]
    assert lines[0] == {
        "seq": 0, "offset": 0, "size": len(E1), "t_ms": 10.0,
        "events": [1], "kinds": ["delta"], "faults": [],
    }  # fmt: skip
    assert lines[2]["faults"] == ["duplicate"]
    assert (lines[2]["seq"], lines[2]["offset"]) == (2, len(E1) + len(E2))
    (last,) = s.feed(DONE[4:], 0.030)
    assert isinstance(last, Send) and last.data == DONE
    s.wrote(last, 0.030)
    assert s.body_end(0.031) == []
    s.finish()
    end = s.summary(0.040)
    assert end == {
        "outcome": "completed",
        "status": 200,
        "bytes": len(E1) + 2 * len(E2) + len(DONE),
        "frames": 4,
        "content_type": "text/event-stream",
        "provider": "openai-chat",
        "format": "sse",
        "events_in": 3,
        "events_out": 4,
        "faults_applied": {"duplicate": 1},
        "faults_skipped": [],
        "ttfb_ms": 10.0,
        "max_gap_ms": pytest.approx(10.0),
        "duration_ms": 40.0,
        # E2 ("b") went out twice: the client was sent "abb", the upstream meant "ab".
        "integrity": "altered",
        "content_integrity": "altered",
        "text_sha256": {
            "upstream": hashlib.sha256(b"ab").hexdigest(),
            "sent": hashlib.sha256(b"abb").hexdigest(),
        },
        # The answer: complete but altered, and a fault a client may object to was sent.
        "answer": {
            "generation": "r-1",
            "connections": 1,
            "content": "altered",
            "prefix": False,
            "sound": False,
            "defect": "duplicate",
            "defect_after": 2,  # the duplicate went out after "ab"
            "text_sha256": {
                "clean": hashlib.sha256(b"ab").hexdigest(),
                "sent": hashlib.sha256(b"abb").hexdigest(),
            },
        },
    }


def test_the_provider_comes_from_the_first_event_when_the_path_says_nothing() -> None:
    s = session("faults: []", path="/proxy/stream")
    s.start(0.0)
    s.response_head(200, "OK", SSE)
    assert s.provider == "auto"
    s.feed(b'event: message_start\ndata: {"type":"message_start"}\n\n', 0.0)
    assert s.provider == "anthropic"
    assert at_body().provider == "openai-chat"  # from the path


def test_a_scenario_format_overrides_the_content_type() -> None:
    s = at_body("format: ndjson\nfaults: [{drop: {nth: 1}}]", [("Content-Type", "text/plain")])
    assert s.format == "ndjson"
    sends = s.feed(b'{"a":1}\n{"b":2}\n', 0.0)
    assert [a.data for a in sends if isinstance(a, Send)] == [b'{"b":2}\n']


def test_event_faults_on_a_raw_body_are_skipped_with_the_reason() -> None:
    s = at_body(
        "faults: [{drop: {nth: 1}}, {rechunk: {size: 2}}]", [("Content-Type", "text/plain")]
    )
    assert s.format == "raw"
    assert [a.data for a in s.feed(b"abcde", 0.0) if isinstance(a, Send)] == [b"ab", b"cd", b"e"]
    s.finish()
    end = s.summary(0.0)
    assert end["faults_applied"] == {"rechunk": 1}  # one write, split
    assert end["faults_skipped"] == [{"fault": "drop", "position": 0, "reason": RAW_SKIP_REASON}]


def test_an_encoded_body_is_not_framed() -> None:
    s = at_body("faults: []", [*SSE, ("Content-Encoding", "gzip")])
    assert s.format == "raw"
    s.finish()
    assert s.summary(0.0)["content_encoding"] == "gzip"


def test_header_faults_edit_the_head_and_compress_names_its_encoding() -> None:
    s = at_body(
        "faults:\n"
        "  - headers: {set: {Content-Type: text/plain}, remove: [X-Upstream]}\n"
        "  - compress: {encoding: gzip}\n",
        [*SSE, ("X-Upstream", "1")],
    )
    head = s.head
    assert head is not None
    names = {k.lower(): v for k, v in head.headers}
    assert names["content-type"] == "text/plain"
    assert names["content-encoding"] == "gzip"
    assert "x-upstream" not in names
    assert s.format == "sse"  # decided from the upstream's head, before the edit


def test_an_upstream_failure_mid_event_salvages_what_arrived() -> None:
    s = at_body()
    s.feed(E1 + E2[:9], 0.0)
    salvage = s.upstream_failed("upstream failed mid-body: reset", 0.0, reason="closed early")
    assert [a.data for a in salvage] == [E2[:9]]
    with pytest.raises(SessionError):  # the pump stops feeding once the session has ended
        s.upstream_failed("again", 0.0)
    end = s.summary(0.0)
    assert (end["outcome"], end["error"], end["stage"], end["reason"]) == (
        "upstream_error",
        "upstream failed mid-body: reset",
        "body",
        "closed early",
    )


def test_a_cut_from_the_pipeline_ends_the_stream_as_cut_even_if_the_client_leaves() -> None:
    s = at_body("faults: [{cut: {after: 1, how: close}}]")
    actions = s.feed(E1 + E2, 0.0)
    assert [type(a) for a in actions] == [Send, Cut]
    s.cut(actions[1])  # type: ignore[arg-type]
    s.client_gone()
    assert s.outcome == "cut"


def test_a_hang_is_a_sleep_forever() -> None:
    s = at_body("faults: [hang]")
    s.feed(E1, 0.0)
    (sleep,) = s.body_end(0.0)
    assert isinstance(sleep, Sleep) and math.isinf(sleep.seconds)


def test_a_hold_over_the_hold_timeout_is_a_cut_with_its_reason_never_a_clean_end() -> None:
    s = at_body("faults: [hang]")
    s.wrote(s.feed(E1 + DONE, 0.0)[0], 0.0)  # type: ignore[arg-type]
    (sleep,) = s.body_end(0.0)
    assert isinstance(sleep, Sleep) and math.isinf(sleep.seconds)
    action = s.hold_timeout(sleep.fault, 2.0)
    assert action == {"action": "cut", "how": "abort", "fault": "hang", "reason": "hold timeout"}
    s.client_gone()  # the abort makes the client go: the first end stands
    end = s.summary(2.0)
    assert (end["outcome"], end["reason"]) == ("cut", "hold timeout")
    assert end["error"] == "the hang fault held the response 2 s with nothing sent"
    assert end["integrity"] == "broken"  # never a clean end
    assert "stage" not in end


def test_a_hold_in_the_http_stage_can_time_out_too() -> None:
    s = session("faults: [{delay: {headers: 10m}}]")
    (sleep,) = s.start(0.0)
    assert sleep == Sleep(600.0, fault="delay")
    action = s.hold_timeout(sleep.fault, 300.0)
    assert action["before"] == "headers"  # nothing of the response went out
    end = s.summary(300.0)
    assert (end["outcome"], end["reason"], end["status"]) == ("cut", "hold timeout", 0)


def test_forwarded_request_headers_drop_what_is_not_the_upstreams() -> None:
    out = forwarded_request_headers(
        [
            ("Host", "proxy"),
            ("Connection", "keep-alive, X-Private"),
            ("X-Private", "1"),
            ("Keep-Alive", "5"),
            ("X-Chaos-Scenario", "s"),
            ("Content-Length", "3"),
            ("Accept-Encoding", "gzip"),
            ("Authorization", "Bearer k"),
            ("X-Keep", "a"),
            ("X-Keep", "b"),
        ]
    )
    assert out == [
        ("Authorization", "Bearer k"),
        ("X-Keep", "a"),
        ("X-Keep", "b"),
        ("Accept-Encoding", "identity"),
    ]


def test_an_untrusted_clients_mock_knobs_are_not_forwarded() -> None:
    given = [("X-Mock-Tokens", "100000"), ("x-mock-interval-ms", "60000"), ("X-Keep", "a")]
    assert forwarded_request_headers(given) == [*given, ("Accept-Encoding", "identity")]
    assert forwarded_request_headers(given, trusted=False) == [
        ("X-Keep", "a"),
        ("Accept-Encoding", "identity"),
    ]
