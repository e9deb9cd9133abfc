"""The contract monitor through the live proxy: ``violation`` lines in the frame log and
the ``chaosproxy_contract_violations_total`` counter.

A staging-style run: the upstream itself (a scripted aiohttp server replaying the real
OpenAI Responses capture) drops one event, duplicates another and sends its terminal
event twice; the proxy runs with ``--envelope sequence=/sequence_number`` and a
scenario with no faults. Every breach is named on the upstream side, and (since the
client was sent the same stream) on the sent side, at the events the test computes
from the stream it scripted.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from chaosproxy.core.integrity import Envelope
from tests.support.captures import OPENAI_RESPONSES
from tests.support.metrics import value
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import Script, ScriptedUpstream

PATH = "/v1/responses"
SSE = {"Content-Type": "text/event-stream"}


def broken_stream() -> list[bytes]:
    """The capture with its 5th event dropped, its 9th sent twice, and its terminal
    event sent again at the end."""
    events = OPENAI_RESPONSES[0].events
    return [*events[:4], *events[5:8], events[8], events[8], *events[9:], events[-1]]


def expected_breaches(events: list[bytes]) -> list[tuple[str, int]]:
    """(rule, 1-based event) for the scripted stream, read off its sequence numbers."""
    found: list[tuple[str, int]] = []
    last: int | None = None
    terminals = 0
    for n, event in enumerate(events, start=1):
        data = json.loads(event.split(b"data: ", 1)[1])
        seq = data["sequence_number"]
        if last is not None and seq == last:
            found.append(("sequence_repeat", n))
        elif last is not None and seq > last + 1:
            found.append(("sequence_gap", n))
        last = seq
        if data["type"] == "response.completed":
            terminals += 1
            if terminals == 2:
                found.append(("terminal_twice", n))
    return found


async def post(url: str, headers: dict[str, str] | None = None) -> str:
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + PATH, json={"stream": True}, headers=headers or {}) as resp,
    ):
        await resp.read()
        return resp.headers["X-Chaos-Request-Id"]


def violations(log: LogCapture, request_id: str) -> list[dict[str, Any]]:
    return [line for line in log.for_request(request_id) if line["event"] == "violation"]


async def test_a_staging_upstream_that_drops_and_duplicates_events(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    events = broken_stream()
    upstream.route(PATH, Script(writes=[(e, 0.0) for e in events], headers=SSE))
    proxy = await make_proxy(
        upstream=upstream.url,
        scenarios={"staging": "faults: []"},
        default="staging",
        envelope=Envelope(sequence="/sequence_number"),
    )
    request_id = await post(proxy.url)
    end = await log_capture.wait_end(request_id)
    expected = expected_breaches(events)
    assert expected == [
        ("sequence_gap", 5),
        ("sequence_repeat", 9),
        ("sequence_repeat", len(events)),
        ("terminal_twice", len(events)),
    ]
    lines = violations(log_capture, request_id)
    assert [(x["side"], x["rule"], x["at_event"]) for x in lines] == [
        ("upstream", rule, n) for rule, n in expected
    ] + [("sent", rule, n) for rule, n in expected]
    assert all(x["scenario"] == "staging" for x in lines)
    # Logged before the request's response_end, which says the client got it as sent.
    order = [line["event"] for line in log_capture.for_request(request_id)]
    assert order.index("response_end") > max(i for i, e in enumerate(order) if e == "violation")
    assert end["integrity"] == "intact"
    metric = "chaosproxy_contract_violations_total"
    for side in ("upstream", "sent"):
        assert value(proxy, metric, side=side, rule="sequence_repeat") == 2
        assert value(proxy, metric, side=side, rule="sequence_gap") == 1
        assert value(proxy, metric, side=side, rule="terminal_twice") == 1


async def test_a_scenario_envelope_names_what_its_fault_broke(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    capture = OPENAI_RESPONSES[0]
    upstream.route(PATH, Script(writes=[(e, 0.0) for e in capture.events], headers=SSE))
    scenario = "faults: [{drop: {nth: 5}}]\nenvelope: {sequence: /sequence_number}\n"
    proxy = await make_proxy(upstream=upstream.url, scenarios={"gap": scenario})
    request_id = await post(proxy.url, {"X-Chaos-Scenario": "gap"})
    end = await log_capture.wait_end(request_id)
    lines = violations(log_capture, request_id)
    assert [(x["side"], x["rule"], x["at_event"]) for x in lines] == [("sent", "sequence_gap", 5)]
    assert end["integrity"] == "intact"  # the dropped event carried no text
    assert value(proxy, "chaosproxy_contract_violations_total", side="sent", rule="sequence_gap")
