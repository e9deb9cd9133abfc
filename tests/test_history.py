"""The sans-IO history of reconnectable streams (chaosproxy.core.history): no event loop,
time passed in as numbers, exact expectations.

What is proven: a recorder gives every event its id (``<request_id>.<n>``, or the
upstream's) whatever the read boundaries, keeps comments out of history and passes them
on; history is bounded by ``max_bytes`` (oldest forgotten), ``streams`` per scenario
(oldest dropped) and ``retention`` (after the last activity); and each policy answers a
``Last-Event-ID`` as docs/reconnection.md says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaosproxy.core.history import (
    Answer,
    Fresh,
    HistoryStore,
    Recorder,
    Replay,
    ResumeConfig,
    StreamHistory,
    parse_bytes,
)
from chaosproxy.scenario import ScenarioError, load_scenarios, parse_scenario

SSE = [("Content-Type", "text/event-stream")]

#: A plain upstream: a comment, an event with its own id, one with two data lines, and
#: one with an ``event:`` name and CRLF line endings.
C = b": keepalive\n\n"
E1 = b'data: {"t":"Hel"}\n\n'
E2 = b"id: up-2\ndata: lo\n\n"
E3 = b"data: a\ndata: b\n\n"
E4 = b"event: done\r\ndata: [DONE]\r\n\r\n"
BODY = C + E1 + E2 + E3 + E4


def recorded(
    config: ResumeConfig, body: bytes, *, step: int = 0, rid: str = "r-1"
) -> tuple[StreamHistory, bytes]:
    store = HistoryStore()
    stream = store.begin("s", config, rid, SSE, 0.0)
    recorder = Recorder(stream)
    out = b""
    chunks = [body] if not step else [body[i : i + step] for i in range(0, len(body), step)]
    for i, chunk in enumerate(chunks):
        out += recorder.feed(chunk, float(i))
    out += recorder.eof(99.0)
    return stream, out


@pytest.mark.parametrize("step", [0, 1, 2, 7])
def test_proxy_ids_replace_the_upstreams_whatever_the_reads(step: int) -> None:
    stream, out = recorded(ResumeConfig(), BODY, step=step)
    expected = [
        b'id: r-1.1\ndata: {"t":"Hel"}\n\n',
        b"id: r-1.2\ndata: lo\n\n",
        b"id: r-1.3\ndata: a\ndata: b\n\n",
        b"id: r-1.4\r\nevent: done\r\ndata: [DONE]\r\n\r\n",
    ]
    assert out == C + b"".join(expected)  # the comment passes on, not kept
    assert [k.raw for k in stream.events] == expected
    assert [k.id for k in stream.events] == ["r-1.1", "r-1.2", "r-1.3", "r-1.4"]
    assert [k.upstream_id for k in stream.events] == [None, "up-2", None, None]
    assert [k.ordinal for k in stream.events] == [1, 2, 3, 4]
    assert (stream.first, stream.total, stream.bytes) == (0, 4, sum(map(len, expected)))


def test_upstream_ids_are_kept_and_looked_up() -> None:
    stream, out = recorded(ResumeConfig(ids="upstream"), BODY, step=3)
    assert out == BODY
    assert [k.id for k in stream.events] == [None, "up-2", None, None]
    assert stream.index_of("up-2") == 1
    assert stream.index_of("r-1.2") is None


def test_an_unterminated_last_event_is_kept_at_eof() -> None:
    stream, out = recorded(ResumeConfig(), E1 + b"data: tail")
    assert out.endswith(b"id: r-1.2\ndata: tail")
    assert [k.raw for k in stream.events][-1] == b"id: r-1.2\ndata: tail"


def test_a_leading_bom_goes_on_but_is_not_kept() -> None:
    stream, out = recorded(ResumeConfig(), b"\xef\xbb\xbf" + E1)
    assert out == b'\xef\xbb\xbfid: r-1.1\ndata: {"t":"Hel"}\n\n'
    assert stream.events[0].raw == b'id: r-1.1\ndata: {"t":"Hel"}\n\n'


def test_max_bytes_forgets_the_oldest_events() -> None:
    event = b"data: 0123456789\n\n"  # 18 bytes; 28 with "id: r-1.N\n"
    stream, _ = recorded(ResumeConfig(max_bytes=100), event * 5)
    # 5 events of 28 bytes: 140 > 100, so the first two are forgotten (84 <= 100).
    assert (stream.first, stream.total, stream.bytes) == (2, 5, 84)
    assert [k.id for k in stream.events] == ["r-1.3", "r-1.4", "r-1.5"]
    assert stream.index_of("r-1.2") is None
    assert stream.index_of("r-1.3") == 2
    assert stream.since(0) == list(stream.events)


def test_many_streams_stay_bounded_by_streams_and_bytes() -> None:
    config = ResumeConfig(streams=100, max_bytes=1000)
    store = HistoryStore()
    event = b"data: " + b"x" * 90 + b"\n\n"
    for n in range(500):
        stream = store.begin("s", config, f"r-{n}", SSE, n / 100)
        recorder = Recorder(stream)
        recorder.feed(event * 40, n / 100)  # 40 events of ~104 bytes: ~4 kB each
    held = list(store.streams("s"))
    assert len(held) == 100
    assert [s.request_id for s in held] == [f"r-{n}" for n in range(400, 500)]
    assert all(s.bytes <= 1000 for s in held)
    assert store.bytes <= 100 * 1000
    assert store.find("s", "r-399.40") is None  # dropped with its stream
    assert store.find("s", "r-499.40") == (held[-1], 39)


def test_streams_expire_retention_after_their_last_activity() -> None:
    config = ResumeConfig(retention="10s")
    store = HistoryStore()
    a = store.begin("s", config, "r-a", SSE, 0.0)
    b = store.begin("s", config, "r-b", SSE, 5.0)
    Recorder(a).feed(E1, 3.0)  # activity at 3.0
    assert store.expire(12.9) == []
    assert store.expire(13.0) == [a]
    assert store.holds(b) and not store.holds(a)
    b.touch(14.0)  # a reconnect looked it up
    assert store.expire(23.9) == []
    assert store.expire(24.0) == [b]
    assert list(store.streams()) == []


def kept_stream(config: ResumeConfig, *, finished: bool) -> tuple[HistoryStore, StreamHistory]:
    store = HistoryStore()
    stream = store.begin("s", config, "r-1", SSE, 0.0)
    Recorder(stream).feed(E1 + E2 + E3 + E4, 1.0)
    if finished:
        stream.end("completed", 2.0)
    return store, stream


@pytest.mark.parametrize(
    ("policy", "start"),
    [("resume", 2), ("replay_last", 1), ("restart", 0)],
)
def test_history_policies_replay_from_their_point(policy: str, start: int) -> None:
    config = ResumeConfig(policy=policy)  # type: ignore[arg-type]
    store, stream = kept_stream(config, finished=False)
    decision = store.decide("s", config, "r-1.2", 3.0)
    assert decision == Replay(stream, start)
    assert [k.id for k in stream.since(start)] == ["r-1.1", "r-1.2", "r-1.3", "r-1.4"][start:]
    assert stream.last_activity == 3.0  # the lookup counts as activity


def test_new_stream_is_a_fresh_generation_and_unsupported_is_204() -> None:
    config = ResumeConfig(policy="new_stream")
    store, stream = kept_stream(config, finished=False)
    assert store.decide("s", config, "r-1.2", 3.0) == Fresh("new generation", stream)
    config = ResumeConfig(policy="unsupported")
    store, stream = kept_stream(config, finished=False)
    assert store.decide("s", config, "r-1.2", 3.0) == Answer(204, "resume unsupported", stream)
    assert store.decide("s", config, "nope", 3.0) == Answer(204, "resume unsupported", None)


@pytest.mark.parametrize("missing", [204, 404, "new_stream"])
def test_expired_answers_as_missing(missing: int | str) -> None:
    config = ResumeConfig(policy="expired", missing=missing)  # type: ignore[arg-type]
    store, stream = kept_stream(config, finished=False)
    decision = store.decide("s", config, "r-1.2", 3.0)
    if missing == "new_stream":
        assert decision == Fresh("history expired", stream)
    else:
        assert decision == Answer(missing, "history expired", stream)  # type: ignore[arg-type]


@pytest.mark.parametrize("last_id", ["r-2.1", "r-1.9", "r-1.0", "r-1", "garbage", "r-1.x"])
def test_an_unknown_id_gets_missing(last_id: str) -> None:
    for missing, expected in [
        (204, Answer(204, "unknown event id")),
        (404, Answer(404, "unknown event id")),
        ("new_stream", Fresh("unknown event id")),
    ]:
        config = ResumeConfig(missing=missing)  # type: ignore[arg-type]
        store, _ = kept_stream(config, finished=False)
        assert store.decide("s", config, last_id, 3.0) == expected


def test_an_expired_stream_is_missing() -> None:
    config = ResumeConfig(retention="5s")
    store, _ = kept_stream(config, finished=True)  # last activity 2.0
    assert isinstance(store.decide("s", config, "r-1.2", 6.9), Replay)  # touched at 6.9
    assert store.decide("s", config, "r-1.2", 11.9) == Answer(204, "unknown event id")


@pytest.mark.parametrize("policy", ["resume", "replay_last", "restart", "new_stream"])
def test_a_finished_streams_last_id_gets_204(policy: str) -> None:
    config = ResumeConfig(policy=policy)  # type: ignore[arg-type]
    store, stream = kept_stream(config, finished=True)
    assert store.decide("s", config, "r-1.4", 3.0) == Answer(204, "stream finished", stream)
    # An earlier id of the finished stream is still answered by the policy.
    assert not isinstance(store.decide("s", config, "r-1.3", 3.0), Answer)


def test_streams_are_per_scenario() -> None:
    config = ResumeConfig()
    store, _ = kept_stream(config, finished=False)
    assert store.decide("other", config, "r-1.2", 3.0) == Answer(204, "unknown event id")


def test_sizes_parse_with_units() -> None:
    assert parse_bytes("4MiB") == 4 * 1024 * 1024
    assert parse_bytes("512KiB") == 512 * 1024
    assert parse_bytes("100kB") == 100_000
    assert parse_bytes(" 7 ") == 7
    assert parse_bytes(1234) == 1234
    with pytest.raises(ValueError, match="not a size"):
        parse_bytes("4 parsecs")


def test_the_resume_key_validates_with_located_problems(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "faults: []\n"
        "resume:\n"
        "  policy: resum\n"
        "  retention: 5x\n"
        "  streams: 0\n"
        "  max_bytes: 4 parsecs\n"
        "  missing: 500\n"
        "  colour: red\n"
    )
    with pytest.raises(ScenarioError) as info:
        load_scenarios([bad])
    problems = [str(p) for p in info.value.problems]
    assert problems == [
        f"{bad}:3: resume.policy: must be one of: resume, replay_last, restart, new_stream,"
        " unsupported, expired",
        f"{bad}:4: resume.retention: not a duration: '5x' (use a number of ms, or 250ms, 2s)",
        f"{bad}:5: resume.streams: must be >= 1",
        f"{bad}:6: resume.max_bytes: not a size: '4 parsecs' (use bytes, or 512KiB, 4MiB)",
        f"{bad}:7: resume.missing: must be one of: 204, 404, new_stream",
        f"{bad}:8: resume.colour: unknown key (allowed: policy, ids, retention, streams,"
        " max_bytes, missing)",
    ]


def test_the_resume_key_defaults_and_shows_as_a_file_would() -> None:
    scenario = parse_scenario("faults: []\nresume: {}\n", "<x>", default_name="x")
    assert scenario.resume == ResumeConfig()
    shown = scenario.as_dict()["resume"]
    assert shown == {
        "policy": "resume",
        "ids": "proxy",
        "retention": "60s",
        "streams": 100,
        "max_bytes": 4194304,
        "missing": 204,
    }
    again = parse_scenario(
        "faults: []\nresume: {retention: 60s, max_bytes: 4MiB}\n", "<y>", default_name="x"
    )
    assert again.resume == scenario.resume
