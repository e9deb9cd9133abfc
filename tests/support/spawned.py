"""What tests/workers/test_workers.py runs in spawned processes. A spawned process
imports the module of its target afresh: from the test module, that was pytest,
Hypothesis and the rest (0.8 s of CPU a process); from here, only what the targets use."""

from __future__ import annotations

from typing import Any

import orjson

from chaosproxy.workers.counters import SharedCounters
from chaosproxy.workers.logfile import LineWriter, open_append


def id_in_worker(worker: int) -> str:
    from chaosproxy.server import proxy

    proxy.set_process_tag(f"beefw{worker}")
    return proxy.next_request_id()


def count(array: Any, lock: Any, slots: dict[str, int], n: int, out: Any) -> None:
    counters = SharedCounters(array, lock, slots)
    out.put([(counters.next_request(), counters.next_ordinal("s") or 0) for _ in range(n)])


def append_lines(path: str, worker: int) -> None:
    writer = LineWriter(open_append(path), name=path)
    pad = "x" * (100 + 900 * worker)  # lines of two lengths: a torn one would show
    for n in range(3000):
        writer.write(orjson.dumps({"w": worker, "n": n, "pad": pad}) + b"\n")
    writer.close()


def hold(lock: Any, held: Any) -> None:
    """Take ``lock`` and keep it until killed (a worker killed mid-count)."""
    import time

    lock.acquire()
    held.set()
    time.sleep(120)
