"""The supervisor's steps alone (chaosproxy/workers/supervisor.py): what it checks
before a worker is spawned (``_prepare``: the address held, the scenarios, the log)
and the warnings it gives at start; the request ids that name their worker, the workers'
metrics summed, a dead worker's requests ended ``worker_lost`` and the counters' lock it
held freed. The supervisor at work, with its workers, is
tests/workers/test_workers_live.py's."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from chaosproxy.observe.logs import FrameLog
from chaosproxy.observe.metrics import Metrics
from chaosproxy.scenario import load_library, parse_scenario
from chaosproxy.server import proxy
from chaosproxy.server.config import Config
from chaosproxy.server.net import StartupError
from chaosproxy.workers.counters import SLOTS, SharedCounters, Slots
from chaosproxy.workers.logfile import LineWriter, open_append
from chaosproxy.workers.supervisor import (
    Keeper,
    Worker,
    Workers,
    _Merged,
    _prepare,
    _Prepared,
    _unlock,
    _warnings,
    ended_how,
    lost_family,
    owner_of,
)
from tests.support import spawned


def config(**changes: object) -> Config:
    return Config().replace(**{"listen": ("127.0.0.1", 0), "workers": 2, **changes})


def test_the_address_is_held_for_the_workers_and_the_library_given() -> None:
    mine = parse_scenario("name: mine\nfaults: [{drop: {nth: 2}}]\n", "mine")
    prepared = _prepare(config(log=None), {"mine": mine})
    try:
        port = prepared.held.getsockname()[1]
        assert port > 0
        assert prepared.held.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        # Another listener without SO_REUSEPORT is refused: the port is the workers'.
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        assert prepared.library == {**load_library(), "mine": mine}
        assert (prepared.log_mode, prepared.log_format, prepared.admin_warning) == (
            "none",
            "json",
            None,
        )
    finally:
        prepared.held.close()


def test_a_start_that_cannot_be_is_refused_before_any_worker(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"^--scenario 'nope' is not a loaded scenario$"):
        _prepare(config(scenario="nope"), {})
    missing = tmp_path / "no" / "such" / "log.jsonl"
    with pytest.raises(StartupError, match=f"^cannot open log {missing}: No such file"):
        _prepare(config(log=str(missing)), {})
    many = {
        f"s{i}": parse_scenario(f"name: s{i}\nfaults: [{{drop: {{nth: 2}}}}]\n", f"s{i}")
        for i in range(SLOTS)
    }
    with pytest.raises(StartupError, match=f"^more than {SLOTS} scenarios: too many"):
        _prepare(config(), many)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError, match=f"^cannot listen on 127.0.0.1:{port}: "):
            _prepare(config(listen=("127.0.0.1", port)), {})


def test_the_warnings_at_start_each_once() -> None:
    crossing = parse_scenario(
        "name: crossing\nfaults: [{splice: {from: previous, after: 2, across_tenants: true}}]\n",
        "crossing",
    )
    with socket.socket() as held:
        prepared = _Prepared({"crossing": crossing}, "none", "json", held, "admin on 0.0.0.0")
        got = _warnings(prepared, {"warnings": ["admin on 0.0.0.0", "a worker's own"]})
    assert got[:2] == ["admin on 0.0.0.0", "a worker's own"]
    assert got[2:] == [
        "crossing: faults[0].splice.across_tenants: true: scenario crossing puts events of "
        "every tenant's streams (other users' text) into its answers"
    ]


# --------------------------------------------------------------------------- ids


def test_request_ids_of_two_workers_never_collide_and_name_their_worker() -> None:
    made: dict[int, list[str]] = {}
    for worker in (0, 1):
        proxy.set_process_tag(f"3f9aw{worker}")
        made[worker] = [proxy.next_request_id() for _ in range(50)]
    proxy.set_process_tag(os.urandom(2).hex())
    assert not set(made[0]) & set(made[1])
    assert {owner_of(i) for i in made[0]} == {0}
    assert {owner_of(i) for i in made[1]} == {1}
    assert owner_of("r-3f9a-7") is None  # one process's id: no worker
    assert owner_of("r-3f9aw1-7-x") is None


def test_ids_are_tagged_in_the_worker_not_at_import(tmp_path: Path) -> None:
    """The bug of issue 27: a tag drawn at import was the same in every forked worker.
    Spawned workers each set their own."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        ids = pool.map(spawned.id_in_worker, [0, 1])
    assert ids[0] != ids[1]
    assert [owner_of(i) for i in ids] == [0, 1]


# --------------------------------------------------------------------------- metrics


def test_metrics_of_the_workers_are_summed() -> None:
    answers = []
    for n in (1, 2):
        metrics = Metrics()
        for i in range(n):  # (lines of the fields Metrics reads only)
            metrics({"event": "request", "request_id": f"r{i}"})  # type: ignore[arg-type]
            metrics({"event": "frame", "request_id": f"r{i}", "scenario": "dup", "size": 10})  # type: ignore[arg-type]
            metrics(
                {  # type: ignore[arg-type]
                    "event": "response_end",
                    "request_id": f"r{i}",
                    "scenario": "dup",
                    "outcome": "completed",
                    "ttfb_ms": 5.0,
                    "duration_ms": 20.0,
                }
            )
        answers.append(
            [
                [f.name, f.documentation, f.type, [[s.name, s.labels, s.value] for s in f.samples]]
                for f in metrics.registry.collect()
            ]
        )
    merged = {m.name: m for m in _Merged(answers).collect()}
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in merged["chaosproxy_requests"].samples
    }
    assert (
        values[("chaosproxy_requests_total", (("outcome", "completed"), ("scenario", "dup")))] == 3
    )
    sent = {s.name: s.value for s in merged["chaosproxy_bytes_sent"].samples}
    assert sent["chaosproxy_bytes_sent_total"] == 30
    count = [s for s in merged["chaosproxy_ttfb_seconds"].samples if s.name.endswith("_count")]
    assert count[0].value == 3
    # and it renders as Prometheus text that parses
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(answers))
    parsed = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert "chaosproxy_requests" in parsed


# --------------------------------------------------------------------------- deaths


def test_how_a_worker_ended_is_said_in_words() -> None:
    assert ended_how(-signal.SIGKILL) == "killed by SIGKILL"
    assert ended_how(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert ended_how(-200) == "killed by signal 200"
    assert ended_how(3) == "exit code 3"
    assert ended_how(None) == "ended"


async def test_a_dead_workers_requests_end_worker_lost_in_the_order_they_began(
    tmp_path: Path,
) -> None:
    path = tmp_path / "frames.log"
    stream: Any = LineWriter(open_append(str(path)), name=str(path))  # (as the supervisor's)
    log = FrameLog(stream)
    context = multiprocessing.get_context("spawn")
    counters = SharedCounters(context.RawArray("q", 9), context.Lock())
    keeper = Keeper(Workers([], Slots(counters)), _never, dict, log, None)
    dead = Worker(1, None, None)  # type: ignore[arg-type]
    now = time.monotonic()
    dead.noted(
        {
            "op": "flights",
            "begun": [["r-aw1-2", None, now - 0.5], ["r-aw1-1", "slow", now - 2]],
            "ended": [],
        }
    )
    dead.noted({"op": "flights", "begun": [["r-aw1-3", "slow", now]], "ended": ["r-aw1-3"]})
    assert keeper.lose(dead, "killed by SIGKILL") == 2
    assert dead.flights == {}
    assert keeper.group.lost == {"slow": 1, "none": 1}
    # /metrics: counted with the workers' outcomes.
    worker = Metrics()
    worker.requests.labels("slow", "completed").inc()
    answer = [
        [f.name, f.documentation, f.type, [[x.name, x.labels, x.value] for x in f.samples]]
        for f in worker.registry.collect()
    ]
    merged = {m.name: m for m in _Merged([answer, lost_family(keeper.group.lost)]).collect()}
    assert {
        (x.labels["scenario"], x.labels["outcome"]): x.value
        for x in merged["chaosproxy_requests"].samples
        if x.name == "chaosproxy_requests_total"
    } == {("slow", "completed"): 1, ("slow", "worker_lost"): 1, ("none", "worker_lost"): 1}
    log.close()
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [(x["request_id"], x["scenario"]) for x in lines] == [
        ("r-aw1-1", "slow"),
        ("r-aw1-2", None),
    ]
    for line in lines:
        assert line == {
            "request_id": line["request_id"],
            "scenario": line["scenario"],
            "outcome": "worker_lost",
            "status": 0,
            "bytes": 0,
            "frames": 0,
            "duration_ms": line["duration_ms"],
            "reason": "worker 1 killed by SIGKILL",
            "event": "response_end",
            "ts": line["ts"],
        }
    assert 2000 <= lines[0]["duration_ms"] < 60_000 and 500 <= lines[1]["duration_ms"] < 58_500


async def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("nothing is spawned here")


def test_the_counters_lock_of_a_worker_killed_holding_it_is_freed() -> None:
    context = multiprocessing.get_context("spawn")
    lock = context.Lock()
    held = context.Event()
    process = context.Process(target=spawned.hold, args=(lock, held))
    process.start()
    try:
        assert held.wait(60)
        assert lock.acquire(timeout=0.05) is False
        process.kill()
        process.join(10)
        _unlock(lock)
        assert lock.acquire(timeout=0) is True  # free again
        lock.release()
        _unlock(lock)  # a free lock stays free (and is not released twice)
        assert lock.acquire(timeout=0) is True
    finally:
        process.kill()
        process.join(10)
