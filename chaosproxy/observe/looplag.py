"""An event-loop lag probe, for the benchmark and for chasing stalls (opt-in, hidden).

``CHAOSPROXY_LOOP_LAG=PATH`` in the environment of ``chaosproxy serve`` starts a
:class:`LoopLagProbe` in the proxy's process: a timer that asks to run every
millisecond and records how late it ran (the *lag*: how long the loop was busy with
something else when it was due). That is what a client's event waits, on top of the
proxy's own work, whenever the loop is held. Each garbage-collector pass is timed
as well (``gc.callbacks``), so a stall can be laid next to the collections.

What was measured is written to ``PATH`` as one JSON object (atomically: a temp file
then a rename) at the start (an empty window: from then on ``SIGUSR1`` is handled),
when the process gets ``SIGUSR1`` and when the proxy stops. Each write
covers one *window*: the time since the previous write (or the start), and the next
window starts empty. ``benchmarks/run.py`` sends ``SIGUSR1`` before and after a phase
and keeps the second write: the loop's lag during exactly that phase.

Resolution: under uvloop timers count whole milliseconds (libuv), so on an idle loop a
tick can be up to about 1 ms late with nothing holding the loop; on a busy loop (the
benchmark's phases) the loop polls often and a tick runs at the first turn after it is
due, so the lag is the rest of the turn in progress then. The histogram keeps two
significant digits (``123 us`` counts as ``130 us``), the maximum is exact.

Nothing here runs unless the variable is set: the probe costs a timer callback per
millisecond (about 0.5 % of a core).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

#: The environment variable that turns the probe on (its value: where to write).
ENV = "CHAOSPROXY_LOOP_LAG"
#: How often the probe's timer asks to run.
INTERVAL = 0.001
#: A lag above this is a *stall*: counted, and kept with its time (up to MAX_STALLS).
STALL = 0.001
#: Stalls kept per window with their time and length (the count goes on beyond).
MAX_STALLS = 2000


def bucket_us(us: int) -> int:
    """The histogram bucket of a lag of ``us`` microseconds: its upper bound, to two
    significant digits (exact below 100 us)."""
    if us < 100:
        return us
    step: int = 10 ** (len(str(us)) - 2)
    return -(-us // step) * step


def percentile_us(histogram: dict[int, int], pct: float) -> int | None:
    """The ``pct`` percentile (nearest rank) of a histogram of lags, in microseconds."""
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = max(1, -(-total * pct // 100))
    seen = 0
    for us in sorted(histogram):
        seen += histogram[us]
        if seen >= rank:
            return us
    return max(histogram)  # pragma: no cover - rank <= total


class LoopLagProbe:
    """Samples the lag of the running event loop; :meth:`window` reports and restarts.

    ``clock`` is the clock the lag is read from; it must be the loop's (``time.
    monotonic``, which uvloop's and asyncio's ``loop.time()`` both follow)."""

    def __init__(
        self,
        *,
        interval: float = INTERVAL,
        stall: float = STALL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.stall = stall
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._gc_started = 0.0
        self._gc_generation = 0
        self._timerfd: TimerFd | None = None
        self.writes = 0
        self._reset(clock())

    def _reset(self, now: float) -> None:
        self._window_start = now
        self._histogram: dict[int, int] = {}
        self._count = 0
        self._max = 0.0
        self._stall_count = 0
        self._stalls: list[tuple[float, float]] = []
        #: generation -> [passes, total seconds, longest, passes over ``stall``]
        self._gc: dict[int, list[float]] = {}
        self._gc_stalls: list[tuple[float, int, float]] = []

    # ------------------------------------------------------------------ sampling

    def start(self, loop: asyncio.AbstractEventLoop | None = None, *, timerfd: bool = True) -> None:
        """Start sampling ``loop`` (the running one by default). On Linux the ticks come
        from a ``timerfd`` the loop watches like a socket (``timerfd=False``: from the
        loop's own timers, as elsewhere)."""
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._reset(self._clock())
        self._timerfd = TimerFd.open(self.interval) if timerfd else None
        if self._timerfd is not None:
            self._loop.add_reader(self._timerfd.fileno, self._expired)
        else:
            self._schedule()
        gc.callbacks.append(self._on_gc)

    @property
    def source(self) -> str:
        """Where the ticks come from: ``timerfd`` or ``timer``."""
        return "timerfd" if self._timerfd is not None else "timer"

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._timerfd is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._timerfd.fileno)
            self._timerfd.close()
            self._timerfd = None
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)

    def _schedule(self) -> None:
        loop = self._loop
        assert loop is not None
        self._due = loop.time() + self.interval
        self._handle = loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        self.record(self._clock() - self._due)
        self._schedule()

    def _expired(self) -> None:
        fd = self._timerfd
        if fd is None:
            return
        now = time.monotonic_ns()
        for i, due in enumerate(fd.expired()):
            # Every tick the loop missed counts, each with its own lag: what an event
            # arriving at that moment would have waited. The stall list keeps the
            # first (the longest) of them: one entry per stall.
            self.record((now - due) / 1e9, listed=i == 0)

    def record(self, lag: float, *, listed: bool = True) -> None:
        """Count one sample: the timer ran ``lag`` seconds after it was due. A stall
        goes into the stall list too unless ``listed`` is False."""
        if lag < 0.0:
            lag = 0.0
        key = bucket_us(int(lag * 1e6))
        self._histogram[key] = self._histogram.get(key, 0) + 1
        self._count += 1
        if lag > self._max:
            self._max = lag
        if lag > self.stall:
            self._stall_count += 1
            if listed and len(self._stalls) < MAX_STALLS:
                at = self._clock() - lag - self._window_start
                self._stalls.append((round(at, 4), round(lag * 1000.0, 3)))

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            self._gc_generation = int(info.get("generation", 0))
            return
        took = time.perf_counter() - self._gc_started
        stats = self._gc.get(self._gc_generation)
        if stats is None:
            stats = self._gc[self._gc_generation] = [0, 0.0, 0.0, 0]
        stats[0] += 1
        stats[1] += took
        if took > stats[2]:
            stats[2] = took
        if took > self.stall:
            stats[3] += 1
            if len(self._gc_stalls) < MAX_STALLS:
                at = self._clock() - took - self._window_start
                self._gc_stalls.append((round(at, 4), self._gc_generation, round(took * 1e3, 3)))

    # ------------------------------------------------------------------ reporting

    def window(self) -> dict[str, Any]:
        """What was measured since the last window (or the start), and start a new one."""
        now = self._clock()
        hist = self._histogram
        out: dict[str, Any] = {
            "seconds": round(now - self._window_start, 3),
            "interval_ms": self.interval * 1000.0,
            "stall_ms": self.stall * 1000.0,
            "samples": self._count,
            "source": self.source,
            "p50_ms": self._pct(50),
            "p99_ms": self._pct(99),
            "p999_ms": self._pct(99.9),
            "max_ms": round(self._max * 1000.0, 3),
            "stalls": self._stall_count,
            # the time the loop was held beyond the threshold, from the listed stalls
            "stall_total_ms": round(sum(lag for _, lag in self._stalls), 3),
            "histogram_us": {str(k): hist[k] for k in sorted(hist)},
            "stall_list": self._stalls,
            "gc": {
                str(gen): {
                    "passes": int(s[0]),
                    "total_ms": round(s[1] * 1e3, 3),
                    "max_ms": round(s[2] * 1e3, 3),
                    "over_stall": int(s[3]),
                }
                for gen, s in sorted(self._gc.items())
            },
            "gc_stalls": self._gc_stalls,
            "gc_counts": list(gc.get_count()),
            "gc_thresholds": list(gc.get_threshold()),
            # (a list of every tracked object is made to count them: only at a write)
            "gc_tracked": len(gc.get_objects()),
            "gc_frozen": gc.get_freeze_count(),
        }
        self._reset(now)
        return out

    def _pct(self, pct: float) -> float | None:
        """A percentile of this window in ms (a bucket's bound, but never above the max)."""
        us = percentile_us(self._histogram, pct)
        return None if us is None else round(min(us / 1000.0, self._max * 1000.0), 3)

    def write(self, path: str | Path) -> None:
        """Write :meth:`window` to ``path`` (a temp file, then a rename)."""
        self.writes += 1
        body = self.window()
        body["write"] = self.writes
        body["pid"] = os.getpid()
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2))
        os.replace(tmp, target)


class TimerFd:
    """A periodic Linux ``timerfd`` on ``CLOCK_MONOTONIC`` (through libc, ctypes):
    readable when a tick is due; :meth:`expired` says which ticks (their due times,
    ``time.monotonic_ns()`` units) have passed since the last read."""

    _libc: Any = None

    def __init__(self, fd: int, first_ns: int, interval_ns: int) -> None:
        self.fileno = fd
        self._next = first_ns
        self._interval = interval_ns

    @classmethod
    def open(cls, interval: float) -> TimerFd | None:
        """A started timer, or None where there is no timerfd (not Linux, no libc)."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = cls._libc
            if libc is None:
                libc = cls._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd < 0:
                return None
            interval_ns = max(int(interval * 1e9), 1000)
            first = time.monotonic_ns() + interval_ns
            spec = _ITimerSpec(_TimeSpec.of(interval_ns), _TimeSpec.of(first))
            if libc.timerfd_settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
                os.close(fd)
                return None
        except (OSError, AttributeError, TypeError):
            return None
        return cls(fd, first, interval_ns)

    def expired(self) -> list[int]:
        """The due times of the ticks that expired since the last call (oldest first)."""
        try:
            count = int.from_bytes(os.read(self.fileno, 8), sys.byteorder)
        except BlockingIOError:
            return []
        first, step = self._next, self._interval
        self._next = first + count * step
        return [first + i * step for i in range(count)]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fileno)


_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0o2000000)


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    @classmethod
    def of(cls, ns: int) -> _TimeSpec:
        return cls(ns // 1_000_000_000, ns % 1_000_000_000)


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


class EnvironmentProbe:
    """The probe as ``CHAOSPROXY_LOOP_LAG`` starts it: writes on ``SIGUSR1`` and at stop."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.probe = LoopLagProbe()
        self._signal = False

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.probe.start(loop)
        # Only the main thread may take a signal (not ChaosProxy's thread): there the
        # probe writes at stop only.
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGUSR1, self._write)
            self._signal = True
        # A first (empty) write: the file's existence says SIGUSR1 is safe to send.
        self._write()

    def _write(self) -> None:
        with contextlib.suppress(OSError):
            self.probe.write(self.path)

    def stop(self) -> None:
        if self._signal:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)
        self.probe.stop()
        self._write()


def probe_from_environment(environ: Mapping[str, str] | None = None) -> EnvironmentProbe | None:
    """A started probe when ``CHAOSPROXY_LOOP_LAG`` names a file, else None."""
    env = os.environ if environ is None else environ
    path = env.get(ENV)
    if not path:
        return None
    probe = EnvironmentProbe(path)
    probe.start()
    return probe
