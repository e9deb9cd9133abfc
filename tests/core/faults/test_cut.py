"""The ``cut`` fault (docs/faults-transport.md, ``cut``): upstream bytes in, the exact
actions out, through the real Pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Action, Cut, Send, Sleep
from chaosproxy.core.events import Event
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.cut import CutConfig, CutFault, cut_prefix
from chaosproxy.core.faults.rechunk import RechunkConfig
from chaosproxy.core.frames import Frame
from chaosproxy.core.pipeline import Pipeline, fault_fallbacks
from chaosproxy.core.providers import get_profile
from tests.support import bedrock_stream as bs
from tests.support.fault_http import fault
from tests.support.fault_transport import (
    BODY,
    DONE,
    E1,
    E2,
    GENERIC,
    R,
    Spec,
    body,
    cut_detail,
    ordinals,
    run,
    script,
)


def event(raw: bytes, ordinal: int, kinds: str = "other") -> Event:
    """A hand-built SSE event (its data is the text after ``data: ``)."""
    data = raw.split(b"data: ", 1)[1].split(b"\n", 1)[0].decode() if b"data" in raw else None
    return Event(Frame(raw, data=data), ordinal, frozenset({kinds}))


ID_EVENT = 'id: 7\ndata: {"t":"né"}\n\n'.encode()


@pytest.mark.parametrize("how", ["close", "abort", "reset"])
def test_cut_after_n_at_the_boundary(how: str) -> None:
    out, p = run([("cut", CutConfig.model_validate({"after": 2, "how": how}))])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), ("cut", how, cut_detail(2, "boundary"))]
    assert out[-1] == Cut(how, fault="cut")  # type: ignore[arg-type]
    assert p.done
    assert p.summary() == ({"cut": 1}, [])


def test_cut_default_how_is_abort_and_after_zero_cuts_before_anything() -> None:
    out, _ = run([("cut", CutConfig(after=0))])
    assert script(out) == [("cut", "abort", cut_detail(0, "boundary"))]
    out, _ = run([("cut", CutConfig(after=0))], b"")
    assert script(out) == [("cut", "abort", cut_detail(0, "boundary"))]


@pytest.mark.parametrize(
    ("position", "sent"),
    [
        ("after_id", b"id: 7\n"),
        ("after_data", 'id: 7\ndata: {"t":"né"}\n'.encode()),
        ("mid_utf8", b'id: 7\ndata: {"t":"n\xc3'),
        ("mid_line", b"id"),  # "id: 7" is 5 bytes: 5 // 2
    ],
)
def test_cut_part_way_into_the_next_event(position: str, sent: bytes) -> None:
    cfg = CutConfig.model_validate({"after": 1, "position": position, "how": "reset"})
    out, _ = run([("cut", cfg)], E1 + ID_EVENT + DONE)
    assert script(out) == [
        (E1, 1, ()),
        (sent, 0, ("cut",)),
        ("cut", "reset", cut_detail(1, position)),
    ]
    assert ordinals(out[1]) == [2]


def test_cut_mid_line_sends_at_least_one_byte() -> None:
    cfg = CutConfig(after=0, position="mid_line")
    out, _ = run([("cut", cfg)], b"x\n", fmt="ndjson")
    assert script(out) == [(b"x", 0, ("cut",)), ("cut", "abort", cut_detail(0, "mid_line"))]


@pytest.mark.parametrize(
    ("position", "why"),
    [
        ("after_id", "the event has no id line"),
        ("mid_utf8", "the event has no multi-byte UTF-8 character"),
    ],
)
def test_cut_position_falls_back_to_the_boundary(position: str, why: str) -> None:
    cfg = CutConfig.model_validate({"after": 1, "position": position})
    out, _ = run([("cut", cfg)])
    detail = cut_detail(1, "boundary", requested=position, fallback=why)
    assert script(out) == [(E1, 1, ()), ("cut", "abort", detail)]


def test_cut_without_seek_reports_its_fallback_in_the_summary() -> None:
    cfg = CutConfig.model_validate({"after": 1, "position": "mid_utf8"})
    _, p = run([("cut", cfg)])
    assert fault_fallbacks(p.faults) == [
        {
            "fault": "cut",
            "position": 0,
            "requested": "mid_utf8",
            "actual": "boundary",
            "reason": "the event has no multi-byte UTF-8 character",
        }
    ]
    assert p.summary() == ({"cut": 1}, [])


ASCII = b'data: {"t":"a"}\n\n'


CHAT = get_profile("openai-chat")


def run_chat(cfg: CutConfig, data: bytes) -> tuple[list[Action], Pipeline]:
    """``data`` through a cut on an OpenAI Chat stream (whose ``[DONE]`` is terminal)."""
    p = Pipeline(build_faults([("cut", cfg)], 1, "sse", CHAT), "sse", CHAT)
    return p.feed(data, 0.0) + p.end(0.0), p


def test_cut_seek_passes_over_events_without_the_place() -> None:
    """seek: the cut falls inside the first event from the cut point on that has a
    multi-byte character (the third here), not on the boundary of the next one."""
    cfg = CutConfig.model_validate({"after": 1, "position": "mid_utf8", "seek": True})
    wide = 'data: {"t":"☕"}\n\n'.encode()
    out, p = run([("cut", cfg)], E1 + ASCII + wide + DONE)
    assert script(out) == [
        (E1, 1, ()),
        (ASCII, 1, ()),
        (b'data: {"t":"\xe2', 0, ("cut",)),
        ("cut", "abort", cut_detail(2, "mid_utf8")),
    ]
    assert ordinals(out[2]) == [3]
    assert fault_fallbacks(p.faults) == []


def test_cut_seek_without_a_place_cuts_before_the_terminal_event_and_says_why() -> None:
    cfg = CutConfig.model_validate({"after": 1, "position": "mid_utf8", "seek": True})
    out, p = run_chat(cfg, E1 + ASCII + E2 + DONE)
    why = "no event from event 2 to the terminal event has a multi-byte UTF-8 character"
    assert script(out) == [
        (E1, 1, ()),
        (ASCII, 1, ()),
        (E2, 1, ()),
        ("cut", "abort", cut_detail(3, "boundary", requested="mid_utf8", fallback=why)),
    ]
    assert fault_fallbacks(p.faults)[0]["reason"] == why


def test_cut_seek_inside_the_terminal_event_when_it_has_the_place() -> None:
    """A Gemini chunk with the last text and its finishReason is a terminal event."""
    cfg = CutConfig.model_validate({"after": 1, "position": "mid_utf8", "seek": True})
    gemini = get_profile("gemini")
    p = Pipeline(build_faults([("cut", cfg)], 1, "sse", gemini), "sse", gemini)
    text = 'data: {"candidates":[{"content":{"parts":[{"text":"%s"}]}%s}]}\n\n'
    last = (text % ("é", ',"finishReason":"STOP"')).encode()
    data = (text % ("a", "")).encode() * 2 + last
    out = p.feed(data, 0.0) + p.end(0.0)
    first = (text % ("a", "")).encode()
    assert script(out) == [
        (first, 1, ()),
        (first, 1, ()),
        (last[: last.index(b"\xc3") + 1], 0, ("cut",)),
        ("cut", "abort", cut_detail(2, "mid_utf8")),
    ]
    assert "terminal" in out[2].events[0].kinds  # type: ignore[union-attr]


def test_cut_seek_on_a_body_that_ends_without_a_place_or_a_terminal() -> None:
    cfg = CutConfig.model_validate({"after": 1, "position": "after_id", "seek": True})
    out, p = run([("cut", cfg)], E1 + ASCII + E2)
    why = "no event from event 2 to the end of the body has an id line"
    assert script(out) == [
        (E1, 1, ()),
        (ASCII, 1, ()),
        (E2, 1, ()),
        ("cut", "abort", cut_detail(3, "boundary", requested="after_id", fallback=why)),
    ]
    assert p.summary() == ({"cut": 1}, [])


def test_cut_seek_with_nothing_after_the_cut_point_is_skipped() -> None:
    cfg = CutConfig.model_validate({"after": 3, "position": "mid_utf8", "seek": True})
    out, p = run([("cut", cfg)])
    assert body(out) == BODY
    assert p.summary() == (
        {},
        [
            {
                "fault": "cut",
                "position": 0,
                "reason": "no event came after event 3 to cut into (mid_utf8)",
            }
        ],
    )


def test_cut_without_seek_is_unchanged_by_a_later_place() -> None:
    """An explicit scenario keeps its meaning: the boundary of the next event."""
    cfg = CutConfig.model_validate({"after": 1, "position": "mid_utf8"})
    wide = 'data: {"t":"☕"}\n\n'.encode()
    out, _ = run([("cut", cfg)], E1 + ASCII + wide + DONE)
    why = "the event has no multi-byte UTF-8 character"
    assert script(out) == [
        (E1, 1, ()),
        ("cut", "abort", cut_detail(1, "boundary", requested="mid_utf8", fallback=why)),
    ]


def test_cut_after_data_without_a_final_terminator_falls_back() -> None:
    out, _ = run([("cut", CutConfig(after=1, position="after_data"))], b"ab", b"cd", fmt="raw")
    detail = cut_detail(
        1, "boundary", requested="after_data", fallback="the event has no final line terminator"
    )
    assert script(out) == [(b"ab", 1, ()), ("cut", "abort", detail)]


def test_cut_lets_a_comment_before_the_next_event_through() -> None:
    cfg = CutConfig(after=1, position="mid_line", how="close")
    out, _ = run([("cut", cfg)], E1 + b": ping\n\n" + E2)
    assert script(out) == [
        (E1, 1, ()),
        (b": ping\n\n", 1, ()),
        (b"data: ", 0, ("cut",)),  # 'data: {"n":2}' is 13 bytes: 6 of them
        ("cut", "close", cut_detail(1, "mid_line")),
    ]


def test_cut_before_terminal() -> None:
    out, _ = run([("cut", CutConfig(before="terminal", how="close"))])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), ("cut", "close", cut_detail(2, "boundary"))]
    # With a position, part-way into the terminal event itself.
    cfg = CutConfig(before="terminal", position="after_data")
    out, _ = run([("cut", cfg)])
    assert script(out)[2:] == [
        (b"data: [DONE]\n", 0, ("cut",)),
        ("cut", "abort", cut_detail(2, "after_data")),
    ]


def test_cut_after_start_and_terminal_kinds() -> None:
    out, _ = run([("cut", CutConfig(after="terminal"))])
    assert script(out) == [
        (E1, 1, ()),
        (E2, 1, ()),
        (DONE, 1, ()),
        ("cut", "abort", cut_detail(3, "boundary")),
    ]
    _, p = run([("cut", CutConfig(after="start"))])
    assert p.summary()[1] == [{"fault": "cut", "position": 0, "reason": "no start event was sent"}]


def test_cut_after_bytes_splits_mid_event() -> None:
    out, _ = run([("cut", CutConfig(after_bytes=20, how="reset"))])
    detail = cut_detail(1, "after_bytes", bytes=20)
    assert script(out) == [(E1, 1, ()), (E2[:5], 0, ("cut",)), ("cut", "reset", detail)]
    assert ordinals(out[1]) == [2]
    assert len(body(out)) == 20
    # Exactly on a boundary: the whole write, then the cut.
    out, _ = run([("cut", CutConfig(after_bytes=len(E1)))])
    assert script(out) == [(E1, 1, ()), ("cut", "abort", cut_detail(1, "after_bytes", bytes=15))]


def test_cut_counts_events_not_pieces_when_after_rechunk() -> None:
    specs: list[Spec] = [("rechunk", RechunkConfig(size=8)), ("cut", CutConfig(after=1))]
    out, _ = run(specs)
    assert script(out) == [
        (E1[:8], 0, R),
        (E1[8:], 1, R),
        ("cut", "abort", cut_detail(1, "boundary")),
    ]


def test_cut_then_rechunk_splits_the_partial_event_too() -> None:
    specs: list[Spec] = [("cut", CutConfig(after_bytes=20)), ("rechunk", RechunkConfig(size=3))]
    out, _ = run(specs, E2 + E1)
    assert body(out) == (E2 + E1)[:20]
    assert script(out)[-2:] == [
        (b"a:", 0, ("cut", "rechunk")),
        ("cut", "abort", cut_detail(1, "after_bytes", bytes=20)),
    ]


@pytest.mark.parametrize(
    ("cfg", "reason"),
    [
        (CutConfig(after=5), "only 3 events were sent, fewer than 5"),
        (
            CutConfig(after=3, position="after_id"),
            "no event came after event 3 to cut into (after_id)",
        ),
        (CutConfig(after_bytes=999), "the body ended after 44 bytes, before byte 999"),
    ],
)
def test_cut_skipped_when_the_stream_ends_first(cfg: CutConfig, reason: str) -> None:
    out, p = run([("cut", cfg)])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), (DONE, 1, ())]
    assert p.summary() == ({}, [{"fault": "cut", "position": 0, "reason": reason}])


def test_cut_before_terminal_skipped_without_terminal() -> None:
    out, p = run([("cut", CutConfig(before="terminal"))], E1)
    assert script(out) == [(E1, 1, ())]
    assert p.summary()[1][0]["reason"] == "no terminal event came"


def test_cut_ignores_everything_after_it_fired() -> None:
    # Driven directly: a merged input after the cut point yields nothing more.
    fault = build_faults([("cut", CutConfig(after=1))], 1, "sse", GENERIC)[0]
    assert isinstance(fault, CutFault)
    one, two = event(E1, 1), event(E2, 2)
    sent = fault.on_action(Send(E1, (one,), 1))
    assert script(sent) == [(E1, 1, ()), ("cut", "abort", cut_detail(1, "boundary"))]
    assert fault.on_action(Send(E2, (two,), 1)) == []
    assert fault.on_action(Sleep(1.0)) == []
    assert fault.on_action_end() == []


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (CutConfig, {}, "give exactly one of after, before, after_bytes"),
        (CutConfig, {"after": 1, "before": "terminal"}, "give exactly one of"),
        (CutConfig, {"after": 1, "how": "gently"}, "'close', 'abort' or 'reset'"),
        (CutConfig, {"after": 1, "position": "middle"}, "Input should be 'boundary'"),
        (CutConfig, {"before": "start"}, "'terminal' or 'headers'"),
        (CutConfig, {"after_bytes": -1}, "greater than or equal to 0"),
        (
            CutConfig,
            {"before": "headers", "position": "boundary"},
            "position is not allowed with before: headers",
        ),
        (
            CutConfig,
            {"after_bytes": 3, "position": "mid_line"},
            "position is not allowed with after_bytes",
        ),
        (CutConfig, {"before": "headers", "position": "mid_line"}, "position is not allowed"),
        (CutConfig, {"after": 1, "seek": True}, "seek needs a position other than boundary"),
        (
            CutConfig,
            {"before": "terminal", "position": "mid_utf8", "seek": True},
            "seek searches forward from after",
        ),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)


@pytest.mark.parametrize("how", ["close", "abort", "reset"])
def test_cut_before_headers(how: str) -> None:
    f = fault("cut", CutConfig.model_validate({"before": "headers", "how": how}))
    [cut] = f.before_upstream()
    assert cut == Cut(how, fault="cut")  # type: ignore[arg-type]
    assert cut.detail == {"before": "headers"}
    assert f.applied == 1
    assert f.before_upstream() == []  # once


def test_cut_before_headers_never_touches_the_body() -> None:
    f = fault("cut", CutConfig(before="headers"))
    assert f.skipped() == "the request never reached the upstream"
    p = Pipeline([f], "sse", GENERIC)
    out = p.feed(b"data: x\n\n", 0.0)
    assert [(type(a), getattr(a, "data", None)) for a in out] == [(Send, b"data: x\n\n")]
    assert p.end(0.0) == []


def _cut_on_event_stream(position: str) -> tuple[list[bytes], list[Cut]]:
    config = CutConfig.model_validate({"after": 2, "position": position, "how": "close"})
    pipeline = bs.pipeline([("cut", config)])
    actions = pipeline.feed(bs.BODY, 0.0) + pipeline.end(0.0)
    sends = [a.data for a in actions if isinstance(a, Send)]
    return sends, [a for a in actions if isinstance(a, Cut)]


def test_positions_inside_an_event_stream_message_truncate_it() -> None:
    """after_data: all but the message CRC; mid_line: half the message; mid_utf8: into
    the payload's first multi-byte character (botocore keeps each partial message in
    its buffer and says nothing: tests/e2e/test_bedrock_boto3.py)."""
    start, d1, d2 = bs.START, bs.D1, bs.D2
    wide = bs.converse("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " wörld"}})
    assert _cut_on_event_stream("after_data")[0] == [start, d1, d2[:-4]]
    assert _cut_on_event_stream("mid_line")[0] == [start, d1, d2[: len(d2) // 2]]
    data, (cut,) = _cut_on_event_stream("after_id")
    assert data == [start, d1] and cut.detail["fallback"] == "an event stream message has no id"
    assert cut_prefix(wide, "mid_utf8", "eventstream") == (wide[: wide.index(b"\xc3") + 1], "")
    assert cut_prefix(d2, "mid_utf8", "eventstream") == (
        None,
        "the event has no multi-byte UTF-8 character",
    )
    # (its CRC may hold such bytes: only the payload is searched)
    crc_lead = next(
        m
        for i in range(200)
        if (m := bs.converse("x", {"n": i}))[-4:-2][0] in range(0xC0, 0xF8)
        and m[-3] in range(0x80, 0xC0)
    )
    assert cut_prefix(crc_lead, "mid_utf8", "eventstream")[0] is None
