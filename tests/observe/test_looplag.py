"""The loop-lag probe (chaosproxy/observe/looplag.py) and the frame log's hot path: the frame
line's shorter way gives the same bytes, the admin store keeps nothing the garbage
collector walks per line."""

from __future__ import annotations

import asyncio
import gc
import io
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from chaosproxy.control.admin import RequestStore
from chaosproxy.control.process import FULL_GC_EVERY
from chaosproxy.control.start import start_proxy
from chaosproxy.core.actions import Send
from chaosproxy.core.events import Event
from chaosproxy.core.frames import Frame
from chaosproxy.core.session import Session
from chaosproxy.observe import logs, looplag
from chaosproxy.observe.logs import FrameLog, RequestLog
from chaosproxy.observe.looplag import LoopLagProbe, bucket_us, percentile_us
from chaosproxy.observe.metrics import Metrics
from chaosproxy.scenario import parse_scenario
from chaosproxy.server.config import Config
from tests.support.repo import REPO

# --------------------------------------------------------------------------- the numbers


@pytest.mark.parametrize(
    ("us", "bucket"),
    [(0, 0), (57, 57), (99, 99), (100, 100), (101, 110), (123, 130), (999, 1000),
     (1000, 1000), (1001, 1100), (4567, 4600), (123456, 130000)],
)  # fmt: skip
def test_buckets_keep_two_significant_digits(us: int, bucket: int) -> None:
    assert bucket_us(us) == bucket


def test_percentiles_are_nearest_rank_over_the_buckets() -> None:
    hist = {10: 90, 500: 9, 20000: 1}
    assert percentile_us(hist, 50) == 10
    assert percentile_us(hist, 90) == 10
    assert percentile_us(hist, 91) == 500
    assert percentile_us(hist, 99) == 500
    assert percentile_us(hist, 99.9) == 20000
    assert percentile_us({}, 50) is None


def test_a_window_reports_what_was_recorded_and_starts_empty() -> None:
    now = [100.0]
    probe = LoopLagProbe(clock=lambda: now[0])
    probe._reset(now[0])
    for lag in [0.00002] * 97 + [0.0005, 0.0042, 0.0301]:
        probe.record(lag)
    probe.record(-0.0001)  # early: counted as no lag
    now[0] = 106.0
    window = probe.window()
    assert window["samples"] == 101
    assert window["p50_ms"] == 0.02
    assert window["p99_ms"] == 4.2
    assert window["p999_ms"] == 30.1  # the bucket (31 ms) never says more than the max
    assert window["max_ms"] == 30.1
    assert window["stalls"] == 2
    assert [lag for _, lag in window["stall_list"]] == [4.2, 30.1]
    assert window["histogram_us"] == {"0": 1, "20": 97, "500": 1, "4200": 1, "31000": 1}
    assert window["seconds"] == 6.0
    empty = probe.window()
    assert empty["samples"] == 0 and empty["p99_ms"] is None and empty["stalls"] == 0


def test_missed_ticks_each_count_but_one_stall_is_listed_once() -> None:
    probe = LoopLagProbe(clock=lambda: 5.0)
    probe._reset(0.0)
    for i, lag in enumerate([0.004, 0.003, 0.002]):
        probe.record(lag, listed=i == 0)
    window = probe.window()
    assert window["samples"] == 3 and window["stalls"] == 3
    assert window["stall_list"] == [(4.996, 4.0)]  # when it began, into the window


# --------------------------------------------------------------------------- live


def _hold(seconds: float) -> None:
    """Keep the loop busy (as a long callback would) for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _read(path: Path) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(path.read_bytes())
    return body


@pytest.mark.parametrize("timerfd", [True, False], ids=["timerfd", "timer"])
async def test_the_probe_sees_a_blocked_loop_and_the_gc_passes(timerfd: bool) -> None:
    probe = LoopLagProbe()
    probe.start(timerfd=timerfd)
    try:
        if timerfd:
            assert probe.source == ("timerfd" if looplag.TimerFd.open(0.001) else "timer")
        await asyncio.sleep(0.05)
        probe.window()  # start from here
        await asyncio.sleep(0.02)
        _hold(0.03)  # the loop is held for 30 ms
        gc.collect()
        await asyncio.sleep(0.02)
        window = probe.window()
    finally:
        probe.stop()
    assert window["max_ms"] >= 25.0
    assert window["stalls"] >= 1
    assert max(lag for _, lag in window["stall_list"]) >= 25.0
    assert window["gc"]["2"]["passes"] >= 1
    if probe.source == "timerfd":
        # every tick of the 30 ms counts: an event arriving then would have waited
        assert window["stalls"] >= 20
        assert window["samples"] >= 50


async def test_a_stopped_probe_leaves_nothing_behind() -> None:
    probe = LoopLagProbe()
    probe.start()
    await asyncio.sleep(0.01)
    probe.stop()
    assert probe._on_gc not in gc.callbacks
    samples = probe.window()["samples"]
    await asyncio.sleep(0.02)
    assert probe.window()["samples"] == 0 and samples >= 1


async def _written(path: Path, write: int, deadline_s: float = 5.0) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            body = _read(path)
            if body["write"] >= write:
                return body
        except (OSError, orjson.JSONDecodeError):
            pass
        await asyncio.sleep(0.01)
    raise AssertionError(f"the probe did not write #{write} to {path}")


async def test_the_proxy_runs_the_probe_when_the_environment_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "lag.json"
    monkeypatch.setenv(looplag.ENV, str(path))
    config = Config(upstream=("http://127.0.0.1:9",), listen=("127.0.0.1", 0), admin=None)
    proxy = await start_proxy(config, log=FrameLog(None))
    try:
        first = await _written(path, 1)  # at once: SIGUSR1 is handled from now on
        assert first["pid"] == os.getpid() and first["source"] in ("timerfd", "timer")
        await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)
        second = await _written(path, 2)
        assert second["samples"] >= 10
        assert second["gc_tracked"] > 0
    finally:
        await proxy.close()
    last = await _written(path, 3)  # and at the stop
    assert last["write"] == 3


async def test_without_the_variable_there_is_no_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(looplag.ENV, raising=False)
    config = Config(upstream=("http://127.0.0.1:9",), listen=("127.0.0.1", 0), admin=None)
    proxy = await start_proxy(config, log=FrameLog(None))
    try:
        assert proxy._lag_probe is None
    finally:
        await proxy.close()


# --------------------------------------------------------------------------- frame lines

BENCH = parse_scenario("name: b\nfaults:\n  - duplicate: {probability: 0}\n", "t")


def _fields(i: int) -> dict[str, Any]:
    session = Session("r-1", scenario=BENCH, seed=1, path="/x")
    session.start(0.0)
    session.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    frame = Frame(raw=b"data: x\n\n", data="x")
    send = Send(frame.raw, (Event(frame, i, frozenset({"delta", "b"})),), 1, ("dup",))
    return session.wrote(send, 0.5)


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The log's clock stands still: two logs of the same lines write the same ``ts``."""
    monkeypatch.setattr(logs.time, "time", lambda: 1764600000.25)


def _log_frame(bound: RequestLog, i: int, way: str) -> None:
    """The line of frame ``i`` (content "x"), logged ``way``: by ``info`` (the log makes
    it from keyword arguments) or by ``frame`` (the fields as they are)."""
    fields = _fields(i) | {"data": "x", "raw": "eA=="}
    if way == "info":
        bound.info("frame", **fields)
    else:
        bound.frame(fields)


@pytest.mark.parametrize("fmt", ["json", "pretty"])
@pytest.mark.parametrize("level", ["frames", "requests", "off"])
def test_a_frame_line_is_the_same_by_either_way(
    fmt: logs.LogFormat, level: logs.LogLevel, frozen_clock: None
) -> None:
    outs, seen = [], []
    for way in ("info", "frame"):
        out = io.BytesIO()
        log = FrameLog(out, fmt=fmt, level=level)
        observed: list[dict[str, Any]] = []
        log.add_observer(observed.append)
        bound = log.for_request(request_id="r-1", scenario="dup")
        _log_frame(bound, 3, way)
        log.flush()
        outs.append(out.getvalue())
        seen.append(observed)
    assert outs[0] == outs[1]
    assert seen[0] == seen[1] and list(seen[0][0]) == list(seen[1][0])
    assert list(seen[0][0]) == [
        "request_id", "scenario", "seq", "offset", "size", "t_ms", "events", "kinds",
        "faults", "data", "raw", "event", "ts",
    ]  # fmt: skip
    assert seen[0][0]["kinds"] == ["b", "delta"]
    assert (outs[0] == b"") == (level != "frames")


@pytest.mark.parametrize("fmt", ["json", "pretty"])
@pytest.mark.parametrize("level", ["frames", "requests", "off"])
@pytest.mark.parametrize("observers", ["hooks", "dicts", "both"])
def test_a_batch_of_frame_lines_is_the_same_as_one_at_a_time(
    fmt: logs.LogFormat, level: logs.LogLevel, observers: str, frozen_clock: None
) -> None:
    """The lines of one upstream read's writes, logged together (one write to the log):
    the same bytes, the same dicts, the same store and metrics as one line at a time."""
    batch = [_fields(3), _fields(4) | {"data": "y", "raw": "eQ=="}, _fields(5)]
    outs, seen, kept, counted = [], [], [], []
    for way in ("one", "batch"):
        out = io.BytesIO()
        log = FrameLog(out, fmt=fmt, level=level)
        observed: list[dict[str, Any]] = []
        store, metrics = RequestStore(), Metrics()
        if observers in ("dicts", "both"):
            log.add_observer(observed.append)
        if observers in ("hooks", "both"):
            log.add_observer(store)
            log.add_observer(metrics)
        bound = log.for_request(request_id="r-1", scenario="dup")
        store({"event": "request", "request_id": "r-1", "scenario": "dup"})
        if way == "one":
            for fields in batch:
                bound.frame(fields)
        else:
            bound.frames(batch)
        log.flush()
        outs.append(out.getvalue())
        seen.append(observed)
        record = store.get("r-1")
        assert record is not None
        kept.append((record.frames, record.sent_frames, record.sent_bytes))
        counted.append(metrics.render())
    assert outs[0] == outs[1]
    assert seen[0] == seen[1]
    assert kept[0] == kept[1] and counted[0] == counted[1]
    if observers != "dicts":
        assert kept[0][1] == 3


def test_the_admin_store_keeps_frame_lines_as_untracked_json() -> None:
    store = RequestStore()
    store({"event": "request", "request_id": "r-1", "scenario": "dup"})
    line = {"request_id": "r-1", "scenario": "dup", **_fields(1), "event": "frame", "ts": "t"}
    store(line)
    store({"request_id": "r-1", "action": "cut", "how": "reset", "event": "action"})
    record = store.get("r-1")
    assert record is not None
    assert all(isinstance(f, bytes) and not gc.is_tracked(f) for f in record.frames)
    detail = record.detail()
    assert detail["frames"] == [{k: v for k, v in line.items() if k not in ("event",
        "request_id", "scenario")}]  # fmt: skip
    assert detail["actions"] == [{"action": "cut", "how": "reset"}]


# --------------------------------------------------------------------------- serve


async def test_serve_settles_the_gc_and_its_probe_answers_sigusr1(tmp_path: Path) -> None:
    """``chaosproxy serve`` with the variable: the probe writes at once, on SIGUSR1 and
    at the stop; start-up's objects are frozen out of the collector and a full pass
    comes at most every FULL_GC_EVERY second-generation ones."""
    path = tmp_path / "lag.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "chaosproxy", "serve", "--listen", "127.0.0.1:0",
        "--upstream", "http://127.0.0.1:9", "--admin", "off", "--log", str(tmp_path / "f"),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), looplag.ENV: str(path)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        first = await _written(path, 1, deadline_s=20.0)
        assert first["pid"] == proc.pid
        await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        second = await _written(path, 2)
        assert second["samples"] >= 10
        assert second["gc_frozen"] > 10_000
        assert second["gc_thresholds"][2] == FULL_GC_EVERY
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert _read(path)["write"] == 3


def test_a_request_log_is_still_a_structlog_logger_for_other_lines() -> None:
    out = io.BytesIO()
    log = FrameLog(out)
    bound = log.for_request(request_id="r-1", scenario=None).bind(scenario="dup")
    bound.msg("action", action="cut", fault="cut")  # structlog's own method
    bound.frame({"seq": 0, "offset": 0, "size": 1, "t_ms": 0.0})
    log.flush()
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["event"], x["request_id"], x["scenario"]) for x in lines] == [
        ("action", "r-1", "dup"), ("frame", "r-1", "dup")
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", ["json", "pretty"])
@pytest.mark.parametrize("level", ["frames", "requests", "off"])
@pytest.mark.parametrize("max_content", [0, 1000])
@pytest.mark.parametrize("only_hooks", [False, True], ids=["with-a-dict-observer", "only-hooks"])
def test_the_admin_store_keeps_the_same_text_either_way(
    fmt: logs.LogFormat,
    level: logs.LogLevel,
    max_content: int,
    only_hooks: bool,
    frozen_clock: None,
) -> None:
    # bound.frame hands the store the log's own JSON text (RequestStore.frame_json);
    # bound.info("frame", ...) calls the store with the dict, which it dumps itself.
    # With only hook observers (the store, the metrics: as serve runs), bound.frame
    # makes no dict of the line at all.
    kept, written = [], []
    for way in ("info", "frame"):
        out = io.BytesIO()
        log = FrameLog(out, fmt=fmt, level=level)
        store = RequestStore(max_content=max_content)
        metrics = Metrics()
        observed: list[dict[str, Any]] = []
        if not only_hooks:
            log.add_observer(observed.append)
        log.add_observer(store)
        log.add_observer(metrics)
        bound = log.for_request(request_id="r-1", scenario="dup")
        bound.info("request", seed=1, method="POST", path="/v1/chat/completions")
        for i in (1, 2):
            _log_frame(bound, i, way)
        record = store.get("r-1")
        assert record is not None
        assert (b'"content_omitted":true' in record.frames[0]) == (not max_content)
        if not only_hooks:
            frames = [f for f in observed if f["event"] == "frame"]
            if max_content:
                assert record.frames == [orjson.dumps(f) + b"\n" for f in frames]
        size = _fields(1)["size"]
        assert (record.sent_frames, record.sent_bytes) == (2, 2 * size)
        assert {k: [v.frames, v.bytes] for k, v in metrics._sent.items()} == {"dup": [2, 2 * size]}
        log.flush()
        kept.append(record.frames)
        written.append(out.getvalue())
    assert kept[0] == kept[1]
    assert written[0] == written[1]
