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
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaosproxy.control.start import RunningProxy
from tests.e2e.test_resume_live import PLAIN, WORDS, mock_reference, text_of
from tests.support.node import NodeRunner
from tests.support.proxies import ProxyFactory
from tests.support.scripted_upstream import Script, ScriptedUpstream

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def _why_skip() -> str | None:
    if shutil.which("node") is None:
        return "`node` is not on PATH (the Node client tests need Node >= 20)"
    if not (NODE_DIR / "node_modules" / "eventsource").is_dir():
        return "tests/node/node_modules is absent: run `npm ci --prefix tests/node`"
    return None


_SKIP = _why_skip()
pytestmark = [pytest.mark.node, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

#: The request tests/node/eventsource-resume.mjs sends (lib.mjs's PROMPT).
NODE_CHAT = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "Plan my week, please."}],
    "stream": True,
}
POLICIES = ["resume", "replay_last", "restart", "new_stream", "unsupported", "expired"]


def scenario(policy: str, cut: str) -> str:
    return (
        f"resume: {{policy: {policy}}}\n"
        "requests: [1]\n"
        "faults:\n"
        "  - ids: {retry: 50}\n"
        f"  - cut: {cut}\n"
    )


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


def all_ids(run: dict[str, Any]) -> list[str]:
    return [i for c in run["connections"] for i in c["ids"]]


def all_datas(run: dict[str, Any]) -> list[str]:
    return [d for c in run["connections"] for d in c["datas"]]


def twice(run: dict[str, Any]) -> list[str]:
    ids = all_ids(run)
    return [i for i in dict.fromkeys(ids) if ids.count(i) > 1]


def check(
    run: dict[str, Any],
    policy: str,
    reference: list[str],
    cut_at: int,
    shown: Callable[[str], str] = str,
) -> None:
    """What EventSource received under ``policy`` after a cut once ``cut_at`` events
    were sent, the upstream's events being ``reference``; ``run["sent"]`` holds each
    ``Last-Event-ID`` sent as ``shown`` shows it (the frame log shows a token cut:
    chaosproxy.core.history.shown_event_id)."""
    conns = run["connections"]
    n = len(reference)
    first_ids = conns[0]["ids"]
    assert len(first_ids) == cut_at
    rid = first_ids[0].rpartition(".")[0]
    assert first_ids == [f"{rid}.{i}" for i in range(1, cut_at + 1)]
    assert conns[0]["datas"] == reference[:cut_at]
    assert run["sent"][:2] == [None, shown(f"{rid}.{cut_at}")]  # it sent Last-Event-ID itself
    assert run["stopped"]["code"] == 204  # and 204 stopped it
    if policy in ("unsupported", "expired"):
        assert len(conns) == 1 and len(run["sent"]) == 2
        assert all_datas(run) == reference[:cut_at]
        return
    assert len(conns) == 2 and len(run["sent"]) == 3
    second = conns[1]["ids"]
    if policy == "new_stream":
        rid2 = second[0].rpartition(".")[0]
        assert rid2 != rid
        assert second == [f"{rid2}.{i}" for i in range(1, n + 1)]
        assert all_datas(run) == reference[:cut_at] + reference  # two generations
        assert run["sent"][2] == shown(f"{rid2}.{n}")
        assert twice(run) == []
        return
    start = {"resume": cut_at + 1, "replay_last": cut_at, "restart": 1}[policy]
    assert second == [f"{rid}.{i}" for i in range(start, n + 1)]
    assert twice(run) == [f"{rid}.{i}" for i in range(start, cut_at + 1)]
    assert conns[1]["datas"] == reference[start - 1 :]
    assert run["sent"][2] == shown(f"{rid}.{n}")


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
