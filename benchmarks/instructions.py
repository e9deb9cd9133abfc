"""Instructions per event, from a fixed workload: ``python benchmarks/instructions.py``.

Wall-clock figures move with whatever else the machine runs; instruction counts do
not. This runs ``chaosproxy serve`` under valgrind's cachegrind (no cache simulation:
it only counts instructions) between a lock-step SSE upstream and its clients, both in
this process outside valgrind, and reports the proxy's instructions per event:

- **paced**: the upstream writes a stream's next event only once the client has read
  the previous one, so every upstream read carries one event and the proxy makes one
  write of it: the path of a paced stream, whatever valgrind's slowness;
- **burst**: the upstream writes all of a stream's events at once, so reads carry many
  events: the path of a saturated stream.

Each shape runs twice (``--events`` and five times as many per stream, ``--streams``
streams at once); the difference divided by the difference in events is the cost of
one event, start-up and shutdown cancelling out. Targets: ``framed`` (the benchmark's
``bench-framed`` scenario: a fault that never fires, every event framed, checked and
logged) and ``passthrough``; modes: ``compiled`` (the package as installed) and
``pure`` (``CHAOSPROXY_PURE=1``: the Python sources even where compiled modules exist).
The proxy's start-up line says which it runs; a mode it does not run is an error. By
default the proxy is this checkout (pure: an editable install compiles nothing);
``--python VENV/bin/python`` runs the package installed there (the wheel).

    python benchmarks/instructions.py                   # this checkout: framed and passthrough
    pip wheel --no-deps -w dist . && python -m venv /tmp/v && /tmp/v/bin/pip install dist/*.whl
    python benchmarks/instructions.py --python /tmp/v/bin/python --modes compiled,pure

Needs valgrind (Debian: ``apt-get install valgrind``). A run takes a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from loadgen import StreamClient, StreamResult, request_bytes  # noqa: E402

BENCH_FRAMED = "name: bench-framed\nfaults:\n  - duplicate: {probability: 0}\n"
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)  # (one stream per connection: a pooled one would bring a second request it ignores)
PAD = b"x" * 200
_IREFS = re.compile(rb"(?:I\s+refs|Collected)\s*:\s+([\d,]+)")


def event_chunk(i: int) -> bytes:
    ev = b'data: {"t": 1764600000000000000, "i": %d, "pad": "%b"}\n\n' % (i, PAD)
    return b"%x\r\n%b\r\n" % (len(ev), ev)


class Upstream(asyncio.Protocol):
    """``GET /stream?id=K&n=N&shape=paced|burst``: N events; paced ones one at a time,
    the next when the client of stream K says it has read one."""

    streams: dict[str, Upstream] = {}

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.n = 0
        self.i = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or self.n:
            return
        target = self.buf.split(b" ", 2)[1].decode()
        query = dict(p.split("=", 1) for p in target.partition("?")[2].split("&") if "=" in p)
        self.n = int(query["n"])
        assert self.transport is not None
        self.transport.write(HEAD)
        if query.get("shape") == "burst":
            self.transport.write(b"".join(event_chunk(i) for i in range(self.n)) + b"0\r\n\r\n")
            self.transport.close()
            self.i = self.n
        else:
            Upstream.streams[query["id"]] = self
            self.next()

    def next(self) -> None:
        assert self.transport is not None
        if self.i < self.n:
            self.transport.write(event_chunk(self.i))
            self.i += 1
            if self.i == self.n:
                self.transport.write(b"0\r\n\r\n")
                self.transport.close()


class Client(StreamClient):
    """Counts events; tells the lock-step upstream of its stream after each one."""

    def __init__(self, stream_id: str, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.stream_id = stream_id

    def _body(self, body: bytes) -> None:
        before = self.result.events
        super()._body(body)
        upstream = Upstream.streams.get(self.stream_id)
        if upstream is not None:
            for _ in range(self.result.events - before):
                upstream.next()


async def drive(proxy_port: int, streams: int, events: int, shape: str) -> None:
    loop = asyncio.get_running_loop()
    done = []
    for k in range(streams):
        result = StreamResult()
        future: asyncio.Future[None] = loop.create_future()
        stream_id = f"{shape}-{events}-{k}"
        path = f"/stream?id={stream_id}&n={events}&shape={shape}"
        req = request_bytes("127.0.0.1", proxy_port, path)
        await loop.create_connection(
            lambda f=future, r=result, i=stream_id, q=req: Client(i, q, r, f, latency=False),
            "127.0.0.1",
            proxy_port,
        )
        done.append((future, result))
    for future, result in done:
        await asyncio.wait_for(future, 600)
        if not result.ok or result.events != events:
            raise RuntimeError(f"a stream failed: {result.error} ({result.events}/{events})")


@dataclass
class Count:
    target: str
    mode: str
    shape: str
    per_event: float
    small: int
    large: int


async def one_run(
    target: str,
    mode: str,
    streams: int,
    events: int,
    shape: str,
    workdir: Path,
    python: str | None = None,
) -> int:
    """The proxy's instruction count for one workload."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, "127.0.0.1", 0)
    upstream_port = server.sockets[0].getsockname()[1]
    scenarios = workdir / "scenarios"
    scenarios.mkdir(exist_ok=True)
    (scenarios / "bench-framed.yaml").write_text(BENCH_FRAMED)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("CHAOSPROXY_PURE", None)
    if python is None:  # this checkout; else the package installed for ``python``
        env["PYTHONPATH"] = str(REPO)
    if mode == "pure":
        env["CHAOSPROXY_PURE"] = "1"
    profile = os.environ.get("INSTRUCTIONS_CALLGRIND")  # a file: keep a callgrind profile
    valgrind = (
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}"]
        if profile
        else [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={workdir / 'cachegrind.out'}",
        ]
    )
    cprofile = os.environ.get("INSTRUCTIONS_CPROFILE")  # a file: cProfile instead of valgrind
    args = [
        *(valgrind if not (os.environ.get("INSTRUCTIONS_NO_VALGRIND") or cprofile) else []),
        python or sys.executable,
        *(["-m", "cProfile", "-o", cprofile] if cprofile else []),
        "-m",
        "chaosproxy",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        f"http://127.0.0.1:{upstream_port}",
        "--admin",
        "127.0.0.1:0",
        "--log",
        str(workdir / "frames.jsonl"),
        "--scenarios",
        str(scenarios),
        # valgrind makes the proxy ~50x slower: no limit may end a stream early.
        "--connect-timeout",
        "10m",
        "--head-timeout",
        "10m",
        "--idle-timeout",
        "10m",
        "--client-timeout",
        "10m",
    ]
    if target == "framed":
        args += ["--scenario", "bench-framed"]
    proc = await asyncio.create_subprocess_exec(
        *args,
        env=env,
        cwd=workdir,  # (python -m puts the directory first: never a checkout's sources)
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = b""
    port = None
    while port is None:
        line = await asyncio.wait_for(proc.stderr.readline(), 600)
        if not line:
            raise RuntimeError("the proxy exited before it listened: " + err.decode())
        err += line
        m = re.search(rb"\((compiled|pure)\) listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            if m.group(1).decode() != mode:
                proc.kill()
                raise RuntimeError(f"asked for {mode}, the proxy runs {m.group(1).decode()}")
            port = int(m.group(2))
    try:
        await drive(port, streams, events, shape)
    except Exception:
        proc.kill()
        log = (workdir / "frames.jsonl").read_text() if (workdir / "frames.jsonl").exists() else ""
        ends = [line for line in log.splitlines() if '"response_end"' in line]
        raise RuntimeError(f"the proxy's ends: {ends[:3]}") from None
    proc.send_signal(signal.SIGTERM)
    rest = await asyncio.wait_for(proc.stderr.read(), 600)
    await proc.wait()
    server.close()
    found = _IREFS.search(err + rest)
    if found is None:
        raise RuntimeError("no instruction count from cachegrind: " + (err + rest).decode()[-2000:])
    return int(found.group(1).replace(b",", b""))


async def measure(
    target: str, mode: str, shape: str, streams: int, events: int, python: str | None = None
) -> Count:
    with tempfile.TemporaryDirectory() as tmp:
        small = await one_run(target, mode, streams, events, shape, Path(tmp), python)
    with tempfile.TemporaryDirectory() as tmp:
        large = await one_run(target, mode, streams, events * 5, shape, Path(tmp), python)
    per_event = (large - small) / (streams * events * 4)
    return Count(target, mode, shape, per_event, small, large)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="framed,passthrough")
    parser.add_argument(
        "--modes",
        default=None,
        help="compiled, pure, or both (default: pure for the checkout, both with --python)",
    )
    parser.add_argument("--shapes", default="paced,burst")
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--events", type=int, default=100, help="per stream, small workload")
    parser.add_argument("--json", default=None, metavar="PATH")
    parser.add_argument(
        "--python",
        default=None,
        metavar="PYTHON",
        help="run the proxy with this interpreter and the chaosproxy installed for it (a "
        "venv with the wheel: compiled where it was built so); default: this checkout",
    )
    args = parser.parse_args()
    if subprocess.run(["valgrind", "--version"], capture_output=True).returncode != 0:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    modes = args.modes or ("compiled,pure" if args.python else "pure")
    counts: list[Count] = []
    for target in args.targets.split(","):
        for mode in modes.split(","):
            for shape in args.shapes.split(","):
                count = asyncio.run(
                    measure(target, mode, shape, args.streams, args.events, args.python)
                )
                counts.append(count)
                print(
                    f"{target:12} {mode:9} {shape:6} {count.per_event:10,.0f} instructions/event",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_bytes(
            orjson.dumps([c.__dict__ for c in counts], option=orjson.OPT_INDENT_2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
