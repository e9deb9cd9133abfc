"""The same upstream bytes, scenario and seed give the same writes: offline (simulate)
and through the live proxy, run after run; and the seed a response reports replays it.

Live reads may be cut differently from offline ones, so the scenarios here use faults
whose output does not depend on read boundaries: event faults, ``rechunk`` and
``coalesce: {events: N}``.
"""

from __future__ import annotations

from typing import Any

import pytest

from chaosproxy.control.start import RunningProxy
from chaosproxy.scenario import parse_scenario
from chaosproxy.scenario.selection import derive_seed
from chaosproxy.tools.simulate import simulate
from tests.support.live_faults import BODY, PATH, SSE, fetch, wait_end, writes
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import Script, ScriptedUpstream

SCENARIOS = {
    "random": """
faults:
  - drop: {kind: delta, probability: 0.4}
  - duplicate: {probability: 0.5, times: 2}
  - reorder: {nth: 1, window: 3, mode: shuffle}
  - rechunk: {random: [3, 40]}
""",
    "made-up": """
faults:
  - inject: {after: 2, event: {kind: error}}
  - mutate: {kind: delta, nth: 2, set: {id: other}}
  - comment: {every: 3}
  - ids: {start: 1, retry: 500}
  - rechunk: {sizes: [5, 1, 17]}
""",
    "merged": """
faults:
  - corrupt: {match: Hel, mode: invalid_utf8}
  - line_endings: {style: crlf}
  - coalesce: {events: 4}
""",
    "hostile": """
faults:
  - bom: {}
  - rechunk: {boundaries: hostile}
""",
    "cut": """
faults:
  - duplicate: {every: 2}
  - cut: {after: 4, position: mid_utf8, how: close}
  - rechunk: {random: [1, 60]}
""",
}


async def start(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, *, one_write: bool, **kw: Any
) -> RunningProxy:
    """The upstream sends BODY in one write, or one write per event, without gaps."""
    if one_write:
        script = Script(writes=[(BODY, 0.0)], headers=SSE)
    else:
        script = Script.events(BODY, headers=SSE)
    upstream.route(PATH, script)
    return await make_proxy(upstream=upstream.url, scenarios=SCENARIOS, content=True, **kw)


def offline(name: str, seed: int) -> list[bytes]:
    scenario = parse_scenario(SCENARIOS[name], f"<{name}>", default_name=name)
    return simulate(scenario, BODY, seed=seed, path=PATH).writes


@pytest.mark.parametrize("one_write", [True, False], ids=["one-write", "per-event"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_live_writes_equal_simulated_writes(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    name: str,
    one_write: bool,
) -> None:
    proxy = await start(upstream, make_proxy, one_write=one_write)
    for seed in (1, 2):
        expected = offline(name, seed)
        reply = await fetch(proxy, headers={"X-Chaos-Scenario": name, "X-Chaos-Seed": str(seed)})
        await wait_end(log_capture, reply.request_id)
        sizes = [f["size"] for f in log_capture.frames(reply.request_id)]
        assert sizes == [len(w) for w in expected]
        assert writes(log_capture, reply.request_id) == expected
        assert reply.body == b"".join(expected)


async def test_the_returned_seed_replays_the_run(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await start(upstream, make_proxy, one_write=False)
    first = await fetch(proxy, headers={"X-Chaos-Scenario": "random"})  # a random seed
    seed = first.headers["X-Chaos-Seed"]
    assert seed.isdigit()
    again = await fetch(proxy, headers={"X-Chaos-Scenario": "random", "X-Chaos-Seed": seed})
    assert again.headers["X-Chaos-Seed"] == seed
    for reply in (first, again):
        await wait_end(log_capture, reply.request_id)
    assert again.body == first.body
    assert writes(log_capture, again.request_id) == writes(log_capture, first.request_id)
    assert writes(log_capture, first.request_id) == offline("random", int(seed))


async def test_a_base_seed_derives_each_request_seed(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await start(upstream, make_proxy, one_write=False, seed=77, default="random")
    replies = [await fetch(proxy) for _ in range(3)]
    seeds = [int(r.headers["X-Chaos-Seed"]) for r in replies]
    assert seeds == [derive_seed(77, n) for n in (1, 2, 3)]
    for reply, seed in zip(replies, seeds, strict=True):
        await wait_end(log_capture, reply.request_id)
        assert writes(log_capture, reply.request_id) == offline("random", seed)
    replay = await fetch(proxy, headers={"X-Chaos-Seed": str(seeds[1])})
    await wait_end(log_capture, replay.request_id)
    assert writes(log_capture, replay.request_id) == writes(log_capture, replies[1].request_id)


def test_a_different_seed_gives_different_writes() -> None:
    runs = {seed: offline("random", seed) for seed in range(1, 6)}
    assert len({tuple(w) for w in runs.values()}) == len(runs)
    for seed, ws in runs.items():
        assert offline("random", seed) == ws  # and the same seed, the same writes


def test_scenario_seed_is_the_default_and_the_request_seed_overrides() -> None:
    scenario = parse_scenario("seed: 8\n" + SCENARIOS["random"], "<s>", default_name="s")
    assert simulate(scenario, BODY).seed == 8
    assert simulate(scenario, BODY).writes == offline("random", 8)
    assert simulate(scenario, BODY, seed=9).writes == offline("random", 9)


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_read_boundaries_do_not_change_event_faults(chunk: int) -> None:
    scenario = parse_scenario(SCENARIOS["random"], "<r>", default_name="r")
    whole = simulate(scenario, BODY, seed=3, path=PATH)
    assert simulate(scenario, BODY, seed=3, path=PATH, chunk=chunk).writes == whole.writes
