"""Headless Chromium's native ``EventSource`` reconnecting through the live proxy, for
each ``resume:`` policy (tests/support/browser.py drives Chromium over DevTools).

A native ``EventSource`` can only GET, and the mock's streaming endpoints are POST, so
the upstream is the plain SSE one (``data:`` events without ids). The page is served
through the proxy too (no scenario: passthrough), and opens
``/_chaos/s/stream``: same origin, no CORS, and the path prefix chooses the scenario,
as a browser that cannot set headers would. The first connection gets ``retry: 50``
and is cut; Chromium reconnects on its own with ``Last-Event-ID``. Asserted: the ids and
data it dispatched per connection, the ``Last-Event-ID`` it sent (from the proxy's
``request`` lines), which events it saw twice, and that 204 stopped it.

Skipped without Chromium (fails instead under ``CHAOSPROXY_REQUIRE_CHROMIUM=1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chaosproxy.core.history import shown_event_id
from tests.support.browser import Chromium, chromium_path, require_chromium, shared_chromium
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.resume import PLAIN, POLICIES, WORDS, check, scenario
from tests.support.scripted_upstream import Script, ScriptedUpstream, until

__all__ = ["chromium_path"]  # the fixture: skip (or fail in CI) without Chromium

pytestmark = pytest.mark.browser

PAGE = b"""<!doctype html>
<meta charset="utf-8"><title>resume</title>
<script>
window.rec = {connections: [], done: false, gaveUp: false};
const es = new EventSource("/_chaos/s/stream");
es.onopen = () => rec.connections.push({ids: [], datas: []});
es.onmessage = (ev) => {
  const conn = rec.connections[rec.connections.length - 1];
  conn.ids.push(ev.lastEventId);
  conn.datas.push(ev.data);
};
es.onerror = () => {
  if (es.readyState === EventSource.CLOSED) {
    rec.done = true;  // failed for good (a 204): no more reconnects
  } else if (rec.connections.length >= 6) {
    rec.gaveUp = true;
    rec.done = true;
    es.close();
  }
};
</script>
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[str]:
    """One Chromium for the module (its DevTools URL): each run opens its page in a
    browser context of its own."""
    require_chromium()
    with shared_chromium() as devtools:
        yield devtools


async def browser_run(browser: str, url: str, log_capture: LogCapture) -> dict[str, Any]:
    async with Chromium(attach=browser) as chromium:
        page = await chromium.open(url + "/page")
        await page.wait_for("window.rec && window.rec.done", limit=20)
        run: dict[str, Any] = await page.evaluate("window.rec")
        assert page.errors == []
    requests = [x for x in log_capture.lines if x["event"] == "request" and x["scenario"] == "s"]
    await until(
        lambda: all(
            log_capture.for_request(r["request_id"])[-1]["event"] == "response_end"
            for r in requests
        )
    )
    run["sent"] = [r.get("last_event_id") for r in requests]
    last = log_capture.end(requests[-1]["request_id"])
    run["stopped"] = {"code": last["status"]}
    assert not run["gaveUp"]
    return run


@pytest.mark.parametrize("policy", POLICIES)
async def test_chromium_eventsource_for_each_policy(
    make_proxy: ProxyFactory,
    upstream: ScriptedUpstream,
    log_capture: LogCapture,
    browser: str,
    policy: str,
) -> None:
    upstream.route("/stream", Script.events(PLAIN, gap=0.01))
    upstream.route("/page", Script(writes=[(PAGE, 0)], headers={"Content-Type": "text/html"}))
    cut = "{after: 3, position: after_id, how: reset}"
    proxy = await make_proxy(upstream=upstream.url, scenarios={"s": scenario(policy, cut)})
    run = await browser_run(browser, proxy.url, log_capture)
    check(run, policy, WORDS, 3, shown_event_id)  # (the log shows each id's token cut)


async def test_chromium_eventsource_resumes_after_a_mid_line_cut(
    make_proxy: ProxyFactory,
    upstream: ScriptedUpstream,
    log_capture: LogCapture,
    browser: str,
) -> None:
    """``resume`` with a cut half-way into a line: the complete text, each event once,
    then the 204 of the finished stream stops it."""
    upstream.route("/stream", Script.events(PLAIN, gap=0.01))
    upstream.route("/page", Script(writes=[(PAGE, 0)], headers={"Content-Type": "text/html"}))
    cut = "{after: 5, position: mid_line, how: abort}"
    proxy = await make_proxy(upstream=upstream.url, scenarios={"s": scenario("resume", cut)})
    run = await browser_run(browser, proxy.url, log_capture)
    ids = [i for c in run["connections"] for i in c["ids"]]
    datas = [d for c in run["connections"] for d in c["datas"]]
    assert datas == WORDS and len(set(ids)) == len(ids) == len(WORDS)
    assert run["stopped"]["code"] == 204


async def test_chromium_eventsource_in_front_of_the_mock_gets_the_whole_answer_once(
    make_proxy: ProxyFactory, log_capture: LogCapture, chromium_path: str
) -> None:
    """The issue's done-means in a browser: an EventSource in front of the mock (its
    GET chat route), ``resume: {policy: resume}``, a cut mid-stream (inside a line):
    the complete answer, each event once, then the finished stream's 204 stops it."""
    cut = "{after: 4, position: mid_line, how: abort}"
    proxy = await make_proxy(
        scenarios={"s": scenario("resume", cut)}, mock_tokens=8, mock_interval=0.005
    )
    path = "/v1/chat/completions?q=hello&model=m"
    async with httpx.AsyncClient() as client:  # the same answer, uncut, for reference
        reference = (await client.get(proxy.url + path)).text
    expected = [ln[6:] for ln in reference.split("\n") if ln.startswith("data: ")]
    page = PAGE.decode().replace('"/_chaos/s/stream"', f'"{proxy.url}/_chaos/s{path}"')
    async with Chromium(executable=chromium_path, disable_web_security=True) as browser:
        tab = await browser.write(page)
        await tab.wait_for("window.rec && window.rec.done", limit=20)
        run: dict[str, Any] = await tab.evaluate("window.rec")
        assert tab.errors == []
    assert not run["gaveUp"] and len(run["connections"]) >= 2  # it was cut, and came back
    ids = [i for c in run["connections"] for i in c["ids"]]
    datas = [d for c in run["connections"] for d in c["datas"]]
    assert datas == expected and len(set(ids)) == len(ids) == len(expected)
    requests = [x for x in log_capture.lines if x["event"] == "request" and x["scenario"] == "s"]
    resumed_from = ids[len(run["connections"][0]["ids"]) - 1]
    assert requests[1]["last_event_id"] == shown_event_id(resumed_from) != resumed_from
    await until(lambda: log_capture.end(requests[-1]["request_id"]) is not None)
    assert log_capture.end(requests[-1]["request_id"])["status"] == 204
