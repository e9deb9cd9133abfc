"""Per-event CPU of chaosproxy's sans-IO core, in-process: ``python benchmarks/micro.py``.

Times :meth:`Pipeline.feed` (plus the one :meth:`Pipeline.end` per body, and the
accounting of each write's events for integrity and the contract monitor) on pipelines
built as the proxy builds them (a :class:`~chaosproxy.core.session.Session` given a head),
over whole bodies, and prints microseconds per upstream event: the minimum over
``--repeats`` repeats, each timing enough fresh pipelines for ``--per-repeat`` events
with ``time.perf_counter_ns`` (the garbage collector off while timing, as ``timeit``
does). Building the pipeline is not timed. The repeats of all cases are interleaved,
so a slow spell of a shared machine costs a case one repeat, not all of them; the
``reference loop`` line (a fixed pure-Python loop, min over the run) tells how fast
the machine was.

Cases:

- ``bench``: the benchmark upstream's stream (``data: {"t": ..., "i": n, "pad":
  "xxx…"}`` events of ~1 KB on ``/stream``, see ``benchmarks/upstream.py``) under the
  benchmark's ``bench-framed`` scenario (``duplicate: {probability: 0}``), fed in
  64 KiB reads (a saturated stream) and one event per read (a paced one); also under no
  fault at all;
- ``ndjson``: the same payloads as NDJSON lines;
- each real provider capture in ``tests/fixtures/providers/``,
  under ``faults: []`` and under ``duplicate: {nth: 2}``, in 64 KiB reads and one event
  per read;
- the constructors ``Frame``, ``Event`` and ``Send``, per object.

Nothing here opens a socket; a full run takes about a minute (``--only bench``: seconds).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chaosproxy.core.actions import Send
from chaosproxy.core.events import Event
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.session import Session
from chaosproxy.scenario import Scenario, parse_scenario
from chaosproxy.tools.simulate import CONTENT_TYPES

HERE = Path(__file__).resolve().parent
READ_SIZE = 64 * 1024

BENCH_FRAMED = "name: bench-framed\nfaults:\n  - duplicate: {probability: 0}\n"
NO_FAULTS = "name: no-faults\nfaults: []\n"
DUPLICATE_NTH = "name: duplicate-nth\nfaults:\n  - duplicate: {nth: 2}\n"

#: Fixture file prefix -> the request path its provider answers (picks the profile).
FIXTURE_PATHS = {
    "openai_chat": "/v1/chat/completions",
    "openai_responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
    "ollama_chat": "/api/chat",
    "ollama_generate": "/api/generate",
    "ollama": "/api/chat",
    "cohere": "/v2/chat",  # no rule: detected from the first event (generic)
}


def fixtures_dir() -> Path | None:
    """$CHAOSPROXY_FIXTURES, or the repo's ``tests/fixtures/providers``."""
    candidates = [
        os.environ.get("CHAOSPROXY_FIXTURES", ""),
        str(HERE.parent / "tests" / "fixtures" / "providers"),
    ]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return None


def bench_events(n: int, size: int = 1024) -> list[bytes]:
    """The benchmark upstream's events (``benchmarks/upstream.py``), fixed timestamps."""
    overhead = len(b'data: {"t": 1700000000000000000, "i": 0, "pad": ""}\n\n')
    pad = b"x" * max(0, size - overhead - len(str(n)))
    t0 = 1_700_000_000_000_000_000
    return [
        b'data: {"t": %d, "i": %d, "pad": "%b"}\n\n' % (t0 + i * 1000, i, pad) for i in range(n)
    ]


def ndjson_events(n: int, size: int = 1024) -> list[bytes]:
    return [ev[len(b"data: ") : -1] for ev in bench_events(n, size)]


def split_events(body: bytes, fmt: Format) -> list[bytes]:
    """The body cut after each event's terminator (one read per event)."""
    if fmt == "ndjson":
        return body.splitlines(keepends=True)
    nl = b"\r\n" if b"\r\n\r\n" in body else b"\n"
    sep = nl + nl
    pieces = body.split(sep)
    out = [p + sep for p in pieces[:-1]]
    if pieces[-1]:
        out.append(pieces[-1])
    return out


def in_reads(body: bytes, size: int = READ_SIZE) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


@dataclass
class Case:
    name: str
    scenario: Scenario
    fmt: Format
    path: str
    reads: list[bytes]


def body_pipeline(
    scenario: Scenario, seed: int, fmt: Format, path: str
) -> tuple[Pipeline, Callable[[Send], None] | None]:
    """The pipeline the proxy builds for a body of ``fmt`` answering ``path``, and what
    accounts each of its writes for the stream's sent side (integrity and contract
    monitor; ``Session.wrote`` calls it)."""
    session = Session("bench", scenario=scenario, seed=seed, path=path)
    session.start(0.0)
    session.response_head(200, "OK", [("Content-Type", CONTENT_TYPES[fmt])])
    assert session.pipeline is not None
    content = session.content
    return session.pipeline, None if content is None else content.wrote


def time_case(case: Case, bodies: int, repeats: int) -> tuple[float, int]:
    """(min over repeats of us per upstream event, events per body)."""
    best = float("inf")
    events = 0
    reads = case.reads
    start = body_pipeline
    clock = time.perf_counter_ns
    for _ in range(repeats):
        elapsed = 0
        total = 0
        gc.collect()
        gc.disable()
        try:
            for _ in range(bodies):
                p, wrote = start(case.scenario, 1234, case.fmt, case.path)
                feed = p.feed
                t0 = clock()
                if wrote is None:
                    for chunk in reads:
                        feed(chunk, 0.0)
                    p.end(0.0)
                else:
                    for chunk in reads:
                        for action in feed(chunk, 0.0):
                            if isinstance(action, Send):
                                wrote(action)
                    for action in p.end(0.0):
                        if isinstance(action, Send):
                            wrote(action)
                elapsed += clock() - t0
                total += p.events_in
                events = p.events_in
        finally:
            gc.enable()
        best = min(best, elapsed / 1000 / max(total, 1))
    return best, events


def time_ctor(make: Callable[[], object], n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            for _ in range(n):
                make()
            elapsed = time.perf_counter_ns() - t0
        finally:
            gc.enable()
        best = min(best, elapsed / 1000 / n)
    return best


def reference_loop() -> float:
    """ms for a fixed pure-Python loop: how fast this machine is right now."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        total = 0
        for i in range(200_000):
            total += i
        best = min(best, (time.perf_counter_ns() - t0) / 1e6)
    return best


@dataclass
class Row:
    name: str
    fmt: Format
    path: str
    body: bytes
    per_event: list[bytes]
    #: Column label -> scenario.
    scenarios: dict[str, Scenario]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats, min taken (7)")
    ap.add_argument("--events", type=int, default=2000, help="events of the bench stream")
    ap.add_argument(
        "--per-repeat", type=int, default=2000, help="upstream events timed per repeat (2000)"
    )
    ap.add_argument("--only", default="", help="run only rows whose name contains this")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers there")
    args = ap.parse_args(argv)

    bench = parse_scenario(BENCH_FRAMED, "micro")
    none = parse_scenario(NO_FAULTS, "micro")
    dup = parse_scenario(DUPLICATE_NTH, "micro")
    sse_events = bench_events(args.events)
    nd_events = ndjson_events(args.events)

    rows = [
        Row(
            name,
            fmt,
            "/stream",
            b"".join(events),
            events,
            {"bench-framed": bench, "no faults": none},
        )
        for name, fmt, events in (
            ("bench stream (sse, /stream)", "sse", sse_events),
            ("bench payloads as ndjson", "ndjson", nd_events),
        )
    ]
    fixtures = fixtures_dir()
    if fixtures is None:
        print("(provider fixtures not found: skipped)", file=sys.stderr)
    else:
        for f in sorted(fixtures.iterdir()):
            if f.suffix not in (".sse", ".ndjson", ".txt"):
                continue
            fmt: Format = "ndjson" if f.suffix == ".ndjson" else "sse"
            prefix = next((p for p in FIXTURE_PATHS if f.name.startswith(p)), "")
            body = f.read_bytes()
            rows.append(
                Row(
                    f.name,
                    fmt,
                    FIXTURE_PATHS.get(prefix, "/"),
                    body,
                    split_events(body, fmt),
                    {"no faults": none, "dup nth:2": dup},
                )
            )
    rows = [r for r in rows if args.only in r.name]

    # One cell per row x scenario x read size. The repeats are interleaved across
    # cells (round r times every cell once), so a slow spell of a shared machine
    # costs each cell one sample, not all of its samples.
    cells: list[tuple[Case, int]] = []
    for row in rows:
        for scen in row.scenarios.values():
            for reads in (in_reads(row.body), row.per_event):
                case = Case(row.name, scen, row.fmt, row.path, reads)
                _, events = time_case(case, 1, 1)  # warm-up; events per body
                cells.append((case, max(1, args.per_repeat // max(events, 1))))
    best = [float("inf")] * len(cells)
    events_of = [0] * len(cells)
    reference = float("inf")
    for _ in range(args.repeats):
        reference = min(reference, reference_loop())
        for i, (case, bodies) in enumerate(cells):
            us, events_of[i] = time_case(case, bodies, 1)
            best[i] = min(best[i], us)

    print(f"reference loop: {reference:.2f} ms (a pure-Python loop: lower is a faster machine)")
    print(
        "us per upstream event, Pipeline.feed (+ end), min of "
        f"{args.repeats}; columns: scenario / reads (64 KiB, or one event each)"
    )
    results: dict[str, object] = {"reference_loop_ms": reference, "rows": {}}
    k = 0
    for title, group in (("benchmark", rows[:2]), ("provider captures", rows[2:])):
        shown = [r for r in group if r in rows]
        if not shown:
            continue
        labels = list(shown[0].scenarios)
        head = [f"{lab} / {how}" for lab in labels for how in ("64K", "event")]
        print()
        print(f"{title:<44} {'events':>6} " + " ".join(f"{h:>19}" for h in head))
        for row in shown:
            cells_us = best[k : k + 4]
            events = events_of[k]
            k += 4
            print(f"{row.name:<44} {events:>6} " + " ".join(f"{c:>19.2f}" for c in cells_us))
            results["rows"][row.name] = {  # type: ignore[index]
                "events": events,
                **{h: round(c, 3) for h, c in zip(head, cells_us, strict=True)},
            }

    frame = Frame(raw=sse_events[0], data="x")
    ev = Event(frame, 1, frozenset({"other"}))
    ctors: list[tuple[str, Callable[[], object]]] = [
        (
            "Frame(raw=, data=, newline=, complete=)",
            lambda: Frame(raw=b"data: x\n\n", data="x", newline=b"\n", complete=True),
        ),
        ("Event(frame, ordinal, kinds)", lambda: Event(frame, 1, frozenset())),
        ("Send(data, (event,), 1, faults)", lambda: Send(b"x", (ev,), 1, ())),
    ]
    print()
    print(f"{'constructor':<44} {'us/object':>9}")
    ctor_results = {}
    for name, make in ctors:
        us = time_ctor(make, 20000, args.repeats)
        ctor_results[name] = round(us, 3)
        print(f"{name:<44} {us:>9.3f}", flush=True)
    results["constructors"] = ctor_results
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
