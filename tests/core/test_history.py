"""The sans-IO history of reconnectable streams (chaosproxy.core.history): no event loop,
time passed in as numbers, exact expectations.

What is proven: a recorder gives every event its id (``<token>.<n>``, or the
upstream's) whatever the read boundaries, keeps comments out of history and passes them
on; history is bounded by ``max_bytes`` (oldest forgotten), ``streams`` per scenario
(oldest dropped, every tenant's together) and ``retention`` (after the last activity),
and the store says which streams it let go; each policy answers a ``Last-Event-ID`` as
docs/reconnection.md says; and a stream is found only by its own tenant, by map: a
forged id, another tenant's, or an upstream id shared by two tenants finds nothing of
anyone else's, and no lookup reads a kept event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaosproxy.core.history import (
    ANONYMOUS_UPSTREAM_ID,
    Fresh,
    HistoryStore,
    Kept,
    Recorder,
    Refuse,
    Resume,
    ResumeConfig,
    StreamHistory,
    parse_bytes,
    shown_event_id,
)
from chaosproxy.core.tenancy import STRANGER
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


#: The token of the stream a test keeps (the shell draws a random one).
TOKEN = "tok1"


def recorded(
    config: ResumeConfig, body: bytes, *, step: int = 0, rid: str = "r-1"
) -> tuple[StreamHistory, bytes]:
    store = HistoryStore()
    stream = store.begin("s", config, rid, SSE, 0.0, token=TOKEN)
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
        b'id: tok1.1\ndata: {"t":"Hel"}\n\n',
        b"id: tok1.2\ndata: lo\n\n",
        b"id: tok1.3\ndata: a\ndata: b\n\n",
        b"id: tok1.4\r\nevent: done\r\ndata: [DONE]\r\n\r\n",
    ]
    assert out == C + b"".join(expected)  # the comment passes on, not kept
    assert [k.raw for k in stream.events] == expected
    assert [k.id for k in stream.events] == ["tok1.1", "tok1.2", "tok1.3", "tok1.4"]
    assert stream.request_id == "r-1"  # the request that began it: not in its ids
    assert [k.upstream_id for k in stream.events] == [None, "up-2", None, None]
    assert [k.ordinal for k in stream.events] == [1, 2, 3, 4]
    assert (stream.first, stream.total, stream.bytes) == (0, 4, sum(map(len, expected)))


def test_upstream_ids_are_kept_and_looked_up() -> None:
    stream, out = recorded(ResumeConfig(ids="upstream"), BODY, step=3)
    assert out == BODY
    assert [k.id for k in stream.events] == [None, "up-2", None, None]
    assert stream.index_of("up-2") == 1
    assert stream.index_of("tok1.2") is None


def test_an_unterminated_last_event_is_kept_at_eof() -> None:
    stream, out = recorded(ResumeConfig(), E1 + b"data: tail")
    assert out.endswith(b"id: tok1.2\ndata: tail")
    assert [k.raw for k in stream.events][-1] == b"id: tok1.2\ndata: tail"


def test_a_leading_bom_goes_on_but_is_not_kept() -> None:
    stream, out = recorded(ResumeConfig(), b"\xef\xbb\xbf" + E1)
    assert out == b'\xef\xbb\xbfid: tok1.1\ndata: {"t":"Hel"}\n\n'
    assert stream.events[0].raw == b'id: tok1.1\ndata: {"t":"Hel"}\n\n'


def test_max_bytes_forgets_the_oldest_events() -> None:
    event = b"data: 0123456789\n\n"  # 18 bytes; 29 with "id: tok1.N\n"
    stream, _ = recorded(ResumeConfig(max_bytes=100), event * 5)
    # 5 events of 29 bytes: 145 > 100, so the first two are forgotten (87 <= 100).
    assert (stream.first, stream.total, stream.bytes) == (2, 5, 87)
    assert [k.id for k in stream.events] == ["tok1.3", "tok1.4", "tok1.5"]
    assert stream.index_of("tok1.2") is None
    assert stream.index_of("tok1.3") == 2
    assert stream.since(0) == list(stream.events)


def test_many_streams_stay_bounded_by_streams_and_bytes() -> None:
    config = ResumeConfig(streams=100, max_bytes=1000)
    store = HistoryStore()
    event = b"data: " + b"x" * 90 + b"\n\n"
    dropped: list[StreamHistory] = []
    store.on_drop = dropped.append
    for n in range(500):
        stream = store.begin("s", config, f"r-{n}", SSE, n / 100, token=f"t{n}")
        recorder = Recorder(stream)
        recorder.feed(event * 40, n / 100)  # 40 events of ~104 bytes: ~4 kB each
    held = list(store.streams("s"))
    assert len(held) == 100
    assert [s.request_id for s in held] == [f"r-{n}" for n in range(400, 500)]
    assert all(s.bytes <= 1000 for s in held)
    assert store.bytes <= 100 * 1000
    assert store.find("s", "t399.40") is None  # dropped with its stream
    assert store.find("s", "t499.40") == (held[-1], 39)
    # The store said which it let go, oldest first (the shell stops their readers).
    assert [s.request_id for s in dropped] == [f"r-{n}" for n in range(400)]
    assert not any(store.holds(s) for s in dropped)


def test_streams_expire_retention_after_their_last_activity() -> None:
    config = ResumeConfig.model_validate({"retention": "10s"})
    store = HistoryStore()
    a = store.begin("s", config, "r-a", SSE, 0.0, token="ta")
    b = store.begin("s", config, "r-b", SSE, 5.0, token="tb")
    Recorder(a).feed(E1, 3.0)  # activity at 3.0
    assert store.expire(12.9) == []
    assert store.expire(13.0) == [a]
    assert store.holds(b) and not store.holds(a)
    b.touch(14.0)  # a reconnect looked it up
    assert store.expire(23.9) == []
    assert store.expire(24.0) == [b]
    assert list(store.streams()) == []


def test_a_lookup_never_finds_a_stream_past_its_retention() -> None:
    """Between two sweeps of the store, the stream a lookup finds is checked itself: past
    its retention it is let go (the shell stops its reader) and the id is missing."""
    config = ResumeConfig.model_validate({"retention": "500ms"})
    dropped: list[StreamHistory] = []
    store = HistoryStore(on_drop=dropped.append)
    stream = store.begin("s", config, "r-1", SSE, 0.0, token=TOKEN)  # swept at 0.0
    Recorder(stream).feed(E1 + E2, 0.0)
    assert isinstance(store.decide("s", config, "tok1.1", 0.4), Resume)
    assert store.decide("s", config, "tok1.1", 0.95) == Refuse(204, "unknown event id")
    assert dropped == [stream] and not store.holds(stream)


def kept_stream(config: ResumeConfig, *, finished: bool) -> tuple[HistoryStore, StreamHistory]:
    store = HistoryStore()
    stream = store.begin("s", config, "r-1", SSE, 0.0, token=TOKEN)
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
    decision = store.decide("s", config, "tok1.2", 3.0)
    assert decision == Resume(stream, start)
    assert [k.id for k in stream.since(start)] == ["tok1.1", "tok1.2", "tok1.3", "tok1.4"][start:]
    assert stream.last_activity == 3.0  # the lookup counts as activity


def test_new_stream_is_a_fresh_generation_and_unsupported_is_204() -> None:
    config = ResumeConfig(policy="new_stream")
    store, stream = kept_stream(config, finished=False)
    assert store.decide("s", config, "tok1.2", 3.0) == Fresh("new generation", stream)
    config = ResumeConfig(policy="unsupported")
    store, stream = kept_stream(config, finished=False)
    assert store.decide("s", config, "tok1.2", 3.0) == Refuse(204, "resume unsupported", stream)
    assert store.decide("s", config, "nope", 3.0) == Refuse(204, "resume unsupported", None)


@pytest.mark.parametrize("missing", [204, 404, "new_stream"])
def test_expired_answers_as_missing(missing: int | str) -> None:
    config = ResumeConfig(policy="expired", missing=missing)  # type: ignore[arg-type]
    store, stream = kept_stream(config, finished=False)
    decision = store.decide("s", config, "tok1.2", 3.0)
    if missing == "new_stream":
        assert decision == Fresh("history expired", stream)
    else:
        assert decision == Refuse(missing, "history expired", stream)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "last_id",
    [
        "r-1.1",
        "tok2.1",
        "tok1.9",
        "tok1.0",
        "tok1",
        "garbage",
        "tok1.x",
        "tok1.²",
        "tok1." + "9" * 5000,
    ],
)
def test_an_unknown_id_gets_missing(last_id: str) -> None:
    for missing, expected in [
        (204, Refuse(204, "unknown event id")),
        (404, Refuse(404, "unknown event id")),
        ("new_stream", Fresh("unknown event id")),
    ]:
        config = ResumeConfig(missing=missing)  # type: ignore[arg-type]
        store, _ = kept_stream(config, finished=False)
        assert store.decide("s", config, last_id, 3.0) == expected


def test_an_expired_stream_is_missing() -> None:
    config = ResumeConfig.model_validate({"retention": "5s"})
    store, _ = kept_stream(config, finished=True)  # last activity 2.0
    assert isinstance(store.decide("s", config, "tok1.2", 6.9), Resume)  # touched at 6.9
    assert store.decide("s", config, "tok1.2", 11.9) == Refuse(204, "unknown event id")


@pytest.mark.parametrize("policy", ["resume", "replay_last", "restart", "new_stream"])
def test_a_finished_streams_last_id_gets_204(policy: str) -> None:
    config = ResumeConfig(policy=policy)  # type: ignore[arg-type]
    store, stream = kept_stream(config, finished=True)
    assert store.decide("s", config, "tok1.4", 3.0) == Refuse(204, "stream finished", stream)
    # An earlier id of the finished stream is still answered by the policy.
    assert not isinstance(store.decide("s", config, "tok1.3", 3.0), Refuse)


def test_streams_are_per_scenario() -> None:
    config = ResumeConfig()
    store, _ = kept_stream(config, finished=False)
    assert store.decide("other", config, "tok1.2", 3.0) == Refuse(204, "unknown event id")


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


# --------------------------------------------------------------------------- tenants


def two_tenants(
    config: ResumeConfig, body: bytes
) -> tuple[HistoryStore, StreamHistory, StreamHistory]:
    """One scenario, a stream of tenant ``a`` then one of tenant ``b``, same body."""
    store = HistoryStore()
    a = store.begin("s", config, "r-1", SSE, 0.0, tenant="a", token="ta")
    b = store.begin("s", config, "r-2", SSE, 0.0, tenant="b", token="tb")
    Recorder(a).feed(body, 1.0)
    Recorder(b).feed(body, 1.0)
    return store, a, b


def test_a_stream_is_found_only_by_its_own_tenant() -> None:
    config = ResumeConfig()
    store, a, b = two_tenants(config, E1 + E2 + E3)
    assert store.decide("s", config, "ta.1", 2.0, tenant="a") == Resume(a, 1)
    # The other tenant with the very same id: unknown, and no stream named (the log
    # links nothing), whatever the policy.
    assert store.decide("s", config, "ta.1", 2.0, tenant="b") == Refuse(204, "unknown event id")
    for policy in ("unsupported", "new_stream", "restart"):
        cfg = ResumeConfig(policy=policy, missing="new_stream")
        decision = store.decide("s", cfg, "ta.1", 2.0, tenant="b")
        assert getattr(decision, "stream", None) is None, (policy, decision)
    assert store.find("s", "ta.2", tenant="anonymous") is None
    assert store.find("s", "tb.2", tenant="b") == (b, 1)


def test_a_forged_id_built_from_the_request_id_finds_nothing() -> None:
    """Request ids are sequential and shown to every client: a proxy id never contains
    one, so ``<request id>.<n>`` names no event, the tenant's own stream included."""
    config = ResumeConfig()
    store, a, _ = two_tenants(config, E1 + E2 + E3)
    for tenant in ("a", "b"):
        assert store.find("s", f"{a.request_id}.1", tenant=tenant) is None
        assert store.decide("s", config, "r-1.1", 2.0, tenant=tenant) == Refuse(
            204, "unknown event id"
        )


def test_upstream_ids_that_collide_across_tenants_stay_each_tenants() -> None:
    """Two users of one upstream that numbers its events 1, 2, ...: each finds its own."""
    config = ResumeConfig(ids="upstream")
    body = b"".join(b"id: %d\ndata: e%d\n\n" % (i, i) for i in range(1, 6))
    store, a, b = two_tenants(config, body)
    assert store.find("s", "4", tenant="a") == (a, 3)
    assert store.find("s", "4", tenant="b") == (b, 3)
    assert store.find("s", "4", tenant="c") is None
    assert store.decide("s", config, "4", 2.0, tenant="a") == Resume(a, 4)


def test_anonymous_requests_kept_apart_find_their_stream_by_its_token_only() -> None:
    """Anonymous requests kept apart share the stranger tenant: a stream of theirs is
    found by its token (the capability a reconnecting EventSource holds), never by an
    upstream's id, which every anonymous user of an upstream numbering 1, 2, … names
    alike: those are ``missing``, with the reason said, whatever the policy asks."""
    proxy_ids = ResumeConfig()
    store = HistoryStore()
    mine = store.begin("s", proxy_ids, "r-1", SSE, 0.0, tenant=STRANGER, token="tm")
    Recorder(mine).feed(E1 + E2 + E3, 1.0)
    assert store.decide("s", proxy_ids, "tm.1", 2.0, tenant=STRANGER) == Resume(mine, 1)
    config = ResumeConfig(ids="upstream")
    body = b"".join(b"id: %d\ndata: e%d\n\n" % (i, i) for i in range(1, 6))
    theirs = store.begin("s", config, "r-2", SSE, 0.0, tenant=STRANGER, token="tt")
    Recorder(theirs).feed(body, 1.0)
    assert theirs.ids == {"1": 0, "2": 1, "3": 2, "4": 3, "5": 4}  # kept, but not indexed
    assert store.find("s", "4", tenant=STRANGER) is None
    assert store.decide("s", config, "4", 2.0, tenant=STRANGER) == Refuse(
        204, ANONYMOUS_UPSTREAM_ID
    )
    fresh = ResumeConfig(ids="upstream", missing="new_stream")
    assert store.decide("s", fresh, "4", 2.0, tenant=STRANGER) == Fresh(ANONYMOUS_UPSTREAM_ID)
    # A keyed tenant's upstream ids are still found (the control).
    keyed, a, _ = two_tenants(config, body)
    assert keyed.find("s", "4", tenant="a") == (a, 3)


@pytest.mark.parametrize(
    ("sent", "shown"),
    [
        ("9GkT0vR2b6Xq1mZcJ4hLwA.7", "9GkT0v\u2026.7"),
        ("w1_9GkT0vR2b6Xq1mZcJ4hLwA.12", "w1_9Gk\u2026.12"),
        ("9GkT0vR2b6Xq1mZcJ4hLwA", "9GkT0v\u2026"),
        ("r-3f9a-1.1", "r-3f9a\u2026.1"),
        ("short.1", "short.1"),
        ("r-3f9aw1-17.1", "r-3f9a\u2026.1"),
        ("5", "5"),
        ("chatcmpl-1.2.3", "chatcm\u2026.3"),
        ("", ""),
        ("x" * 5000, "xxxxxx\u2026"),
        ("a." + "9" * 5000, "a." + "9" * 198),
    ],
)
def test_a_last_event_id_is_shown_with_its_token_cut(sent: str, shown: str) -> None:
    """What the log and the admin API show of a ``Last-Event-ID``: the token of a proxy
    id is the stream's capability, so only its first 6 characters (36 of 128 bits) and
    the event's number; never more than 200 characters."""
    assert shown_event_id(sent) == shown


def test_an_upstream_id_names_the_tenants_stream_whose_event_came_last() -> None:
    config = ResumeConfig(ids="upstream", max_bytes=40)
    store = HistoryStore()
    old = store.begin("s", config, "r-1", SSE, 0.0, token="t1")
    new = store.begin("s", config, "r-2", SSE, 0.0, token="t2")
    Recorder(old).feed(b"id: 7\ndata: old\n\n", 1.0)
    recorder = Recorder(new)
    recorder.feed(b"id: 7\ndata: new\n\n", 2.0)
    assert store.find("s", "7") == (new, 0)
    # The newer stream forgets its event 7 (max_bytes): the older one's is found again.
    recorder.feed(b"id: 8\ndata: " + b"x" * 20 + b"\n\n", 3.0)
    assert new.first == 1 and store.find("s", "7") == (old, 0)
    assert store.find("s", "8") == (new, 1)
    # Dropped streams take their ids with them.
    store.clear()
    assert store.find("s", "7") is None and store.find("s", "8") is None


class CountingEvents(deque[Kept]):
    """A stream's events that count every read of them."""

    reads = 0

    def __getitem__(self, index: Any) -> Any:
        CountingEvents.reads += 1
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[Kept]:
        CountingEvents.reads += 1
        return super().__iter__()

    def __reversed__(self) -> Iterator[Kept]:
        CountingEvents.reads += 1
        return super().__reversed__()


@pytest.mark.parametrize("ids", ["proxy", "upstream"])
def test_a_lookup_reads_no_event_however_much_is_kept(ids: str) -> None:
    """The audit's forged ``ids: upstream`` id scanned every kept event (4 s of blocked
    loop at a large history): a lookup is two map reads, hit or miss."""
    config = ResumeConfig(ids=ids, streams=50)  # type: ignore[arg-type]
    store = HistoryStore()
    body = b"".join(b"id: u%d\ndata: x\n\n" % i for i in range(1, 401))
    for n in range(50):
        stream = store.begin("s", config, f"r-{n}", SSE, 0.0, tenant=f"t{n % 5}", token=f"k{n}")
        Recorder(stream).feed(body, 0.0)
        stream.events = CountingEvents(stream.events)
    CountingEvents.reads = 0
    for forged in ["u401", "nobody", "k3.999", "r-3.1", "k3.", ".1", "u" * 10_000]:
        for tenant in ("t0", "t3", "other"):
            assert store.find("s", forged, tenant=tenant) is None
            decision = store.decide("s", config, forged, 0.5, tenant=tenant)
            assert decision == Refuse(204, "unknown event id")
    own = "k3.200" if ids == "proxy" else "u200"
    found = store.find("s", own, tenant="t3")
    assert found is not None and found[1] == 199
    assert CountingEvents.reads == 0


def test_what_is_read_of_an_event_not_ended_counts_in_the_bytes() -> None:
    store = HistoryStore()
    stream = store.begin("s", ResumeConfig(), "r-1", SSE, 0.0, token=TOKEN)
    recorder = Recorder(stream)
    recorder.feed(E1 + b"data: half of an ev", 1.0)
    assert stream.pending == len(b"data: half of an ev")
    assert store.bytes == stream.bytes + stream.pending == stream.held
    recorder.feed(b"ent\n\n", 2.0)
    assert stream.pending == 0 and stream.total == 2
    assert store.bytes == stream.bytes


def test_streams_bounds_every_tenants_streams_together() -> None:
    """Credentials are whatever a client sends: ``streams`` is one bound for the
    scenario, never one per tenant (which would be none)."""
    config = ResumeConfig(streams=3)
    store = HistoryStore()
    for n in range(10):
        store.begin("s", config, f"r-{n}", SSE, 0.0, tenant=f"t{n}", token=f"k{n}")
    assert [s.tenant for s in store.streams("s")] == ["t7", "t8", "t9"]
