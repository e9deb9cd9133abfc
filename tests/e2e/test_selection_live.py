"""Choosing the scenario and seed of a request, through the live proxy (docs/scenarios.md).

The header, the ``/_chaos/NAME/`` prefix, ``match:``, the default, none; unknown names;
``X-Chaos-*`` headers kept from the upstream; the ``X-Chaos-*`` response headers; and
``requests:`` ordinals.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from chaosproxy.control.start import RunningProxy
from chaosproxy.scenario.selection import derive_seed
from tests.support.live_faults import BODY, E1, PATH, SSE, Reply, fetch, wait_end, without
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import Script, ScriptedUpstream

SCENARIOS = {
    # drops a different event each, so the body tells which scenario ran
    "drop1": "faults:\n  - drop: {nth: 1}",
    "drop2": "faults:\n  - drop: {nth: 2}",
    "chat": 'match: {method: POST, path: "/v1/chat/*"}\nfaults:\n  - drop: {nth: 3}',
    "header": "match: {headers: {X-Tenant: blue}}\nfaults:\n  - drop: {nth: 4}",
    "first429": "requests: [1]\nfaults:\n  - status: {code: 429, headers: {Retry-After: 1}}",
    "seeded": "seed: 42\nfaults:\n  - drop: {probability: 0.5}",
}


async def start(upstream: ScriptedUpstream, make_proxy: ProxyFactory, **kw: Any) -> RunningProxy:
    for path in (PATH, "/v1/other", "/v1/chat/x"):
        upstream.route(path, Script.events(BODY, headers=SSE))
    return await make_proxy(upstream=upstream.url, scenarios=SCENARIOS, **kw)


async def refused(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, path: str, headers: dict[str, str]
) -> Reply:
    """The proxy's answer to a request it refuses itself: a 400 of type chaosproxy_error,
    and nothing sent upstream."""
    proxy = await start(upstream, make_proxy)
    reply = await fetch(proxy, path, headers=headers)
    assert reply.status == 400
    assert orjson.loads(reply.body)["error"]["type"] == "chaosproxy_error"
    assert upstream.seen == []
    return reply


async def test_header_selects_the_scenario(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await start(upstream, make_proxy)
    reply = await fetch(proxy, "/v1/other", headers={"X-Chaos-Scenario": "drop2"})
    assert reply.body == without(2)
    assert reply.headers["X-Chaos-Scenario"] == "drop2"
    request = [x for x in log_capture.for_request(reply.request_id) if x["event"] == "request"]
    assert request[0]["scenario"] == "drop2"
    assert (await wait_end(log_capture, reply.request_id))["faults_applied"] == {"drop": 1}


async def test_path_prefix_selects_and_is_stripped(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    proxy = await start(upstream, make_proxy)
    reply = await fetch(proxy, "/_chaos/drop1/v1/other?a=1&b=2")
    assert reply.body == without(1)
    assert reply.headers["X-Chaos-Scenario"] == "drop1"
    assert upstream.seen[-1].path_qs == "/v1/other?a=1&b=2"
    # the prefix also works where a client can only GET (a browser EventSource)
    reply = await fetch(proxy, "/_chaos/drop2/v1/other", method="GET")
    assert (reply.body, upstream.seen[-1].method) == (without(2), "GET")
    assert upstream.seen[-1].path_qs == "/v1/other"


async def test_header_wins_over_prefix_and_prefix_over_match(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    proxy = await start(upstream, make_proxy, default="drop1")
    reply = await fetch(proxy, "/_chaos/drop1/v1/chat/x", headers={"X-Chaos-Scenario": "drop2"})
    assert (reply.headers["X-Chaos-Scenario"], reply.body) == ("drop2", without(2))
    assert upstream.seen[-1].path_qs == "/v1/chat/x"  # stripped even when the header won
    reply = await fetch(proxy, "/_chaos/drop2/v1/chat/x")
    assert (reply.headers["X-Chaos-Scenario"], reply.body) == ("drop2", without(2))


async def test_match_selects_by_method_path_and_headers(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    proxy = await start(upstream, make_proxy)
    reply = await fetch(proxy, "/v1/chat/x")
    assert (reply.headers["X-Chaos-Scenario"], reply.body) == ("chat", without(3))
    reply = await fetch(proxy, "/v1/chat/x", method="GET")  # wrong method
    assert (reply.headers["X-Chaos-Scenario"], reply.body) == ("none", BODY)
    reply = await fetch(proxy, "/v1/other", headers={"X-Tenant": "blue"})
    assert (reply.headers["X-Chaos-Scenario"], reply.body) == ("header", without(4))
    assert upstream.seen[-1].headers["X-Tenant"] == "blue"  # match headers are forwarded


async def test_default_scenario_and_none(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await start(upstream, make_proxy, default="drop2")
    reply = await fetch(proxy, "/v1/other")
    assert (reply.headers["X-Chaos-Scenario"], reply.body) == ("drop2", without(2))
    reply = await fetch(proxy, "/v1/chat/x")  # a match comes before the default
    assert reply.headers["X-Chaos-Scenario"] == "chat"

    plain = await start(upstream, make_proxy)
    reply = await fetch(plain, "/v1/other")
    assert (reply.headers["X-Chaos-Scenario"], reply.body) == ("none", BODY)
    end = await wait_end(log_capture, reply.request_id)
    assert "faults_applied" not in end  # pure passthrough: nothing framed
    assert all("events" not in f for f in log_capture.frames(reply.request_id))


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/v1/other", {"X-Chaos-Scenario": "nope"}), ("/_chaos/nope/v1/other", {})],
)
async def test_unknown_scenario_is_a_400_never_forwarded(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    path: str,
    headers: dict[str, str],
) -> None:
    reply = await refused(upstream, make_proxy, path, headers)
    assert "nope" in orjson.loads(reply.body)["error"]["message"]
    assert reply.request_id.startswith("r-")


async def test_a_bad_seed_is_a_400_never_forwarded(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    await refused(upstream, make_proxy, "/v1/other", {"X-Chaos-Seed": "-1"})


async def test_chaos_headers_are_never_forwarded(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    proxy = await start(upstream, make_proxy)
    await fetch(
        proxy,
        "/v1/other",
        headers={
            "X-Chaos-Scenario": "drop1",
            "X-Chaos-Seed": "7",
            "x-chaos-anything": "else",
            "X-Kept": "yes",
        },
    )
    seen = upstream.seen[-1].headers
    assert seen["X-Kept"] == "yes"
    assert not [name for name in seen if name.lower().startswith("x-chaos")]


async def test_response_carries_request_id_scenario_and_seed(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await start(upstream, make_proxy, seed=5)
    replies = [
        await fetch(proxy, "/v1/other"),
        await fetch(proxy, "/v1/other", headers={"X-Chaos-Scenario": "seeded"}),
        await fetch(
            proxy, "/v1/other", headers={"X-Chaos-Scenario": "seeded", "X-Chaos-Seed": "3"}
        ),
    ]
    assert [r.headers["X-Chaos-Scenario"] for r in replies] == ["none", "seeded", "seeded"]
    # --seed derives per request; a scenario's seed: beats it; the header beats both
    assert [r.headers["X-Chaos-Seed"] for r in replies] == [str(derive_seed(5, 1)), "42", "3"]
    ids = [r.request_id for r in replies]
    assert len(set(ids)) == 3
    for reply in replies:
        end = await wait_end(log_capture, reply.request_id)
        assert end["bytes"] == len(reply.body)
        [request] = [
            x for x in log_capture.for_request(reply.request_id) if x["event"] == "request"
        ]
        assert request["seed"] == int(reply.headers["X-Chaos-Seed"])


async def test_requests_ordinals_fail_only_the_first(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await start(upstream, make_proxy)
    headers = {"X-Chaos-Scenario": "first429"}
    first = await fetch(proxy, "/v1/other", headers=headers)
    second = await fetch(proxy, "/v1/other", headers=headers)
    third = await fetch(proxy, "/v1/other", headers=headers)
    assert first.status == 429
    assert first.headers["Retry-After"] == "1"
    assert (second.status, second.body) == (200, BODY)
    assert (third.status, third.body) == (200, BODY)
    assert len(upstream.seen) == 2  # the 429 never reached the upstream
    # an inactive request still says which scenario selected it
    assert second.headers["X-Chaos-Scenario"] == "first429"
    requests = [x for x in log_capture.lines if x["event"] == "request"]
    assert [r.get("ordinal") for r in requests] == [1, 2, 3]
    assert [r.get("inactive", False) for r in requests] == [False, True, True]


async def test_the_same_scenario_by_prefix_keeps_its_query_and_body(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    proxy = await start(upstream, make_proxy)
    reply = await fetch(proxy, "/_chaos/drop1" + PATH + "?stream=true")
    assert reply.body == BODY[len(E1) :]
    seen = upstream.seen[-1]
    assert (seen.path_qs, orjson.loads(seen.body)) == (PATH + "?stream=true", {"stream": True})


async def test_the_400_carries_every_chaos_header(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    reply = await refused(upstream, make_proxy, "/v1/other", {"X-Chaos-Scenario": "nope"})
    assert {"X-Chaos-Request-Id", "X-Chaos-Scenario", "X-Chaos-Seed"} <= set(reply.headers)
