"""Stopping, bounded: ``--grace`` and what the client, the log and the exit code show.

The contract (docs/operations.md, Shutdown): on SIGTERM or SIGINT the proxy stops accepting, lets
the streams in flight run for ``--grace``, then cuts them (outcome ``shutdown``); the
process exits 0 within ``grace + 1 s`` of the signal, always — even when some cleanup
never finishes. :class:`~chaosproxy.ChaosProxy` (async and sync) and the ``chaos_proxy``
fixture stop within the same kind of bound.

The soak and stop runs ``python -m chaosproxy serve`` as a process in front of its mock,
with a few hundred streams (slow ones, ``hang`` ones that never end, quick ones), a
seeded random subset of whose clients leave early (a FIN or an RST) before the signal,
then SIGTERM while streams are in flight. Every client is a raw socket that reads until
its connection ends, so the test knows what each one saw: whether its chunked body
ended properly (``0\\r\\n\\r\\n``) and that the connection did end (EOF or RST), keep-alive
ones included. Each request carries its client's number in the query (``?client=N``),
which the ``request`` line logs, so every client maps to its request id.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from chaosproxy.control.api import ChaosProxy
from chaosproxy.control.start import CLOSE_MARGIN
from chaosproxy.scenario import parse_scenario
from tests.support.cli import LISTENING, start_serve
from tests.support.repo import REPO

SEED = 20261201
GRACE = 1.0
#: What the contract allows from the signal to the exit.
EXIT_BOUND = GRACE + 1.0
#: The longest the soak waits for every client to have its answer going.
SETTLE_LIMIT = 20.0
#: hang: every event sent, then the body never ends (only shutdown ends it).
#: slow: ~26 events 120 ms apart, ~3 s: those started early end within the grace.
SCENARIOS = {
    "hang.yaml": "name: hang\nfaults:\n  - hang: {}\n",
    "slow.yaml": "name: slow\nfaults:\n  - delay: {per_event: 120ms}\n",
    "framed.yaml": "name: framed\nfaults: []\n",
}
BODY = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})


def request_bytes(client: int, scenario: str | None, *, keep_alive: bool) -> bytes:
    head = [
        f"POST /v1/chat/completions?client={client} HTTP/1.1",
        "Host: chaosproxy.test",
        "Content-Type: application/json",
        f"Content-Length: {len(BODY)}",
    ]
    if scenario is not None:
        head.append(f"X-Chaos-Scenario: {scenario}")
    if not keep_alive:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + BODY


async def send_request(
    sock: socket.socket, port: int, number: int, scenario: str | None, *, keep_alive: bool
) -> None:
    """Connect ``sock`` (made non-blocking) to the proxy and send it request ``number``."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, request_bytes(number, scenario, keep_alive=keep_alive))


@dataclass
class Client:
    number: int
    scenario: str | None
    keep_alive: bool
    #: Seconds after the start of the run when it connects.
    start: float
    #: Seconds after it connects when it leaves (None: it reads to the end), and how.
    leave_after: float | None = None
    leave_by_reset: bool = False
    # What happened.
    received: bytes = b""
    #: Monotonic time when it saw its connection end (EOF or RST), or left itself.
    ended_at: float | None = None
    ended_by: str = ""
    left_at: float | None = None

    @property
    def body_ended(self) -> bool:
        """Whether the chunked body was ended properly (its last chunk arrived)."""
        return self.received.endswith(b"\r\n0\r\n\r\n")

    async def run(self, port: int, t0: float, stop_reading_by: float) -> None:
        await asyncio.sleep(max(0.0, t0 + self.start - time.monotonic()))
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        try:
            await send_request(sock, port, self.number, self.scenario, keep_alive=self.keep_alive)
            leave_at = None if self.leave_after is None else time.monotonic() + self.leave_after
            while True:
                limit = stop_reading_by if leave_at is None else leave_at
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        data = await loop.sock_recv(sock, 65536)
                except TimeoutError:
                    break
                except ConnectionResetError:
                    self.ended_at, self.ended_by = time.monotonic(), "rst"
                    return
                if not data:
                    self.ended_at, self.ended_by = time.monotonic(), "eof"
                    return
                self.received += data
            if leave_at is not None and time.monotonic() >= leave_at:
                if self.leave_by_reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.left_at = time.monotonic()
        finally:
            sock.close()


def plan(count: int, rng: random.Random) -> list[Client]:
    clients: list[Client] = []
    for n in range(count):
        scenario = rng.choices(["slow", "hang", None], weights=[45, 25, 30])[0]
        client = Client(
            n,
            scenario,
            keep_alive=rng.random() < 0.5,
            start=rng.uniform(0.0, 1.5),
        )
        if rng.random() < 0.3:  # leaves early, always before the signal
            client.leave_after = rng.uniform(0.0, 1.0)
            client.leave_by_reset = rng.random() < 0.5
        clients.append(client)
    return clients


async def start_with_scenarios(
    tmp_path: Path, *args: str, python: list[str] | None = None
) -> tuple[asyncio.subprocess.Process, int, Path]:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir(exist_ok=True)
    for name, text in SCENARIOS.items():
        (scenarios / name).write_text(text)
    log = tmp_path / "frames.jsonl"
    proc, line = await start_serve(
        "--listen", "127.0.0.1:0", "--admin", "off", "--log", str(log),
        "--scenarios", str(scenarios), "--grace", f"{GRACE:g}s", "--seed", "1", *args,
        cwd=tmp_path,
        command=python or (sys.executable, "-m", "chaosproxy"),
    )  # fmt: skip
    found = LISTENING.search(line)
    assert found, line
    return proc, int(found.group(2)), log


async def stop(proc: asyncio.subprocess.Process) -> tuple[float, str]:
    """SIGTERM; seconds until the process exited, and its stderr (the rest of it)."""
    assert proc.stderr is not None
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(15):
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    took = time.monotonic() - signalled
    stderr = (await proc.stderr.read()).decode()
    return took, stderr


def read_log(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.slow
async def test_a_soak_then_sigterm_cuts_what_runs_and_exits_0_within_grace_plus_1s(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    clients = plan(300, rng)
    proc, port, log_path = await start_with_scenarios(tmp_path)
    t0 = time.monotonic()
    # Every client reads until its connection ends; none should still be reading long
    # after the exit (a connection the proxy left open would be).
    read_until = t0 + SETTLE_LIMIT + EXIT_BOUND + 3.0
    tasks = [asyncio.create_task(c.run(port, t0, read_until)) for c in clients]
    # The signal comes once every planned departure is past (1.5 + 1.0 s) and every
    # other client has its answer going (on a busy machine the proxy may take a moment
    # to accept them all), so that what is in flight at the signal is known.
    await asyncio.sleep(2.6)
    while not all(c.received or c.left_at or c.ended_at for c in clients):
        assert time.monotonic() < t0 + SETTLE_LIMIT, "clients still waiting for an answer"
        await asyncio.sleep(0.05)
    signalled = time.monotonic()
    took, stderr = await stop(proc)
    exited = signalled + took
    async with asyncio.timeout(read_until - time.monotonic() + 5):
        await asyncio.gather(*tasks)

    # The process: exit 0 within grace + 1 s, no traceback.
    assert proc.returncode == 0, stderr
    assert took <= EXIT_BOUND, f"exit {took:.2f}s after SIGTERM (grace {GRACE}s)"
    assert "Traceback" not in stderr, stderr
    assert "SIGTERM: stopping" in stderr

    # The log: one response_end per request, no proxy_error, every line timestamped.
    lines = read_log(log_path)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", x["ts"]) for x in lines)
    requests = {x["request_id"]: x for x in lines if x["event"] == "request"}
    ends: dict[str, list[dict[str, Any]]] = {}
    for x in lines:
        if x["event"] == "response_end":
            ends.setdefault(x["request_id"], []).append(x)
    assert set(ends) == set(requests)
    assert all(len(v) == 1 for v in ends.values()), [v for v in ends.values() if len(v) > 1]
    outcome = {rid: v[0]["outcome"] for rid, v in ends.items()}
    assert "proxy_error" not in outcome.values()
    by_client = {int(x["path"].rsplit("=", 1)[1]): rid for rid, x in requests.items()}

    problems: list[str] = []
    seen: Counter[str] = Counter()
    for c in clients:
        rid = by_client.get(c.number)
        if rid is None:  # it left before the proxy read its request: nothing logged
            if c.left_at is None:
                problems.append(f"client {c.number}: no request line, yet it did not leave")
            continue
        got = outcome[rid]
        seen[got] += 1
        if c.left_at is not None:  # left early, before the signal
            allowed = {"client_gone", "completed"}
        elif c.ended_at is not None and c.ended_at < signalled:  # done before the signal
            allowed = {"completed"}
        else:  # in flight at the signal
            allowed = {"completed", "shutdown"} if c.scenario != "hang" else {"shutdown"}
        if got not in allowed:
            problems.append(f"client {c.number} ({c.scenario}, {rid}): {got}, not {allowed}")
        if c.left_at is None:
            # What the client saw agrees with the log: a proper end only if completed,
            # and its connection ended (EOF or RST) by the time the process had exited.
            if c.body_ended != (got == "completed"):
                problems.append(f"client {c.number} ({rid}): {got} but body_ended={c.body_ended}")
            if c.ended_at is None or c.ended_at > exited + 0.5:
                problems.append(f"client {c.number} ({rid}): connection still open")
        if got == "shutdown" and c.ended_at is not None and c.ended_at < signalled + GRACE - 0.2:
            problems.append(f"client {c.number} ({rid}): cut before the grace was over")
    assert not problems, "\n".join(problems[:30])
    # The run did what it is for: streams cut by the stop, others that made it within
    # the grace, early leavers.
    assert seen["shutdown"] >= 30, seen
    assert seen["completed"] >= 30, seen
    assert seen["client_gone"] >= 10, seen


class Reader:
    """A client that reads its stream to the end, keeping only what the test needs (a
    busy stream sends megabytes)."""

    def __init__(self, number: int, scenario: str | None) -> None:
        self.number = number
        self.scenario = scenario
        self.bytes = 0
        self.tail = b""
        self.ended: str | None = None  # eof | rst | open

    @property
    def body_ended(self) -> bool:
        return self.tail.endswith(b"\r\n0\r\n\r\n")

    async def run(self, port: int, until: float) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        try:
            await send_request(sock, port, self.number, self.scenario, keep_alive=True)
            async with asyncio.timeout(until - time.monotonic()):
                while data := await loop.sock_recv(sock, 262144):
                    self.bytes += len(data)
                    self.tail = (self.tail + data)[-16:]
            self.ended = "eof"
        except ConnectionResetError:
            self.ended = "rst"
        except TimeoutError:
            self.ended = "open"
        finally:
            sock.close()


class ExitTime:
    """When process ``pid`` exits (``time.monotonic()``), as seen by a thread of its
    own: the test's event loop is busy itself and would see it late."""

    def __init__(self, pid: int) -> None:
        self._fd = os.pidfd_open(pid)
        self.at: float | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        try:
            select.select([self._fd], [], [])
            self.at = time.monotonic()
        finally:
            os.close(self._fd)

    def wait(self) -> float:
        self._thread.join(10)
        assert self.at is not None, "the process did not exit"
        return self.at


#: An upstream (a process of its own) that holds every answer until all ``N`` requests
#: have arrived, then streams SSE events to each as fast as it is let (an endless body):
#: every stream is in flight, and the proxy has more to do than it can.
FLOOD = textwrap.dedent(
    """
    import asyncio, sys
    EVENT = b'data: {"choices":[{"delta":{"content":"tok"}}]}\\n\\n'
    CHUNK = b"%x\\r\\n%b\\r\\n" % (len(EVENT), EVENT)
    HEAD = b"HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n"
    HEAD += b"Transfer-Encoding: chunked\\r\\n\\r\\n"

    async def main(expected):
        go, arrived = asyncio.Event(), [0]

        async def serve(reader, writer):
            try:
                head = await reader.readuntil(b"\\r\\n\\r\\n")
                for line in head.split(b"\\r\\n"):
                    if line.lower().startswith(b"content-length:"):
                        await reader.readexactly(int(line.split(b":")[1]))
                arrived[0] += 1
                if arrived[0] == expected:
                    go.set()
                await go.wait()
                writer.write(HEAD)
                while True:
                    writer.write(CHUNK * 4)
                    await writer.drain()
                    await asyncio.sleep(0.002)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main(int(sys.argv[1])))
    """
)


def spin() -> subprocess.Popen[bytes]:
    """A process that keeps a CPU busy."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def start_flood(tmp_path: Path, count: int) -> tuple[subprocess.Popen[bytes], str]:
    """The FLOOD upstream for ``count`` requests, and its URL."""
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    flood = subprocess.Popen([sys.executable, str(script), str(count)], stdout=subprocess.PIPE)
    assert flood.stdout is not None
    return flood, f"http://127.0.0.1:{int(flood.stdout.readline())}"


@pytest.mark.slow
async def test_a_stop_under_load_beside_busy_processes_ends_every_request_in_time(
    tmp_path: Path,
) -> None:
    """Two processes spin the CPU beside it; 210 streams are in flight, from an upstream
    that sends as fast as it is let, more than the proxy can frame and log, so its
    event loop lags by seconds. SIGTERM: the process exits within grace + 1 s of the
    signal (measured by a thread of the test's own, not by its busy loop), and every
    request has exactly one response_end."""
    count = 210
    processes: list[subprocess.Popen[bytes]] = []
    proc: asyncio.subprocess.Process | None = None
    try:
        flood, upstream = start_flood(tmp_path, count)
        processes.append(flood)
        proc, port, log_path = await start_with_scenarios(tmp_path, "--upstream", upstream)
        exited = ExitTime(proc.pid)
        readers = [Reader(n, ["hang", "slow", "framed", None][n % 4]) for n in range(count)]
        until = time.monotonic() + SETTLE_LIMIT + EXIT_BOUND + 5.0
        tasks = [asyncio.create_task(r.run(port, until)) for r in readers]
        started = time.monotonic()
        while not all(r.bytes for r in readers):  # every stream under way
            assert time.monotonic() < started + SETTLE_LIMIT, "streams still waiting"
            await asyncio.sleep(0.05)
        # The spinners run from here to the exit: the stop is what they load (from the
        # start they took two cores' worth of CPU from the rest of the suite for the
        # seconds the streams take to get going).
        processes += [spin(), spin()]
        under_way = sum(r.bytes for r in readers)
        while sum(r.bytes for r in readers) < 2 * under_way + 2**20:  # and flowing
            assert time.monotonic() < started + SETTLE_LIMIT, "streams not flowing"
            await asyncio.sleep(0.05)
        signalled = time.monotonic()
        _, stderr = await stop(proc)
        took = exited.wait() - signalled
        async with asyncio.timeout(until - time.monotonic() + 5):
            await asyncio.gather(*tasks)
    finally:
        for process in processes:
            process.kill()
            process.wait()
        if proc is not None and proc.returncode is None:  # (a failure before the stop)
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert took <= EXIT_BOUND, f"exit {took:.2f}s after SIGTERM (grace {GRACE}s)"
    lines = read_log(log_path)
    requests = {x["request_id"]: x for x in lines if x["event"] == "request"}
    ends: dict[str, list[dict[str, Any]]] = {}
    for x in lines:
        if x["event"] == "response_end":
            ends.setdefault(x["request_id"], []).append(x)
    missing = [rid for rid in requests if rid not in ends]
    assert len(requests) == count
    assert not missing, f"{len(missing)} of {count} requests have no response_end"
    assert {len(v) for v in ends.values()} == {1}
    # The bodies never end: each was cut by the stop, and its client saw no clean end.
    assert {v[0]["outcome"] for v in ends.values()} == {"shutdown"}
    assert {r.ended for r in readers} <= {"eof", "rst"}
    assert not [r.number for r in readers if r.body_ended]


#: ``chaosproxy serve`` with an upstream client whose close never ends, not even when
#: cancelled: the cleanup that another bug could make hang.
HUNG_CLOSE = textwrap.dedent(
    """
    import asyncio, sys
    from chaosproxy.upstream import UpstreamPool

    async def close_never(self):
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    UpstreamPool.close = close_never
    from chaosproxy.cli.main import main
    sys.exit(main(sys.argv[1:]))
    """
)


async def test_a_hung_cleanup_still_exits_0_within_grace_plus_1s(tmp_path: Path) -> None:
    script = tmp_path / "hung_close.py"
    script.write_text(HUNG_CLOSE)
    proc, port, log_path = await start_with_scenarios(
        tmp_path, python=[sys.executable, str(script)]
    )
    client = Client(0, "hang", keep_alive=True, start=0.0)
    reading = asyncio.create_task(client.run(port, time.monotonic(), time.monotonic() + 10))
    await asyncio.sleep(0.8)  # the mock's answer is out, the body hangs
    took, stderr = await stop(proc)
    await reading
    assert proc.returncode == 0, stderr
    assert took <= EXIT_BOUND, f"exit {took:.2f}s after SIGTERM (grace {GRACE}s)"
    assert "Traceback" not in stderr, stderr
    warnings = [x for x in stderr.splitlines() if "warning" in x]
    assert warnings and all(x.startswith("chaosproxy: warning: ") for x in warnings), stderr
    assert any("did not finish in time" in x for x in warnings), stderr
    # The stream was cut before the cleanup hung, and logged as such.
    ends = [x for x in read_log(log_path) if x["event"] == "response_end"]
    assert [x["outcome"] for x in ends] == ["shutdown"]
    assert client.ended_by in ("eof", "rst") and not client.body_ended


async def test_sigint_twice_exits_at_once(tmp_path: Path) -> None:
    proc, port, _ = await start_with_scenarios(tmp_path, "--grace", "30s")
    client = Client(0, "hang", keep_alive=True, start=0.0)
    reading = asyncio.create_task(client.run(port, time.monotonic(), time.monotonic() + 10))
    await asyncio.sleep(0.8)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGINT)
    await asyncio.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    async with asyncio.timeout(10):
        await proc.wait()
    assert time.monotonic() - signalled < 2.0
    assert proc.returncode == 0
    await reading


# --------------------------------------------------------------------------- in process


HANG = "name: hang\nfaults:\n  - hang: {}\n"


def _hang_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaosproxy.upstream import UpstreamPool

    async def close_never(self: UpstreamPool) -> None:
        await asyncio.Event().wait()  # honours cancellation: a plain hang

    monkeypatch.setattr(UpstreamPool, "close", close_never)


async def open_hanging_stream(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request_bytes(0, "hang", keep_alive=True))
    await writer.drain()
    async with asyncio.timeout(5):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return reader, writer


async def test_async_chaosproxy_cuts_streams_as_shutdown_and_stops_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hang_forever(monkeypatch)
    proxy = ChaosProxy(scenarios=[parse_scenario(HANG, "<hang>")], grace=0.3)
    async with proxy:
        reader, writer = await open_hanging_stream(proxy.url)
        await asyncio.sleep(0.8)  # every event is out: the body hangs
    # (When: the grace, then the hung upstream's close given up at grace + CLOSE_MARGIN,
    # exactly, on virtual time: tests/server/test_timing.py. Here: what a socket sees.)
    async with asyncio.timeout(2):
        rest = await reader.read()  # EOF: the connection was closed
    assert not rest.endswith(b"0\r\n\r\n")
    writer.close()
    ends = [x for x in proxy.lines if x["event"] == "response_end"]
    assert [x["outcome"] for x in ends] == ["shutdown"]
    assert all("ts" in x for x in proxy.lines)


def test_sync_chaosproxy_leaves_its_block_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hang_forever(monkeypatch)
    proxy = ChaosProxy(scenarios=[parse_scenario(HANG, "<hang>")], grace=0.2)
    with proxy:
        host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=5)
        sock.sendall(request_bytes(0, "hang", keep_alive=True))
        assert sock.recv(12) == b"HTTP/1.1 200"
        time.sleep(0.8)  # every event is out: the body hangs
        started = time.monotonic()
    took = time.monotonic() - started
    with sock:
        assert 0.2 <= took <= 0.2 + CLOSE_MARGIN + 0.3, took
        while sock.recv(65536):  # the proxy closed the connection: EOF, soon
            pass
    ends = [x for x in proxy.lines if x["event"] == "response_end"]
    assert [x["outcome"] for x in ends] == ["shutdown"]


@pytest.mark.slow
def test_the_chaos_proxy_fixture_tears_down_in_bounded_time(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "hang.yaml").write_text(HANG)
    took = tmp_path / "teardown.txt"
    pytester.makepyfile(
        textwrap.dedent(
            f"""
            import asyncio, socket, time
            import pytest
            from chaosproxy.upstream import UpstreamPool

            async def close_never(self):
                await asyncio.Event().wait()

            UpstreamPool.close = close_never  # a cleanup that never ends on its own
            ENDED = []

            @pytest.fixture
            def timed():
                yield
                # chaos_proxy (set up after this one) has been torn down by now
                with open({str(took)!r}, "w") as f:
                    f.write(str(time.monotonic() - ENDED[0]))

            def test_leaves_a_hanging_stream(timed, chaos_proxy):
                host, port = chaos_proxy.url.removeprefix("http://").rsplit(":", 1)
                sock = socket.create_connection((host, int(port)))
                body = b'{{"model": "m", "stream": true, "messages": []}}'
                sock.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n"
                    b"X-Chaos-Scenario: hang\\r\\nContent-Type: application/json\\r\\n"
                    b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body
                )
                assert sock.recv(12) == b"HTTP/1.1 200"
                time.sleep(0.5)  # every event is out; the stream hangs from now on
                ENDED.append(time.monotonic())
            """
        )
    )
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # this checkout, not an installed copy
    result = pytester.runpytest_subprocess("--chaos-scenarios", str(scenarios), "-q", timeout=30)
    result.assert_outcomes(passed=1)
    # The default grace (2s: the stream never ends on its own) plus the margin, though
    # the upstream client never finishes closing.
    assert float(took.read_text()) <= 2.0 + 0.5 + 0.3
