"""benchmarks/: what the figures rest on.

The reference relays of ``benchmarks/instructions.py`` (``benchmarks/relays.py``) relay
every byte and log every event once, however the upstream's bytes are split; the
instruction benchmark reads strace's and cachegrind's outputs exactly and prints issue
34's targets with the right verdicts; the load generator's summary and ``run.py``'s
ratios against nginx and direct are computed from the numbers given. The benchmarks
themselves run in CI (``.ci/run``: ``run.py --smoke`` and ``instructions.py --smoke``).
"""

from __future__ import annotations

import importlib.util
import io
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from tests.support.repo import REPO

BENCHMARKS = REPO / "benchmarks"


def load(name: str) -> ModuleType:
    """A module of benchmarks/ (not a package: each puts its folder on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path  # (its folder first on the path would shadow other modules)
    return module


relays = load("relays")
instructions = load("instructions")
loadgen = load("loadgen")
run = load("run")

EVENTS = [b'data: {"i": %d, "pad": "%s"}\n\n' % (i, b"x" * (i * 7)) for i in range(5)]
BODY = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + BODY
)


def logged(log: io.BytesIO) -> list[tuple[int, int, int]]:
    """(stream, seq, bytes) of each line of a relay's log (its ``ts`` is the clock's)."""
    lines = [orjson.loads(x) for x in log.getvalue().splitlines()]
    assert all(x["event"] == "frame" and isinstance(x["ts"], int) for x in lines)
    return [(x["stream"], x["seq"], x["bytes"]) for x in lines]


EXPECTED_LOG = [(3, i + 1, len(e)) for i, e in enumerate(EVENTS)]


def feed(pieces: list[bytes]) -> tuple[list[bytes], io.BytesIO]:
    log = io.BytesIO()
    side = relays.SseUpstream(log, 3)
    for piece in pieces:
        side.data_received(piece)
    return side.pending, log


@pytest.mark.parametrize("at", range(1, len(RESPONSE)))
def test_the_sse_relay_logs_each_event_once_wherever_the_reads_split(at: int) -> None:
    relayed, log = feed([RESPONSE[:at], RESPONSE[at:]])
    assert b"".join(relayed) == RESPONSE
    assert logged(log) == EXPECTED_LOG


def test_the_sse_relay_read_byte_by_byte() -> None:
    relayed, log = feed([RESPONSE[i : i + 1] for i in range(len(RESPONSE))])
    assert b"".join(relayed) == RESPONSE
    assert logged(log) == EXPECTED_LOG


def test_an_event_over_two_chunks_is_one_event() -> None:
    event = EVENTS[4]
    body = b"%x\r\n%b\r\n%x\r\n%b\r\n0\r\n\r\n" % (10, event[:10], len(event) - 10, event[10:])
    head = RESPONSE[: RESPONSE.index(b"\r\n\r\n") + 4]
    _, log = feed([head + body])
    assert logged(log) == [(3, 1, len(event))]


def serve_once(response: bytes, got: list[bytes]) -> tuple[socket.socket, threading.Thread]:
    """An upstream on a real socket: reads one request head, answers ``response`` in
    three writes, closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                more = conn.recv(65536)
                if not more:
                    return
                head += more
            got.append(head)
            third = len(response) // 3
            for piece in (response[:third], response[third : 2 * third], response[2 * third :]):
                conn.sendall(piece)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize("kind", ["minimal", "sse"])
def test_a_relay_passes_every_byte_both_ways(kind: str, tmp_path: Path) -> None:
    got: list[bytes] = []
    listener, thread = serve_once(RESPONSE, got)
    log = tmp_path / "relay.jsonl"
    argv = [sys.executable, str(BENCHMARKS / "relays.py"), kind, "--upstream"]
    argv += [f"127.0.0.1:{listener.getsockname()[1]}", *(["--log", str(log)] * (kind == "sse"))]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        found = re.search(r"relay listening on http://127\.0\.0\.1:(\d+)", line)
        assert found, line
        request = b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        with socket.create_connection(("127.0.0.1", int(found.group(1))), timeout=20) as client:
            client.sendall(request)
            received = b""
            while more := client.recv(65536):
                received += more
        thread.join(20)
        assert got == [request]
        assert received == RESPONSE
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        listener.close()
    if kind == "sse":  # written as it stopped: one line per event, the first stream
        lines = [orjson.loads(x) for x in log.read_bytes().splitlines()]
        assert [(x["stream"], x["seq"], x["bytes"]) for x in lines] == [
            (1, i + 1, len(e)) for i, e in enumerate(EVENTS)
        ]


def test_the_relay_refuses_an_upstream_that_is_no_address() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "relays.py"), "sse", "--upstream", "nowhere"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "'nowhere' is not HOST:PORT" in done.stderr
    assert "Traceback" not in done.stderr


STRACE = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 52.10    0.010000           5      2004           write
 30.00    0.006000           2      2001         3 read
 10.00    0.002000           9       210           epoll_wait
  0.10    0.000020          20         1         1 connect
------ ----------- ----------- --------- --------- ----------------
100.00    0.018020           4      4216         4 total
"""


def test_strace_table_read_by_syscall() -> None:
    assert instructions.strace_counts(STRACE) == {
        "write": 2004,
        "read": 2001,
        "epoll_wait": 210,
        "connect": 1,
    }


def test_cachegrind_total_is_its_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "cachegrind.out.123"
    out.write_text("desc: I1 cache:\ncmd: nginx\nevents: Ir\nfl=x\n1 5\nsummary: 228970573\n")
    assert instructions.cachegrind_total(out) == 228_970_573
    (tmp_path / "empty").write_text("events: Ir\n")
    with pytest.raises(RuntimeError, match="no summary line"):
        instructions.cachegrind_total(tmp_path / "empty")


def row(target: str, mode: str, **counts: float) -> Any:
    r = instructions.Row(target, mode, instructions.label(target, mode, "1.2.3"))
    for key, value in counts.items():
        kind, _, shape = key.rpartition("_")
        r.counts[(kind, shape)] = value
    return r


def test_the_table_gives_issue_34s_verdicts() -> None:
    rows = [
        row("nginx", "-", instructions_paced=2181.6, minor_faults_paced=0.0, syscalls_paced=2.1),
        row("relay-sse", "-", instructions_paced=26348.7, minor_faults_paced=0.001),
        row("passthrough", "compiled", instructions_paced=13999.6, minor_faults_paced=0.5),
        row("framed", "compiled", instructions_paced=30000.4, minor_faults_paced=0.02),
        row("framed", "pure", instructions_paced=91155.0),
    ]
    rows[3].counts[("syscalls", "paced")] = 2.1
    skipped = instructions.Row("toxiproxy", "-", "Toxiproxy (Go)", skipped="no binary")
    text = instructions.table([*rows, skipped], ["paced"], nginx_syscalls=2.1)
    assert text.splitlines() == [
        "| path | instructions / paced event | page faults / event | syscalls / event "
        "| target (compiled, paced) | result |",
        "|---|---|---|---|---|---|",
        "| nginx 1.2.3 (`proxy_buffering off`) | 2,182 | 0.000 | 2.10 |  |  |",
        "| a Python uvloop relay that splits SSE events and writes one JSON line per event "
        "to a file | 26,349 | 0.001 | - |  |  |",
        "| chaosproxy passthrough, compiled | 14,000 | 0.500 | - | ≤ 14,000 | PASS |",
        "| chaosproxy framed + logged, compiled | 30,000 | 0.020 | 2.10 | ≤ 30,000 | FAIL |",
        "| chaosproxy framed + logged, pure | 91,155 | - | - |  |  |",
        "| Toxiproxy (Go) | not measured: no binary |  |  |  |  |",
        "",
        "| the kernel's share, compiled | target | value | result |",
        "|---|---|---|---|",
        "| page faults / framed event | < 0.02 | 0.020 | FAIL |",
        "| syscalls / framed event | ≤ nginx's (2.10) | 2.10 | PASS |",
    ]


def result(ok: bool, latencies: list[int], events: int, error: str | None = None) -> Any:
    return loadgen.StreamResult(ok=ok, latencies=latencies, events=events, error=error)


def test_the_load_generators_summary() -> None:
    results = [
        result(True, [1_000_000 * i for i in range(1, 51)], 50),
        result(True, [1_000_000 * i for i in range(51, 101)], 50),
        result(False, [], 3, "connection lost: EOF after 3 events"),
    ]
    assert loadgen.summary(results, 50) == {
        "streams": 3,
        "failures": 1,
        "errors": ["1x connection lost: EOF after 3 events"],
        "events_received": 103,
        "events_expected": 150,
        "latency_p50_ms": 50.0,
        "latency_p99_ms": 99.0,
        "latency_p999_ms": 100.0,
        "latency_max_ms": 100.0,
    }


def test_run_compares_cpu_with_nginx_user_and_system_apart() -> None:
    def phases(cpu: float, system: float, p99: float) -> dict[str, Any]:
        return {
            "latency": {"proxy_cpu_s": cpu, "proxy_sys_s": system, "events_received": 60_000},
            "colocated": {"steps": [{"latency_p99_ms": p99, "proxy_share_pct": 41.5}]},
        }

    derived = run.derive(
        {
            "direct": {"colocated": {"steps": [{"latency_p99_ms": 1.25}]}},
            "framed": phases(2.4, 1.2, 4.0),
            "nginx": phases(1.2, 0.9, 1.5),
        }
    )
    framed = derived["framed"]
    assert framed["cpu_us_per_event_200"] == 40.0
    assert (framed["user_us_per_event_200"], framed["sys_us_per_event_200"]) == (20.0, 20.0)
    assert framed["cpu_200_x_nginx"] == 2.0
    assert framed["user_200_x_nginx"] == 4.0
    assert framed["sys_200_x_nginx"] == 1.33
    assert framed["colocated_added_p99_ms"] == 2.75
    assert framed["colocated_proxy_share_pct"] == 41.5
    checks = {c["check"]: c["pass"] for c in run.evaluate(derived) if c["target"] == "framed"}
    assert checks["CPU per paced event <= 1.6x nginx's"] is False


def test_the_colocated_phase_is_last_and_its_smoke_is_small() -> None:
    assert run.ALL_PHASES[-1] == "colocated"
    assert run.SMOKE.colocated_streams == "20"
    assert run.Scale().colocated_streams == "200,400"
