"""Memory that comes back when the proxy goes idle (chaosproxy/server/memory.py): a
reclaim only with no request in flight and only when the process allocated since the
last one (an idle proxy is never collected twice), looked at every ``interval`` once
started, stopped (twice) cleanly. Memory after a real load is tests/e2e/test_hostile_memory.py's."""

from __future__ import annotations

import gc

from chaosproxy.server.memory import IdleReclaimer, release_memory, young_collections
from tests.support.scripted_upstream import until


def allocate() -> None:
    """What a request leaves: enough for the youngest generation to be collected."""
    before = young_collections()
    gc.collect(0)
    assert young_collections() == before + 1


def test_a_reclaim_waits_for_no_request_in_flight() -> None:
    busy = [2]
    reclaimer = IdleReclaimer(lambda: busy[0])
    allocate()
    assert reclaimer.check() is False
    busy[0] = 0
    assert reclaimer.check() is True
    assert reclaimer.reclaims == 1


def test_an_idle_process_that_allocates_nothing_is_reclaimed_once() -> None:
    reclaimer = IdleReclaimer(lambda: 0)
    allocate()
    assert [reclaimer.check(), reclaimer.check(), reclaimer.check()] == [True, False, False]
    allocate()
    assert reclaimer.check() is True
    assert reclaimer.reclaims == 2


async def test_started_it_looks_every_interval_until_stopped() -> None:
    reclaimer = IdleReclaimer(lambda: 0, interval=0.01)
    allocate()
    reclaimer.start()
    try:
        await until(lambda: reclaimer.reclaims == 1)
    finally:
        await reclaimer.stop()
    await reclaimer.stop()  # (twice: nothing to stop)
    assert reclaimer.reclaims == 1


def test_release_memory_is_a_full_collection() -> None:
    before = gc.get_stats()[2]["collections"]
    release_memory()
    assert gc.get_stats()[2]["collections"] == before + 1
