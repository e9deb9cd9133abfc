"""Transport faults, Playbook style: upstream bytes in, the exact actions out.

Most tests drive the real :class:`Pipeline` (SSE or raw framing, generic profile); a few
feed hand-built writes straight into one fault, to show what it does with input that
earlier transport faults shaped.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Action, Cut, Send, Sleep
from chaosproxy.core.events import Event
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import FaultConfig, fault_rng
from chaosproxy.core.faults.coalesce import CoalesceConfig
from chaosproxy.core.faults.compress import CompressConfig
from chaosproxy.core.faults.cut import CutConfig, CutFault
from chaosproxy.core.faults.delay import DelayConfig
from chaosproxy.core.faults.hang import HangConfig
from chaosproxy.core.faults.headers import HeadersConfig
from chaosproxy.core.faults.rechunk import RechunkConfig, hostile_cuts
from chaosproxy.core.faults.stall import StallConfig
from chaosproxy.core.faults.status import StatusConfig
from chaosproxy.core.faults.throttle import ThrottleConfig
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.pipeline import Pipeline, fault_fallbacks
from chaosproxy.core.providers import get_profile

GENERIC = get_profile("generic")

E1 = b'data: {"n":1}\n\n'
E2 = b'data: {"n":2}\n\n'
DONE = b"data: [DONE]\n\n"
BODY = E1 + E2 + DONE

Spec = tuple[str, FaultConfig]


def pipeline(specs: Sequence[Spec], fmt: Format = "sse", seed: int = 1) -> Pipeline:
    return Pipeline(build_faults(specs, seed, fmt, GENERIC), fmt, GENERIC)


def run(
    specs: Sequence[Spec], *chunks: bytes, fmt: Format = "sse", seed: int = 1
) -> tuple[list[Action], Pipeline]:
    """Feed ``chunks`` (default: BODY in one read) at t=0 and end the body."""
    p = pipeline(specs, fmt, seed)
    out: list[Action] = []
    for chunk in chunks or (BODY,):
        out += p.feed(chunk, 0.0)
    out += p.end(0.0)
    return out, p


def script(actions: Sequence[Action]) -> list[tuple[Any, ...]]:
    """Actions as comparable tuples: writes with their ends and faults, sleeps, cuts."""
    out: list[tuple[Any, ...]] = []
    for a in actions:
        if isinstance(a, Send):
            out.append((a.data, a.ends, a.faults))
        elif isinstance(a, Sleep):
            out.append(("sleep", a.seconds, a.fault))
        else:
            out.append(("cut", a.how, a.detail))
    return out


def body(actions: Sequence[Action]) -> bytes:
    return b"".join(a.data for a in actions if isinstance(a, Send))


def ordinals(send: Action) -> list[int]:
    assert isinstance(send, Send)
    return [ev.ordinal for ev in send.events]


def event(raw: bytes, ordinal: int, kinds: str = "other") -> Event:
    """A hand-built SSE event (its data is the text after ``data: ``)."""
    data = raw.split(b"data: ", 1)[1].split(b"\n", 1)[0].decode() if b"data" in raw else None
    return Event(Frame(raw, data=data), ordinal, frozenset({kinds}))


R = ("rechunk",)


# ---------------------------------------------------------------------- rechunk


def test_rechunk_size_splits_each_event_without_holding_bytes() -> None:
    out, p = run([("rechunk", RechunkConfig(size=6))])
    assert script(out) == [
        (b"data: ", 0, R),
        (b'{"n":1', 0, R),
        (b"}\n\n", 1, R),
        (b"data: ", 0, R),
        (b'{"n":2', 0, R),
        (b"}\n\n", 1, R),
        (b"data: ", 0, R),
        (b"[DONE]", 0, R),
        (b"\n\n", 1, R),
    ]
    assert [ordinals(a) for a in out] == [[1]] * 3 + [[2]] * 3 + [[3]] * 3
    assert p.summary() == ({"rechunk": 3}, [])


def test_rechunk_leaves_short_writes_alone_and_reports_when_nothing_split() -> None:
    out, p = run([("rechunk", RechunkConfig(size=100))])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), (DONE, 1, ())]
    assert p.summary() == (
        {},
        [{"fault": "rechunk", "position": 0, "reason": "no write was long enough to split"}],
    )


def test_rechunk_sizes_cycle_across_events() -> None:
    # 2,5,2,5… and a shortened last piece still uses up its entry.
    out, _ = run([("rechunk", RechunkConfig(sizes=[2, 5]))])
    sizes = [len(a.data) for a in out if isinstance(a, Send)]
    assert sizes == [2, 5, 2, 5, 1, 5, 2, 5, 2, 1, 2, 5, 2, 5]
    assert body(out) == BODY


def test_rechunk_random_is_seeded() -> None:
    out, _ = run([("rechunk", RechunkConfig(random=(1, 6)))], seed=42)
    sizes = [len(a.data) for a in out if isinstance(a, Send)]
    assert sizes == [3, 4, 6, 1, 1, 1, 6, 1, 3, 4, 5, 5, 1, 3]
    # The draws come from the fault's own generator (seed 42, position 0), one per piece.
    rng = fault_rng(42, 0, "rechunk")
    draws = [rng.randint(1, 6) for _ in sizes]
    assert [min(d, s) for d, s in zip(draws, sizes, strict=True)] == sizes
    assert body(out) == BODY
    again, _ = run([("rechunk", RechunkConfig(random=(1, 6)))], seed=42)
    assert again == out
    other, _ = run([("rechunk", RechunkConfig(random=(1, 6)))], seed=43)
    assert [len(a.data) for a in other if isinstance(a, Send)] != sizes


HOSTILE = 'data: {"t":"é🙂"}\r\n\r\n'.encode() + b"data: [DONE]\r\n\r\n"


def test_rechunk_hostile_boundaries() -> None:
    out, _ = run([("rechunk", RechunkConfig(boundaries="hostile"))], HOSTILE)
    pieces = [a.data for a in out if isinstance(a, Send)]
    assert pieces == [
        b"data",
        b":",
        b" ",
        b"{",
        b'"t":"\xc3',  # é = c3 a9: cut after its first byte
        b"\xa9\xf0",  # 🙂 = f0 9f 99 82
        b'\x9f\x99\x82"',
        b"}",
        b"\r",  # CR | LF
        b"\n",  # between the two line ends that close the event
        b"\r",
        b"\n",
        b"data",
        b":",
        b" [DO",
        b"NE]\r",
        b"\n",
        b"\r",
        b"\n",
    ]
    assert b"".join(pieces) == HOSTILE
    assert [a.ends for a in out if isinstance(a, Send)] == [0] * 11 + [1] + [0] * 6 + [1]


def test_hostile_cuts_lf_and_cr_blank_lines_and_field_colons() -> None:
    data = b"event: x\nid: 7\n\n"
    cuts = hostile_cuts(data)
    assert [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)] == [
        b"event:",
        b" x\nid:",
        b" 7\n",
        b"\n",
    ]
    assert hostile_cuts(b"data: x\r\r") == [4, 5, 8]
    assert hostile_cuts(b"x") == []


def test_rechunk_on_raw_reads() -> None:
    out, p = run([("rechunk", RechunkConfig(size=4))], b"abcdef", b"ghij", fmt="raw")
    assert script(out) == [
        (b"abcd", 0, R),
        (b"ef", 1, R),
        (b"ghij", 1, ()),
    ]
    assert [ordinals(a) for a in out] == [[1], [1], [2]]
    assert p.summary() == ({"rechunk": 1}, [])


# ---------------------------------------------------------------------- coalesce

C = ("coalesce",)


def test_coalesce_events_merges_n_and_flushes_the_rest_at_end() -> None:
    p = pipeline([("coalesce", CoalesceConfig(events=2))])
    first = p.feed(BODY, 0.0)
    assert script(first) == [(E1 + E2, 2, C)]
    assert ordinals(first[0]) == [1, 2]
    assert script(p.end(0.0)) == [(DONE, 1, ())]  # a lone remainder is not merged
    assert p.summary() == ({"coalesce": 1}, [])


def test_coalesce_window_uses_the_pipeline_clock() -> None:
    p = pipeline([("coalesce", CoalesceConfig(window=100))])  # 100 ms
    assert p.deadline() is None
    assert p.feed(E1, 10.0) == []
    assert p.deadline() == pytest.approx(10.1)
    assert p.feed(E2, 10.05) == []
    assert p.poll(10.09) == []  # not yet due
    due = p.poll(10.1)
    assert script(due) == [(E1 + E2, 2, C)]
    assert p.deadline() is None
    # A write arriving after the window closed (nobody polled) flushes what was held
    # before it, and opens a new window itself.
    assert p.feed(E1, 20.0) == []
    assert script(p.feed(E2, 20.5)) == [(E1, 1, ())]
    assert p.deadline() == pytest.approx(20.6)
    assert script(p.feed(DONE, 20.55) + p.end(20.56)) == [(E2 + DONE, 2, C)]


def test_coalesce_all_is_one_write_at_the_end() -> None:
    p = pipeline([("coalesce", CoalesceConfig(all=True))], fmt="raw")
    assert p.feed(b"ab", 0.0) + p.feed(b"cd", 1.0) == []
    out = p.end(2.0)
    assert script(out) == [(b"abcd", 2, C)]
    assert ordinals(out[0]) == [1, 2]


def test_coalesce_flushes_before_a_sleep_or_cut() -> None:
    specs: list[Spec] = [
        ("stall", StallConfig.model_validate({"after": 1, "duration": "2s"})),
        ("cut", CutConfig(after=2, how="close")),
        ("coalesce", CoalesceConfig(all=True)),
    ]
    out, _ = run(specs)
    assert script(out) == [
        (E1, 1, ()),
        ("sleep", 2.0, "stall"),
        (E2, 1, ()),
        ("cut", "close", {"after_event": 2, "position": "boundary"}),
    ]


def test_coalesce_merges_the_faults_of_its_parts() -> None:
    out, _ = run([("rechunk", RechunkConfig(size=10)), ("coalesce", CoalesceConfig(all=True))])
    assert script(out) == [(BODY, 3, ("rechunk", "coalesce"))]
    assert ordinals(out[0]) == [1, 1, 2, 2, 3, 3]


# ---------------------------------------------------------------------- delay


def test_delay_first_byte_and_per_event_with_selector() -> None:
    cfg = DelayConfig.model_validate({"first_byte": "1.5s", "per_event": 200, "nth": 2})
    out, p = run([("delay", cfg)])
    assert script(out) == [
        ("sleep", 1.5, "delay"),
        (E1, 1, ()),
        ("sleep", 0.2, "delay"),
        (E2, 1, ()),
        (DONE, 1, ()),
    ]
    assert p.summary() == ({"delay": 2}, [])


def test_delay_per_event_jitter_is_seeded_and_skips_comments() -> None:
    cfg = DelayConfig(per_event=100, jitter=50)
    chunk = E1 + b": keepalive\n\n" + DONE
    out, _ = run([("delay", cfg)], chunk, seed=7)
    rng = fault_rng(7, 0, "delay")
    jitters = [rng.uniform(0.0, 0.05) for _ in range(2)]
    assert script(out) == [
        ("sleep", 0.1 + jitters[0], "delay"),
        (E1, 1, ()),
        (b": keepalive\n\n", 1, ()),  # a comment is not an event
        ("sleep", 0.1 + jitters[1], "delay"),
        (DONE, 1, ()),
    ]
    assert run([("delay", cfg)], chunk, seed=7)[0] == out


def test_delay_per_event_counts_raw_reads_and_kind_selector() -> None:
    out, _ = run([("delay", DelayConfig(per_event=10))], b"ab", b"cd", fmt="raw")
    assert script(out) == [
        ("sleep", 0.01, "delay"),
        (b"ab", 1, ()),
        ("sleep", 0.01, "delay"),
        (b"cd", 1, ()),
    ]
    out, _ = run([("delay", DelayConfig.model_validate({"per_event": "1s", "kind": "terminal"}))])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), ("sleep", 1.0, "delay"), (DONE, 1, ())]


def test_delay_skipped_when_selector_never_reached() -> None:
    _, p = run([("delay", DelayConfig(per_event=10, nth=9))])
    assert p.summary() == (
        {},
        [
            {
                "fault": "delay",
                "position": 0,
                "reason": "ordinal 9 never reached: the stream had 3 events",
            }
        ],
    )


# ---------------------------------------------------------------------- throttle


@pytest.mark.parametrize(
    ("rate", "body", "fmt", "pieces", "gap"),
    [
        pytest.param(
            100,
            E1,
            "sse",
            [b"data:", b' {"n"', b":1}\n\n"],
            0.05,
            id="5-byte-writes-at-100-bytes-a-second",
        ),
        pytest.param(
            4, b"abc", "raw", [b"a", b"b", b"c"], 0.25, id="single-bytes-below-20-bytes-a-second"
        ),
    ],
)
def test_throttle_pieces_and_sleeps(
    rate: int, body: bytes, fmt: Format, pieces: list[bytes], gap: float
) -> None:
    """The body in ``pieces``, each followed by a sleep of ``gap``; the last ends the event."""
    out, p = run([("throttle", ThrottleConfig(bytes_per_second=rate))], body, fmt=fmt)
    expected: list[tuple[Any, ...]] = []
    for i, piece in enumerate(pieces, 1):
        expected += [(piece, int(i == len(pieces)), ("throttle",)), ("sleep", gap, "throttle")]
    assert script(out) == expected
    assert sum(a.seconds for a in out if isinstance(a, Sleep)) == pytest.approx(len(body) / rate)
    assert p.summary() == ({"throttle": 1}, [])


# ---------------------------------------------------------------------- stall


def test_stall_after_an_ordinal_for_a_duration() -> None:
    out, p = run([("stall", StallConfig(after=1, duration=2500))])
    assert script(out) == [(E1, 1, ()), ("sleep", 2.5, "stall"), (E2, 1, ()), (DONE, 1, ())]
    assert p.summary() == ({"stall": 1}, [])


def test_stall_forever_after_terminal() -> None:
    out, _ = run([("stall", StallConfig(after="terminal", forever=True))])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), (DONE, 1, ()), ("sleep", math.inf, "stall")]


def test_stall_before_the_first_byte() -> None:
    out, _ = run([("stall", StallConfig(after=0, duration=1000))])
    assert script(out)[:2] == [("sleep", 1.0, "stall"), (E1, 1, ())]
    # An empty body still stalls.
    out, _ = run([("stall", StallConfig(after=0, duration=1000))], b"")
    assert script(out) == [("sleep", 1.0, "stall")]


def test_stall_after_the_last_piece_of_a_rechunked_event() -> None:
    specs: list[Spec] = [
        ("rechunk", RechunkConfig(size=10)),
        ("stall", StallConfig(after=1, duration=5)),
    ]
    out, _ = run(specs, E1)
    assert script(out) == [(E1[:10], 0, R), (E1[10:], 1, R), ("sleep", 0.005, "stall")]


def test_stall_skipped_when_the_event_never_came() -> None:
    out, p = run([("stall", StallConfig(after=9, forever=True))])
    assert body(out) == BODY
    assert not any(isinstance(a, Sleep) for a in out)
    assert p.summary()[1] == [
        {"fault": "stall", "position": 0, "reason": "event 9 never came: the stream ended first"}
    ]
    _, p = run([("stall", StallConfig(after="start", duration=1))])
    assert p.summary()[1][0]["reason"] == "a start event never came: the stream ended first"


# ---------------------------------------------------------------------- cut

ID_EVENT = 'id: 7\ndata: {"t":"né"}\n\n'.encode()


def cut_detail(after_event: int, position: str, **extra: object) -> dict[str, object]:
    return {"after_event": after_event, "position": position, **extra}


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


# ---------------------------------------------------------------------- hang


def test_hang_never_ends_the_body() -> None:
    out, p = run([("hang", HangConfig())])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), (DONE, 1, ()), ("sleep", math.inf, "hang")]
    assert p.summary() == ({"hang": 1}, [])


def test_hang_does_not_apply_after_a_cut() -> None:
    out, p = run([("cut", CutConfig(after=1)), ("hang", HangConfig())])
    assert script(out) == [(E1, 1, ()), ("cut", "abort", cut_detail(1, "boundary"))]
    assert p.summary()[1] == [
        {"fault": "hang", "position": 1, "reason": "the body never ended (it was cut first)"}
    ]


# ---------------------------------------------------------------------- compress


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", 15)])
def test_compress_each_flushes_every_write(encoding: str, wbits: int) -> None:
    cfg = CompressConfig.model_validate({"encoding": encoding})
    out, p = run([("compress", cfg)])
    sends = [a for a in out if isinstance(a, Send)]
    assert len(sends) == 4  # one per event, then the stream's tail
    assert [s.ends for s in sends] == [1, 1, 1, 0]
    assert all(s.faults == ("compress",) for s in sends)
    assert [ordinals(s) for s in sends] == [[1], [2], [3], []]
    # Each write decompresses, on its own and in order, to exactly its event.
    d = zlib.decompressobj(wbits)
    assert [d.decompress(s.data) for s in sends] == [E1, E2, DONE, b""]
    assert d.eof
    assert zlib.decompress(body(out), wbits) == BODY
    assert p.summary() == ({"compress": 3}, [])


def test_compress_end_buffers_until_the_end() -> None:
    out, _ = run([("compress", CompressConfig(flush="end"))])
    # The compressor keeps this small body entirely: the client sees one write at the end.
    assert len(out) == 1
    tail = out[0]
    assert isinstance(tail, Send)
    assert (tail.ends, tail.faults, ordinals(tail)) == (3, ("compress",), [1, 2, 3])
    assert zlib.decompress(tail.data, 31) == BODY


def test_compress_end_emits_when_the_compressor_does() -> None:
    # Incompressible bytes overflow zlib's buffers: output comes before the end.
    chunks = [fault_rng(3, 0, "data").randbytes(40_000) for _ in range(3)]
    out, _ = run(
        [("compress", CompressConfig(flush="end", encoding="deflate"))], *chunks, fmt="raw"
    )
    sends = [a for a in out if isinstance(a, Send)]
    assert len(sends) > 1 and all(s.data for s in sends)
    assert sum(s.ends for s in sends) == 3
    assert [o for s in sends for o in ordinals(s)] == [1, 2, 3]
    assert zlib.decompress(body(out), 15) == b"".join(chunks)


def test_compress_passes_a_cut_through_and_the_body_stays_truncated() -> None:
    out, _ = run([("cut", CutConfig(after=2)), ("compress", CompressConfig())])
    assert isinstance(out[-1], Cut)
    d = zlib.decompressobj(31)
    assert d.decompress(body(out)) == E1 + E2
    assert not d.eof


def test_compress_empty_body_is_a_valid_empty_stream() -> None:
    out, p = run([("compress", CompressConfig())], b"")
    assert zlib.decompress(body(out), 31) == b""
    assert p.summary()[1] == [{"fault": "compress", "position": 0, "reason": "the body was empty"}]


# ---------------------------------------------------------------------- order, seeds


def test_transport_faults_run_in_the_order_listed() -> None:
    cut_first: list[Spec] = [("cut", CutConfig(after=1)), ("coalesce", CoalesceConfig(all=True))]
    coalesce_first: list[Spec] = [
        ("coalesce", CoalesceConfig(all=True)),
        ("cut", CutConfig(after=1)),
    ]
    assert script(run(cut_first)[0]) == [(E1, 1, ()), ("cut", "abort", cut_detail(1, "boundary"))]
    # Coalesced first, the cut only sees one write carrying three events.
    assert script(run(coalesce_first)[0]) == [
        (BODY, 3, C),
        ("cut", "abort", cut_detail(3, "boundary")),
    ]


def test_same_seed_same_actions() -> None:
    def scenario() -> list[Spec]:
        return [
            ("delay", DelayConfig(per_event=10, jitter=100, probability=0.5)),
            ("rechunk", RechunkConfig(random=(1, 9))),
            ("throttle", ThrottleConfig(bytes_per_second=1000)),
        ]

    chunks = (BODY[:7], BODY[7:30], BODY[30:])
    first, _ = run(scenario(), *chunks, seed=99)
    assert run(scenario(), *chunks, seed=99)[0] == first
    assert run(scenario(), *chunks, seed=100)[0] != first
    assert body(first) == BODY


def test_transport_faults_work_on_raw_streams() -> None:
    for name, cfg in [
        ("rechunk", RechunkConfig(size=1)),
        ("coalesce", CoalesceConfig(events=2)),
        ("delay", DelayConfig(per_event=1)),
        ("throttle", ThrottleConfig(bytes_per_second=1)),
        ("stall", StallConfig(after=1, duration=1)),
        ("cut", CutConfig(after=1, position="mid_line")),
        ("hang", HangConfig()),
        ("compress", CompressConfig()),
    ]:
        fault = build_faults([(name, cfg)], 1, "raw", GENERIC)[0]
        assert not fault.needs_framing(cfg), name


# ---------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (RechunkConfig, {}, "give exactly one of size, sizes, random, boundaries"),
        (RechunkConfig, {"size": 2, "sizes": [1]}, "give exactly one of"),
        (RechunkConfig, {"size": 0}, "greater than or equal to 1"),
        (RechunkConfig, {"sizes": []}, "at least 1 item"),
        (RechunkConfig, {"sizes": [3, 0]}, "greater than or equal to 1"),
        (RechunkConfig, {"random": [5, 2]}, "random must be [min, max] with min <= max"),
        (RechunkConfig, {"random": [0, 2]}, "greater than or equal to 1"),
        (RechunkConfig, {"boundaries": "nice"}, "Input should be 'hostile'"),
        (RechunkConfig, {"size": 2, "extra": 1}, "Extra inputs are not permitted"),
        (CoalesceConfig, {}, "give exactly one of events, window, all"),
        (CoalesceConfig, {"events": 1}, "greater than or equal to 2"),
        (CoalesceConfig, {"window": 0}, "greater than 0"),
        (CoalesceConfig, {"window": "soon"}, "not a duration"),
        (CoalesceConfig, {"all": False}, "Input should be True"),
        (CoalesceConfig, {"events": 2, "all": True}, "give exactly one of"),
        (DelayConfig, {}, "give at least one of first_byte, per_event, jitter, headers"),
        (DelayConfig, {"per_event": -5}, "greater than or equal to 0"),
        (DelayConfig, {"per_event": 5, "kind": "nope"}, "unknown kind 'nope'"),
        (ThrottleConfig, {}, "Field required"),
        (ThrottleConfig, {"bytes_per_second": 0}, "greater than or equal to 1"),
        (StallConfig, {"after": 1}, "give exactly one of duration, forever"),
        (StallConfig, {"after": 1, "duration": 1, "forever": True}, "give exactly one of"),
        (StallConfig, {"after": -1, "duration": 1}, "greater than or equal to 0"),
        (StallConfig, {"after": "middle", "duration": 1}, "'start' or 'terminal'"),
        (StallConfig, {"duration": 1}, "Field required"),
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
        (HangConfig, {"x": 1}, "Extra inputs are not permitted"),
        (CompressConfig, {"encoding": "br"}, "'gzip' or 'deflate'"),
        (CompressConfig, {"flush": "never"}, "'each' or 'end'"),
        # HTTP faults (tests/core/test_faults_http.py)
        (StatusConfig, {}, "Field required"),
        (StatusConfig, {"code": 99}, "greater than or equal to 100"),
        (StatusConfig, {"code": 600}, "less than or equal to 599"),
        (StatusConfig, {"code": 500, "headers": {"X": [1]}}, "headers.X"),
        (StatusConfig, {"code": 500, "body": 12}, "body"),
        (StatusConfig, {"code": 500, "retry": 1}, "Extra inputs are not permitted"),
        (HeadersConfig, {}, "give at least one of set, remove"),
        (HeadersConfig, {"set": {}, "remove": []}, "give at least one of set, remove"),
        (HeadersConfig, {"set": {"X": 1}}, "Input should be a valid string"),
        (HeadersConfig, {"remove": "X-One"}, "Input should be a valid list"),
        (DelayConfig, {"headers": "later"}, "not a duration"),
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


def test_durations_accept_ms_numbers_and_unit_strings() -> None:
    cfg = DelayConfig.model_validate({"first_byte": 250, "per_event": "2s", "jitter": "15ms"})
    assert (cfg.first_byte, cfg.per_event, cfg.jitter) == (0.25, 2.0, 0.015)
    assert CoalesceConfig.model_validate({"window": "1.5s"}).window == 1.5
    assert StallConfig.model_validate({"after": "terminal", "duration": "1m"}).duration == 60.0


ALL_TRANSPORT: list[Spec] = [
    ("rechunk", RechunkConfig(size=1)),
    ("coalesce", CoalesceConfig(events=2)),
    ("delay", DelayConfig(first_byte=5, per_event=1)),
    ("throttle", ThrottleConfig(bytes_per_second=1)),
    ("stall", StallConfig(after=0, duration=1)),
    ("cut", CutConfig(after=1)),
    ("hang", HangConfig()),
    ("compress", CompressConfig()),
]


@pytest.mark.parametrize(("name", "cfg"), ALL_TRANSPORT, ids=[n for n, _ in ALL_TRANSPORT])
def test_sleeps_and_cuts_from_earlier_faults_pass_through_untouched(
    name: str, cfg: FaultConfig
) -> None:
    # Driven directly, with nothing held: what a fault did not make, it passes on as is.
    fault = build_faults([(name, cfg)], 1, "sse", GENERIC)[0]
    sleep = Sleep(0.5, fault="earlier")
    cut = Cut("reset", fault="earlier", detail={"x": 1})
    assert fault.on_action(sleep) == [sleep]
    assert fault.on_action(cut) == [cut]
