"""The counters the workers share (chaosproxy/workers/counters.py): each request and
each scenario's ordinal counted once across processes and threads, the slots of
scenarios (a replaced scenario counts anew, a slot free again only after release), and
a scenario set counting through them as it would in two workers."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from chaosproxy.scenario import parse_scenario
from chaosproxy.scenario.selection import ScenarioSet, derive_seed
from chaosproxy.workers.counters import SharedCounters, Slots, TooManyScenarios
from tests.support import spawned


def _counters(slots: int = 8) -> SharedCounters:
    context = multiprocessing.get_context("spawn")
    return SharedCounters(context.RawArray("q", slots + 1), context.Lock())


@pytest.mark.slow
def test_counters_count_once_per_request_across_processes() -> None:
    context = multiprocessing.get_context("spawn")
    array = context.RawArray("q", 9)
    lock = context.Lock()
    out = context.Queue()
    processes = [
        context.Process(target=spawned.count, args=(array, lock, {"s": 3}, 2000, out))
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=10)
    numbers = [n for result in results for n, _ in result]
    ordinals = [o for result in results for _, o in result]
    assert sorted(numbers) == list(range(1, 8001))  # each number once: none lost
    assert sorted(ordinals) == list(range(1, 8001))
    assert SharedCounters(array, lock).value(0) == 8000


def test_counters_under_threads_too() -> None:
    counters = _counters()
    counters.remap({"s": 1})
    got: list[int] = []

    def work() -> None:
        for _ in range(500):
            ordinal = counters.next_ordinal("s")
            assert ordinal is not None
            got.append(ordinal)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 2001))


def test_slots_a_replaced_scenario_counts_anew_and_slots_come_free_after_release() -> None:
    counters = _counters(slots=3)
    slots = Slots(counters, ["a", "b"], size=3)
    counters.remap(slots.of)
    assert [counters.next_ordinal("a") for _ in range(3)] == [1, 2, 3]
    old = slots.of["a"]
    slots.fresh("a")  # replaced: a new slot at 0
    counters.remap(slots.of)
    assert slots.of["a"] != old
    assert counters.next_ordinal("a") == 1
    with pytest.raises(TooManyScenarios):  # the old slot is not free before release
        slots.fresh("c")
    slots.release()
    slots.fresh("c")
    counters.remap(slots.of)
    assert counters.next_ordinal("c") == 1  # a reused slot starts at 0
    slots.drop("b")
    slots.restore()
    slots.release()
    assert slots.of == slots.initial
    counters.zero()
    counters.remap(slots.of)
    assert counters.next_ordinal("a") == 1
    assert counters.next_request() == 1


def test_a_scenario_set_with_shared_counters_counts_through_them() -> None:
    scenario = parse_scenario(b"name: once\nrequests: [1]\nfaults: []\n", "t")
    counters = _counters()
    counters.remap({"once": 1})
    sets = [ScenarioSet({"once": scenario}, None, 7) for _ in range(2)]  # two workers
    for s in sets:
        s.counters = counters
    choices = [sets[i % 2].choose("POST", "/x", {"X-Chaos-Scenario": "once"}) for i in range(6)]
    assert [c.ordinal for c in choices] == [1, 2, 3, 4, 5, 6]
    assert [c.active for c in choices] == [True] + [False] * 5
    assert [c.seed for c in choices] == [derive_seed(7, n) for n in range(1, 7)]
    # An unknown scenario counts nothing, on either worker.
    with pytest.raises(Exception, match="unknown scenario"):
        sets[0].choose("POST", "/x", {"X-Chaos-Scenario": "nope"})
    assert counters.next_request() == 7
