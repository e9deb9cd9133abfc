"""Prometheus metrics: fed by the frame log, one registry per proxy."""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from chaosproxy.observe.metrics import Metrics
from tests.support.metrics import value
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import Script, ScriptedUpstream

SSE = b"".join(b'data: {"n": %d}\n\n' % i for i in range(5))
SCENARIO = "provider: generic\nfaults:\n  - rechunk: {size: 6}\n  - cut: {after: 99}\n"


def test_lines_become_metrics() -> None:
    metrics = Metrics()
    lines: list[dict[str, Any]] = [
        {"event": "request", "request_id": "r-1", "scenario": "s"},
        {"event": "frame", "request_id": "r-1", "scenario": "s", "size": 10},
        {"event": "frame", "request_id": "r-1", "scenario": "s", "size": 5},
        {"event": "action", "request_id": "r-1", "scenario": "s", "action": "cut"},
    ]
    for line in lines:
        metrics(line)
    assert value(metrics, "chaosproxy_requests_in_flight") == 1
    metrics(
        {
            "event": "response_end", "request_id": "r-1", "scenario": "s", "outcome": "cut",
            "status": 200, "faults_applied": {"rechunk": 3, "cut": 1},
            "faults_skipped": [{"fault": "drop", "position": 2, "reason": "x"}],
            "ttfb_ms": 20.0, "duration_ms": 250.0,
        }
    )  # fmt: skip
    metrics({"event": "request", "request_id": "r-2", "scenario": None})
    metrics(
        {"event": "response_end", "request_id": "r-2", "scenario": None,
         "outcome": "upstream_error", "stage": "connect", "status": 502, "ttfb_ms": None,
         "duration_ms": 1.0}
    )  # fmt: skip
    metrics({"event": "request", "request_id": "r-3", "scenario": None})
    metrics(
        {"event": "response_end", "request_id": "r-3", "scenario": None,
         "outcome": "upstream_error", "stage": "body", "status": 200, "ttfb_ms": 1.0,
         "duration_ms": 2.0}
    )  # fmt: skip

    assert value(metrics, "chaosproxy_requests_in_flight") == 0
    assert value(metrics, "chaosproxy_requests_total", scenario="s", outcome="cut") == 1
    assert (
        value(metrics, "chaosproxy_requests_total", scenario="none", outcome="upstream_error") == 2
    )
    assert value(metrics, "chaosproxy_frames_total", scenario="s") == 2
    assert value(metrics, "chaosproxy_bytes_sent_total", scenario="s") == 15
    assert value(metrics, "chaosproxy_faults_applied_total", scenario="s", fault="rechunk") == 3
    assert value(metrics, "chaosproxy_faults_applied_total", scenario="s", fault="cut") == 1
    assert value(metrics, "chaosproxy_faults_skipped_total", scenario="s", fault="drop") == 1
    assert value(metrics, "chaosproxy_upstream_errors_total", scenario="none", stage="connect") == 1
    assert value(metrics, "chaosproxy_upstream_errors_total", scenario="none", stage="body") == 1
    assert value(metrics, "chaosproxy_ttfb_seconds_count", scenario="s") == 1
    assert value(metrics, "chaosproxy_ttfb_seconds_sum", scenario="s") == pytest.approx(0.02)
    assert value(metrics, "chaosproxy_ttfb_seconds_count", scenario="none") == 1  # r-2 had none
    assert (
        value(metrics, "chaosproxy_request_duration_seconds_bucket", scenario="s", le="0.25") == 1
    )
    assert value(metrics, "chaosproxy_request_duration_seconds_bucket", scenario="s", le="0.1") == 0


def test_the_frame_lines_of_requests_in_turn_count_for_their_own_scenarios() -> None:
    """The counts of a request's scenario are kept for its next line (its lines share
    one context): lines of requests taking turns, or a line given whole, still count
    where they belong."""
    metrics = Metrics()
    a, b, none = (
        {"request_id": "r-1", "scenario": "a"},
        {"request_id": "r-2", "scenario": "b"},
        {
            "request_id": "r-3",
            "scenario": None,
        },
    )
    for context, size in [(a, 1), (a, 2), (b, 10), (a, 4), (none, 100), (b, 20), (b, 40)]:
        metrics.frame_json(context, {"seq": 0, "offset": 0, "size": size, "t_ms": 0.0}, b"")
    metrics.frames_json(a, [{"seq": 0, "offset": 0, "size": 8, "t_ms": 0.0}] * 2, [b"", b""])
    metrics({"event": "frame", "request_id": "r-2", "scenario": "b", "size": 80})
    assert value(metrics, "chaosproxy_frames_total", scenario="a") == 5
    assert value(metrics, "chaosproxy_bytes_sent_total", scenario="a") == 1 + 2 + 4 + 16
    assert value(metrics, "chaosproxy_frames_total", scenario="b") == 4
    assert value(metrics, "chaosproxy_bytes_sent_total", scenario="b") == 150
    assert value(metrics, "chaosproxy_bytes_sent_total", scenario="none") == 100


def test_each_metrics_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()
    assert a.registry is not b.registry
    a({"event": "frame", "scenario": None, "size": 3})
    assert value(a, "chaosproxy_bytes_sent_total", scenario="none") == 3
    assert value(b, "chaosproxy_bytes_sent_total", scenario="none") == 0
    shared = CollectorRegistry()
    assert Metrics(shared).registry is shared
    assert b"chaosproxy_requests_in_flight" in a.render()


async def test_metrics_follow_the_frame_log_through_a_real_proxy(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    upstream.route("/v1/stream", Script.events(SSE))
    upstream.route("/v1/dies", Script.events(SSE, end="die"))
    upstream.route("/v1/holds", Script.events(SSE[:16], end="hold"))
    proxy = await make_proxy(upstream=upstream.url, scenarios={"m": SCENARIO})
    other = await make_proxy(upstream=upstream.url)
    ids: list[str] = []
    async with aiohttp.ClientSession() as s:
        for path, headers in [
            ("/v1/stream", {"X-Chaos-Scenario": "m"}),
            ("/v1/stream", {}),
            ("/v1/dies", {}),
        ]:
            async with s.post(proxy.url + path, headers=headers) as resp:
                ids.append(resp.headers["X-Chaos-Request-Id"])
                # The upstream that dies mid-body: so does the response.
                with contextlib.suppress(aiohttp.ClientPayloadError):
                    await resp.read()
        async with s.post(proxy.url + "/v1/holds") as resp:  # the client gives up
            ids.append(resp.headers["X-Chaos-Request-Id"])
            await resp.content.readexactly(16)
    ends = [await log_capture.wait_end(i) for i in ids]
    assert [e["outcome"] for e in ends] == [
        "completed",
        "completed",
        "upstream_error",
        "client_gone",
    ]

    # An unreachable upstream is an upstream error at the connect stage.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
        unreachable = await make_proxy(upstream=dead)
        async with aiohttp.ClientSession() as s, s.get(unreachable.url + "/") as resp:
            assert resp.status == 502
            gone = resp.headers["X-Chaos-Request-Id"]
    await log_capture.wait_end(gone)

    m_end = ends[0]
    assert value(proxy, "chaosproxy_requests_total", scenario="m", outcome="completed") == 1
    assert value(proxy, "chaosproxy_requests_total", scenario="none", outcome="completed") == 1
    for fault, count in m_end["faults_applied"].items():
        assert value(proxy, "chaosproxy_faults_applied_total", scenario="m", fault=fault) == count
    assert [s["fault"] for s in m_end["faults_skipped"]] == ["cut"]
    assert value(proxy, "chaosproxy_faults_skipped_total", scenario="m", fault="cut") == 1
    assert value(proxy, "chaosproxy_frames_total", scenario="m") == m_end["frames"]
    assert value(proxy, "chaosproxy_bytes_sent_total", scenario="m") == len(SSE)
    assert value(proxy, "chaosproxy_bytes_sent_total", scenario="none") == sum(
        e["bytes"] for e in ends[1:]
    )
    assert value(proxy, "chaosproxy_upstream_errors_total", scenario="none", stage="body") == 1
    assert value(proxy, "chaosproxy_client_disconnects_total", scenario="none") == 1
    assert value(proxy, "chaosproxy_ttfb_seconds_count", scenario="none") == 3
    assert value(proxy, "chaosproxy_request_duration_seconds_count", scenario="none") == 3
    assert value(proxy, "chaosproxy_ttfb_seconds_sum", scenario="m") == pytest.approx(
        m_end["ttfb_ms"] / 1000.0
    )
    assert value(proxy, "chaosproxy_requests_in_flight") == 0
    assert (
        value(unreachable, "chaosproxy_upstream_errors_total", scenario="none", stage="connect")
        == 1
    )
    # Proxies in one process never share counts.
    assert value(other, "chaosproxy_requests_total", scenario="none", outcome="completed") == 0
    assert value(unreachable, "chaosproxy_bytes_sent_total", scenario="none") == 0
