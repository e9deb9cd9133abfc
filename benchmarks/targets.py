"""Starting, probing and stopping what the benchmark measures, each in its own process.

- the SSE upstream (``benchmarks/upstream.py``);
- chaosproxy as users run it (``python -m chaosproxy serve … --log FILE``), either in
  passthrough or with a default scenario that frames every event and changes nothing;
- nginx as a streaming reverse proxy (``proxy_buffering off``), from a generated config,
  ``daemon off``, when an ``nginx`` binary is on PATH.

Plus the ``/proc`` readers for CPU time and peak RSS (``VmHWM``) of those processes.
Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1

FRAMED_SCENARIO = """\
# Frames every event (SSE), logs every frame, changes nothing.
name: bench-framed
description: benchmark — a fault that never fires, so every event is framed and logged
faults:
  - duplicate: {probability: 0}
"""

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile {nofile};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections {connections};
    multi_accept on;
}}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream sse_upstream {{
        server {upstream};
        keepalive 512;
    }}
    server {{
        listen {host}:{port} backlog=4096;
        location / {{
            proxy_pass http://sse_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


class TargetError(Exception):
    """A target could not be started; the message says why (with its stderr tail)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class Process:
    """A child process we started, with where its stderr goes."""

    name: str
    popen: subprocess.Popen[bytes]
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stderr_tail(self, lines: int = 15) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; only this process, by its pid."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.popen.kill()
                self.popen.wait(timeout)
        if self.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the benchmark process dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def spawn(
    name: str,
    argv: list[str],
    workdir: Path,
    *,
    stdout: int | None = None,
    env: dict[str, str] | None = None,
) -> Process:
    stderr_path = workdir / f"{name}.stderr"
    with stderr_path.open("wb") as err:
        popen = subprocess.Popen(
            argv,
            cwd=workdir,
            env={**os.environ, **env} if env else None,
            stdin=subprocess.PIPE,
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # a Ctrl-C in the terminal reaches only us
            preexec_fn=die_with_parent,  # we are single-threaded here
        )
    return Process(name, popen, stderr_path)


@dataclass
class Target:
    """Something the load generator connects to."""

    name: str
    port: int
    description: str
    process: Process | None = None
    #: Extra files (the frame log) whose size is worth reporting.
    log_path: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)
    #: Where the proxy's loop-lag probe writes (chaosproxy.observe.looplag), when it has one.
    lag_path: Path | None = None

    def measured_pids(self) -> list[int]:
        """The processes whose CPU and memory count for this target."""
        if self.process is None:
            return []
        pid = self.process.pid
        return [pid, *children(pid)]

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


# ---------------------------------------------------------------------------- upstream


def start_upstream(workdir: Path) -> tuple[Process, int]:
    proc = spawn(
        "upstream",
        [sys.executable, str(HERE / "upstream.py"), "--port", "0", "--watch-stdin"],
        workdir,
        stdout=subprocess.PIPE,
    )
    assert proc.popen.stdout is not None
    line = proc.popen.stdout.readline().decode().strip()
    if not line.startswith("PORT "):
        proc.stop()
        raise TargetError(f"upstream did not start: {line!r}\n{proc.stderr_tail()}")
    return proc, int(line.split()[1])


# ---------------------------------------------------------------------------- chaosproxy


def chaosproxy_argv(variant: str | None) -> list[str]:
    if variant:
        return [sys.executable, str(HERE / "variants.py"), variant]
    return [sys.executable, "-m", "chaosproxy"]


def start_chaosproxy(
    name: str,
    upstream_port: int,
    workdir: Path,
    *,
    framed: bool,
    variant: str | None = None,
    workers: int = 1,
) -> Target:
    """``serve`` as users run it; ``workers`` > 1 adds ``--workers N`` (the supervisor's
    children, the workers, are measured with it; no loop-lag probe: it is per process)."""
    port = free_port()
    tdir = workdir / name
    tdir.mkdir(parents=True, exist_ok=True)
    log_path = tdir / "frames.jsonl"
    argv = [
        *chaosproxy_argv(variant),
        "serve",
        "--listen",
        f"{HOST}:{port}",
        "--upstream",
        f"http://{HOST}:{upstream_port}",
        "--admin",
        f"{HOST}:0",  # on, as by default, but on a free port
        "--log",
        str(log_path),
    ]
    if framed:
        scen = tdir / "scenarios"
        scen.mkdir(exist_ok=True)
        (scen / "bench-framed.yaml").write_text(FRAMED_SCENARIO)
        argv += ["--scenarios", str(scen), "--scenario", "bench-framed"]
    else:
        # An empty scenario directory: no ./scenarios surprise, pure passthrough.
        empty = tdir / "no-scenarios"
        empty.mkdir(exist_ok=True)
        argv += ["--scenarios", str(empty)]
    desc = "chaosproxy, default scenario duplicate p=0" if framed else "chaosproxy, passthrough"
    if variant:
        desc += f" [variant {variant}]"
    if workers > 1:
        argv += ["--workers", str(workers)]
        desc += f", {workers} workers"
        proc = spawn(name, argv, tdir)
        return Target(name, port, desc, proc, log_path)
    lag_path = tdir / "looplag.json"
    proc = spawn(name, argv, tdir, env={"CHAOSPROXY_LOOP_LAG": str(lag_path)})
    return Target(name, port, desc, proc, log_path, lag_path=lag_path)


async def loop_lag_window(target: Target, wait_s: float = 5.0) -> dict[str, Any] | None:
    """Ask the proxy's loop-lag probe for what it measured since the last ask (SIGUSR1)
    and wait for it to write; None when the target has no probe (nginx, direct, or a
    chaosproxy older than the probe: its file never appears and no signal is sent)."""
    path, proc = target.lag_path, target.process
    if path is None or proc is None or not path.exists() or not proc.alive():
        return None
    try:
        before = json.loads(path.read_bytes()).get("write", 0)
    except (OSError, ValueError):
        return None
    os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        with contextlib.suppress(OSError, ValueError):
            body: dict[str, Any] = json.loads(path.read_bytes())
            if body.get("write", 0) > before:
                return body
    return None


# ---------------------------------------------------------------------------- nginx


def nginx_binary() -> str | None:
    found = shutil.which("nginx")
    if found:
        return found
    for candidate in ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def start_nginx(upstream_port: int, workdir: Path, *, nofile: int) -> Target | None:
    """nginx from a generated config, or None when no nginx is installed."""
    binary = nginx_binary()
    if binary is None:
        return None
    port = free_port()
    tdir = workdir / "nginx"
    tdir.mkdir(parents=True, exist_ok=True)
    conf = tdir / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            dir=tdir,
            host=HOST,
            port=port,
            upstream=f"{HOST}:{upstream_port}",
            nofile=nofile,
            connections=max(1024, min(nofile, 16384) - 64),
        )
    )
    version = subprocess.run(
        [binary, "-v"], capture_output=True, text=True, check=False
    ).stderr.strip()
    proc = spawn("nginx", [binary, "-p", str(tdir), "-c", str(conf)], tdir)
    return Target(
        "nginx",
        port,
        f"{version or 'nginx'}, 1 worker, proxy_buffering off, upstream keepalive",
        proc,
        extra={"binary": binary},
    )


# ---------------------------------------------------------------------------- readiness


def wait_listening(target: Target, timeout: float = 15.0) -> None:
    """Until the target accepts TCP connections (or its process died); with workers,
    until all of them do (the supervisor's start-up line says so)."""
    deadline = time.monotonic() + timeout
    while "workers" in target.description and time.monotonic() < deadline:
        if target.process is None or "listening on" in target.process.stderr_tail():
            break
        time.sleep(0.05)
    while time.monotonic() < deadline:
        if target.process is not None and not target.process.alive():
            raise TargetError(
                f"{target.name} exited with {target.process.popen.returncode}:\n"
                f"{target.process.stderr_tail()}"
            )
        with socket.socket() as s:
            s.settimeout(0.5)
            try:
                s.connect((HOST, target.port))
            except OSError:
                time.sleep(0.05)
                continue
            return
    tail = target.process.stderr_tail() if target.process else ""
    raise TargetError(f"{target.name} not listening on {target.port} after {timeout}s\n{tail}")


# ---------------------------------------------------------------------------- /proc


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (nginx's workers)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def cpu_times(pids: list[int]) -> tuple[float, float]:
    """(user, system) CPU time of ``pids`` (not of their children) in seconds. System
    time is the kernel working for the process: its syscalls (on loopback, ``send()``
    runs the receiver's TCP input inline) and the interrupts charged to it."""
    user = system = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        user += int(fields[11])  # utime (field 14)
        system += int(fields[12])  # stime (field 15)
    return user / CLK_TCK, system / CLK_TCK


def cpu_seconds(pids: list[int]) -> float:
    """user + system CPU time of ``pids`` (not of their children) in seconds."""
    return sum(cpu_times(pids))


def status_kb(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_mb(pids: list[int]) -> float | None:
    """Sum of VmHWM (peak resident set) over ``pids``, in MiB."""
    values = [status_kb(p, "VmHWM") for p in pids]
    known = [v for v in values if v is not None]
    return round(sum(known) / 1024.0, 1) if known else None


def rss_mb(pids: list[int]) -> float | None:
    values = [status_kb(p, "VmRSS") for p in pids]
    known = [v for v in values if v is not None]
    return round(sum(known) / 1024.0, 1) if known else None


def reset_peak_rss(pids: list[int]) -> bool:
    """Reset VmHWM to the current RSS (``echo 5 > /proc/PID/clear_refs``, Linux ≥ 4.0)."""
    ok = True
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


# ---------------------------------------------------------------------------- sockets

SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture


def socket_options(pid: int, listen_port: int) -> dict[str, dict[str, int]] | None:
    """TCP_NODELAY / TCP_CORK on the TCP sockets of ``pid``, by side.

    The target's sockets are borrowed with ``pidfd_getfd`` (Linux >= 5.6, needs ptrace
    rights over the target: root or the same user with ptrace_scope 0), inspected and
    closed again (closing our duplicate leaves the target's socket alone). ``client``
    sockets are those accepted on ``listen_port``; ``upstream`` those it connected.
    None when the kernel or the permissions do not allow it.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    counts: dict[str, dict[str, int]] = {}
    try:
        try:
            fds = [int(f) for f in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            return None
        for fd in fds:
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    continue
            except OSError:
                continue
            dup = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
            if dup < 0:
                if ctypes.get_errno() in (1, 38):  # EPERM, ENOSYS: cannot look at all
                    return None
                continue
            with socket.socket(fileno=dup) as sock:
                if sock.type != socket.SOCK_STREAM or sock.family not in (
                    socket.AF_INET,
                    socket.AF_INET6,
                ):
                    continue
                try:
                    local_port = sock.getsockname()[1]
                    sock.getpeername()
                except OSError:
                    continue  # the listening socket, or one not connected
                side = "client" if local_port == listen_port else "upstream"
                c = counts.setdefault(side, {"sockets": 0, "nodelay": 0, "cork": 0})
                c["sockets"] += 1
                c["nodelay"] += bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                c["cork"] += bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK))
    finally:
        os.close(pidfd)
    return counts


def tcp_ext_counters(names: tuple[str, ...] = ("ListenOverflows", "ListenDrops")) -> dict[str, int]:
    """Kernel TCP counters (``/proc/net/netstat`` TcpExt) for this network namespace."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return {}
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        if head.startswith("TcpExt:"):
            table = dict(zip(head.split()[1:], values.split()[1:], strict=False))
            return {n: int(table[n]) for n in names if n in table}
    return {}
