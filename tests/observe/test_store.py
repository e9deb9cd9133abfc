"""The admin API's request store (chaosproxy/observe/store.py), bounded in bytes: what
it counts per record and line, the oldest requests forgotten first past
``max_bytes`` (counted by reason, and shown by the metrics), the newest never evicted
for its own lines (they are omitted instead), and the listing's order and cursor."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaosproxy.observe.journal import RequestEntry
from chaosproxy.observe.metrics import Metrics
from chaosproxy.observe.store import LINE_OVERHEAD, RECORD_OVERHEAD, RequestStore


def request(i: int) -> Any:
    return {
        "event": "request",
        "request_id": f"r-{i}",
        "scenario": None,
        "seed": 123456789,
        "method": "POST",
        "path": "/v1/chat/completions",
        "model": "gpt-4o",
        "messages": 3,
        "tools": ["get_weather"],
        "body_bytes": 200,
        "body_sha256": "a" * 64,
        "ts": "2026-01-01T00:00:00.000Z",
    }


def frame(i: int, n: int) -> Any:
    return {
        "event": "frame",
        "request_id": f"r-{i}",
        "scenario": None,
        "seq": n,
        "offset": n * 200,
        "size": 200,
        "t_ms": n * 10.5,
        "events": [n + 1],
        "kinds": ["delta"],
        "faults": [],
        "ts": "2026-01-01T00:00:01.000Z",
    }


def end(i: int) -> Any:
    return {
        "event": "response_end",
        "request_id": f"r-{i}",
        "scenario": None,
        "outcome": "completed",
        "status": 200,
        "bytes": 3000,
        "frames": 12,
        "duration_ms": 230.2,
        "integrity": "intact",
        "ts": "2026-01-01T00:00:01.000Z",
    }


def record_bytes(i: int) -> int:
    """What a record with no line kept counts: its overhead and its request line."""
    return RECORD_OVERHEAD + len(orjson.dumps(request(i)))


def line_bytes(line: Any) -> int:
    return len(orjson.dumps(line)) + 1 + LINE_OVERHEAD  # (kept with its newline)


def test_it_counts_each_record_and_line_and_forgets_them_on_reset() -> None:
    store = RequestStore()
    store(request(1))
    assert store.held == record_bytes(1)
    store(frame(1, 0))
    store(frame(1, 1))
    assert store.held == record_bytes(1) + line_bytes(frame(1, 0)) + line_bytes(frame(1, 1))
    entry = RequestEntry.read("POST", "/v1/chat/completions", [("Host", "x")], b"{}")
    store.keep_request("r-1", entry)
    lines = line_bytes(frame(1, 0)) + line_bytes(frame(1, 1))
    assert store.held == record_bytes(1) + lines + entry.held
    record = store.get("r-1")
    assert record is not None and record.held == store.held
    store.reset()
    assert (store.held, len(store), store.evicted) == (0, 0, {"count": 0, "bytes": 0})


def test_past_max_bytes_the_oldest_requests_are_forgotten_first() -> None:
    # (ids of one digit: every record counts the same)
    one = record_bytes(1) + sum(line_bytes(frame(1, n)) for n in range(10))
    store = RequestStore(max_bytes=3 * one)
    for i in range(1, 6):
        store(request(i))
        for n in range(10):
            store(frame(i, n))
        store(end(i))
    assert [r.line["request_id"] for r in store.records()] == ["r-3", "r-4", "r-5"]
    assert store.evicted == {"count": 0, "bytes": 2}
    assert store.held == 3 * one <= store.max_bytes
    assert all(r.omitted == 0 and len(r.frames) == 10 for r in store.records())


def test_the_history_count_still_bounds_and_is_counted_apart() -> None:
    store = RequestStore(history=2)
    for i in range(5):
        store(request(i))
    assert [r.line["request_id"] for r in store.records()] == ["r-3", "r-4"]
    assert store.evicted == {"count": 3, "bytes": 0}
    assert store.held == record_bytes(3) + record_bytes(4)


def test_a_request_alone_over_the_budget_keeps_its_lines_up_to_it_and_counts_the_rest() -> None:
    store = RequestStore(max_bytes=record_bytes(1) + sum(line_bytes(frame(1, n)) for n in range(3)))
    store(request(1))
    for n in range(10):
        store(frame(1, n))
    (record,) = store.records()
    assert (len(record.frames), record.omitted, record.sent_frames) == (3, 7, 10)
    assert store.held <= store.max_bytes
    # The next request pushes it out, to keep its own lines.
    store(request(2))
    store(frame(2, 0))
    assert [r.line["request_id"] for r in store.records()] == ["r-2"]
    assert store.evicted["bytes"] == 1


def test_an_entry_too_large_for_the_budget_is_not_kept() -> None:
    store = RequestStore(max_bytes=record_bytes(1) + 100)
    store(request(1))
    store.keep_request("r-1", RequestEntry.read("POST", "/", [("X", "v" * 500)], None))
    record = store.get("r-1")
    assert record is not None and record.request is None


def test_newest_first_and_the_cursor() -> None:
    store = RequestStore(history=3)
    for i in range(5):
        store(request(i))
    ids = [(r.seq, r.line["request_id"]) for r in store.newest_first()]
    assert ids == [(5, "r-4"), (4, "r-3"), (3, "r-2")]
    assert [r.seq for r in store.newest_first(before=5)] == [4, 3]
    assert store.newest_first(before=3) == []
    store.reset()
    store(request(9))
    assert [r.seq for r in store.newest_first()] == [6]  # (never reused)


def test_the_metrics_show_what_it_holds_and_forgot() -> None:
    store = RequestStore(history=2)
    metrics = Metrics()
    metrics.count_history(store)
    for i in range(3):
        store(request(i))
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    assert families["chaosproxy_history_bytes"].samples[0].value == store.held
    evicted = {s.labels["reason"]: s.value for s in families["chaosproxy_history_evicted"].samples}
    assert evicted == {"count": 1.0, "bytes": 0.0}


@pytest.mark.parametrize("frames", [0, 50])
def test_what_it_counts_is_what_it_really_holds(frames: int) -> None:
    """``held`` against tracemalloc, for records of no line and of 50 frame lines: never
    less than what they take, and not much more."""
    store = RequestStore(history=100_000, max_bytes=2**40)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(2000):  # (each line made here, as the log makes it)
            store(request(i))
            for n in range(frames):
                store(frame(i, n))
            store(end(i))
        real = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # (The count is the pure build's records; compiled ones take a third less, 1,503
    # bytes against 2,351 counted for a record of no line: an upper bound for both.)
    assert real <= store.held <= 1.6 * real, (real, store.held)


# --------------------------------------------------------------------------- workers


def test_the_request_store_tells_flights_of_requests_and_ends_only() -> None:
    store = RequestStore()
    seen: list[str] = []

    def told(line: Any) -> None:  # (a request's lines only: each has its request_id)
        seen.append(f"{line['event']} {line['request_id']}")

    store.flights = told
    base: dict[str, Any] = {"request_id": "r-1", "scenario": None, "ts": "t"}
    # (lines of the fields the store reads only)
    request: Any = {**base, "event": "request", "seed": 1, "method": "POST", "path": "/"}
    action: Any = {**base, "event": "action", "action": "cut"}
    end: Any = {**base, "event": "response_end", "outcome": "completed"}
    store(request)
    store.frame_json(base, {"n": 1, "size": 3, "t_ms": 0.0}, b'{"n":1}\n')  # type: ignore[typeddict-item]
    store(action)
    store.reset()  # (its end is still told)
    store(end)
    assert seen == ["request r-1", "response_end r-1"]
