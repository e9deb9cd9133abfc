"""The proxy's recent framed streams (chaosproxy/core/recent.py), the sources of
``splice``: what is recorded, per tenant, within bounds, and forgotten on a reset."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from chaosproxy.core.events import Event
from chaosproxy.core.faults import build_faults
from chaosproxy.core.framing import parse_block
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile
from chaosproxy.core.recent import DEFAULT_MAX_BYTES, DEFAULT_MAX_EVENTS, RecentStreams
from chaosproxy.core.session import Session
from tests.support.fault_splice import (
    CHAT,
    ONE_USER,
    A,
    B,
    _Scenario,
    chat,
    chat_stream,
    post,
    record,
    session_run,
    splice,
)
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import Script, ScriptedUpstream, until


def test_the_previous_streams_of_many_tenants_stay_bounded() -> None:
    streams = RecentStreams(max_events=4, max_bytes=4096, max_previous=3)
    for i in range(100):
        record(streams, f"r-{i}", chat_stream(str(i), ["x", "y"]), tenant=f"t{i}")
    assert len(streams) == 3 and streams.events == 3 * 4
    assert [streams.previous_of(f"t{i}") is not None for i in range(96, 100)] == [
        False,
        True,
        True,
        True,
    ]
    # The tenant that finished one last is kept longest.
    record(streams, "r-again", chat_stream("a", ["z"]), tenant="t97")
    record(streams, "r-new", chat_stream("n", ["z"]), tenant="t-new")
    assert streams.previous_of("t97") is not None and streams.previous_of("t98") is None
    assert streams.previous is not None and streams.previous.request_id == "r-new"
    assert len(streams) == 3
    with pytest.raises(ValueError, match=">= 0"):
        RecentStreams(max_previous=-1)


def test_only_complete_upstream_events_are_recorded() -> None:
    streams = RecentStreams()
    from chaosproxy.core.faults.duplicate import DuplicateConfig

    rec = streams.open("r-a", "sse")
    assert rec is not None
    profile = get_profile("openai-chat")
    faults = build_faults(
        [
            ("duplicate", DuplicateConfig()),
            ("splice", splice(**{"from": "concurrent", "after": 1})),
        ],
        1,
        "raw",
        profile,
        streams=streams,
        request_id="r-a",
    )
    record(streams, "r-x", A, close=False)
    pipeline = Pipeline(faults, "sse", profile, record=rec.record)
    pipeline.feed(b": comment\n\n" + b"".join(B) + b'data: {"unterminated', 0.0)
    pipeline.end(0.0)
    # Each upstream event once: not the copies, not the spliced one, not the comment,
    # not the unterminated end.
    assert [len(rec.events(k)) for k in ("start", "delta", "terminal")] == [1, 2, 1]
    assert len(rec) == 4
    assert rec.events("delta") == tuple(parse_block(e, "sse") for e in B[1:3])


def test_a_stream_keeps_its_last_events_within_its_bounds() -> None:
    streams = RecentStreams(max_events=3, max_bytes=10_000)
    rec = record(streams, "r-a", chat_stream("a", [f"t{i}" for i in range(10)]))
    assert len(rec) == 3 and rec.forgotten == 9
    deltas = chat_stream("a", [f"t{i}" for i in range(10)])[1:11]
    assert [f.raw for f in rec.events("delta")] == deltas[8:]
    assert [f.raw for f in rec.events("terminal")] == [b"data: [DONE]\n\n"]
    assert rec.events("start") == ()  # forgotten with the oldest
    size = len(deltas[0])
    streams = RecentStreams(max_events=100, max_bytes=2 * size + 5)
    rec = record(streams, "r-a", chat_stream("a", [f"t{i}" for i in range(10)])[1:11])
    assert [f.raw for f in rec.events("delta")] == deltas[8:]
    assert rec.bytes == 2 * size
    big = chat({"content": "x" * (3 * size)})
    rec = record(streams, "r-big", [big])
    assert len(rec) == 0 and rec.forgotten == 1  # larger than the bound: not kept


def test_many_streams_keep_bounded_memory() -> None:
    streams = RecentStreams(max_events=8, max_bytes=4096, max_running=5)
    for i in range(500):
        record(streams, f"r-{i}", chat_stream(str(i), [f"w{j}" for j in range(50)]))
    assert len(streams) == 1 and streams.previous is not None
    assert streams.previous.request_id == "r-499"
    assert streams.events == 8 and streams.bytes <= 4096
    running = [streams.open(f"r-run-{i}", "sse") for i in range(20)]
    assert sum(r is not None for r in running) == 5 and streams.unrecorded == 15
    for rec in running:
        if rec is not None:
            for j in range(100):
                frame = parse_block(chat({"content": f"z{j}"}), "sse")
                rec.record(Event(frame, j + 1, frozenset({"delta"})))
    assert len(streams) == 6
    assert streams.events == 6 * 8 and streams.bytes <= 6 * 4096
    streams.clear()
    assert len(streams) == 0 and streams.bytes == 0


def test_default_bounds() -> None:
    streams = RecentStreams()
    assert (streams.max_events, streams.max_bytes) == (DEFAULT_MAX_EVENTS, DEFAULT_MAX_BYTES)
    with pytest.raises(ValueError, match=">= 0"):
        RecentStreams(max_events=-1)


def test_a_session_joins_the_streams_as_its_tenants() -> None:
    streams = RecentStreams()
    session_run(streams, "r-1", b"".join(A), [], tenant="alice")
    assert streams.previous_of("alice") is streams.previous
    spec = [("splice", splice(**{"from": "previous", "after": 2}))]
    bob, lines = session_run(streams, "r-2", b"".join(B), spec, tenant="bob")
    assert [ln for ln in lines if "splice_from" in ln] == []
    assert bob.summary(0.0)["faults_applied"] == {}
    _, lines = session_run(streams, "r-3", b"".join(B), spec, tenant="alice")
    assert [ln["splice_from"] for ln in lines if "splice_from" in ln] == ["r-1"]


def test_unframed_and_raw_sessions_are_not_recorded() -> None:
    streams = RecentStreams()
    s = Session("r-p", scenario=None, seed=1, path="/v1/chat/completions", streams=streams)
    s.start(0.0)
    s.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    s.feed(b"".join(A), 0.0)
    s.finish()
    raw = Session("r-raw", scenario=_Scenario([]), seed=1, path="/x", streams=streams)
    raw.start(0.0)
    raw.response_head(200, "OK", [("Content-Type", "application/octet-stream")])
    raw.feed(b"".join(A), 0.0)
    raw.finish()
    assert len(streams) == 0


async def test_live_many_streams_keep_the_registry_bounded(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    many = chat_stream("m", [f"w{i}" for i in range(300)])
    upstream.route(CHAT, Script(writes=[(b"".join(many), 0.0)]))
    proxy = await make_proxy(
        upstream=upstream.url, scenarios={"framed": "faults: []"}, default="framed"
    )
    streams = proxy.state.streams
    ids = await asyncio.gather(*(post(proxy.url, {}) for _ in range(30)))
    for rid, body in ids:
        assert body == b"".join(many)
        await log_capture.wait_end(rid)
    await until(lambda: streams.running() == [])
    assert len(streams) == 1 and streams.previous is not None
    assert streams.previous.request_id in {rid for rid, _ in ids}
    assert streams.events <= DEFAULT_MAX_EVENTS and streams.bytes <= DEFAULT_MAX_BYTES
    assert streams.previous.forgotten == len(many) - DEFAULT_MAX_EVENTS


async def test_live_admin_reset_forgets_the_sources(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(
        library=True, mock_tokens=3, mock_interval=0.001, admin=("127.0.0.1", 0), **ONE_USER
    )
    first_id, _ = await post(proxy.url, {"X-Chaos-Scenario": "one-event-per-read"})
    await log_capture.wait_end(first_id)
    assert proxy.state.streams.previous is not None
    assert proxy.admin_url is not None
    async with aiohttp.ClientSession() as client, client.post(proxy.admin_url + "/reset") as resp:
        assert resp.status == 200
    assert len(proxy.state.streams) == 0
    rid, _ = await post(proxy.url, {"X-Chaos-Scenario": "splice-previous-delta"})
    end = await log_capture.wait_end(rid)
    assert end["faults_skipped"][0]["reason"] == (
        "from: previous: no framed stream of this tenant had finished before this one"
    )
