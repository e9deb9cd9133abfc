"""The ``splice`` fault (docs/faults-event.md, ``splice``): a real Pipeline (framer,
profile, faults) over a small literal body: the exact bytes of every write, the upstream
ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson
import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Send
from chaosproxy.core.faults import build_faults, registry
from chaosproxy.core.faults.base import fault_rng
from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.faults.splice import SpliceConfig
from chaosproxy.core.frames import Format
from chaosproxy.core.framing import parse_block
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile
from chaosproxy.core.recent import RecentStreams
from chaosproxy.core.session import Session
from chaosproxy.core.tenancy import ANONYMOUS, STRANGER
from chaosproxy.scenario import parse_scenario
from tests.support.fault_events import BODY, DONE, E1, E2, E3, ORDINALS, PING
from tests.support.fault_events import Run as EventRun
from tests.support.fault_events import run as event_run
from tests.support.fault_splice import (
    CHAT,
    CHAT_BODY,
    ONE_USER,
    A,
    B,
    Spec,
    _Scenario,
    chat,
    chat_stream,
    post,
    record,
    session_run,
    splice,
)
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import Script, ScriptedUpstream


@pytest.mark.parametrize(
    "spec",
    [
        ("splice", SpliceConfig.model_validate({"from": "previous", "after": 9})),
    ],
    ids=lambda s: s[0],
)
def test_a_fault_that_never_applies_forwards_every_byte(spec: Spec) -> None:
    r = event_run([spec], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.ordinals == ORDINALS
    assert r.faults == [()] * 5
    assert r.applied == {}
    [skip] = r.skipped
    assert skip["fault"] == spec[0] and skip["reason"]


A_DELTAS = A[1:5]


class Run(EventRun):
    @property
    def spliced(self) -> list[tuple[bytes, str | None]]:
        return [(e.raw, e.splice_from) for e in self.events if e.faults == ("splice",)]


def run(
    specs: Sequence[Spec],
    body: Sequence[bytes],
    *,
    streams: RecentStreams | None,
    request_id: str = "r-b",
    seed: int = 7,
    fmt: Format = "sse",
    provider: str = "openai-chat",
    tenant: str = ANONYMOUS,
) -> Run:
    profile = get_profile(provider)
    faults = build_faults(
        list(specs), seed, "raw", profile, streams=streams, request_id=request_id, tenant=tenant
    )
    pipeline = Pipeline(faults, fmt, profile)
    actions = [a for chunk in body for a in pipeline.feed(chunk, 0.0)]
    actions += pipeline.end(0.0)
    sends = [a for a in actions if isinstance(a, Send)]
    assert len(sends) == len(actions)
    return Run(sends, pipeline)


def pick(seed: int, n: int, count: int = 1, *, position: int = 0, streams: int = 0) -> int:
    """Where the fault's generator starts its run of ``count`` among ``n`` events (after
    choosing one of ``streams`` running streams first, when given)."""
    rng = fault_rng(seed, position, "splice")
    if streams:
        rng.randrange(streams)
    return rng.randrange(n - count + 1)


def test_splice_is_an_event_fault_with_a_strict_frozen_config() -> None:
    cls = registry()["splice"]
    assert cls.stage == "event" and cls.Config is SpliceConfig
    assert cls.needs_framing(splice(**{"from": "previous", "after": 1}))
    cfg = splice(**{"from": "concurrent", "after": "terminal"})
    assert (cfg.from_, cfg.after, cfg.count, cfg.kind) == ("concurrent", "terminal", 1, "delta")
    assert cfg.across_tenants is False  # the request's own tenant's streams only
    # Dumped with the YAML key (what the admin API shows can be posted back).
    assert cfg.model_dump(mode="json") == {
        "from": "concurrent",
        "after": "terminal",
        "count": 1,
        "kind": "delta",
        "across_tenants": False,
    }
    assert SpliceConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    with pytest.raises(ValidationError):
        cfg.count = 2


@pytest.mark.parametrize(
    "values",
    [
        {"after": 1},
        {"from": "previous"},
        {"from": "next", "after": 1},
        {"from": "previous", "after": 0},
        {"from": "previous", "after": "middle"},
        {"from": "previous", "after": True},
        {"from": "previous", "after": 1, "count": 0},
        {"from": "previous", "after": 1, "count": 1001},
        {"from": "previous", "after": 1, "kind": "deltas"},
        {"from": "previous", "after": 1, "kind": ["delta"]},
        {"from": "previous", "after": 1, "nth": 2},
        {"from": "previous", "after": 1, "across_tenants": "yes"},
        {"from": "previous", "after": 1, "across_tenants": 1},
    ],
)
def test_bad_splice_config_is_a_validation_error(values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SpliceConfig.model_validate(values)


def test_a_scenario_file_names_the_problem_at_its_key() -> None:
    from chaosproxy.scenario import ScenarioError

    with pytest.raises(ScenarioError) as info:
        parse_scenario("faults:\n  - splice: {from: later, after: 1}\n", "s.yaml")
    assert "s.yaml:2: faults[0].splice.from: must be one of: previous, concurrent" in str(
        info.value
    )


def test_previous_inserts_one_seeded_delta_after_the_ordinal() -> None:
    streams = RecentStreams()
    record(streams, "r-a", [b"".join(A)])
    r = run([("splice", splice(**{"from": "previous", "after": 2}))], B, streams=streams)
    chosen = A_DELTAS[pick(7, 4)]
    assert r.data == [B[0], B[1], chosen, B[2], B[3]]
    assert [e.ordinal for e in r.events] == [1, 2, 0, 3, 4]
    assert r.spliced == [(chosen, "r-a")]
    assert r.events[2].kinds == {"delta"}  # classified by this stream's profile
    assert [s.faults for s in r.sends] == [(), (), ("splice",), (), ()]
    assert r.applied == {"splice": 1} and r.skipped == []


def test_the_choice_is_seeded_same_seed_same_events() -> None:
    streams = RecentStreams()
    record(streams, "r-a", A)
    spec = ("splice", splice(**{"from": "previous", "after": 1}))
    seen = set()
    for seed in range(12):
        first = run([spec], B, streams=streams, seed=seed)
        again = run([spec], B, streams=streams, seed=seed)
        assert first.data == again.data
        assert first.spliced == [(A_DELTAS[pick(seed, 4)], "r-a")]
        seen.add(first.spliced[0][0])
    assert len(seen) > 1  # the seed does choose


def test_count_takes_consecutive_events_and_at_most_what_there_is() -> None:
    streams = RecentStreams()
    record(streams, "r-a", A)
    r = run(
        [("splice", splice(**{"from": "previous", "after": 1, "count": 3}))], B, streams=streams
    )
    start = pick(7, 4, 3)
    assert r.data == [B[0], *A_DELTAS[start : start + 3], *B[1:]]
    assert r.applied == {"splice": 1}
    r = run(
        [("splice", splice(**{"from": "previous", "after": 1, "count": 9}))], B, streams=streams
    )
    assert r.data == [B[0], *A_DELTAS, *B[1:]]


def test_after_terminal_is_a_late_delta_from_another_answer() -> None:
    streams = RecentStreams()
    record(streams, "r-a", A)
    r = run([("splice", splice(**{"from": "previous", "after": "terminal"}))], B, streams=streams)
    assert r.data == [*B, A_DELTAS[pick(7, 4)]]


def test_kind_picks_events_of_that_kind_as_the_source_classified_them() -> None:
    streams = RecentStreams()
    record(streams, "r-a", A)
    r = run(
        [("splice", splice(**{"from": "previous", "after": 1, "kind": "terminal"}))],
        B,
        streams=streams,
    )
    assert r.data == [B[0], b"data: [DONE]\n\n", *B[1:]]
    assert r.events[1].kinds == {"terminal"}
    r = run(
        [("splice", splice(**{"from": "previous", "after": 1, "kind": "tool_delta"}))],
        B,
        streams=streams,
    )
    assert r.data == B
    assert r.skipped == [
        {
            "fault": "splice",
            "position": 0,
            "reason": "from: previous: stream r-a had no tool_delta events",
        }
    ]


def test_previous_is_the_stream_that_finished_last_before_this_request_began() -> None:
    streams = RecentStreams()
    record(streams, "r-1", chat_stream("1", ["one"]))
    running = record(streams, "r-2", chat_stream("2", ["two"]), close=False)
    record(streams, "r-3", chat_stream("3", ["three"]))
    profile = get_profile("openai-chat")
    spec = [("splice", splice(**{"from": "previous", "after": 1}))]
    faults = build_faults(spec, 7, "raw", profile, streams=streams, request_id="r-b")
    # r-2 ends after this request began: r-3 is still its "previous".
    streams.close(running)
    assert streams.previous is running
    pipeline = Pipeline(faults, "sse", profile)
    out = [a for chunk in B for a in pipeline.feed(chunk, 0.0)] + pipeline.end(0.0)
    spliced = [e for a in out if isinstance(a, Send) for e in a.events if e.splice_from]
    assert [(e.raw, e.splice_from) for e in spliced] == [
        (chat({"content": "three"}, cid="3"), "r-3")
    ]


def test_no_previous_stream_or_nothing_of_the_kind_is_skipped_with_a_reason() -> None:
    spec = ("splice", splice(**{"from": "previous", "after": 2}))
    r = run([spec], B, streams=RecentStreams())
    assert r.data == B and r.applied == {}
    assert r.skipped == [
        {
            "fault": "splice",
            "position": 0,
            "reason": (
                "from: previous: no framed stream of this tenant had finished before this one"
            ),
        }
    ]
    streams = RecentStreams()
    record(streams, "r-a", [b": only a comment\n\n", b"data: [DONE]\n\n"])
    r = run([spec], B, streams=streams)
    assert r.data == B
    assert r.skipped[0]["reason"] == "from: previous: stream r-a had no delta events"


def test_offline_there_is_no_other_stream() -> None:
    """``chaosproxy simulate`` builds faults without streams: skipped, and says why."""
    r = run([("splice", splice(**{"from": "concurrent", "after": 1}))], B, streams=None)
    assert r.data == B
    assert r.skipped == [
        {
            "fault": "splice",
            "position": 0,
            "reason": "from: concurrent: no other stream to take from "
            "(an offline run has only its own)",
        }
    ]


def test_after_never_reached_is_skipped_and_takes_nothing() -> None:
    streams = RecentStreams()
    record(streams, "r-a", A)
    r = run([("splice", splice(**{"from": "previous", "after": 9}))], B, streams=streams)
    assert r.data == B
    assert r.skipped[0]["reason"] == "after: 9 never reached: the stream had 4 events"
    r = run(
        [("splice", splice(**{"from": "previous", "after": "start"}))],
        [b"data: {}\n\n"],
        streams=streams,
        provider="anthropic",
    )
    assert r.skipped[0]["reason"] == "after: start never reached: the stream had no start event"


def test_after_a_dropped_event_goes_where_it_was() -> None:

    streams = RecentStreams()
    record(streams, "r-a", A)
    specs: list[Spec] = [
        ("drop", DropConfig(nth=2)),
        ("splice", splice(**{"from": "previous", "after": 2})),
    ]
    r = run(specs, B, streams=streams)
    assert r.data == [B[0], A_DELTAS[pick(7, 4, position=1)], B[2], B[3]]


def test_the_result_does_not_depend_on_chunking() -> None:
    streams = RecentStreams()
    record(streams, "r-a", [bytes([b]) for b in b"".join(A)])  # the source byte by byte
    spec = [("splice", splice(**{"from": "previous", "after": 2, "count": 2}))]
    whole = run(spec, [b"".join(B)], streams=streams)
    body = b"".join(B)
    for i in range(1, len(body)):
        assert run(spec, [body[:i], body[i:]], streams=streams).data == whole.data


def test_spliced_events_take_this_streams_line_endings() -> None:
    streams = RecentStreams()
    record(streams, "r-a", A)
    crlf = chat_stream("b", ["B1", "B2"], nl=b"\r\n")
    r = run([("splice", splice(**{"from": "previous", "after": 2}))], crlf, streams=streams)
    chosen = A_DELTAS[pick(7, 4)]
    assert r.data == [crlf[0], crlf[1], chosen.replace(b"\n", b"\r\n"), crlf[2], crlf[3]]


ANTHROPIC_SOURCE = [
    b'event: message_start\nid: 41\ndata: {"type":"message_start","message":{"id":"msg_x"}}\n\n',
    b'event: content_block_delta\nid: 42\ndata: {"type":"content_block_delta",\n'
    b'data: "index":0,"delta":{"type":"text_delta","text":"Hej"}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]


HEJ = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hej"}}


def test_sse_keeps_the_event_name_drops_the_id_and_keeps_every_data_line() -> None:
    streams = RecentStreams()
    record(streams, "r-a", ANTHROPIC_SOURCE, provider="anthropic")
    r = run([("splice", splice(**{"from": "previous", "after": 1}))], B, streams=streams)
    assert r.data[1] == (
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta",\n'
        b'data: "index":0,"delta":{"type":"text_delta","text":"Hej"}}\n\n'
    )
    # In an OpenAI chat stream that event is no delta: classified by this profile.
    assert r.events[1].kinds == {"other"}


def test_sse_source_into_ndjson_is_one_compact_json_line() -> None:
    streams = RecentStreams()
    record(streams, "r-a", ANTHROPIC_SOURCE, provider="anthropic")
    ollama = [
        b'{"message":{"role":"assistant","content":"Hi"},"done":false}\r\n',
        b'{"message":{"role":"assistant","content":"!"},"done":false}\r\n',
        b'{"done":true}\r\n',
    ]
    r = run(
        [("splice", splice(**{"from": "previous", "after": 1}))],
        ollama,
        streams=streams,
        fmt="ndjson",
        provider="ollama",
    )
    assert r.data == [ollama[0], orjson.dumps(HEJ) + b"\r\n", *ollama[1:]]


def test_ndjson_source_into_sse_is_one_data_line() -> None:
    streams = RecentStreams()
    line = b'{"message":{"role":"assistant","content":"Hi"},"done":false}'
    record(streams, "r-a", [line + b"\n", b'{"done":true}\n'], fmt="ndjson", provider="ollama")
    r = run([("splice", splice(**{"from": "previous", "after": 1}))], B, streams=streams)
    assert r.data == [B[0], b"data: " + line + b"\n\n", *B[1:]]


def test_what_cannot_be_ndjson_is_left_out_and_said() -> None:
    streams = RecentStreams()
    record(streams, "r-a", [b"data: plain text\n\n", b"data: [DONE]\n\n"], provider="openai-chat")
    ollama = [b'{"message":{"content":"Hi"},"done":false}\n', b'{"done":true}\n']
    spec = [("splice", splice(**{"from": "previous", "after": 1, "kind": "terminal"}))]
    r = run(spec, ollama, streams=streams, fmt="ndjson", provider="ollama")
    assert r.data == ollama
    assert (
        r.skipped[0]["reason"]
        == "from: previous: stream r-a had no terminal events that fit ndjson"
    )


def test_concurrent_takes_from_a_running_stream_never_its_own() -> None:
    streams = RecentStreams()
    record(streams, "r-done", chat_stream("d", ["done"]))  # finished: not concurrent
    record(streams, "r-x", chat_stream("x", ["X1", "X2", "X3"]), close=False)
    own = record(streams, "r-b", chat_stream("b", ["own"]), close=False)
    assert own.events("delta")
    r = run([("splice", splice(**{"from": "concurrent", "after": 2}))], B, streams=streams)
    x = chat_stream("x", ["X1", "X2", "X3"])[1:4]
    assert r.spliced == [(x[pick(7, 3, streams=1)], "r-x")]
    assert r.data[2] == r.spliced[0][0]


def test_concurrent_chooses_among_running_streams_with_the_seed() -> None:
    streams = RecentStreams()
    sources = {
        "r-x": chat_stream("x", ["X1", "X2"])[1:3],
        "r-y": chat_stream("y", ["Y1", "Y2", "Y3"])[1:4],
    }
    record(streams, "r-x", chat_stream("x", ["X1", "X2"]), close=False)
    record(streams, "r-empty", [b": nothing yet\n\n"], close=False)  # no delta: not a candidate
    record(streams, "r-y", chat_stream("y", ["Y1", "Y2", "Y3"]), close=False)
    spec = [("splice", splice(**{"from": "concurrent", "after": 1}))]
    chosen = set()
    for seed in range(10):
        rng = fault_rng(seed, 0, "splice")
        rid = ["r-x", "r-y"][rng.randrange(2)]
        frames = sources[rid]
        expected = frames[rng.randrange(len(frames))]
        r = run(spec, B, streams=streams, seed=seed)
        assert r.spliced == [(expected, rid)]
        chosen.add(rid)
    assert chosen == {"r-x", "r-y"}


def test_concurrent_reads_the_source_as_it_is_at_the_splice() -> None:
    streams = RecentStreams()
    rec = streams.open("r-x", "sse")
    assert rec is not None
    profile = get_profile("openai-chat")
    source = Pipeline([], "sse", profile, record=rec.record)
    spec = [("splice", splice(**{"from": "concurrent", "after": 2}))]
    faults = build_faults(spec, 3, "raw", profile, streams=streams, request_id="r-b")
    this = Pipeline(faults, "sse", profile)
    x = chat_stream("x", ["X1", "X2", "X3"])
    source.feed(b"".join(x[:2]), 0.0)  # only X1 so far
    out = this.feed(b"".join(B[:2]), 0.0)
    source.feed(b"".join(x[2:]), 0.0)
    out += this.feed(b"".join(B[2:]), 0.0) + this.end(0.0)
    assert [a.data for a in out if isinstance(a, Send)] == [B[0], B[1], x[1], B[2], B[3]]


def test_no_concurrent_stream_is_skipped_with_a_reason() -> None:
    streams = RecentStreams()
    record(streams, "r-a", A)  # finished: not running
    record(streams, "r-b", B, close=False)  # this very stream
    spec = [("splice", splice(**{"from": "concurrent", "after": 1}))]
    r = run(spec, B, streams=streams)
    assert r.data == B
    assert (
        r.skipped[0]["reason"]
        == "from: concurrent: no other framed stream of this tenant was running"
    )
    record(streams, "r-c", [b": ping\n\n"], close=False)
    r = run(spec, B, streams=streams)
    assert (
        r.skipped[0]["reason"]
        == "from: concurrent: no other running stream of this tenant had delta events yet"
    )


def test_previous_is_the_previous_stream_of_this_tenant() -> None:
    """Another user's answer finished last: this tenant's own previous is taken, never
    the other's (the audit recovered 18 of 20 of the previous user's deltas)."""
    streams = RecentStreams()
    record(streams, "r-mine", A, tenant="me")
    record(streams, "r-theirs", chat_stream("t", ["T1", "T2"]), tenant="them")
    assert streams.previous is not None and streams.previous.request_id == "r-theirs"
    spec = [("splice", splice(**{"from": "previous", "after": 2}))]
    r = run(spec, B, streams=streams, tenant="me")
    assert r.spliced == [(A_DELTAS[pick(7, 4)], "r-mine")]
    r = run(spec, B, streams=streams, tenant="a third")
    assert r.data == B and r.applied == {}
    assert r.skipped[0]["reason"] == (
        "from: previous: no framed stream of this tenant had finished before this one"
    )


def test_concurrent_takes_only_this_tenants_running_streams() -> None:
    streams = RecentStreams()
    theirs = chat_stream("t", ["T1", "T2", "T3"])
    record(streams, "r-theirs", theirs, close=False, tenant="them")
    spec = [("splice", splice(**{"from": "concurrent", "after": 1}))]
    r = run(spec, B, streams=streams, tenant="me")
    assert r.data == B
    assert r.skipped[0]["reason"] == (
        "from: concurrent: no other framed stream of this tenant was running"
    )
    mine = chat_stream("m", ["M1", "M2"])
    record(streams, "r-mine", mine, close=False, tenant="me")
    r = run(spec, B, streams=streams, tenant="me")
    assert r.spliced == [(mine[1:3][pick(7, 2, streams=1)], "r-mine")]


@pytest.mark.parametrize("source", ["previous", "concurrent"])
def test_across_tenants_takes_any_tenants_stream(source: str) -> None:
    streams = RecentStreams()
    theirs = chat_stream("t", ["T1", "T2", "T3"])
    record(streams, "r-theirs", theirs, close=source == "previous", tenant="them")
    spec = [("splice", splice(**{"from": source, "after": 1, "across_tenants": True}))]
    r = run(spec, B, streams=streams, tenant="me")
    chosen = theirs[1:4][pick(7, 3, streams=1 if source == "concurrent" else 0)]
    assert r.spliced == [(chosen, "r-theirs")]


ANONYMOUS_APART = (
    "an anonymous request (no credentials, tenant header or tenant cookie) takes from no "
    "other stream: nothing tells its user apart"
)


@pytest.mark.parametrize("source", ["previous", "concurrent"])
def test_an_anonymous_request_kept_apart_neither_takes_nor_gives(source: str) -> None:
    """Anonymous requests kept apart (the default tenant of a request with no
    credentials, tenant header or cookie) are each their own tenant for ``splice``:
    one anonymous user's answer, finished or running, is no source for another's, and
    none is filed as anyone's previous stream (so many of them push out no keyed
    user's). A keyed user's own stream is still its source; ``across_tenants`` takes
    the anonymous one as it takes anyone's."""
    streams = RecentStreams(max_previous=2)
    record(streams, "r-keyed", A, close=source == "previous", tenant="keyed")
    for i in range(5):
        record(streams, f"r-anon-{i}", chat_stream(str(i), ["N1", "N2"]), tenant=STRANGER)
    theirs = chat_stream("s", ["S1", "S2", "S3"])
    record(streams, "r-stranger", theirs, close=source == "previous", tenant=STRANGER)
    assert streams.previous_of(STRANGER) is None
    assert streams.running(tenant=STRANGER) == []
    spec = [("splice", splice(**{"from": source, "after": 1}))]
    r = run(spec, B, streams=streams, tenant=STRANGER)
    assert r.data == B and r.applied == {}
    assert r.skipped[0]["reason"] == f"from: {source}: {ANONYMOUS_APART}"
    # The keyed user's stream was kept (previous: not pushed out by the anonymous ones).
    mine = run(spec, B, streams=streams, tenant="keyed")
    deltas = A_DELTAS if source == "previous" else A[1:5]
    assert mine.spliced == [(deltas[pick(7, 4, streams=source == "concurrent")], "r-keyed")]
    across = [("splice", splice(**{"from": source, "after": 1, "across_tenants": True}))]
    taken = run(across, B, streams=streams, tenant="keyed")
    if source == "previous":  # the proxy's last stream, whoever's
        assert taken.spliced == [(theirs[1:4][pick(7, 3)], "r-stranger")]
    else:  # the running streams in the order they opened, one chosen by the seed
        rng = fault_rng(7, 0, "splice")
        chosen, events = [("r-keyed", A[1:5]), ("r-stranger", theirs[1:4])][rng.randrange(2)]
        assert taken.spliced == [(events[rng.randrange(len(events))], chosen)]


def test_sessions_join_the_registry_and_the_frame_line_names_the_source() -> None:
    streams = RecentStreams()
    session_run(streams, "r-1", b"".join(A), [])
    assert streams.previous is not None and streams.previous.request_id == "r-1"
    assert streams.running() == []
    second, lines = session_run(
        streams, "r-2", b"".join(B), [("splice", splice(**{"from": "previous", "after": 2}))]
    )
    spliced = [ln for ln in lines if "splice_from" in ln]
    assert spliced == [
        {
            "seq": 2,
            "offset": len(B[0]) + len(B[1]),
            "size": len(A_DELTAS[pick(7, 4)]),
            "t_ms": 0.0,
            "events": [0],
            "kinds": ["delta"],
            "faults": ["splice"],
            "splice_from": "r-1",
        }
    ]
    assert second.summary(0.0)["faults_applied"] == {"splice": 1}
    assert streams.previous is not None and streams.previous.request_id == "r-2"


def test_a_write_with_events_of_two_sources_names_both() -> None:
    from chaosproxy.core.faults.coalesce import CoalesceConfig

    streams = RecentStreams()
    session_run(streams, "r-1", b"".join(A), [])
    record(streams, "r-x", chat_stream("x", ["X"]), close=False)
    _, lines = session_run(
        streams,
        "r-2",
        b"".join(B),
        [
            ("splice", splice(**{"from": "previous", "after": 1})),
            ("splice", splice(**{"from": "concurrent", "after": 1})),
            ("coalesce", CoalesceConfig(all=True)),
        ],
    )
    [line] = lines
    assert line["splice_from"] == ["r-x", "r-1"]  # in the order they were sent
    assert line["faults"] == ["splice", "coalesce"]


def test_a_stream_that_was_cut_or_left_is_previous_too() -> None:
    streams = RecentStreams()
    s = Session(
        "r-gone", scenario=_Scenario([]), seed=1, path="/v1/chat/completions", streams=streams
    )
    s.start(0.0)
    s.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    s.feed(b"".join(A[:3]), 0.0)
    assert [r.request_id for r in streams.running()] == ["r-gone"]
    s.client_gone()
    assert streams.running() == []
    assert streams.previous is not None and len(streams.previous.events("delta")) == 2


@pytest.mark.parametrize("stem", ["splice-previous-delta", "splice-concurrent-delta"])
def test_simulate_reports_the_library_scenarios_skipped(stem: str) -> None:
    """Offline, one stream alone: the bytes go through untouched, and the summary says
    why the splice did nothing (never silently ignored)."""
    from chaosproxy.scenario import load_library
    from chaosproxy.tools.simulate import simulate

    scenario = load_library()[stem]
    sim = simulate(scenario, b"".join(B), seed=1, path="/v1/chat/completions")
    assert sim.body == b"".join(B)
    assert sim.applied == {}
    which = "previous" if "previous" in stem else "concurrent"
    assert sim.skipped == [
        {
            "fault": "splice",
            "position": 0,
            "reason": f"from: {which}: no other stream to take from "
            "(an offline run has only its own)",
        }
    ]


def blocks(body: bytes) -> list[bytes]:
    parts = body.split(b"\n\n")
    assert parts[-1] == b""
    return [p + b"\n\n" for p in parts[:-1]]


def delta_blocks(body: bytes) -> list[bytes]:
    """The blocks of an OpenAI chat body that its profile calls text deltas."""
    profile = get_profile("openai-chat")
    return [b for b in blocks(body) if "delta" in profile.classify(parse_block(b, "sse"))]


async def test_live_the_second_request_gets_a_delta_of_the_first(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(
        library=True, content=True, mock_tokens=6, mock_interval=0.001, **ONE_USER
    )
    other = {**CHAT_BODY, "messages": [{"role": "user", "content": "something else"}]}
    first_id, first = await post(proxy.url, {"X-Chaos-Scenario": "one-event-per-read"}, other)
    await log_capture.wait_end(first_id)
    seed = 11
    headers = {"X-Chaos-Scenario": "splice-previous-delta", "X-Chaos-Seed": str(seed)}
    second_id, second = await post(proxy.url, headers)
    _, reference = await post(proxy.url, {"X-Chaos-Seed": str(seed)})  # passthrough
    end = await log_capture.wait_end(second_id)
    assert end["faults_applied"] == {"splice": 1} and end["faults_skipped"] == []
    sources = delta_blocks(first)
    chosen = sources[pick(seed, len(sources))]
    ref = blocks(reference)
    assert second == b"".join([*ref[:2], chosen, *ref[2:]])
    assert chosen not in ref  # another answer's text, not this one's
    frames = log_capture.frames(second_id)
    spliced = [f for f in frames if f["faults"] == ["splice"]]
    assert len(spliced) == 1
    assert spliced[0]["splice_from"] == first_id
    assert spliced[0]["events"] == [0] and spliced[0]["kinds"] == ["delta"]
    assert base64.b64decode(spliced[0]["raw"]) == chosen
    assert all("splice_from" not in f for f in frames if f is not spliced[0])


async def test_live_a_stream_running_now_is_a_concurrent_source(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(
        library=True, content=True, mock_tokens=5, mock_interval=0.001, **ONE_USER
    )
    other = {**CHAT_BODY, "messages": [{"role": "user", "content": "another user"}]}
    got = bytearray()
    seed = 5
    async with (
        aiohttp.ClientSession() as client,
        # Stream A stays open after its last event (hang): it is running while B runs.
        client.post(
            proxy.url + CHAT, json=other, headers={"X-Chaos-Scenario": "hang-after-last-event"}
        ) as resp_a,
    ):
        a_id = resp_a.headers["X-Chaos-Request-Id"]
        async with asyncio.timeout(5):
            while b"data: [DONE]\n\n" not in got:
                got += await resp_a.content.readany()
        headers = {"X-Chaos-Scenario": "splice-concurrent-delta", "X-Chaos-Seed": str(seed)}
        b_id, b_body = await post(proxy.url, headers)
        end = await log_capture.wait_end(b_id)
    # A is over once its client left.
    await log_capture.wait_end(a_id)
    assert end["faults_applied"] == {"splice": 1}, end
    sources = delta_blocks(bytes(got))
    chosen = sources[pick(seed, len(sources), streams=1)]
    _, reference = await post(proxy.url, {"X-Chaos-Seed": str(seed)})  # passthrough
    ref = blocks(reference)
    assert b_body == b"".join([*ref[:2], chosen, *ref[2:]])
    [spliced] = [f for f in log_capture.frames(b_id) if "splice_from" in f]
    assert spliced["splice_from"] == a_id
    assert proxy.state.streams.running() == []


async def test_live_concurrent_with_no_other_stream_is_skipped(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(library=True, mock_tokens=3, mock_interval=0.001, **ONE_USER)
    rid, body = await post(proxy.url, {"X-Chaos-Scenario": "splice-concurrent-delta"})
    _, reference = await post(proxy.url, {})
    end = await log_capture.wait_end(rid)
    assert end["faults_skipped"] == [
        {
            "fault": "splice",
            "position": 0,
            "reason": "from: concurrent: no other framed stream of this tenant was running",
        }
    ]
    assert end["faults_applied"] == {}
    assert len(blocks(body)) == len(blocks(reference))


async def test_live_ndjson_stream_gets_an_sse_streams_delta_as_a_json_line(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    upstream.route(CHAT, Script.events(b"".join(A)))
    lines = [b'{"message":{"content":"Hi"},"done":false}\n', b'{"done":true}\n']
    upstream.route(
        "/api/chat",
        Script(
            writes=[(ln, 0.0) for ln in lines], headers={"Content-Type": "application/x-ndjson"}
        ),
    )
    proxy = await make_proxy(
        upstream=upstream.url,
        scenarios={
            "framed": "faults: []",
            "s": "faults:\n  - splice: {from: previous, after: 1}",
        },
        content=True,
        **ONE_USER,
    )
    first_id, _ = await post(proxy.url, {"X-Chaos-Scenario": "framed"})
    await log_capture.wait_end(first_id)
    headers = {"X-Chaos-Scenario": "s", "X-Chaos-Seed": "2"}
    async with (
        aiohttp.ClientSession() as client,
        client.post(proxy.url + "/api/chat", json={}, headers=headers) as resp,
    ):
        body = await resp.read()
        rid = resp.headers["X-Chaos-Request-Id"]
    end = await log_capture.wait_end(rid)
    assert end["faults_applied"] == {"splice": 1}
    chosen = A_DELTAS[pick(2, 4)]
    line = chosen.removeprefix(b"data: ").rstrip(b"\n") + b"\n"
    assert body == lines[0] + line + lines[1]
    [spliced] = [f for f in log_capture.frames(rid) if "splice_from" in f]
    assert spliced["splice_from"] == first_id


async def test_live_plain_sse_upstream_previous_stream_is_the_source(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    # A plain SSE upstream (``data:`` lines, no ids, no provider): its events are of
    # kind ``other``, and the splice takes one of the previous stream's.
    first_words = [b"data: first-%d\n\n" % i for i in range(1, 6)]
    second_words = [b"data: second-%d\n\n" % i for i in range(1, 6)]
    upstream.route("/a", Script.events(b"".join(first_words)))
    upstream.route("/b", Script.events(b"".join(second_words)))
    proxy = await make_proxy(
        upstream=upstream.url,
        scenarios={"s": "faults:\n  - splice: {from: previous, after: 2, kind: other}"},
        default="s",
        **ONE_USER,
    )
    seed = 3
    async with aiohttp.ClientSession() as client:
        async with client.get(proxy.url + "/a", headers={"X-Chaos-Seed": "1"}) as resp:
            first_id = resp.headers["X-Chaos-Request-Id"]
            assert await resp.read() == b"".join(first_words)  # nothing to take from yet
        await log_capture.wait_end(first_id)
        async with client.get(proxy.url + "/b", headers={"X-Chaos-Seed": str(seed)}) as resp:
            second_id = resp.headers["X-Chaos-Request-Id"]
            body = await resp.read()
    end = await log_capture.wait_end(second_id)
    assert end["faults_applied"] == {"splice": 1}
    chosen = first_words[pick(seed, len(first_words))]
    assert body == b"".join([*second_words[:2], chosen, *second_words[2:]])
    [spliced] = [f for f in log_capture.frames(second_id) if "splice_from" in f]
    assert spliced["splice_from"] == first_id and spliced["kinds"] == ["other"]
