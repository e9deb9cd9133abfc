"""The pieces of ``serve --workers N``, one at a time (the whole is
tests/workers/test_workers_live.py): the control protocol, request ids across workers, the
shared counters under concurrency (threads and processes), the slots of scenarios,
which worker keeps a stream token, the frame log's whole lines, merged metrics."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from chaosproxy.observe.logs import FrameLog
from chaosproxy.observe.metrics import Metrics
from chaosproxy.observe.store import RequestStore
from chaosproxy.scenario import parse_scenario
from chaosproxy.scenario.selection import ScenarioSet, derive_seed
from chaosproxy.workers.control import (
    MAX_MESSAGE,
    Channel,
    ControlError,
    Decoder,
    WorkerEnd,
    encode,
)
from chaosproxy.workers.counters import SharedCounters, Slots, TooManyScenarios
from chaosproxy.workers.handover import WorkerHandover, token_prefix
from chaosproxy.workers.logfile import LineWriter, Relay, open_append
from chaosproxy.workers.supervisor import (
    Keeper,
    Worker,
    Workers,
    _Merged,
    _unlock,
    ended_how,
    lost_family,
    owner_of,
)
from chaosproxy.workers.worker import Flights
from tests.support import spawned

# --------------------------------------------------------------------------- control

MESSAGES = [{"id": 1, "op": "add_scenario", "body": "bmFtZTogeAo="}, {"id": 2, "op": "reset"}]


def test_every_split_of_two_messages_decodes_to_the_same_messages() -> None:
    wire = b"".join(encode(m) for m in MESSAGES)
    for cut in range(len(wire) + 1):
        decoder = Decoder()
        got = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
        assert got == MESSAGES
        assert decoder.buffered == 0


@given(st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=40))
def test_byte_by_byte_or_in_any_pieces(sizes: list[int]) -> None:
    wire = b"".join(encode(m) for m in MESSAGES) * 3
    decoder = Decoder()
    got: list[dict[str, Any]] = []
    i = 0
    while i < len(wire):
        size = sizes[i % len(sizes)]
        got += decoder.feed(wire[i : i + size])
        i += size
    assert got == MESSAGES * 3


def test_a_message_over_the_limit_or_not_an_object_is_refused() -> None:
    with pytest.raises(ControlError, match="over the limit"):
        Decoder().feed((MAX_MESSAGE + 1).to_bytes(4, "big"))
    with pytest.raises(ControlError, match="not a JSON object"):
        Decoder().feed(len(b"[1]").to_bytes(4, "big") + b"[1]")
    with pytest.raises(ControlError, match="not JSON"):
        Decoder().feed(len(b"{x").to_bytes(4, "big") + b"{x")


async def test_a_channel_asks_and_the_worker_answers_in_order() -> None:
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    worker = WorkerEnd(theirs)
    await channel.open()
    await worker.open()
    seen: list[str] = []

    async def handler(op: str, message: dict[str, Any]) -> Any:
        seen.append(op)
        if op == "slow":
            await asyncio.sleep(0)  # (answers still go back in order)
            return message["n"] * 2
        if op == "boom":
            raise ValueError("no such thing")
        return op

    worker.hello("ready", pid=7)
    serving = asyncio.create_task(worker.serve(handler))
    assert channel.hello is not None
    assert (await channel.hello)["pid"] == 7
    futures = [channel.send("slow", n=1), channel.send("fast"), channel.send("boom")]
    assert await futures[0] == 2
    assert await futures[1] == "fast"
    with pytest.raises(ControlError, match="ValueError: no such thing"):
        await futures[2]
    assert seen == ["slow", "fast", "boom"]  # one at a time, in the order sent
    assert await channel.ask("slow", n=21) == 42
    # The worker goes away: what waits fails, what is asked next fails at once.
    waiting = channel.send("never")
    serving.cancel()
    theirs.close()
    with pytest.raises(ControlError):
        await waiting
    with pytest.raises(ControlError, match="went away"):
        await channel.ask("again")
    await channel.close()


async def test_a_worker_that_dies_before_its_hello_is_a_failed_start() -> None:
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    await channel.open()
    theirs.close()
    assert channel.hello is not None
    assert (await channel.hello)["op"] == "failed"
    await channel.close()


# --------------------------------------------------------------------------- ids


def test_request_ids_of_two_workers_never_collide_and_name_their_worker() -> None:
    from chaosproxy.server import proxy

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


# --------------------------------------------------------------------------- counters


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


# --------------------------------------------------------------------------- handover


def test_which_worker_keeps_a_stream_is_in_its_token() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    handover = WorkerHandover(0, [None, a])
    assert token_prefix(1) == "w1_"
    assert handover.owner(b"w1_AbCd-_xyz.4") == 1
    assert handover.owner(b"w0_AbCd.4") is None  # its own
    assert handover.owner(b"w7_AbCd.4") is None  # no such worker
    assert handover.owner(b"AbCd.4") is None  # one process's token, or upstream ids
    assert handover.owner(b"") is None
    a.close()
    b.close()


# --------------------------------------------------------------------------- the log


def test_line_writers_of_two_processes_append_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "frames.log"
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        pool.starmap(spawned.append_lines, [(str(path), w) for w in (0, 1)])
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert Counter(line["w"] for line in lines) == {0: 3000, 1: 3000}
    for worker in (0, 1):  # each worker's lines in its own order
        assert [line["n"] for line in lines if line["w"] == worker] == list(range(3000))


async def test_the_relay_passes_whole_lines_only() -> None:
    out: list[bytes] = []
    relay = Relay(out.append)
    wire = b'{"a":1}\n{"b":2}\n{"c":3}\n'
    for cut in (1, 9, 10, 20):
        relay.data_received(wire[:cut])
        relay.data_received(wire[cut:])
    assert all(chunk.endswith(b"\n") for chunk in out)
    assert b"".join(out) == wire * 4
    relay.data_received(b'{"torn"')
    relay.connection_lost(None)  # a worker killed mid-line: the part, ended
    assert out[-1] == b'{"torn"\n'
    assert relay.done.done()


# --------------------------------------------------------------------------- metrics


def test_metrics_of_the_workers_are_summed() -> None:
    answers = []
    for n in (1, 2):
        metrics = Metrics()
        for i in range(n):
            metrics({"event": "request", "request_id": f"r{i}"})
            metrics({"event": "frame", "request_id": f"r{i}", "scenario": "dup", "size": 10})
            metrics(
                {
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
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(answers))
    parsed = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert "chaosproxy_requests" in parsed


# --------------------------------------------------------------------------- the guard


class _Refusing:
    """A handover that finds every id another worker's, and cannot send it."""

    def __init__(self) -> None:
        self.asked: list[bytes] = []

    def owner(self, last_event_id: bytes) -> int | None:
        self.asked.append(last_event_id)
        return 1 if last_event_id.startswith(b"w1_") else None

    def send(self, owner: int, transport: Any, data: bytes) -> bool:
        return False


async def _exchange(port: int, *requests: list[bytes]) -> bytes:
    """Each request (in pieces, sent one by one) on one connection, the next once the
    answer to the one before has ended."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = b""
    for pieces in requests:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0)
        async with asyncio.timeout(10):
            while not got.endswith(b"0\r\n\r\n"):
                data = await reader.read(65536)
                if not data:
                    break
                got += data
        got += b"|"
    writer.close()
    return got


async def test_a_held_head_is_served_as_ever_whole_byte_by_byte_and_kept_alive(
    make_proxy: Any,
) -> None:
    from chaosproxy.server.net import CLIENT_GUARD
    from chaosproxy.server.proxy import STATE

    proxy = await make_proxy(scenarios={"framed": "faults: []\n"})
    runner = next(r for r in proxy.runners if STATE in getattr(r, "app", {}))
    refusing = _Refusing()
    runner.app[CLIENT_GUARD].handover = refusing
    port = int(proxy.url.rsplit(":", 1)[1])
    body = orjson.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Last-Event-ID: w1_abc.3\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    whole = head + body
    answered = await _exchange(port, [whole])
    assert answered.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in answered
    one_by_one = await _exchange(port, [whole[i : i + 1] for i in range(len(whole))])
    assert one_by_one.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in one_by_one
    # Two requests on one connection: the second head is held and looked at too.
    both = await _exchange(port, [whole], [b"\r\n", whole[:7], whole[7:]])
    assert both.count(b"HTTP/1.1 200") == 2
    assert refusing.asked == [b"w1_abc.3"] * 4
    assert runner.app[CLIENT_GUARD].handed_over == 0


# --------------------------------------------------------------------------- the flag


def test_workers_is_a_number_or_auto() -> None:
    from chaosproxy.server.config import ConfigError, parse_workers

    assert parse_workers("2") == 2
    assert parse_workers("auto") == len(os.sched_getaffinity(0))
    for bad in ("0", "-1", "two", "", "1025"):
        with pytest.raises(ConfigError, match="auto or a number of workers"):
            parse_workers(bad)


# --------------------------------------------------------------------------- deaths


async def test_notes_come_unasked_between_answers_and_are_read_to_the_end() -> None:
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    notes: list[dict[str, Any]] = []
    channel.on_note = notes.append
    worker = WorkerEnd(theirs)
    await channel.open()
    await worker.open()

    async def handler(op: str, message: dict[str, Any]) -> Any:
        worker.note("flights", begun=[["r-1", None, 1.5]], ended=[])
        return op

    worker.hello("ready", pid=7)
    serving = asyncio.create_task(worker.serve(handler))
    assert await channel.ask("x") == "x"
    worker.note("flights", begun=[], ended=["r-1"])
    serving.cancel()
    theirs.close()  # gone: what it wrote is still read
    assert channel.ended is not None
    await channel.ended
    assert notes == [
        {"id": -1, "op": "flights", "begun": [["r-1", None, 1.5]], "ended": []},
        {"id": -1, "op": "flights", "begun": [], "ended": ["r-1"]},
    ]
    await channel.close()


async def test_flights_are_told_once_per_loop_iteration_and_short_ones_never() -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    flights = Flights(lambda op, **fields: notes.append((op, fields)))
    before = time.monotonic()
    flights({"event": "request", "request_id": "r-1", "scenario": "slow"})
    flights({"event": "request", "request_id": "r-2", "scenario": None})
    flights({"event": "response_end", "request_id": "r-2", "scenario": None})  # ended at once
    assert notes == []  # not before the iteration ends
    await asyncio.sleep(0)
    ((op, fields),) = notes
    assert op == "flights" and fields["ended"] == []
    ((request_id, scenario, began),) = fields["begun"]
    assert (request_id, scenario) == ("r-1", "slow") and before <= began <= time.monotonic()
    flights({"event": "response_end", "request_id": "r-1", "scenario": "slow"})
    await asyncio.sleep(0)
    assert notes[1] == ("flights", {"begun": [], "ended": ["r-1"]})
    await asyncio.sleep(0)
    assert len(notes) == 2  # nothing more to tell: nothing told


def test_the_request_store_tells_flights_of_requests_and_ends_only() -> None:
    store = RequestStore()
    seen: list[str] = []
    store.flights = lambda line: seen.append(f"{line['event']} {line['request_id']}")
    base = {"request_id": "r-1", "scenario": None, "ts": "t"}
    store({**base, "event": "request", "seed": 1, "method": "POST", "path": "/"})
    store.frame_json(base, {"n": 1, "size": 3, "t_ms": 0.0}, b'{"n":1}\n')  # type: ignore[typeddict-item]
    store({**base, "event": "action", "action": "cut"})
    store.reset()  # (its end is still told)
    store({**base, "event": "response_end", "outcome": "completed"})
    assert seen == ["request r-1", "response_end r-1"]


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
    log = FrameLog(LineWriter(open_append(str(path)), name=str(path)))
    counters = _counters()
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
