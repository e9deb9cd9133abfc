"""The load generator: raw asyncio protocols (uvloop), HTTP/1.1, chunked decoding, SSE split.

No framework on the client side: each stream is one ``asyncio.Protocol`` whose
``data_received`` timestamps the read once, de-chunks it, splits events on the blank
line and, when asked, reads each event's send time (``"t": <ns>``) to compute its
latency. That keeps the generator cheaper per event than the proxies it measures.

All connections go to 127.0.0.1; every stream has a deadline and is aborted after it.
``benchmarks/run.py`` imports it (the load generator in its own process), and runs it as a
process of its own (``python benchmarks/loadgen.py --help``) for its ``colocated`` phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

#: Where the send time sits in an upstream event: ``data: {"t": 1700000000000000000, …``.
T_MARK = b'"t": '
T_DIGITS = 19


@dataclass(slots=True)
class StreamResult:
    """What one stream saw. Times are ``perf_counter_ns`` values."""

    ok: bool = False
    error: str | None = None
    status: int = 0
    t_start: int = 0
    t_connected: int = 0
    t_first: int = 0
    t_end: int = 0
    events: int = 0
    body_bytes: int = 0
    #: Receive time minus send time of each event, in ns (only when asked for).
    latencies: list[int] = field(default_factory=list)

    @property
    def connect_ns(self) -> int | None:
        return self.t_connected - self.t_start if self.t_connected else None

    @property
    def ttfb_ns(self) -> int | None:
        return self.t_first - self.t_start if self.t_first else None


class StreamClient(asyncio.Protocol):
    """One GET, one SSE response, counted and (optionally) timed per event."""

    def __init__(
        self,
        request: bytes,
        result: StreamResult,
        done: asyncio.Future[None],
        *,
        latency: bool,
    ) -> None:
        self.request = request
        self.result = result
        self.done = done
        self.latency = latency
        self.transport: asyncio.Transport | None = None
        self._head = b""
        self._headers_done = False
        self._chunked = False
        self._length: int | None = None
        self._left = 0  # payload bytes left in the current chunk
        self._skip = 0  # CRLF bytes after a chunk's payload still to skip
        self._pending = b""  # an incomplete chunk-size line
        self._sse = b""  # body bytes after the last complete event

    # ------------------------------------------------------------------ protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.result.t_connected = time.perf_counter_ns()
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if not self._headers_done:
            rest = self._parse_head(data)
            if rest is None:
                return
            data = rest
        if not data:
            return
        result = self.result
        if not result.t_first:
            result.t_first = time.perf_counter_ns()
        if self._chunked:
            body, finished = self._dechunk(data)
        else:
            body, finished = data, False
            if self._length is not None:
                body = body[: self._length - result.body_bytes]
                finished = result.body_bytes + len(body) >= self._length
        if body:
            self._body(body)
        if finished:
            self._finish(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done.done():
            return
        if self._headers_done and not self._chunked and self._length is None:
            self._finish(None)  # a close-delimited body ends at EOF
        else:
            self._finish(f"connection lost: {exc or 'EOF'} after {self.result.events} events")

    # ------------------------------------------------------------------ parsing

    def _parse_head(self, data: bytes) -> bytes | None:
        """The body bytes after a complete, good response head; None before that."""
        head = self._head + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            self._head = head
            if len(head) > 65536:
                self._finish("response head too long")
            return None
        lines = head[:end].decode("latin-1").split("\r\n")
        self._head = b""
        self._headers_done = True
        try:
            self.result.status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self._finish(f"bad status line {lines[0]!r}")
            return None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "transfer-encoding" and "chunked" in value.lower():
                self._chunked = True
            elif name == "content-length":
                self._length = int(value)
        if self.result.status != 200:
            self._finish(f"status {self.result.status}")
            return None
        return head[end + 4 :]

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        buf = self._pending + data if self._pending else data
        self._pending = b""
        out: list[bytes] = []
        pos = 0
        n = len(buf)
        while pos < n:
            if self._left:
                stop = min(n, pos + self._left)
                out.append(buf[pos:stop])
                self._left -= stop - pos
                pos = stop
                if not self._left:
                    self._skip = 2
            elif self._skip:
                step = min(self._skip, n - pos)
                pos += step
                self._skip -= step
            else:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    self._pending = buf[pos:]
                    break
                size = int(buf[pos:nl].split(b";", 1)[0], 16)
                pos = nl + 2
                if size == 0:
                    return b"".join(out), True
                self._left = size
        return b"".join(out), False

    def _body(self, body: bytes) -> None:
        result = self.result
        result.body_bytes += len(body)
        sse = self._sse + body if self._sse else body
        if not self.latency:
            # Throughput: count blank-line separators; keep a possible "\n" half.
            result.events += sse.count(b"\n\n")
            self._sse = b"\n" if sse.endswith(b"\n") and not sse.endswith(b"\n\n") else b""
            return
        parts = sse.split(b"\n\n")
        self._sse = parts.pop()
        if not parts:
            return
        now = time.time_ns()
        lat = result.latencies
        for ev in parts:
            at = ev.find(T_MARK)
            if at >= 0:
                at += len(T_MARK)
                lat.append(now - int(ev[at : at + T_DIGITS]))
        result.events += len(parts)

    def _finish(self, error: str | None) -> None:
        result = self.result
        result.t_end = time.perf_counter_ns()
        result.error = error
        result.ok = error is None
        if not self.done.done():
            self.done.set_result(None)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def request_bytes(host: str, port: int, path: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Accept: text/event-stream\r\nConnection: close\r\n\r\n"
    ).encode("ascii")


async def run_stream(
    host: str,
    port: int,
    path: str,
    *,
    latency: bool = False,
    limit_s: float = 30.0,
    expect_events: int | None = None,
) -> StreamResult:
    """One streaming GET; never raises (failures are in the result)."""
    loop = asyncio.get_running_loop()
    result = StreamResult(t_start=time.perf_counter_ns())
    done: asyncio.Future[None] = loop.create_future()
    deadline = loop.time() + limit_s
    req = request_bytes(host, port, path)
    transport: asyncio.Transport | None = None
    try:
        async with asyncio.timeout_at(deadline):
            transport, _ = await loop.create_connection(
                lambda: StreamClient(req, result, done, latency=latency), host, port
            )
            await done
    except TimeoutError:
        result.error = f"timed out after {limit_s:.1f}s with {result.events} events"
        result.ok = False
        result.t_end = time.perf_counter_ns()
    except OSError as exc:
        result.error = f"connect: {exc.strerror or exc}"
        result.ok = False
        result.t_end = time.perf_counter_ns()
    finally:
        if transport is not None and not transport.is_closing():
            transport.abort()
    if result.ok and expect_events is not None and result.events != expect_events:
        result.ok = False
        result.error = f"expected {expect_events} events, got {result.events}"
    return result


async def run_many(
    host: str,
    port: int,
    paths: Sequence[str],
    *,
    latency: bool,
    limit_s: float,
    expect_events: int | None,
) -> list[StreamResult]:
    """All ``paths`` at once (a burst of connects), each with the same deadline."""
    return list(
        await asyncio.gather(
            *(
                run_stream(
                    host,
                    port,
                    p,
                    latency=latency,
                    limit_s=limit_s,
                    expect_events=expect_events,
                )
                for p in paths
            )
        )
    )


def percentile(sorted_values: Sequence[int] | Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of already sorted values; nan if none."""
    if not sorted_values:
        return float("nan")
    rank = min(len(sorted_values), max(1, math.ceil(q / 100.0 * len(sorted_values))))
    return float(sorted_values[rank - 1])


def summary(results: Sequence[StreamResult], expect_events: int) -> dict[str, Any]:
    """What a paced run saw, in one JSON-ready dict: failures, latency percentiles."""
    lat = sorted(v for r in results for v in r.latencies)
    errors = Counter(r.error or "?" for r in results if not r.ok)
    return {
        "streams": len(results),
        "failures": sum(not r.ok for r in results),
        "errors": [f"{n}x {e}" for e, n in errors.most_common(3)],
        "events_received": sum(r.events for r in results),
        "events_expected": expect_events * len(results),
        "latency_p50_ms": round(percentile(lat, 50) / 1e6, 3),
        "latency_p99_ms": round(percentile(lat, 99) / 1e6, 3),
        "latency_p999_ms": round(percentile(lat, 99.9) / 1e6, 3),
        "latency_max_ms": round(lat[-1] / 1e6, 3) if lat else None,
    }


async def paced_run(args: argparse.Namespace) -> dict[str, Any]:
    """``--streams`` streams of ``--rate`` events/s, all connecting at once, each one's
    timetable offset by k/(streams x rate) s (the benchmark's latency phase)."""
    n = max(1, round(args.rate * args.seconds))
    spread_ms = 1000.0 / args.rate / args.streams
    paths = [
        f"/stream?n={n}&rate={args.rate:g}&size={args.size}"
        + (f"&offset={k * spread_ms:.3f}" if k else "")
        for k in range(args.streams)
    ]
    cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    results = await run_many(
        args.host,
        args.port,
        paths,
        latency=True,
        limit_s=n / args.rate * 2 + 20,
        expect_events=n,
    )
    cpu1, wall1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    return {
        **summary(results, n),
        "wall_s": round(wall1 - wall0, 3),
        "cpu_user_s": round(cpu1.ru_utime - cpu0.ru_utime, 3),
        "cpu_sys_s": round(cpu1.ru_stime - cpu0.ru_stime, 3),
    }


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/loadgen.py --port P --streams 200 --rate 50 --seconds 6``: the
    load generator as a process of its own. With ``--wait``, it prints ``READY`` once
    it is set up and starts when a line comes on stdin (so that whoever measures it
    starts its clocks then). Prints its summary as one JSON line on stdout."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0, help="events/s per stream")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--size", type=int, default=256, help="bytes per event")
    parser.add_argument("--wait", action="store_true", help="READY, then start on a line")
    args = parser.parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.wait:
        print("READY", flush=True)
        sys.stdin.readline()
    import uvloop

    print(json.dumps(uvloop.run(paced_run(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
