"""Per-write CPU of the frame log, in-process: ``python benchmarks/framelog.py``.

Times what the proxy does for each write to a client besides the write itself:
``Exchange.log_frame`` (the session's accounting, ``Session.wrote``, and the ``frame``
line through structlog, its processors and the observers ``chaosproxy serve`` attaches:
the admin's :class:`~chaosproxy.control.admin.RequestStore` and the
:class:`~chaosproxy.observe.metrics.Metrics`) into a real file, for framed sends (one event
each, as the benchmark's ``bench-framed`` scenario makes them) and passthrough sends.
Each repeat logs ``--lines`` lines for ``--requests`` requests in turn (as 200 streams
interleave), opening with their ``request`` lines and closing with their
``response_end``; the minimum over ``--repeats`` is printed in microseconds per frame
line, with the garbage collector on (as in the proxy: what its passes cost is part of
the price) and off. ``tracked`` is the number of objects the garbage collector
tracks after a repeat, less those before it: what the log keeps per line.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from chaosproxy.control.admin import RequestStore
from chaosproxy.core.actions import Send
from chaosproxy.core.events import Event
from chaosproxy.core.frames import Frame
from chaosproxy.core.session import Session
from chaosproxy.observe.logs import FrameLog
from chaosproxy.observe.metrics import Metrics
from chaosproxy.scenario import parse_scenario
from chaosproxy.server.exchange import Exchange

BENCH_FRAMED = "name: bench-framed\nfaults:\n  - duplicate: {probability: 0}\n"
PAYLOAD = b'data: {"t": 1764600000000000000, "i": 1, "pad": "' + b"x" * 200 + b'"}\n\n'


def sessions(n: int, framed: bool) -> list[Session]:
    scenario = parse_scenario(BENCH_FRAMED, "framelog") if framed else None
    out = []
    for i in range(n):
        s = Session(f"r-{i}", scenario=scenario, seed=i, path="/stream")
        s.start(0.0)
        s.response_head(200, "OK", [("Content-Type", "text/event-stream")])
        out.append(s)
    return out


def one_repeat(
    log_path: Path, framed: bool, requests: int, lines: int, gc_on: bool
) -> tuple[float, int]:
    """(us per frame line, tracked objects left per line)."""
    log = FrameLog.open(str(log_path), fmt="json")
    for observer in (RequestStore(), Metrics()):
        log.add_observer(observer)
    hosts = []
    for s in sessions(requests, framed):
        host = SimpleNamespace(
            session=s,
            _content=False,
            _kept=None,
            log=log.for_request(request_id=s.request_id, scenario=None),
        )
        host.log.info("request", seed=s.seed, method="GET", path="/stream")
        hosts.append(host)
    frame = Frame(raw=PAYLOAD, data=PAYLOAD[6:-2].decode())
    sends = [
        Send(PAYLOAD, (Event(frame, i + 1, frozenset({"other"})),), 1, ())
        if framed
        else Send(PAYLOAD)
        for i in range(lines)
    ]
    log_frame = Exchange.log_frame
    gc.collect()
    before = len(gc.get_objects())
    if not gc_on:
        gc.disable()
    clock = time.perf_counter_ns
    try:
        t0 = clock()
        now = 1.0
        for send in sends:
            now += 0.0001
            for host in hosts:
                log_frame(host, send, now)  # type: ignore[arg-type]
        elapsed = clock() - t0
    finally:
        gc.enable()
    after = len(gc.get_objects())
    log.close()
    total = requests * lines
    return elapsed / 1000 / total, round((after - before) / total, 2)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--lines", type=int, default=100, help="frame lines per request")
    ap.add_argument("--only", choices=("framed", "passthrough"), help="one kind of sends")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frames.jsonl"
        kinds = {"framed": (True,), "passthrough": (False,)}.get(args.only, (True, False))
        cells = [(framed, gc_on) for framed in kinds for gc_on in (True, False)]
        best = {c: float("inf") for c in cells}
        tracked = {c: 0.0 for c in cells}
        for _ in range(args.repeats):
            for c in cells:
                us, kept = one_repeat(path, c[0], args.requests, args.lines, c[1])
                path.unlink()
                best[c] = min(best[c], us)
                tracked[c] = kept
        print(
            f"frame log, us per frame line ({args.requests} requests x {args.lines} "
            f"lines, min of {args.repeats})"
        )
        print(f"{'sends':<12} {'gc on':>8} {'gc off':>8} {'tracked/line':>13}")
        for framed in kinds:
            name = "framed" if framed else "passthrough"
            print(
                f"{name:<12} {best[(framed, True)]:>8.2f} {best[(framed, False)]:>8.2f} "
                f"{tracked[(framed, True)]:>13}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
