"""chaosproxy performance benchmark: one command, four targets, same run, same machine.

    python benchmarks/run.py                 # full run, a few minutes
    python benchmarks/run.py --smoke         # seconds: checks the harness works (CI)
    python benchmarks/run.py --json out.json # results also as JSON (default: results/)

Targets (each its own process; the load generator is this process):

- ``direct``      the SSE upstream itself, no proxy
- ``passthrough`` ``python -m chaosproxy serve --upstream URL --log FILE`` (no scenario)
- ``framed``      the same with a default scenario ``duplicate: {probability: 0}``: every
                  event is framed, run through a fault and logged, nothing changes
- ``nginx``       nginx, ``proxy_buffering off``, when installed (skipped otherwise)

Phases, per target: ``ttfb`` (sequential fresh connections, one event each),
``throughput`` (one stream, upstream as fast as it can, ~1 KB events), ``latency``
(200 streams x 50 events/s, latency = receive time - the event's send time),
``fanout`` (2,000 streams x 10 events/s, all connecting at once: failures, completion
time against the paced duration, proxy peak RSS). docs/benchmark.md explains every
number and the targets in the pass/fail column.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import math
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen import StreamResult, percentile, run_many, run_stream
from targets import (
    CLK_TCK,
    HOST,
    Process,
    Target,
    TargetError,
    cpu_seconds,
    cpu_times,
    loop_lag_window,
    peak_rss_mb,
    reset_peak_rss,
    rss_mb,
    socket_options,
    start_chaosproxy,
    start_nginx,
    start_upstream,
    tcp_ext_counters,
    wait_listening,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ALL_TARGETS = ("direct", "passthrough", "framed", "nginx")
ALL_PHASES = ("ttfb", "throughput", "latency", "fanout", "colocated")


@dataclass
class Scale:
    """How much load each phase makes."""

    throughput_events: int = 50_000
    event_size: int = 1024
    repeats: int = 5
    latency_streams: int = 200
    latency_rate: float = 50.0
    latency_seconds: float = 6.0
    fanout_streams: int = 2000
    fanout_rate: float = 10.0
    fanout_seconds: float = 8.0
    paced_event_size: int = 256
    ttfb_requests: int = 300
    #: The colocated phase's steps: streams of latency_rate events/s, one after another.
    colocated_streams: str = "200,400"


SMOKE = Scale(
    throughput_events=2000,
    repeats=1,
    latency_streams=20,
    latency_seconds=0.4,
    fanout_streams=100,
    fanout_seconds=0.5,
    ttfb_requests=20,
    colocated_streams="20",
)

Check = tuple[str, str, float, str, str]


def _both(metric: str, limit: float, how: str, description: str) -> list[Check]:
    """One check, the same for both targets."""
    return [(target, metric, limit, how, description) for target in ("passthrough", "framed")]


# The targets in the pass/fail column: (target, metric, limit, how, description).
CHECKS: list[Check] = [
    ("passthrough", "throughput_ratio", 0.9, ">=", "throughput >= 0.9x direct"),
    ("framed", "throughput_ratio", 0.5, ">=", "throughput >= 0.5x direct"),
    ("passthrough", "added_p99_ms", 2.0, "<=", "p99 at 200 streams <= direct + 2 ms"),
    ("framed", "added_p99_ms", 3.0, "<=", "p99 at 200 streams <= direct + 3 ms"),
    *_both("fanout_failures", 0, "<=", "2,000 streams: no failures"),
    *_both("fanout_completion_ratio", 1.2, "<=", "2,000 streams: <= 1.2x paced"),
    *_both("fanout_peak_rss_mb", 200, "<=", "2,000 streams: peak RSS <= 200 MB"),
    ("passthrough", "added_ttfb_p50_ms", 1.0, "<=", "TTFB p50 <= direct + 1 ms"),
    ("framed", "cpu_200_x_nginx", 1.6, "<=", "CPU per paced event <= 1.6x nginx's"),
    ("framed", "added_ttfb_p50_ms", 1.0, "<=", "TTFB p50 <= direct + 1 ms"),
]


# ---------------------------------------------------------------------------- helpers


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit; children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_gib = round(int(first.split()[1]) / 1024 / 1024, 1)
    import aiohttp

    versions = {"python": platform.python_version(), "aiohttp": aiohttp.__version__}
    with contextlib.suppress(ImportError):
        import uvloop

        versions["uvloop"] = str(getattr(uvloop, "__version__", "?"))
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        **versions,
    }


def source_state() -> dict[str, Any]:
    """Which chaosproxy the proxies run: its path, commit and uncommitted files."""
    import chaosproxy

    root = Path(chaosproxy.__file__).resolve().parent.parent
    state: dict[str, Any] = {"path": str(root)}

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *argv], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    state["commit"] = git("rev-parse", "--short", "HEAD") or None
    dirty = git("status", "--porcelain", "--", "chaosproxy")
    state["dirty"] = [line.split(maxsplit=1)[-1] for line in dirty.splitlines()]
    return state


def ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine so far, from /proc/stat."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])
    return total - idle, total


def machine_busy_pct(seconds: float) -> float:
    b0, t0 = machine_jiffies()
    time.sleep(seconds)
    b1, t1 = machine_jiffies()
    return 100.0 * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


async def wait_quiet(limit_s: float, below_pct: float) -> dict[str, float]:
    """Wait (at most ``limit_s``) until the machine is under ``below_pct`` busy, so a
    measurement does not share the cores with someone else's work. Returns what it saw."""
    waited = 0.0
    busy = await asyncio.to_thread(machine_busy_pct, 0.5)
    while busy >= below_pct and waited < limit_s:
        busy = await asyncio.to_thread(machine_busy_pct, 1.0)
        waited += 1.0
    return {"busy_before_pct": round(busy, 1), "waited_s": waited}


@contextlib.contextmanager
def accounting(target: Target, upstream: Process, out: dict[str, Any]) -> Iterator[None]:
    """CPU seconds of the target, the upstream and the load generator over a phase, and
    how busy the whole machine was (``others_pct``: what none of them used, in % of
    all cores; kernel network time not charged to a process counts there too)."""
    pids = target.measured_pids()
    t0, c0, u0, g0 = time.perf_counter(), cpu_seconds(pids), cpu_seconds([upstream.pid]), cpu_self()
    s0 = cpu_times(pids)[1]
    mb0, mt0 = machine_jiffies()
    yield
    wall = time.perf_counter() - t0
    mb1, mt1 = machine_jiffies()
    out["wall_s"] = round(wall, 3)
    ours = 0.0
    if pids:
        out["proxy_cpu_s"] = round(cpu_seconds(pids) - c0, 3)
        out["proxy_sys_s"] = round(cpu_times(pids)[1] - s0, 3)
        out["proxy_cpu_pct"] = round(100 * out["proxy_cpu_s"] / wall, 1) if wall else None
        ours += out["proxy_cpu_s"]
    out["upstream_cpu_s"] = round(cpu_seconds([upstream.pid]) - u0, 3)
    out["loadgen_cpu_s"] = round(cpu_self() - g0, 3)
    ours += out["upstream_cpu_s"] + out["loadgen_cpu_s"]
    if mt1 > mt0:
        cores = os.cpu_count() or 1
        busy_s = (mb1 - mb0) / CLK_TCK
        out["machine_busy_pct"] = round(100.0 * (mb1 - mb0) / (mt1 - mt0), 1)
        out["others_pct"] = round(max(0.0, 100.0 * (busy_s - ours) / (wall * cores)), 1)


def errors_sample(results: list[StreamResult], limit: int = 3) -> list[str]:
    counts = Counter(r.error or "?" for r in results if not r.ok)
    return [f"{n}x {e}" for e, n in counts.most_common(limit)]


def stream_path(n: int, rate: float, size: int, offset_ms: float = 0.0) -> str:
    path = f"/stream?n={n}&rate={rate:g}&size={size}"
    return path + (f"&offset={offset_ms:.3f}" if offset_ms else "")


# ---------------------------------------------------------------------------- phases


async def phase_warmup(target: Target) -> None:
    for _ in range(20):
        await run_stream(HOST, target.port, stream_path(5, 0, 256), limit_s=10)


async def phase_ttfb(target: Target, scale: Scale) -> dict[str, Any]:
    """Sequential fresh connections, one event each: time to the first body byte."""
    results = []
    for _ in range(scale.ttfb_requests):
        results.append(
            await run_stream(
                HOST,
                target.port,
                stream_path(1, 0, scale.paced_event_size),
                limit_s=10,
                expect_events=1,
            )
        )
    ok = [r for r in results if r.ok]
    ttfb = sorted(r.ttfb_ns or 0 for r in ok)
    conn = sorted(r.connect_ns or 0 for r in ok)
    return {
        "requests": len(results),
        "failures": len(results) - len(ok),
        "errors": errors_sample(results),
        "ttfb_p50_ms": ms(percentile(ttfb, 50)),
        "ttfb_p90_ms": ms(percentile(ttfb, 90)),
        "ttfb_p99_ms": ms(percentile(ttfb, 99)),
        "connect_p50_ms": ms(percentile(conn, 50)),
    }


async def phase_throughput(target: Target, scale: Scale) -> dict[str, Any]:
    """One run of one stream, the upstream writing ~1 KB events as fast as the socket
    takes them. The bench loop repeats it ``scale.repeats`` times, interleaving the
    targets (direct, passthrough, …, direct, …) so slow drifts in the machine hit all
    of them alike, and :func:`combine_throughput` takes the median."""
    n = scale.throughput_events
    r = await run_stream(
        HOST,
        target.port,
        stream_path(n, 0, scale.event_size),
        limit_s=max(20.0, n / 2000.0),
        expect_events=n,
    )
    if not r.ok:
        return {"failed": r}
    secs = (r.t_end - r.t_start) / 1e9
    return {"seconds": secs, "events_per_s": n / secs, "mb_per_s": r.body_bytes / secs / 1e6}


def combine_throughput(scale: Scale, runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [x for x in runs if "failed" not in x]
    failures = [x["failed"] for x in runs if "failed" in x]
    out: dict[str, Any] = {
        "events": scale.throughput_events,
        "event_bytes": scale.event_size,
        "repeats": len(runs),
        "failures": len(failures),
        "errors": errors_sample(failures),
        "runs": [
            {
                "seconds": round(x["seconds"], 4),
                "events_per_s": round(x["events_per_s"], 1),
                "mb_per_s": round(x["mb_per_s"], 2),
            }
            for x in good
        ],
    }
    if good:
        out["events_per_s"] = round(statistics.median(x["events_per_s"] for x in good), 1)
        out["mb_per_s"] = round(statistics.median(x["mb_per_s"] for x in good), 2)
        out["best_events_per_s"] = round(max(x["events_per_s"] for x in good), 1)
    return out


def add_accounts(into: dict[str, Any], more: dict[str, Any]) -> None:
    """Sum the CPU and wall seconds of repeated measurements; keep the worst load."""
    for key, value in more.items():
        if key.endswith("_s") and isinstance(value, int | float):
            into[key] = round(into.get(key, 0.0) + value, 3)
        elif key in ("machine_busy_pct", "others_pct", "busy_before_pct"):
            into[key] = max(into.get(key, 0.0), value)
        elif key == "loop_lag":
            into[key] = value
    if into.get("proxy_cpu_s") is not None and into.get("wall_s"):
        into["proxy_cpu_pct"] = round(100 * into["proxy_cpu_s"] / into["wall_s"], 1)


async def phase_paced(
    target: Target, streams: int, rate: float, seconds: float, size: int
) -> dict[str, Any]:
    """``streams`` concurrent streams of ``rate`` events/s, all connecting at once.

    Each stream's schedule is offset by k/(streams*rate) so the events of all streams
    are spread evenly over time (an LLM gateway's streams are not in lock-step)."""
    n = max(1, round(rate * seconds))
    spread_ms = 1000.0 / rate / streams
    paths = [stream_path(n, rate, size, k * spread_ms) for k in range(streams)]
    paced = n / rate  # the last event of the last stream is due at about this time
    timeout = paced * 2 + 20
    started = time.perf_counter_ns()
    results = await run_many(
        HOST, target.port, paths, latency=True, limit_s=timeout, expect_events=n
    )
    finished = max(r.t_end for r in results)
    ok = [r for r in results if r.ok]
    lat = sorted(v for r in results for v in r.latencies)
    # Diagnostic, not a target: the same without each stream's first second, when all
    # the streams are still connecting and queueing behind each other's set-up.
    steady = sorted(v for r in results for v in r.latencies[max(1, round(rate)) :])
    conn = sorted(r.connect_ns or 0 for r in results if r.connect_ns is not None)
    ttfb = sorted(r.ttfb_ns or 0 for r in results if r.ttfb_ns is not None)
    completion = (finished - started) / 1e9
    return {
        "streams": streams,
        "rate": rate,
        "events_per_stream": n,
        "event_bytes": size,
        "failures": len(results) - len(ok),
        "errors": errors_sample(results),
        "events_received": sum(r.events for r in results),
        "events_expected": n * streams,
        "latency_p50_ms": ms(percentile(lat, 50)),
        "latency_p90_ms": ms(percentile(lat, 90)),
        "latency_p99_ms": ms(percentile(lat, 99)),
        "latency_p999_ms": ms(percentile(lat, 99.9)),
        "latency_max_ms": ms(lat[-1]) if lat else None,
        "steady_latency_p99_ms": ms(percentile(steady, 99)),
        "paced_s": round(paced, 3),
        "completion_s": round(completion, 3),
        "completion_ratio": round(completion / paced, 3),
        "connect_p50_ms": ms(percentile(conn, 50)),
        "connect_p99_ms": ms(percentile(conn, 99)),
        "connect_max_ms": ms(conn[-1]) if conn else None,
        "ttfb_p50_ms": ms(percentile(ttfb, 50)),
        "ttfb_p99_ms": ms(percentile(ttfb, 99)),
    }


async def phase_latency(target: Target, scale: Scale) -> dict[str, Any]:
    return await phase_paced(
        target,
        scale.latency_streams,
        scale.latency_rate,
        scale.latency_seconds,
        scale.paced_event_size,
    )


async def phase_fanout(target: Target, scale: Scale) -> dict[str, Any]:
    pids = target.measured_pids()
    before = rss_mb(pids)
    hwm_reset = reset_peak_rss(pids) if pids else False
    overflows = tcp_ext_counters()
    result_task = asyncio.ensure_future(
        phase_paced(
            target,
            scale.fanout_streams,
            scale.fanout_rate,
            scale.fanout_seconds,
            scale.paced_event_size,
        )
    )
    sockets: dict[str, dict[str, int]] = {}
    if pids:
        # Halfway through, when every stream is connected: how are the sockets set up?
        await asyncio.sleep(scale.fanout_seconds / 2)
        for pid in pids:  # nginx: the master has only the listener, workers the rest
            seen = await asyncio.to_thread(socket_options, pid, target.port) or {}
            for side, counts in seen.items():
                into = sockets.setdefault(side, dict.fromkeys(counts, 0))
                for key, n in counts.items():
                    into[key] += n
    out = await result_task
    after = tcp_ext_counters()
    # Connections the kernel dropped because an accept queue was full (any listener).
    out["listen_overflows"] = {k: after[k] - v for k, v in overflows.items() if k in after}
    if pids:
        out["rss_before_mb"] = before
        out["peak_rss_mb"] = peak_rss_mb(pids)
        out["peak_rss_since_reset"] = hwm_reset
    out["socket_options"] = sockets
    return out


def shared_cores() -> list[int]:
    """The two CPUs the colocated phase pins its processes to: the first two this
    process may run on (all of them on a smaller machine)."""
    return sorted(os.sched_getaffinity(0))[:2]


def pin(pids: list[int], cpus: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, cpus)


async def colocated_step(
    target: Target, streams: int, scale: Scale, pids: list[int]
) -> dict[str, Any]:
    """One step of the colocated phase: the load generator as a process of its own,
    pinned with the proxy and the upstream to the same two cores; the CPU each of them
    used over the step, as a share of the two cores."""
    cpus = set(shared_cores())
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "loadgen.py"),
        "--wait",
        "--port",
        str(target.port),
        "--streams",
        str(streams),
        "--rate",
        f"{scale.latency_rate:g}",
        "--seconds",
        f"{scale.latency_seconds:g}",
        "--size",
        str(scale.paced_event_size),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        ready = await asyncio.wait_for(proc.stdout.readline(), 60)
        if ready.strip() != b"READY":
            raise TargetError(f"the load generator did not start: {ready!r}")
        pin([proc.pid, *pids], cpus)
        user0, sys0 = cpu_times(target.measured_pids())
        up0 = cpu_seconds(pids[-1:])
        mb0, mt0 = machine_jiffies()
        proc.stdin.write(b"GO\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), scale.latency_seconds * 2 + 60)
        user1, sys1 = cpu_times(target.measured_pids())
        up1 = cpu_seconds(pids[-1:])
        mb1, mt1 = machine_jiffies()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await proc.wait()
    out: dict[str, Any] = json.loads(line)
    wall = out["wall_s"]
    capacity = wall * len(cpus)  # CPU seconds the two cores had
    loadgen = out["cpu_user_s"] + out["cpu_sys_s"]
    proxy = (user1 - user0) + (sys1 - sys0)
    upstream = up1 - up0
    out["cores"] = len(cpus)
    out["proxy_user_s"] = round(user1 - user0, 3)
    out["proxy_sys_s"] = round(sys1 - sys0, 3)
    shares = {"proxy": proxy, "upstream": upstream, "loadgen": loadgen}
    if not target.measured_pids():
        shares.pop("proxy")
    for name, seconds in shares.items():
        out[f"{name}_share_pct"] = round(100 * seconds / capacity, 1) if capacity else None
    if mt1 > mt0:
        # Everything else on the whole machine (other cores too), in % of the two.
        busy_s = (mb1 - mb0) / CLK_TCK
        rest = busy_s - sum(shares.values())
        out["others_share_pct"] = round(max(0.0, 100 * rest / capacity), 1) if capacity else None
    if out["events_received"]:
        out["proxy_cpu_us_per_event"] = round(proxy * 1e6 / out["events_received"], 2)
    return out


async def phase_colocated(target: Target, scale: Scale) -> dict[str, Any]:
    """p99 with the load generator as a separate process, proxy + upstream + load
    generator pinned to the same two cores (``--colocated-streams``: one step each, at
    ``--latency-rate`` events/s per stream), and where the CPU goes as the p99 grows."""
    cpus = set(shared_cores())
    upstream_pid = int(target.extra["upstream_pid"])
    pids = [*target.measured_pids(), upstream_pid]
    before = {pid: os.sched_getaffinity(pid) for pid in pids}
    steps = []
    try:
        for streams in (int(x) for x in scale.colocated_streams.split(",") if x.strip()):
            steps.append({"streams": streams, **await colocated_step(target, streams, scale, pids)})
    finally:
        for pid, mask in before.items():
            pin([pid], mask)
    head = steps[0] if steps else {}
    return {
        "cpus": sorted(cpus),
        "steps": steps,
        "streams": head.get("streams"),
        "failures": head.get("failures"),
        "errors": head.get("errors", []),
        "latency_p99_ms": head.get("latency_p99_ms"),
        "proxy_share_pct": head.get("proxy_share_pct"),
    }


#: Phases during which the proxy's loop-lag probe is read (chaosproxy/observe/looplag.py).
LAG_PHASES = ("latency", "fanout")


def summarise_lag(window: dict[str, Any]) -> dict[str, Any]:
    """The probe's window as the JSON keeps it: the numbers, the histogram, the GC
    passes, and the 200 longest stalls and GC passes over 1 ms, with their times."""
    keep = (
        "seconds",
        "samples",
        "p50_ms",
        "p99_ms",
        "p999_ms",
        "max_ms",
        "stalls",
        "stall_total_ms",
        "histogram_us",
        "gc",
        "gc_tracked",
        "gc_frozen",
        "gc_thresholds",
    )
    out = {k: window.get(k) for k in keep}
    # the 200 longest, in time order: [seconds into the phase, ms]
    longest = sorted(window.get("stall_list", []), key=lambda s: -s[1])[:200]
    out["stall_list"] = sorted(longest)
    out["gc_stalls"] = sorted(sorted(window.get("gc_stalls", []), key=lambda s: -s[2])[:200])
    return out


PHASES: dict[str, Callable[[Target, Scale], Coroutine[Any, Any, dict[str, Any]]]] = {
    "ttfb": phase_ttfb,
    "throughput": phase_throughput,
    "latency": phase_latency,
    "fanout": phase_fanout,
    "colocated": phase_colocated,
}


# ---------------------------------------------------------------------------- profiling


class Profiler:
    """py-spy attached to a target for one phase (``--profile DIR``)."""

    def __init__(self, outdir: Path, fmt: str, rate: int, *, nonblocking: bool) -> None:
        self.outdir = outdir
        self.fmt = fmt
        self.rate = rate
        #: Blocking (the default) pauses the target for each sample: exact stacks, a
        #: little overhead. Non-blocking does not pause it, and some stacks come out torn.
        self.nonblocking = nonblocking
        self.binary = shutil.which("py-spy")
        outdir.mkdir(parents=True, exist_ok=True)
        #: The raw profiles recorded per (target, phase): one per round (the throughput
        #: phase has several), summarised together by :meth:`report`.
        self.raw: dict[tuple[str, str], list[Path]] = {}

    @contextlib.contextmanager
    def attach(self, target: Target, phase: str) -> Iterator[None]:
        if (
            self.binary is None
            or target.process is None
            or not target.name.startswith(("passthrough", "framed"))
        ):
            yield
            return
        ext = {"raw": "txt", "flamegraph": "svg", "speedscope": "json"}[self.fmt]
        rounds = self.raw.setdefault((target.name, phase), [])
        n = f"-{len(rounds) + 1}" if rounds else ""  # a later round of the same phase
        out = self.outdir / f"{target.name}-{phase}{n}.{ext}"
        proc = subprocess.Popen(
            [
                self.binary,
                "record",
                "--pid",
                str(target.process.pid),
                "--rate",
                str(self.rate),
                "--format",
                self.fmt,
                "--output",
                str(out),
                *(["--nonblocking"] if self.nonblocking else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(0.5)  # let it attach
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if proc.returncode not in (0, -signal.SIGINT) and not out.exists():
                print(f"  py-spy failed: {err.decode(errors='replace')[-300:]}", file=sys.stderr)
            elif self.fmt == "raw" and out.exists():
                rounds.append(out)

    def report(self) -> None:
        """Print and write (``DIR/<target>-<phase>.top.txt``) one summary per target
        and phase, over all its rounds."""
        for (target, phase), paths in self.raw.items():
            summary = summarise_profile(*paths)
            (self.outdir / f"{target}-{phase}.top.txt").write_text(summary)
            where = ", ".join(p.name for p in paths)
            print(f"\n--- profile {target}/{phase} ({self.outdir}: {where})\n{summary}")


#: Where a sample's time goes: the first category whose test holds, in this order.
#: Each test sees the sample's stack as function names (``Class.method``), root first.
#: Work done for a write (the frame line) counts as the log even though the pump's
#: ``_send`` calls it; only time spent in ``_send`` itself, which is its
#: ``transport.write`` (the kernel's ``send()``, running the client's TCP receive
#: inline on loopback) and the chunk's formatting, counts as the write.
PROFILE_CATEGORIES: list[tuple[str, Callable[[list[str]], bool]]] = [
    (
        "frame log (Exchange.log_frame: Session.wrote, the line, observers, file)",
        lambda st: "Exchange.log_frame" in st or "RequestLog.info" in st,
    ),
    (
        "request set-up and end (accept, head, upstream connect, response_end)",
        lambda st: any(
            f in st
            for f in (
                "Exchange._end",
                "Session.response_head",
                "RequestHandler.connection_made",
                "RequestHandler.data_received",
                "StreamResponse.prepare",
                "_attempt",
                "UpstreamPool.request",
            )
        ),
    ),
    (
        "core: framer, profile, faults, integrity (Session.feed/poll/body_end)",
        lambda st: any(
            f in st for f in ("Session.feed", "Session.poll", "Session.body_end", "Pipeline.feed")
        ),
    ),
    (
        "the write to the client (BodyPump._send itself: transport.write, the kernel's send)",
        lambda st: st[-1] in ("BodyPump._send", "StreamWriter._write"),
    ),
    (
        "upstream read (the upstream connection's HTTP parser, httptools)",
        lambda st: st[-1] in ("Connection.data_received", "UpstreamResponse._body"),
    ),
    ("loop-lag probe", lambda st: any(f.startswith(("LoopLagProbe", "TimerFd")) for f in st)),
    (
        "event loop (uvloop in C: epoll, accept, recv, callbacks)",
        lambda st: st[-1] in ("Runner.run", "run"),
    ),
    ("pump (BodyPump, its flow control and timers)", lambda st: st[-1].startswith("BodyPump.")),
]


def _category(stack: list[str]) -> str:
    """``stack``: function names (``Class.method``), root first."""
    for name, holds in PROFILE_CATEGORIES:
        if holds(stack):
            return name
    return "the rest"


def summarise_profile(*paths: Path, top: int = 25) -> str:
    """Categories, then self and inclusive shares per function, from py-spy's
    collapsed stacks (``--format raw``), over all of ``paths``."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    total = 0
    for line in (x for path in paths for x in path.read_text().splitlines()):
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        raw = stack.split(";")
        cats[_category([f.split(" (", 1)[0] for f in raw])] += n
        frames = [f.rsplit(":", 1)[0] + ")" if ":" in f else f for f in raw]
        frames = [f.replace("))", ")") for f in frames]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return "no samples"
    lines = [f"{total} samples (on CPU only)", "share  where the time goes"]
    lines += [f"{100 * c / total:5.1f}  {f}" for f, c in cats.most_common()]
    lines += ["", "self%  function"]
    lines += [f"{100 * c / total:5.1f}  {f}" for f, c in own.most_common(top)]
    lines += ["", "incl%  function"]
    lines += [f"{100 * c / total:5.1f}  {f}" for f, c in incl.most_common(top)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- report


def derive(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Ratios and differences against ``direct`` per target."""

    def get(t: str, phase: str, key: str) -> float | None:
        v = results.get(t, {}).get(phase, {}).get(key)
        return float(v) if isinstance(v, int | float) and not math.isnan(v) else None

    def minus(a: float | None, b: float | None) -> float | None:
        return round(a - b, 3) if a is not None and b is not None else None

    def per_event_us(cpu: float | None, events: float | None) -> float | None:
        return round(cpu * 1e6 / events, 2) if cpu is not None and events else None

    out: dict[str, dict[str, float | None]] = {}
    for name in results:
        d: dict[str, float | None] = {}
        tp, tp_direct = (
            get(name, "throughput", "events_per_s"),
            get("direct", "throughput", "events_per_s"),
        )
        d["throughput_ratio"] = round(tp / tp_direct, 3) if tp and tp_direct else None
        for key, phase, metric in (
            ("added_p99_ms", "latency", "latency_p99_ms"),
            ("added_p50_ms", "latency", "latency_p50_ms"),
            ("added_ttfb_p50_ms", "ttfb", "ttfb_p50_ms"),
        ):
            d[key] = minus(get(name, phase, metric), get("direct", phase, metric))
        d["fanout_failures"] = get(name, "fanout", "failures")
        d["fanout_completion_ratio"] = get(name, "fanout", "completion_ratio")
        d["fanout_peak_rss_mb"] = get(name, "fanout", "peak_rss_mb")
        d["cpu_us_per_event_200"] = per_event_us(
            get(name, "latency", "proxy_cpu_s"), get(name, "latency", "events_received")
        )
        d["cpu_us_per_event_2000"] = per_event_us(
            get(name, "fanout", "proxy_cpu_s"), get(name, "fanout", "events_received")
        )
        events = get(name, "throughput", "events")
        repeats = get(name, "throughput", "repeats") or 1.0
        d["cpu_us_per_event_saturated"] = per_event_us(
            get(name, "throughput", "proxy_cpu_s"), events * repeats if events else None
        )
        # The kernel's share (system time: the syscalls) of the same, per event.
        d["sys_us_per_event_saturated"] = per_event_us(
            get(name, "throughput", "proxy_sys_s"), events * repeats if events else None
        )
        d["sys_us_per_event_200"] = per_event_us(
            get(name, "latency", "proxy_sys_s"), get(name, "latency", "events_received")
        )
        d["sys_us_per_event_2000"] = per_event_us(
            get(name, "fanout", "proxy_sys_s"), get(name, "fanout", "events_received")
        )
        others = [
            float(v["others_pct"])
            for v in results.get(name, {}).values()
            if isinstance(v, dict) and v.get("others_pct") is not None
        ]
        d["others_max_pct"] = max(others) if others else None
        lag = results.get(name, {}).get("latency", {}).get("loop_lag") or {}
        for key in ("p99_ms", "p999_ms", "max_ms", "stalls"):
            value = lag.get(key)
            d["loop_lag_" + key] = float(value) if isinstance(value, int | float) else None
        colocated = results.get(name, {}).get("colocated", {})
        first = (colocated.get("steps") or [{}])[0]
        d["colocated_p99_ms"] = first.get("latency_p99_ms")
        d["colocated_proxy_share_pct"] = first.get("proxy_share_pct")
        out[name] = d
    for d in out.values():
        d["colocated_added_p99_ms"] = minus(
            d.get("colocated_p99_ms"), out.get("direct", {}).get("colocated_p99_ms")
        )
    nginx = out.get("nginx", {})
    for d in out.values():
        total, kernel = d.get("cpu_us_per_event_200"), d.get("sys_us_per_event_200")
        d["user_us_per_event_200"] = round(total - kernel, 2) if total and kernel else None
    for d in out.values():
        for key, ratio in (
            ("cpu_us_per_event_200", "cpu_200_x_nginx"),
            ("user_us_per_event_200", "user_200_x_nginx"),
            ("sys_us_per_event_200", "sys_200_x_nginx"),
        ):
            mine, theirs = d.get(key), nginx.get(key)
            d[ratio] = round(mine / theirs, 2) if mine and theirs else None
    return out


def evaluate(derived: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    checks = []
    for target, metric, limit, how, text in CHECKS:
        if target not in derived:
            continue
        value = derived[target].get(metric)
        passed = None if value is None else (value >= limit if how == ">=" else value <= limit)
        checks.append(
            {
                "target": target,
                "metric": metric,
                "value": value,
                "limit": limit,
                "op": how,
                "check": text,
                "pass": passed,
            }
        )
    return checks


def fmt(v: Any, spec: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec) if spec else str(v)


def print_loop_lag(res: dict[str, dict[str, Any]]) -> None:
    """The proxy's event-loop lag per phase (chaosproxy targets, from its probe)."""
    rows = [
        (name, phase, lag)
        for name, phases in res.items()
        for phase in LAG_PHASES
        if isinstance(phases.get(phase), dict) and (lag := phases[phase].get("loop_lag"))
    ]
    if not rows:
        return
    head = (
        f"{'loop lag':<12} {'phase':<8} {'samples':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'p99.9 ms':>8} {'max ms':>7} {'>1 ms':>6} | {'gc passes':>9} {'gc ms':>7} "
        f"{'gc max':>7}"
    )
    print("\n" + head)
    print("-" * len(head))
    for name, phase, lag in rows:
        gcs = (lag.get("gc") or {}).values()
        print(
            f"{name:<12} {phase:<8} {fmt(lag.get('samples')):>7} "
            f"{fmt(lag.get('p50_ms'), '.3f'):>7} {fmt(lag.get('p99_ms'), '.2f'):>7} "
            f"{fmt(lag.get('p999_ms'), '.2f'):>8} {fmt(lag.get('max_ms'), '.2f'):>7} "
            f"{fmt(lag.get('stalls')):>6} | {sum(g['passes'] for g in gcs):>9} "
            f"{sum(g['total_ms'] for g in gcs):>7.1f} "
            f"{max((g['max_ms'] for g in gcs), default=0.0):>7.2f}"
        )


def print_cpu_split(der: dict[str, dict[str, Any]]) -> None:
    """The proxies' CPU per event, split into user (the process's own code) and system
    (the kernel: its syscalls), per phase."""
    rows = [(n, d) for n, d in der.items() if d.get("cpu_us_per_event_200") is not None]
    if not rows:
        return
    head = f"{'cpu us/ev':<12} " + " ".join(
        f"{phase + ' user/sys':>20}" for phase in ("one stream", "200 streams", "2,000 streams")
    )
    print("\n" + head)
    print("-" * len(head))
    for name, d in rows:
        cells = []
        for key in ("saturated", "200", "2000"):
            total, kernel = d.get(f"cpu_us_per_event_{key}"), d.get(f"sys_us_per_event_{key}")
            cell = "-"
            if total is not None and kernel is not None:
                cell = f"{total - kernel:.1f} / {kernel:.1f}"
            cells.append(f"{cell:>20}")
        print(f"{name:<12} " + " ".join(cells))


def print_cpu_against_nginx(der: dict[str, dict[str, Any]]) -> None:
    """Issue 34's target: the CPU of a paced framed event (200 streams) against nginx's,
    user and system time apart, measured in this run."""
    framed, nginx = der.get("framed", {}), der.get("nginx", {})
    if framed.get("cpu_200_x_nginx") is None:
        return
    ratio = framed["cpu_200_x_nginx"]

    def split(d: dict[str, Any]) -> str:
        return (
            f"{d['cpu_us_per_event_200']:.1f} us (user {fmt(d['user_us_per_event_200'], '.1f')}, "
            f"system {fmt(d['sys_us_per_event_200'], '.1f')})"
        )

    print(
        f"\nCPU per paced event (200 streams x 50 ev/s): framed {split(framed)} against "
        f"nginx's {split(nginx)}: {ratio:.2f}x "
        f"(user {fmt(framed['user_200_x_nginx'], '.2f')}x, system "
        f"{fmt(framed['sys_200_x_nginx'], '.2f')}x); target <= 1.6x: "
        f"{'PASS' if ratio <= 1.6 else 'FAIL'}"
    )


def print_colocated(res: dict[str, dict[str, Any]]) -> None:
    """The colocated phase: p99 and where the two cores' CPU went, per step."""
    rows = [(n, step) for n, r in res.items() for step in r.get("colocated", {}).get("steps", [])]
    if not rows:
        return
    cpus = next(iter(r["colocated"]["cpus"] for r in res.values() if "colocated" in r))
    print(
        f"\np99 with the load generator as its own process; proxy, upstream and load "
        f"generator pinned to CPUs {','.join(map(str, cpus))} (shares of those cores' CPU "
        "time; others = every other process of the machine)"
    )
    head = (
        f"{'colocated':<12} {'streams':>7} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} "
        f"{'fail':>5} | {'proxy%':>6} {'upstr%':>6} {'loadg%':>6} {'other%':>6} "
        f"{'proxy us/ev':>11}"
    )
    print(head)
    print("-" * len(head))
    for name, st in rows:
        print(
            f"{name:<12} {st['streams']:>7} {fmt(st.get('latency_p50_ms'), '.2f'):>7} "
            f"{fmt(st.get('latency_p99_ms'), '.2f'):>7} "
            f"{fmt(st.get('latency_p999_ms'), '.2f'):>8} {fmt(st.get('failures')):>5} | "
            f"{fmt(st.get('proxy_share_pct'), '.1f'):>6} "
            f"{fmt(st.get('upstream_share_pct'), '.1f'):>6} "
            f"{fmt(st.get('loadgen_share_pct'), '.1f'):>6} "
            f"{fmt(st.get('others_share_pct'), '.1f'):>6} "
            f"{fmt(st.get('proxy_cpu_us_per_event'), '.1f'):>11}"
        )


def print_report(report: dict[str, Any]) -> None:
    res = report["results"]
    der = report["derived"]
    m = report["machine"]
    print(
        f"\nchaosproxy benchmark — {m['nproc']} cores, {m['cpu_model']}, "
        f"Python {m['python']}, aiohttp {m['aiohttp']}, uvloop {m.get('uvloop', '-')}"
        f"{' (SMOKE: tiny loads, numbers not meaningful)' if report['smoke'] else ''}"
    )
    s = report["scale"]
    print(
        f"throughput: 1 stream x {s['throughput_events']} events of {s['event_size']} B, "
        f"median of {s['repeats']}; latency: {s['latency_streams']} streams x "
        f"{s['latency_rate']:g}/s; fanout: {s['fanout_streams']} streams x "
        f"{s['fanout_rate']:g}/s; paced events {s['paced_event_size']} B\n"
    )
    head = (
        f"{'target':<12} {'ev/s':>9} {'MB/s':>7} {'x dir':>6} {'cpu us/ev':>9} | "
        f"{'p50 ms':>7} {'p99 ms':>7} {'+p99':>6} {'cpu%':>5} | "
        f"{'fail':>5} {'compl':>6} {'RSS MB':>7} {'conn p99':>8} | {'TTFB p50':>8} {'+TTFB':>6} "
        f"{'bg%':>4}"
    )
    print(head)
    print("-" * len(head))
    for name in res:
        r, d = res[name], der[name]
        tp, lt, fo, tt = (r.get(p, {}) for p in ("throughput", "latency", "fanout", "ttfb"))
        print(
            f"{name:<12} {fmt(tp.get('events_per_s'), ',.0f'):>9} "
            f"{fmt(tp.get('mb_per_s'), '.1f'):>7} "
            f"{fmt(d.get('throughput_ratio'), '.2f'):>6} "
            f"{fmt(d.get('cpu_us_per_event_saturated'), '.1f'):>9} | "
            f"{fmt(lt.get('latency_p50_ms'), '.2f'):>7} {fmt(lt.get('latency_p99_ms'), '.2f'):>7} "
            f"{fmt(d.get('added_p99_ms'), '+.2f'):>6} {fmt(lt.get('proxy_cpu_pct'), '.0f'):>5} | "
            f"{fmt(fo.get('failures')):>5} {fmt(fo.get('completion_ratio'), '.2f'):>6} "
            f"{fmt(fo.get('peak_rss_mb'), '.1f'):>7} {fmt(fo.get('connect_p99_ms'), '.1f'):>8} | "
            f"{fmt(tt.get('ttfb_p50_ms'), '.3f'):>8} {fmt(d.get('added_ttfb_p50_ms'), '+.3f'):>6} "
            f"{fmt(d.get('others_max_pct'), '.0f'):>4}"
        )
    for name, reason in report["skipped"].items():
        print(f"{name:<12} skipped: {reason}")
    print_cpu_split(der)
    print_cpu_against_nginx(der)
    print_colocated(res)
    print_loop_lag(res)
    problems = [
        f"{n}/{p}: {', '.join(v['errors'])}"
        for n, phases in res.items()
        for p, v in phases.items()
        if isinstance(v, dict) and v.get("errors")
    ]
    if problems:
        print("\nfailures:\n  " + "\n  ".join(problems))
    noisy = [n for n, d in der.items() if (d.get("others_max_pct") or 0) > 15]
    if noisy:
        print(
            f"\nwarning: other work used the machine during {', '.join(noisy)} (bg% = the "
            "largest share of all cores used by none of the benchmark's processes in a "
            "phase); latency and completion numbers are then unreliable"
        )
    src = report.get("source", {})
    if src.get("dirty"):
        print(
            f"\nnote: chaosproxy at {src.get('commit')} with uncommitted {', '.join(src['dirty'])}"
        )
    if report["checks"]:
        print(f"\n{'check':<12} {'target':<40} {'value':>9}  result")
        for c in report["checks"]:
            verdict = {True: "PASS", False: "FAIL", None: "n/a"}[c["pass"]]
            print(f"{c['target']:<12} {c['check']:<40} {fmt(c['value']):>9}  {verdict}")
    sock = {n: r.get("fanout", {}).get("socket_options") for n, r in res.items()}
    sock = {n: v for n, v in sock.items() if v}
    if sock:
        print("\nsockets during fanout (count with TCP_NODELAY / TCP_CORK set):")
        for n, sides in sock.items():
            parts = [
                f"{side} {c['sockets']} sockets, nodelay {c['nodelay']}, cork {c['cork']}"
                for side, c in sides.items()
            ]
            print(f"  {n:<12} " + "; ".join(parts))


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="chaosproxy performance benchmark (see docs/benchmark.md)"
    )
    p.add_argument("--smoke", action="store_true", help="tiny loads, seconds; checks it runs")
    p.add_argument("--json", metavar="PATH", help="write results here (default: results/)")
    p.add_argument(
        "--targets",
        default=",".join(ALL_TARGETS),
        help=f"comma-separated subset of {','.join(ALL_TARGETS)}",
    )
    p.add_argument(
        "--phases",
        default=",".join(ALL_PHASES),
        help=f"comma-separated subset of {','.join(ALL_PHASES)}",
    )
    p.add_argument("--no-nginx", action="store_true", help="skip nginx even when installed")
    p.add_argument(
        "--variant",
        metavar="NAME",
        help="run the chaosproxy targets through benchmarks/variants.py NAME (experiments)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="run the chaosproxy targets with serve --workers N (default 1: one process)",
    )
    p.add_argument("--profile", metavar="DIR", help="attach py-spy to the chaosproxy targets")
    p.add_argument("--profile-format", choices=("raw", "flamegraph", "speedscope"), default="raw")
    p.add_argument("--profile-rate", type=int, default=200, help="samples/s (default 200)")
    p.add_argument(
        "--profile-nonblocking",
        action="store_true",
        help="do not pause the proxy to sample (less overhead, some torn stacks)",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=None,
        metavar="S",
        help="before each measurement wait up to S s for the machine to be quiet "
        "(default 10, 0 with --smoke)",
    )
    p.add_argument(
        "--quiet-below",
        type=float,
        default=15.0,
        metavar="PCT",
        help="quiet means under PCT%% of all cores busy (default 15)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs)")
    for f in dataclasses.fields(Scale):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None)
    return p.parse_args(argv)


async def bench(args: argparse.Namespace, scale: Scale, workdir: Path) -> dict[str, Any]:
    want = [t.strip() for t in args.targets.split(",") if t.strip()]
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    for name in want:
        if name not in ALL_TARGETS:
            raise SystemExit(f"unknown target {name!r}")
    for name in phases:
        if name not in ALL_PHASES:
            raise SystemExit(f"unknown phase {name!r}")
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    upstream, up_port = start_upstream(workdir)
    targets: list[Target] = []
    skipped: dict[str, str] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in want:
            if name == "direct":
                targets.append(Target("direct", up_port, "the upstream, no proxy"))
            elif name in ("passthrough", "framed"):
                targets.append(
                    start_chaosproxy(
                        name,
                        up_port,
                        workdir,
                        framed=name == "framed",
                        variant=args.variant,
                        workers=args.workers,
                    )
                )
            elif name == "nginx":
                if args.no_nginx:
                    skipped["nginx"] = "--no-nginx"
                    continue
                t = start_nginx(up_port, workdir, nofile=nofile)
                if t is None:
                    skipped["nginx"] = "nginx not installed (apt-get install -y nginx)"
                else:
                    targets.append(t)
        ready: list[Target] = []
        for t in targets:
            try:
                wait_listening(t)
                await phase_warmup(t)
                ready.append(t)
            except TargetError as exc:
                if t.name == "nginx":
                    skipped["nginx"] = f"did not start: {exc}"
                    t.stop()
                else:
                    raise
        targets = ready
        for t in targets:
            t.extra["upstream_pid"] = str(upstream.pid)
        profiler = (
            Profiler(
                Path(args.profile),
                args.profile_format,
                args.profile_rate,
                nonblocking=args.profile_nonblocking,
            )
            if args.profile
            else None
        )
        for t in targets:
            results[t.name] = {"description": t.description}
        for phase in phases:
            rounds = max(1, scale.repeats) if phase == "throughput" else 1
            runs: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
            accts: dict[str, dict[str, Any]] = {t.name: {} for t in targets}
            for _ in range(rounds):
                for t in targets:
                    print(f"  {phase:<10} {t.name:<12}", end=" ", flush=True, file=sys.stderr)
                    if t.process is not None and not t.process.alive():
                        raise TargetError(f"{t.name} died:\n{t.process.stderr_tail()}")
                    acct: dict[str, Any] = {}
                    gc.collect()
                    if args.quiet_wait > 0:
                        acct.update(await wait_quiet(args.quiet_wait, args.quiet_below))
                    prof = profiler.attach(t, phase) if profiler else contextlib.nullcontext()
                    probed = phase in LAG_PHASES and await loop_lag_window(t) is not None
                    with prof, accounting(t, upstream, acct):
                        runs[t.name].append(await PHASES[phase](t, scale))
                    if probed:
                        lag = await loop_lag_window(t)
                        if lag is not None:
                            acct["loop_lag"] = summarise_lag(lag)
                    add_accounts(accts[t.name], acct)
                    print(f"{acct.get('wall_s', 0):6.1f}s", file=sys.stderr)
                    await asyncio.sleep(0.3)
            for t in targets:
                out = (
                    combine_throughput(scale, runs[t.name])
                    if phase == "throughput"
                    else runs[t.name][0]
                )
                results[t.name][phase] = {**out, **accts[t.name]}
        for t in targets:
            if t.log_path is not None and t.log_path.exists():
                results[t.name]["frame_log_bytes"] = t.log_path.stat().st_size
        if profiler is not None:
            profiler.report()
    finally:
        for t in targets:
            t.stop()
        upstream.stop()
    return {"results": results, "skipped": skipped}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scale = dataclasses.replace(SMOKE) if args.smoke else Scale()
    for f in dataclasses.fields(Scale):
        value = getattr(args, f.name)
        if value is not None:
            setattr(scale, f.name, value)
    if args.quiet_wait is None:
        args.quiet_wait = 0.0 if args.smoke else 10.0
    nofile = raise_fd_limit()
    needed = 3 * scale.fanout_streams + 256
    if nofile < needed:
        print(f"warning: RLIMIT_NOFILE is {nofile}, fanout needs about {needed}", file=sys.stderr)
    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="chaosproxy-bench-"))
    print(
        f"chaosproxy benchmark{' (smoke)' if args.smoke else ''}; work dir {tmp}", file=sys.stderr
    )
    try:
        try:
            import uvloop

            runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        except ImportError:  # pragma: no cover
            runner = asyncio.Runner()
        with runner:
            outcome = runner.run(bench(args, scale, tmp))
    except TargetError as exc:
        print(f"benchmark could not run: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    results = outcome["results"]
    derived = derive(results)
    report: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "smoke": args.smoke,
        "variant": args.variant,
        "workers": args.workers,
        "profiled": bool(args.profile),
        "machine": machine(),
        "source": source_state(),
        "fd_limit": nofile,
        "scale": dataclasses.asdict(scale),
        "results": results,
        "derived": derived,
        "skipped": outcome["skipped"],
        "checks": evaluate(derived),
    }
    print_report(report)
    path = (
        Path(args.json) if args.json else RESULTS / ("smoke.json" if args.smoke else "latest.json")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nresults: {path} ({report['duration_s']} s)")
    # "Ran" means: every target measured something in every phase.
    broken = [
        f"{n}/{p}"
        for n, phases in results.items()
        for p, v in phases.items()
        if isinstance(v, dict)
        and v.get("failures")
        and v.get("failures") == v.get("streams", v.get("requests", v.get("repeats")))
    ]
    if broken:
        print(f"every stream failed in: {', '.join(broken)}", file=sys.stderr)
        return 1
    if args.strict and any(c["pass"] is False for c in report["checks"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
