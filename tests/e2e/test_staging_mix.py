"""The staging mix in ``examples/staging-mix/``: 10,000 requests split as its rates say,
request for request the same for the same ``--seed``, and through the live proxy."""

from __future__ import annotations

import asyncio
import re
import shlex
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from chaosproxy.cli.main import build_parser, config_from
from chaosproxy.scenario import load_scenarios
from chaosproxy.scenario.selection import ScenarioSet
from tests.support.proxies import ProxyFactory

MIX = Path(__file__).resolve().parents[2] / "examples" / "staging-mix"
REQUESTS = 10_000


def split(seed: int, n: int = REQUESTS, *, only: str | None = None) -> list[str]:
    """The scenario each of ``n`` requests gets (``none``: clean), alternating a
    ``/v1/...`` and an ``/api/chat`` path unless ``only`` gives one."""
    chooser = ScenarioSet(load_scenarios([MIX]), None, seed)
    picks = []
    for i in range(n):
        path = only or ("/v1/chat/completions" if i % 2 else "/api/chat")
        choice = chooser.choose("POST", path, {})
        picks.append(choice.scenario.name if choice.scenario else "none")
    return picks


def test_ten_thousand_requests_split_as_the_rates_say() -> None:
    picks = split(seed=2026)
    share = {k: v / REQUESTS for k, v in Counter(picks).items()}
    # Half the requests are POST /v1/... (cut, then duplicate, then slow take 5 %, 2 %,
    # 10 %), half POST /api/chat (duplicate then slow: 2 %, 10 %).
    assert share["staging-cut"] == pytest.approx(0.025, abs=0.006)
    assert share["staging-duplicate"] == pytest.approx(0.02, abs=0.005)
    assert share["staging-slow"] == pytest.approx(0.10, abs=0.01)
    assert share["none"] == pytest.approx(0.855, abs=0.012)


def test_the_same_seed_splits_the_same_way_request_for_request() -> None:
    assert split(seed=2026) == split(seed=2026)
    assert split(2026, 3_000) != split(2027, 3_000)


async def test_the_mix_through_the_live_proxy(make_proxy: ProxyFactory) -> None:
    texts = {p.stem: p.read_text() for p in sorted(MIX.glob("*.yaml"))}  # load order
    proxy = await make_proxy(
        scenarios=texts,
        seed=2026,
        mock_tokens=2,
        mock_interval=0.0,
        trust_client_scenarios=False,  # as the example runs (its README)
    )
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    # Every other client tries to opt out: untrusted, that changes nothing.
    opt_out = iter([{"X-Chaos-Scenario": "none"}, {}] * 100)

    async def one(http: aiohttp.ClientSession) -> str:
        async with http.post(proxy.url + "/api/chat", json=body, headers=next(opt_out)) as resp:
            await resp.read()
            return resp.headers["X-Chaos-Scenario"]

    async with aiohttp.ClientSession() as http:  # at once: the slow ones overlap
        seen = await asyncio.gather(*(one(http) for _ in range(200)))
    # Each request's draw depends only on its number, so the 200 answers carry exactly
    # the choices the selection alone makes for the same seed (in arrival order).
    assert Counter(seen) == Counter(split(seed=2026, n=200, only="/api/chat"))
    assert "staging-cut" not in seen  # its match takes only /v1/...
    assert {"staging-duplicate", "staging-slow", "none"} >= set(seen)


def test_the_example_runs_with_clients_untrusted() -> None:
    """The README's command line and its container variables both turn the trust off,
    and load this directory."""
    readme = (MIX / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("chaosproxy serve"))
    args = build_parser().parse_args(shlex.split(command)[1:])
    config = config_from(args, environ={})
    assert config.trust_client_scenarios is False
    assert config.scenarios == ("examples/staging-mix",) and config.seed == 2026
    docker = next(line for line in readme.splitlines() if line.startswith("docker run"))
    environ = dict(e.split("=", 1) for e in re.findall(r"-e (CHAOSPROXY_\w+=\S+)", docker))
    config = config_from(build_parser().parse_args(["serve"]), environ=environ)
    assert config.trust_client_scenarios is False and config.seed == 2026
