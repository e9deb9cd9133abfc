"""npm ``eventsource`` reconnecting through the live proxy, for each ``resume:`` policy.

The client (tests/node/eventsource-resume.mjs) is an ``EventSource`` left to reconnect
on its own: it sends ``Last-Event-ID`` itself and stops only when the server fails the
connection (204). In front of the mock and of a plain SSE upstream (``data:`` events
without ids), these tests assert what it received across connections: the ids, the
text, the events it saw twice, the ``Last-Event-ID`` it sent, and that 204 stopped it.
The first connection also gets ``retry: 50`` (the ``ids`` fault), so its reconnects
come at once rather than after EventSource's default 3 s.

Skipped when ``node`` or tests/node/node_modules is absent (as tests/e2e/test_node_clients.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from chaosproxy.control.start import RunningProxy
from tests.support.node import NodeRunner
from tests.support.proxies import ProxyFactory
from tests.support.resume import (
    NODE_CHAT,
    NODE_SKIP,
    PLAIN,
    POLICIES,
    WORDS,
    all_datas,
    all_ids,
    check,
    mock_reference,
    scenario,
    text_of,
)
from tests.support.scripted_upstream import Script, ScriptedUpstream

pytestmark = [pytest.mark.node, pytest.mark.skipif(NODE_SKIP is not None, reason=NODE_SKIP or "")]


async def eventsource(
    node: NodeRunner, proxy: RunningProxy, path: str, method: str
) -> dict[str, Any]:
    settings = {
        "CHAOS_URL": proxy.url,
        "CHAOS_SCENARIO": "s",
        "CHAOS_PATH": path,
        "CHAOS_METHOD": method,
        "CHAOS_OPENS": "6",
        "CHAOS_TIMEOUT_MS": "15000",
    }
    run = await asyncio.to_thread(node.run, "eventsource-resume", settings, 45)
    assert run["error"] is None and not run["hung"], run
    return run


@pytest.mark.parametrize("policy", POLICIES)
async def test_eventsource_in_front_of_the_mock(
    make_proxy: ProxyFactory, node_runner: NodeRunner, policy: str
) -> None:
    cut = "{after: 4, position: mid_line, how: abort}"
    proxy = await make_proxy(scenarios={"s": scenario(policy, cut)})
    reference = await mock_reference(proxy, NODE_CHAT)
    run = await eventsource(node_runner, proxy, "/v1/chat/completions", "POST")
    check(run, policy, reference, 4)


@pytest.mark.parametrize("policy", POLICIES)
async def test_eventsource_in_front_of_a_plain_upstream(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, node_runner: NodeRunner, policy: str
) -> None:
    upstream.route("/stream", Script.events(PLAIN, gap=0.01))
    cut = "{after: 3, position: after_id, how: reset}"
    proxy = await make_proxy(upstream=upstream.url, scenarios={"s": scenario(policy, cut)})
    run = await eventsource(node_runner, proxy, "/stream", "GET")
    check(run, policy, WORDS, 3)


async def test_done_means_the_complete_answer_each_event_once(
    make_proxy: ProxyFactory, node_runner: NodeRunner
) -> None:
    """The issue's "done means": an EventSource in front of the mock with ``resume:
    {policy: resume}`` and a mid-stream cut ends with the complete answer, each event
    once (and stops on the 204 of the finished stream instead of reconnecting for ever)."""
    text = (
        "resume: {policy: resume}\nrequests: [1]\n"
        "faults:\n  - ids: {retry: 50}\n  - cut: {after: 6, how: reset}\n"
    )
    proxy = await make_proxy(scenarios={"s": text})
    reference = await mock_reference(proxy, NODE_CHAT)
    run = await eventsource(node_runner, proxy, "/v1/chat/completions", "POST")
    ids = all_ids(run)
    assert len(ids) == len(set(ids)) == len(reference)
    assert all_datas(run) == reference
    assert text_of(all_datas(run)) == text_of(reference) != ""
    assert run["stopped"]["code"] == 204
