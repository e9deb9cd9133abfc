"""Reconnection and resume through the live proxy, with a client that resumes itself.

Two upstreams: the built-in mock (OpenAI chat stream) and a plain SSE upstream that
sends ``data:`` events without ids (the scripted aiohttp server). For each policy the
fetch-style loop of tests/support/resume_client.py reconnects with ``Last-Event-ID`` until it
gets a non-200 answer; the tests assert the ids it received across connections, the
text it assembled, which events it saw twice, that 204 stops it, what the upstream was
asked, and what the log says (``resumes``, ``last_event_id``, frames, outcomes).
Expected ids and texts are built from the upstream's events and the policy's rule.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from chaosproxy.control.start import RunningProxy
from tests.support.admin import ADMIN, call
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.resume import CHAT, PLAIN, WORDS, mock_reference, text_of, token_of
from tests.support.resume_client import Run, resume_loop
from tests.support.scripted_upstream import Script, ScriptedUpstream, until

#: PLAIN at once, then the upstream keeps the body open (until the proxy lets it go).
HELD = Script.events(PLAIN, end="hold")


def scenario(policy: str, cut: str = "{after: 3}", **resume: str) -> str:
    extra = "".join(f", {k}: {v}" for k, v in resume.items())
    return f"resume: {{policy: {policy}{extra}}}\nrequests: [1]\nfaults:\n  - cut: {cut}\n"


async def plain_proxy(
    make_proxy: ProxyFactory,
    upstream: ScriptedUpstream,
    text: str,
    *,
    script: Script | None = None,
    **options: Any,
) -> RunningProxy:
    """A proxy (``options`` for make_proxy) whose default scenario is ``text``, in front of
    an upstream answering /stream with ``script``: PLAIN, an event every 10 ms, unless told."""
    upstream.route("/stream", script or Script.events(PLAIN, gap=0.01))
    return await make_proxy(upstream=upstream.url, scenarios={"s": text}, default="s", **options)


async def plain_run(proxy: RunningProxy) -> Run:
    async with httpx.AsyncClient(timeout=10) as client:
        return await resume_loop(client, proxy.url + "/stream")


def ids(token: str | None, ordinals: range | list[int]) -> list[str]:
    return [f"{token}.{n}" for n in ordinals]


# ------------------------------------------------------------------ plain SSE upstream


@pytest.mark.parametrize(
    ("policy", "second", "twice"),
    [
        ("resume", range(4, 9), []),
        ("replay_last", range(3, 9), [3]),
        ("restart", range(1, 9), [1, 2, 3]),
    ],
)
async def test_history_policies_through_a_plain_upstream(
    make_proxy: ProxyFactory,
    upstream: ScriptedUpstream,
    log_capture: LogCapture,
    policy: str,
    second: range,
    twice: list[int],
) -> None:
    proxy = await plain_proxy(make_proxy, upstream, scenario(policy, "{after: 3, how: reset}"))
    run = await plain_run(proxy)
    first = run.connections[0].request_id
    token = token_of(proxy, first)
    assert run.statuses == [200, 200, 204]  # the 204 of a finished stream stops it
    assert [c.end for c in run.connections] == ["error", "clean", ""]
    assert run.connections[0].ids == ids(token, range(1, 4))
    assert run.connections[1].ids == ids(token, second)  # same ids: the same stream
    assert run.twice() == ids(token, twice)
    assert run.deduplicated() == WORDS
    assert run.datas == WORDS[:3] + WORDS[second.start - 1 :]
    # Answered from history: the upstream was asked once, and read to its end although
    # its client was cut.
    assert len(upstream.seen) == 1
    reconnect = run.connections[1].request_id
    assert reconnect is not None
    end = await log_capture.wait_end(reconnect)
    request = log_capture.for_request(reconnect)[0]
    assert request["event"] == "request"
    # (the token is the stream's capability: the log shows its first characters only)
    assert (request["resumes"], request["last_event_id"]) == (first, f"{token[:6]}\u2026.3")
    assert request["resume_answer"] == "history"
    assert end["outcome"] == "completed"
    assert sum(f["size"] for f in log_capture.frames(reconnect)) == end["bytes"]
    last = log_capture.for_request(run.connections[2].request_id or "")
    assert last[0]["resumes"] == first and last[0]["last_event_id"] == f"{token[:6]}\u2026.8"
    assert last[0]["resume_reason"] == "stream finished"
    assert (await log_capture.wait_end(run.connections[2].request_id or ""))["status"] == 204


async def test_new_stream_is_a_fresh_generation_from_the_upstream(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture
) -> None:
    proxy = await plain_proxy(make_proxy, upstream, scenario("new_stream", "{after: 3}"))
    run = await plain_run(proxy)
    first, second = (c.request_id for c in run.connections[:2])
    assert run.statuses == [200, 200, 204]
    assert run.connections[0].ids == ids(token_of(proxy, first), range(1, 4))
    # Fresh ids, a new generation: a new token.
    assert run.connections[1].ids == ids(token_of(proxy, second), range(1, 9))
    assert run.twice() == []
    assert run.datas == WORDS[:3] + WORDS  # two generations: a client must not join them
    assert len(upstream.seen) == 2
    assert "Last-Event-ID" not in upstream.seen[1].headers  # the proxy plays the server
    request = log_capture.for_request(second or "")[0]
    assert (request["resumes"], request["resume_answer"]) == (first, "new_stream")


@pytest.mark.parametrize("policy", ["unsupported", "expired"])
async def test_unsupported_and_expired_answer_204_without_the_upstream(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture, policy: str
) -> None:
    proxy = await plain_proxy(make_proxy, upstream, scenario(policy, "{after: 3}"))
    run = await plain_run(proxy)
    assert run.statuses == [200, 204]
    assert run.datas == WORDS[:3]
    assert len(upstream.seen) == 1
    end = await log_capture.wait_end(run.connections[1].request_id or "")
    assert (end["status"], end["bytes"], end["outcome"]) == (204, 0, "completed")


@pytest.mark.parametrize(("missing", "statuses"), [("404", [200, 404]), ("204", [200, 204])])
async def test_missing_answers_an_unknown_id(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, missing: str, statuses: list[int]
) -> None:
    proxy = await plain_proxy(make_proxy, upstream, scenario("expired", missing=missing))
    run = await plain_run(proxy)
    assert run.statuses == statuses
    assert len(upstream.seen) == 1
    async with httpx.AsyncClient(timeout=5) as client:
        resp = await client.get(proxy.url + "/stream", headers={"Last-Event-ID": "nobody.1"})
    assert resp.status_code == int(missing) and resp.content == b""


async def test_missing_new_stream_forwards_an_unknown_id(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    """``expired`` with ``missing: new_stream``: every reconnect is a new generation, so
    a reconnecting client never stops (the loop's own bound ends it)."""
    proxy = await plain_proxy(make_proxy, upstream, scenario("expired", missing="new_stream"))
    async with httpx.AsyncClient(timeout=10) as client:
        run = await resume_loop(client, proxy.url + "/stream", limit=4)
    assert run.statuses == [200, 200, 200, 200]
    for conn in run.connections[1:]:
        assert conn.ids == ids(token_of(proxy, conn.request_id), range(1, 9))
    assert len(upstream.seen) == 4


@pytest.mark.parametrize(
    ("cut", "second"),
    [
        # after_id: the 4th event's id line went out, not its data: never dispatched, so
        # the client's last id is still the 3rd.
        ("{after: 3, position: after_id, how: abort}", 4),
        # after_data: the 4th's data line went out without its blank line.
        ("{after: 3, position: after_data, how: close}", 4),
        ("{after: 7, how: abort}", 8),  # before the last event
    ],
)
async def test_resume_after_each_cut_position(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, cut: str, second: int
) -> None:
    proxy = await plain_proxy(make_proxy, upstream, scenario("resume", cut))
    run = await plain_run(proxy)
    token = token_of(proxy, run.connections[0].request_id)
    assert run.statuses == [200, 200, 204]
    assert run.ids == ids(token, range(1, 9))
    assert run.connections[1].ids[0] == f"{token}.{second}"
    assert run.datas == WORDS and run.twice() == []


async def test_a_reconnect_follows_the_stream_live(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture
) -> None:
    """The reconnect comes while the upstream is still sending: history, then live."""
    proxy = await plain_proxy(
        make_proxy, upstream, scenario("resume", "{after: 2}"), script=Script.events(PLAIN, gap=0.1)
    )
    run = await plain_run(proxy)
    token = token_of(proxy, run.connections[0].request_id)
    assert run.ids == ids(token, range(1, 9)) and run.statuses == [200, 200, 204]
    frames = log_capture.frames(run.connections[1].request_id or "")
    # More than one write: the later events came as the upstream sent them.
    assert len(frames) >= 3


async def test_faults_apply_afresh_to_every_reconnect(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    """Without ``requests:``, each connection is cut after 3 of its own events."""
    text = "resume: {policy: resume}\nfaults:\n  - cut: {after: 3, how: abort}\n"
    proxy = await plain_proxy(make_proxy, upstream, text)
    run = await plain_run(proxy)
    token = token_of(proxy, run.connections[0].request_id)
    assert [c.ids for c in run.connections] == [
        ids(token, range(1, 4)),
        ids(token, range(4, 7)),
        ids(token, range(7, 9)),  # two left: the cut after three never came
        [],
    ]
    assert run.statuses == [200, 200, 200, 204]
    assert len(upstream.seen) == 1


@pytest.mark.parametrize("anonymous", ["shared", "apart"])
async def test_upstream_ids_are_kept_and_resumed_from(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture, anonymous: str
) -> None:
    """The client sends no credentials. Its anonymous requests shared (one client, as in
    the matrix), it resumes by the upstream's ids. Kept apart (the default), nothing
    tells its stream from another anonymous user's of the same ids: the reconnect is
    ``missing`` and says why (docs/reconnection.md, Tenants)."""
    body = b"".join(b"id: u%d\ndata: %s\n\n" % (i, w.encode()) for i, w in enumerate(WORDS, 1))
    text = scenario("resume", "{after: 3}", ids="upstream")
    proxy = await plain_proxy(
        make_proxy,
        upstream,
        text,
        script=Script.events(body, gap=0.01),
        anonymous_requests=anonymous,
    )
    run = await plain_run(proxy)
    if anonymous == "apart":
        assert (run.ids, run.statuses) == (["u1", "u2", "u3"], [200, 204])
        reconnect = run.connections[1].request_id or ""
        await log_capture.wait_end(reconnect)
        request = log_capture.for_request(reconnect)[0]
        assert (request["last_event_id"], request["resume_answer"]) == ("u3", "204")
        assert request["resume_reason"] == "anonymous upstream id" and "resumes" not in request
        assert list(proxy.state.resume.store.streams()) == []  # nothing kept for nobody
        return
    assert run.ids == [f"u{i}" for i in range(1, 9)]
    assert run.statuses == [200, 200, 204]
    assert run.datas == WORDS


async def test_proxy_ids_log_the_upstreams_own(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture
) -> None:
    body = b"".join(b"id: u%d\ndata: %s\n\n" % (i, w.encode()) for i, w in enumerate(WORDS, 1))
    proxy = await plain_proxy(
        make_proxy, upstream, "resume: {}\nfaults: []\n", script=Script.events(body)
    )
    async with httpx.AsyncClient(timeout=5) as client:
        resp = await client.get(proxy.url + "/stream")
    rid = resp.headers["X-Chaos-Request-Id"]
    token = token_of(proxy, rid)
    assert resp.text == "".join(f"id: {token}.{i}\ndata: {w}\n\n" for i, w in enumerate(WORDS, 1))
    await log_capture.wait_end(rid)
    logged = [f.get("upstream_ids") for f in log_capture.frames(rid)]
    assert logged == [[f"u{i}"] for i in range(1, 9)]


# ------------------------------------------------------------------ background reading


async def test_the_upstream_is_read_after_the_cut_and_stopped_by_retention(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    text = scenario("resume", "{after: 2, how: reset}", retention="300ms")
    proxy = await plain_proxy(make_proxy, upstream, text, script=HELD)
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.TransportError):
            await (await client.get(proxy.url + "/stream")).aread()
    manager = proxy.state.resume
    streams = list(manager.store.streams())
    assert len(streams) == 1
    await until(lambda: streams[0].total == 8)  # read into history, nobody listening
    assert manager.readers == 1
    await asyncio.wait_for(upstream.disconnected.wait(), 5)  # retention ran out
    assert manager.readers == 0 and streams[0].state == "abandoned"
    # (When: at the retention exactly, on virtual time: tests/server/test_timing.py.)


async def test_stopping_the_proxy_ends_background_readers(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    text = scenario("resume", "{after: 3, how: close}")
    proxy = await plain_proxy(make_proxy, upstream, text, script=HELD, grace=0.2)
    async with httpx.AsyncClient(timeout=5) as client:
        await (await client.get(proxy.url + "/stream")).aread()  # cut with a clean close
    await until(lambda: proxy.state.resume.readers == 1)
    await proxy.close()  # (at once: on virtual time, tests/server/test_timing.py)
    assert proxy.state.resume.readers == 0
    await asyncio.wait_for(upstream.disconnected.wait(), 5)


async def test_admin_reset_forgets_kept_streams_and_stops_their_readers(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    text = scenario("resume", "{after: 2, how: reset}")
    proxy = await plain_proxy(make_proxy, upstream, text, script=HELD, admin=ADMIN)
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.TransportError):
            await (await client.get(proxy.url + "/stream")).aread()
        manager = proxy.state.resume
        await until(lambda: manager.readers == 1)
        kept = list(manager.store.streams())
        assert len(kept) == 1
        status, body, _ = await call(proxy, "POST", "/reset")
        assert (status, body) == (200, {"reset": True})
        assert manager.readers == 0 and list(manager.store.streams()) == []
        await asyncio.wait_for(upstream.disconnected.wait(), 5)
        # The history is gone: the reconnect gets ``missing`` (204), not the old stream.
        again = await client.get(
            proxy.url + "/stream", headers={"Last-Event-ID": f"{kept[0].token}.2"}
        )
        assert again.status_code == 204


# ------------------------------------------------------------------ the mock


@pytest.mark.parametrize(
    ("policy", "statuses"),
    [
        ("resume", [200, 200, 204]),
        ("replay_last", [200, 200, 204]),
        ("restart", [200, 200, 204]),
        ("new_stream", [200, 200, 204]),
        ("unsupported", [200, 204]),
        ("expired", [200, 204]),
    ],
)
async def test_every_policy_in_front_of_the_mock(
    make_proxy: ProxyFactory, policy: str, statuses: list[int]
) -> None:
    proxy = await make_proxy(
        scenarios={"s": scenario(policy, "{after: 5, position: mid_line, how: abort}")},
        default="s",
    )
    reference = await mock_reference(proxy)
    assert len(reference) > 8
    async with httpx.AsyncClient(timeout=10) as client:
        run = await resume_loop(client, proxy.url + "/v1/chat/completions", json=CHAT)
    assert run.statuses == statuses
    first = run.connections[0]
    token = token_of(proxy, first.request_id)
    assert first.ids == ids(token, range(1, 6))
    n = len(reference)
    if policy in ("unsupported", "expired"):
        assert run.datas == reference[:5]
        return
    second = run.connections[1]
    if policy == "new_stream":
        assert second.ids == ids(token_of(proxy, second.request_id), range(1, n + 1))
        assert run.datas == reference[:5] + reference
        return
    start = {"resume": 6, "replay_last": 5, "restart": 1}[policy]
    assert second.ids == ids(token, range(start, n + 1))
    assert run.deduplicated() == reference
    assert text_of(run.deduplicated()) == text_of(reference)
    assert run.twice() == ids(token, range(start, 6))


async def test_unattended_reading_stops_after_max_bytes(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    """Nobody reconnects and the upstream goes on: reading stops once ``max_bytes`` more
    were read, well before the (long) retention."""
    big = b"".join(b"data: " + b"x" * 200 + b"\n\n" for _ in range(40))  # ~8 kB
    text = scenario("resume", "{after: 1, how: reset}", retention="60s", max_bytes="2KiB")
    proxy = await plain_proxy(
        make_proxy, upstream, text, script=Script.events(big, gap=0.005, end="hold")
    )
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.TransportError):
            await (await client.get(proxy.url + "/stream")).aread()
    [stream] = proxy.state.resume.store.streams()
    await asyncio.wait_for(upstream.disconnected.wait(), 5)
    assert proxy.state.resume.readers == 0 and stream.state == "abandoned"
    assert stream.bytes <= 2048
    assert stream.total < 40  # it stopped before the upstream's end


async def test_many_live_streams_keep_at_most_streams(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    text = "resume: {streams: 20, max_bytes: 100}\nfaults: []\n"
    proxy = await plain_proxy(make_proxy, upstream, text, script=Script.events(PLAIN))
    async with httpx.AsyncClient(timeout=5) as client:
        rids = []
        for _ in range(150):
            resp = await client.get(proxy.url + "/stream")
            rids.append(resp.headers["X-Chaos-Request-Id"])
    store = proxy.state.resume.store
    kept = list(store.streams("s"))
    assert [s.request_id for s in kept] == rids[-20:]
    assert all(s.bytes <= 100 for s in kept) and store.bytes <= 20 * 100
    assert proxy.state.resume.readers == 0


async def test_an_inactive_request_with_a_content_length_still_gets_ids(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    """``requests:`` leaves the first two requests unfaulted, but they are kept, with ids:
    the upstream's Content-Length no longer holds and is not passed on."""
    text = "resume: {}\nrequests: [3]\nfaults:\n  - cut: {after: 1}\n"
    proxy = await plain_proxy(
        make_proxy, upstream, text, script=Script.events(PLAIN, content_length=True)
    )
    async with httpx.AsyncClient(timeout=5) as client:
        resp = await client.get(proxy.url + "/stream")
        token = token_of(proxy, resp.headers["X-Chaos-Request-Id"])
        assert resp.text == "".join(
            f"id: {token}.{i}\ndata: {w}\n\n" for i, w in enumerate(WORDS, 1)
        )
        again = await client.get(proxy.url + "/stream", headers={"Last-Event-ID": f"{token}.5"})
    assert again.text == "".join(
        f"id: {token}.{i}\ndata: {w}\n\n" for i, w in enumerate(WORDS, 1) if i > 5
    )


async def test_unattended_reading_ends_at_the_idle_timeout(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream
) -> None:
    """An upstream that goes silent after the cut is dropped at ``--idle-timeout``, long
    before the retention: the stream ends ``failed``, and a reconnect gets what was kept,
    then an unclean end (never a clean one)."""
    text = scenario("resume", "{after: 2, how: reset}", retention="60s")
    proxy = await plain_proxy(make_proxy, upstream, text, script=HELD, idle_timeout=0.3)
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.TransportError):
            await (await client.get(proxy.url + "/stream")).aread()
        [stream] = proxy.state.resume.store.streams()
        await asyncio.wait_for(upstream.disconnected.wait(), 5)
        await until(lambda: stream.finished)
        assert (stream.state, stream.total, proxy.state.resume.readers) == ("failed", 8, 0)
        token = stream.token
        got: list[str] = []
        with pytest.raises(httpx.TransportError):
            async with client.stream(
                "GET", proxy.url + "/stream", headers={"Last-Event-ID": f"{token}.2"}
            ) as resp:
                async for line in resp.aiter_lines():
                    got.append(line)
    assert [x for x in got if x.startswith("id: ")] == [f"id: {token}.{i}" for i in range(3, 9)]


async def test_the_admin_store_links_the_connections(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture
) -> None:
    proxy = await plain_proxy(
        make_proxy, upstream, scenario("resume"), script=Script.events(PLAIN), admin=ADMIN
    )
    run = await plain_run(proxy)
    first, second = (c.request_id for c in run.connections[:2])
    await log_capture.wait_end(second or "")
    status, detail, _ = await call(proxy, "GET", f"/requests/{second}")
    assert status == 200
    shown = detail["summary"]
    token = token_of(proxy, first)
    assert (shown["resumes"], shown["last_event_id"]) == (first, f"{token[:6]}\u2026.3")
    assert token not in orjson.dumps(detail).decode()  # shown nowhere whole
    assert shown["outcome"] == "completed"
    assert sum(f["size"] for f in detail["frames"]) == shown["bytes"] > 0
