"""The parts of a session, each on its own (core/lifecycle.py, core/head.py,
core/body.py, core/summary.py): inputs in, exact outputs out. tests/core/test_session.py
drives them together through the facade."""

from __future__ import annotations

import math
import random
from typing import get_args

import pytest

from chaosproxy.core.actions import Send
from chaosproxy.core.body import BENIGN, BodyPath, Soundness
from chaosproxy.core.events import Event
from chaosproxy.core.faults import build_faults
from chaosproxy.core.frames import Frame
from chaosproxy.core.head import (
    body_format,
    chaos_headers,
    client_headers,
    edit_headers,
    error_answer,
)
from chaosproxy.core.lifecycle import (
    OUTCOMES,
    TRANSITIONS,
    WORKER_LOST,
    Lifecycle,
    Phase,
    SessionError,
    SessionEvent,
)
from chaosproxy.core.providers import get_profile
from chaosproxy.core.records import Outcome
from chaosproxy.core.summary import Tally, round_ms, worker_lost_end
from chaosproxy.scenario import parse_scenario

# --------------------------------------------------------------------------- lifecycle


def test_every_outcome_is_set_by_an_event_but_worker_lost() -> None:
    # worker_lost is written by a supervisor for a worker's requests, never by a session.
    assert set(get_args(Outcome)) == {*OUTCOMES.values(), WORKER_LOST}
    assert WORKER_LOST not in OUTCOMES.values()
    assert worker_lost_end(1234.56789, "worker 1 killed by SIGKILL") == {
        "outcome": "worker_lost",
        "status": 0,
        "bytes": 0,
        "frames": 0,
        "duration_ms": 1234.568,
        "reason": "worker 1 killed by SIGKILL",
    }
    assert worker_lost_end(-0.5, "exit code 3")["duration_ms"] == 0.0  # (clocks apart)


def test_the_events_are_typed_and_still_their_names() -> None:
    assert SessionEvent("cut") is SessionEvent.CUT
    assert f"{SessionEvent.REQUEST_CUT}" == "request_cut"
    assert {event for _, event in TRANSITIONS} == set(SessionEvent)
    assert set(OUTCOMES) == {e for (_, e), target in TRANSITIONS.items() if target is Phase.ENDED}
    with pytest.raises(ValueError):
        SessionEvent("finsh")  # a typo is an error where it is written


def test_a_lifecycle_ends_once_and_the_first_end_stands() -> None:
    life = Lifecycle()
    assert (life.phase, life.outcome, life.ended) == (Phase.START, None, False)
    assert life.move(SessionEvent.START) is False
    assert life.move(SessionEvent.HEAD) is False
    assert life.phase is Phase.BODY
    assert life.move(SessionEvent.CUT) is True
    assert (life.phase, life.outcome, life.ended) == (Phase.ENDED, "cut", True)
    assert life.move(SessionEvent.CLIENT_GONE) is False  # allowed, and changes nothing
    assert life.outcome == "cut"


def test_a_lifecycle_refuses_what_the_table_does_not_allow() -> None:
    life = Lifecycle()
    with pytest.raises(SessionError, match=r"^finish is not allowed in phase START$"):
        life.move(SessionEvent.FINISH)
    assert (life.phase, life.outcome) == (Phase.START, None)


# --------------------------------------------------------------------------- head


def test_client_headers_drop_hop_by_hop_and_keep_length_only_unframed() -> None:
    upstream = [
        ("Content-Type", "text/event-stream"),
        ("Transfer-Encoding", "chunked"),
        ("Connection", "keep-alive"),
        ("Content-Length", "12"),
        ("X-Request-Id", "u-1"),
    ]
    assert client_headers(upstream, framed=True) == [
        ("Content-Type", "text/event-stream"),
        ("X-Request-Id", "u-1"),
    ]
    assert client_headers(upstream, framed=False) == [
        ("Content-Type", "text/event-stream"),
        ("X-Request-Id", "u-1"),
        ("Content-Length", "12"),
    ]


def test_chaos_headers_name_the_request() -> None:
    assert chaos_headers("r-1", "dup", 42) == [
        ("X-Chaos-Request-Id", "r-1"),
        ("X-Chaos-Scenario", "dup"),
        ("X-Chaos-Seed", "42"),
    ]


@pytest.mark.parametrize(
    ("headers", "scenario_format", "expected"),
    [
        ([("Content-Type", "text/event-stream")], "auto", "sse"),
        ([("content-type", "application/x-ndjson")], "auto", "ndjson"),
        ([("Content-Type", "application/json")], "auto", "raw"),
        ([("Content-Type", "text/event-stream"), ("Content-Encoding", "gzip")], "auto", "raw"),
        ([("Content-Type", "text/event-stream"), ("Content-Encoding", "identity")], "auto", "sse"),
        ([("Content-Type", "application/json")], "ndjson", "ndjson"),
    ],
)
def test_the_body_format_comes_from_the_scenario_else_the_content_type(
    headers: list[tuple[str, str]], scenario_format: str, expected: str
) -> None:
    assert body_format(headers, scenario_format) == expected


def test_edit_headers_runs_the_head_editing_faults_and_names_the_first() -> None:
    scenario = parse_scenario(
        "name: h\nfaults:\n  - headers: {set: {Content-Type: text/plain}, remove: [X-A]}\n"
        "  - drop: {nth: 1}\n",
        source="h.yaml",
    )
    faults = build_faults(scenario.faults, 1, "raw", get_profile("generic"))
    headers = [("Content-Type", "text/event-stream"), ("X-A", "1"), ("X-B", "2")]
    assert edit_headers(faults, 200, headers) == (
        [("X-B", "2"), ("Content-Type", "text/plain")],  # (set after the rest)
        "headers",
    )
    assert edit_headers(faults[1:], 200, headers) == (headers, None)


def test_an_error_answer_is_json_with_its_reason_in_a_header() -> None:
    answer = error_answer(400, "unknown scenario 'x'", [("X-Chaos-Seed", "1")])
    assert answer.status == 400
    assert answer.body == (
        b'{"error":{"type":"chaosproxy_error","message":"unknown scenario \'x\'"}}'
    )
    assert answer.headers == {
        "Content-Type": "application/json; charset=utf-8",
        "X-Chaos-Proxy-Error": "unknown scenario 'x'",
        "X-Chaos-Seed": "1",
    }


# --------------------------------------------------------------------------- body


def _event(ordinal: int, group: tuple[int, int] | None = None) -> Event:
    return Event(Frame(b"data: x\n\n", data="x"), ordinal, frozenset({"delta"}), group=group)


def _whole(ev: Event, *faults: str) -> Send:
    return Send(ev.frame.raw, (ev,), 1, faults)


def test_soundness_finds_the_first_defect_only() -> None:
    sound = Soundness()
    for i in (1, 2, 3):
        sound.wrote(_whole(_event(i), "rechunk", "delay"))
    assert sound.defect is None
    sound.wrote(_whole(_event(5)))
    assert sound.defect == "a gap in the events"
    sound.wrote(_whole(_event(4), "duplicate"))
    assert sound.defect == "a gap in the events"  # the first stands


@pytest.mark.parametrize(
    ("ordinals", "defect"),
    [
        ([1, 2, 3], None),
        ([1, 3], "a gap in the events"),
        ([2, 1], "a gap in the events"),
        ([1, 2, 2], "events out of order"),
        ([0, 1, 0, 2], None),  # 0: made up by a fault, not an upstream event
    ],
)
def test_soundness_judges_the_order_events_end_in(ordinals: list[int], defect: str | None) -> None:
    sound = Soundness()
    for ordinal in ordinals:
        sound.wrote(_whole(_event(ordinal)))
    assert sound.defect == defect


def test_a_group_of_events_may_end_in_any_order() -> None:
    sound = Soundness()
    sound.wrote(_whole(_event(1)))
    sound.wrote(_whole(_event(3, group=(2, 3))))
    sound.wrote(_whole(_event(2, group=(2, 3))))
    assert sound.defect is None


def test_a_fault_that_changes_events_is_a_defect_and_benign_ones_are_not() -> None:
    assert {"rechunk", "coalesce", "delay", "stall"} <= BENIGN
    assert not {"drop", "duplicate", "mutate", "snapshot"} & BENIGN
    sound = Soundness()
    sound.wrote(_whole(_event(1), "rechunk", "mutate"))
    assert sound.defect == "mutate"


def test_a_body_path_gives_a_write_its_event_fields() -> None:
    path = BodyPath(
        [], "sse", get_profile("openai-chat"), max_size=1 << 20, record=None, envelope=None
    )
    assert (path.provider, path.unframed) == ("openai-chat", [])
    assert path.content is not None and path.pipeline.format == "sse"
    a, b = _event(1), _event(2)
    line = Tally().write(10, 0.0)
    path.wrote(Send(b"xx", (a, b), 2, ("coalesce",)), line)
    assert line == {
        "seq": 0,
        "offset": 0,
        "size": 10,
        "t_ms": 0.0,
        "events": [1, 2],
        "kinds": ["delta"],
        "faults": ["coalesce"],
    }
    assert path.content.sent.events == 2


def test_a_write_of_events_gets_its_line_made_whole_with_the_same_keys_in_order() -> None:
    """``Tally.write_events`` with ``BodyPath.judged`` (the session's way) gives the line
    ``Tally.write`` then ``BodyPath.wrote`` give: the same keys in the same order (the
    frame log's bytes follow it), the same counts."""
    one, other = (
        BodyPath(
            [], "sse", get_profile("openai-chat"), max_size=1 << 20, record=None, envelope=None
        ),
        BodyPath(
            [], "sse", get_profile("openai-chat"), max_size=1 << 20, record=None, envelope=None
        ),
    )
    a, b = Tally(), Tally()
    a.started = b.started = 1.0
    for n, now in [(1, 1.0123), (2, 1.5)]:
        send = Send(b"x" * n, (_event(n),), 1, ("duplicate",))
        grown = a.write(n, now)
        one.wrote(send, grown)
        events, kinds, faults = other.judged(send)
        made = b.write_events(n, now, events, kinds, faults)
        assert list(made.items()) == list(grown.items())
    assert made == {
        "seq": 1,
        "offset": 1,
        "size": 2,
        "t_ms": 500.0,
        "events": [2],
        "kinds": ["delta"],
        "faults": ["duplicate"],
    }
    assert (a.frames, a.bytes, a.ttfb_ms) == (b.frames, b.bytes, b.ttfb_ms) == (2, 3, 12.3)
    assert one.content is not None and other.content is not None
    assert one.content.sent.events == other.content.sent.events == 2
    assert one.soundness.defect == other.soundness.defect == "duplicate"


def test_a_raw_body_leaves_out_the_faults_that_need_events() -> None:
    scenario = parse_scenario(
        "name: r\nfaults:\n  - drop: {nth: 1}\n  - rechunk: {size: 3}\n", source="r.yaml"
    )
    faults = build_faults(scenario.faults, 1, "raw", get_profile("generic"))
    path = BodyPath(faults, "raw", None, max_size=1 << 20, record=None, envelope=None)
    assert [f.name for f in path.unframed] == ["drop"]
    assert [f.name for f in path.pipeline.faults] == ["rechunk"]
    assert (path.content, path.provider) == (None, None)


# --------------------------------------------------------------------------- summary


def test_a_tally_numbers_the_writes_and_times_them() -> None:
    tally = Tally()
    tally.started = 10.0
    assert tally.write(5, 10.0314) == {"seq": 0, "offset": 0, "size": 5, "t_ms": 31.4}
    assert tally.write(7, 10.0520) == {"seq": 1, "offset": 5, "size": 7, "t_ms": 52.0}
    assert tally.write(1, 10.0530) == {"seq": 2, "offset": 12, "size": 1, "t_ms": 53.0}
    assert (tally.frames, tally.bytes, tally.ttfb_ms, tally.max_gap_ms) == (3, 13, 31.4, 20.6)
    assert tally.ms_since_start(10.088) == pytest.approx(88.0)


def test_round_ms_is_round_to_the_thousandth_float_for_float() -> None:
    """The write's ``t_ms`` is ``round(t, 3)`` exactly (the frame log's bytes depend
    on it), by a shorter way where the product by 1000 is far enough from a half."""
    rng = random.Random(34)
    cases = [0.0, -0.0, -1.5, 0.0005, 0.0015, 2.675, 1.0005, 1e12, 1e300, math.inf, 5e-324]
    for _ in range(200_000):
        cases.append(rng.random() * 10 ** rng.randint(-4, 10))  # anything
        half = (rng.randint(0, 10**9) + 0.5) / 1000  # a half of a thousandth, or next to it
        cases += [half, math.nextafter(half, 0.0), math.nextafter(half, math.inf)]
    # (as text: the sign of a zero counts; the log writes it)
    assert [repr(round_ms(t)) for t in cases] == [repr(round(t, 3)) for t in cases]
    assert math.isnan(round_ms(math.nan))


def test_a_tally_of_nothing() -> None:
    tally = Tally()
    assert (tally.frames, tally.bytes, tally.ttfb_ms, tally.max_gap_ms) == (0, 0, None, 0.0)
    assert tally.ms_since_start(5.0) == 0.0  # never started
