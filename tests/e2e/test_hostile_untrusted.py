"""Clients that must not choose their faults (issue 21; ``--trust-client-scenarios no``).

The audit: any client could get a 503 on demand (``X-Chaos-Scenario:
service-unavailable``), a reset, a hang for ever, opt out with ``none``, or pick its
rate draw with ``X-Chaos-Seed`` (one seed gave ``staging-cut`` 5 times of 5). With the
setting off, each of those is replayed here against the live proxy: the request gets
what ``match:``, ``rate`` and the default give it, request for request the same as a
twin proxy that never saw the client's choices, and each ignored choice is counted.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaosproxy.control.start import RunningProxy
from chaosproxy.scenario import load_scenarios
from chaosproxy.scenario.selection import ScenarioSet, derive_seed
from tests.support.cli import serve_until_started, sigterm
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.repo import REPO
from tests.support.scripted_upstream import Script, ScriptedUpstream

SSE = b"".join(b'data: {"n": %d}\n\n' % i for i in range(6))
MIX = REPO / "examples" / "staging-mix"
CHAT_BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
#: The audit's orders, by the library scenario each names.
ORDERS = ["service-unavailable", "reset-mid-stream", "hang-after-last-event", "none"]


async def ask(
    proxy: RunningProxy, path: str, headers: dict[str, str] | None = None, json: Any = None
) -> tuple[int, dict[str, str], bytes | None]:
    """One POST through the proxy: status, headers, and the body (None when the stream
    was broken, as a fault may break it)."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + path, headers=headers or {}, json=json or {}) as resp,
    ):
        try:
            body: bytes | None = await resp.read()
        except aiohttp.ClientError:
            body = None
        return resp.status, dict(resp.headers), body


def sse_at(upstream: ScriptedUpstream, *paths: str) -> None:
    for path in paths:
        upstream.route(path, Script.events(SSE))


def no_chaos_headers(upstream: ScriptedUpstream) -> None:
    for seen in upstream.seen:
        assert not [k for k in seen.headers if k.lower().startswith("x-chaos-")], seen


# --------------------------------------------------------------------------- orders


async def test_a_client_cannot_order_a_503_a_reset_a_hang_or_opt_out(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture
) -> None:
    sse_at(upstream, "/v1/stream", *(f"/_chaos/{name}/v1/stream" for name in ORDERS))
    house = "faults:\n  - rechunk: {size: 5}\n"  # the operator's default, every request
    proxy = await make_proxy(
        upstream=upstream.url,
        library=True,
        scenarios={"house": house},
        default="house",
        seed=11,
        trust_client_scenarios=False,
    )
    asked = [({"X-Chaos-Scenario": name}, "/v1/stream") for name in ORDERS]
    asked += [({}, f"/_chaos/{name}/v1/stream") for name in ORDERS]
    asked += [({"X-Chaos-Seed": "5"}, "/v1/stream")]
    for n, (headers, path) in enumerate(asked, start=1):
        status, answer, body = await ask(proxy, path, headers)
        assert (status, body) == (200, SSE), (headers, path)  # no 503, no reset, no hang
        assert answer["X-Chaos-Scenario"] == "house"  # not passthrough for "none" either
        assert answer["X-Chaos-Seed"] == str(derive_seed(11, n))  # not 5
        request_id = answer["X-Chaos-Request-Id"]
        end = await log_capture.wait_end(request_id)
        assert end["outcome"] == "completed" and end["faults_applied"] == {"rechunk": 6}
        assert max(f["size"] for f in log_capture.frames(request_id)) == 5
        assert upstream.seen[-1].path_qs == path  # the prefix is forwarded as sent
    no_chaos_headers(upstream)


def cut_seed() -> int:
    """A seed whose rate draw gives ``staging-cut`` (5 %) to a trusted client."""
    return next(s for s in range(10_000) if random.Random(f"{s}:rate").random() < 0.05)


async def test_one_seed_no_longer_picks_the_cut_every_time(make_proxy: ProxyFactory) -> None:
    texts = {p.stem: p.read_text() for p in sorted(MIX.glob("*.yaml"))}
    settings: dict[str, Any] = {"scenarios": texts, "seed": 2026, "mock_tokens": 2}
    trusted = await make_proxy(**settings, mock_interval=0.0)
    untrusted = await make_proxy(**settings, mock_interval=0.0, trust_client_scenarios=False)
    seed = {"X-Chaos-Seed": str(cut_seed())}
    path = "/v1/chat/completions"
    # The audit, trusted: the same seed, the cut, five times of five.
    picks = [(await ask(trusted, path, seed, CHAT_BODY))[1]["X-Chaos-Scenario"] for _ in range(5)]
    assert picks == ["staging-cut"] * 5
    # Untrusted: what the mix gives requests 1 to 5 under --seed 2026, whatever they send.
    chooser = ScenarioSet(load_scenarios([MIX]), None, 2026)
    want = [chooser.choose("POST", path, {}) for _ in range(5)]
    for n, choice in enumerate(want, start=1):
        _, answer, _ = await ask(untrusted, path, seed, CHAT_BODY)
        scenario = choice.scenario.name if choice.scenario else "none"
        assert (answer["X-Chaos-Scenario"], answer["X-Chaos-Seed"]) == (
            scenario,
            str(derive_seed(2026, n)),
        )


# --------------------------------------------------------------------------- the twin


#: What a client may send, alone and together; each followed by a plain request.
HOSTILE: list[tuple[dict[str, str], str]] = [
    ({"X-Chaos-Scenario": "service-unavailable"}, ""),
    ({"X-Chaos-Scenario": "none"}, ""),
    ({"X-Chaos-Scenario": "no-such-scenario"}, ""),
    ({"X-Chaos-Seed": "1"}, ""),
    ({"X-Chaos-Seed": "9" * 5000}, ""),
    ({"X-Chaos-Seed": "-1"}, ""),
    ({}, "/_chaos/reset-mid-stream"),
    ({}, "/_chaos/none"),
    ({"X-Chaos-Scenario": "hang-after-last-event", "X-Chaos-Seed": "3"}, "/_chaos/none"),
]


async def test_no_client_header_or_path_changes_the_scenario_or_the_seed(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture
) -> None:
    """Two proxies, the same settings and --seed: one gets every request as the client
    wrote it, the other the same requests without the client's choices. Request for
    request, both give the same scenario, seed and frames."""
    sse_at(upstream, "/v1/stream", *{f"{prefix}/v1/stream" for _, prefix in HOSTILE})
    mix = {
        "often": "match: {method: POST}\nrate: 0.3\nfaults:\n  - rechunk: {size: 1}\n",
        "sometimes": "rate: 0.4\nfaults:\n  - rechunk: {size: 2}\n",
    }
    settings: dict[str, Any] = {
        "upstream": upstream.url,
        "library": True,
        "scenarios": mix,
        "default": "sometimes",
        "seed": 7,
        "trust_client_scenarios": False,
    }
    asked = await make_proxy(**settings)
    quiet = await make_proxy(**settings)
    seen: list[tuple[str, str]] = []
    for _ in range(4):
        for headers, prefix in HOSTILE + [({}, "")] * 3:
            got = await ask(asked, prefix + "/v1/stream", headers)
            want = await ask(quiet, "/v1/stream")
            assert got[0] == want[0] == 200 and got[2] == want[2] == SSE
            chosen = [(r[1]["X-Chaos-Scenario"], r[1]["X-Chaos-Seed"]) for r in (got, want)]
            assert chosen[0] == chosen[1], (headers, prefix)
            frames = [
                [f["size"] for f in log_capture.frames(r[1]["X-Chaos-Request-Id"])]
                for r in (got, want)
            ]
            assert frames[0] == frames[1]
            seen.append(chosen[0])
    # The draws did vary: both scenarios and clean requests came up.
    assert {scenario for scenario, _ in seen} == {"often", "sometimes", "none"}
    no_chaos_headers(upstream)


async def test_each_ignored_choice_is_logged_and_counted(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture
) -> None:
    sse_at(upstream, "/v1/stream", "/_chaos/x/v1/stream")
    proxy = await make_proxy(
        upstream=upstream.url, admin=("127.0.0.1", 0), trust_client_scenarios=False
    )
    asked = [
        ({"X-Chaos-Scenario": "x"}, "/v1/stream", ["header"]),
        ({"X-Chaos-Seed": "1"}, "/v1/stream", ["seed"]),
        ({}, "/_chaos/x/v1/stream", ["path"]),
        (
            {"X-Chaos-Scenario": "x", "X-Chaos-Seed": "2"},
            "/_chaos/x/v1/stream",
            ["header", "seed", "path"],
        ),
        ({"X-Mock-Tokens": "9"}, "/v1/stream", ["mock"]),
        ({}, "/v1/stream", []),
    ]
    for headers, path, ignored in asked:
        _, answer, _ = await ask(proxy, path, headers)
        line = log_capture.for_request(answer["X-Chaos-Request-Id"])[0]
        assert line["event"] == "request"
        assert line.get("client_choices_ignored", []) == ignored
    assert proxy.admin_url is not None
    async with aiohttp.ClientSession() as s, s.get(proxy.admin_url + "/metrics") as resp:
        text = await resp.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = families["chaosproxy_client_choices_ignored"].samples
    counted = {s.labels["what"]: s.value for s in samples if s.name.endswith("_total")}
    assert counted == {"header": 2.0, "seed": 2.0, "path": 2.0, "mock": 1.0}


def text_deltas(body: bytes) -> int:
    """The text deltas of an OpenAI chat stream (the first chunk's empty content is
    none)."""
    return sum(1 for e in body.split(b"\n\n") if b'"content":"' in e and b'"content":""' not in e)


@pytest.mark.parametrize("trusted", [True, False])
async def test_an_untrusted_client_cannot_steer_the_mock(
    make_proxy: ProxyFactory, log_capture: LogCapture, trusted: bool
) -> None:
    """The audit: ``X-Mock-Tokens: 100000`` gave a 25 MB answer and ``X-Mock-Interval-Ms:
    60000`` a minute per event. Untrusted, the mock never sees them: the answer has the
    operator's length and pace, and the choice is counted; trusted, they still work."""
    proxy = await make_proxy(mock_tokens=4, trust_client_scenarios=trusted)
    knobs = {"X-Mock-Tokens": "7", "x-mock-interval-ms": "1"}
    status, answer, body = await ask(proxy, "/v1/chat/completions", knobs, CHAT_BODY)
    assert status == 200 and body is not None
    assert text_deltas(body) == (7 if trusted else 4)
    line = log_capture.for_request(answer["X-Chaos-Request-Id"])[0]
    assert line.get("client_choices_ignored", []) == ([] if trusted else ["mock"])
    # The hostile orders, bounded here: the answer still comes at the operator's pace.
    if not trusted:
        hostile = {"X-Mock-Tokens": "100000", "X-Mock-Interval-Ms": "60000"}
        status, _, body = await ask(proxy, "/v1/chat/completions", hostile, CHAT_BODY)
        assert status == 200 and body is not None
        assert text_deltas(body) == 4


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("how", ["flag", "variable"])
async def test_serve_says_which_mode_is_on_and_ignores_the_orders(how: str, tmp_path: Path) -> None:
    args = ["--listen", "127.0.0.1:0", "--admin", "off"]
    env = {"CHAOSPROXY_TRUST_CLIENT_SCENARIOS": "no"} if how == "variable" else {}
    if how == "flag":
        args += ["--trust-client-scenarios", "no"]
    proc, lines = await serve_until_started(*args, env=env)
    try:
        start = lines[0]
        assert "clients choose: nothing (--trust-client-scenarios no" in start, start
        url = start.split("listening on ", 1)[1].split(" ", 1)[0]
        async with aiohttp.ClientSession() as s:
            for order in ("service-unavailable", "reset-mid-stream"):
                headers = {"X-Chaos-Scenario": order}
                async with s.post(
                    url + "/v1/chat/completions", json=CHAT_BODY, headers=headers
                ) as r:
                    assert r.status == 200 and r.headers["X-Chaos-Scenario"] == "none"
                    assert (await r.read()).rstrip().endswith(b"data: [DONE]")
    finally:
        await sigterm(proc)


async def test_serve_says_clients_choose_by_default() -> None:
    proc, lines = await serve_until_started("--listen", "127.0.0.1:0", "--admin", "off")
    try:
        assert "clients choose: X-Chaos-Scenario, X-Chaos-Seed, /_chaos/NAME/;" in lines[0]
    finally:
        await sigterm(proc)
