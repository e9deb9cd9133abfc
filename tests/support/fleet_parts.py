"""Real parts for the fleet's tests (docs/fleet.md): Debian's ``redis-server`` and
HAProxy as processes of their own, and replicas of ``chaosproxy serve`` naming them.

Each part waits for what it started by asking it (a ``PING``, a connection), never by
sleeping; each is stopped, and killed if it must be, when its block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cli import start_serve, stop_serve

REDIS = shutil.which("redis-server")
HAPROXY = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
)

needs_redis = pytest.mark.skipif(REDIS is None, reason="needs Debian's redis-server")
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="needs Debian's haproxy")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(port: int, ask: bytes, expect: bytes, within: float = 10.0) -> None:
    """Wait until 127.0.0.1:``port`` answers ``ask`` with ``expect`` (or raise)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                if not ask:
                    return
                s.sendall(ask)
                if s.recv(64).startswith(expect):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing answered on port {port} within {within} s")
        time.sleep(0.02)


@dataclass
class RedisServer:
    """One ``redis-server`` on loopback, keeping nothing on disk."""

    port: int
    process: subprocess.Popen[bytes]
    workdir: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers (a stalled Redis)."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def command(self, *args: str) -> str:
        """``redis-cli`` on this server (a test's own look inside)."""
        out = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True,
            check=True,
            timeout=10,
        )
        return out.stdout.decode().strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def redis_server(tmp: Path, port: int | None = None) -> Iterator[RedisServer]:
    assert REDIS is not None
    port = port or free_port()
    workdir = tmp / f"redis-{port}"
    workdir.mkdir(exist_ok=True)
    process = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    server = RedisServer(port, process, workdir)
    try:
        _answers(port, b"PING\r\n", b"+PONG")
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def haproxy(tmp: Path, backends: list[int]) -> Iterator[str]:
    """HAProxy in HTTP mode, round robin over ``backends`` (ports of 127.0.0.1), each
    request to the next (``http-server-close``), nothing buffered; its URL."""
    assert HAPROXY is not None
    port = free_port()
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{backend}" for i, backend in enumerate(backends)
    )
    config = tmp / f"haproxy-{port}.cfg"
    config.write_text(
        f"""global
    maxconn 512
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option http-server-close
frontend fleet
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
{servers}
"""
    )
    process = subprocess.Popen(
        [HAPROXY, "-db", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _answers(port, b"", b"")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


LISTENING = re.compile(r"listening on (http://[0-9.]+:\d+) .*admin: (http://[0-9.]+:\d+)")


@dataclass
class Replica:
    name: str
    url: str
    admin: str
    log: Path
    process: asyncio.subprocess.Process
    stderr: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


async def start_replica(name: str, tmp: Path, *args: str) -> Replica:
    log = tmp / f"{name}.jsonl"
    proc, line = await start_serve(
        "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--replica-id", name,
        "--log", str(log), *args,
    )  # fmt: skip
    found = LISTENING.search(line)
    if found is None:
        await stop_serve(proc)
        raise AssertionError(f"replica {name} did not start: {line}")
    return Replica(name, found.group(1), found.group(2), log, proc)


@contextlib.asynccontextmanager
async def replicas(tmp: Path, names: list[str], *args: str) -> AsyncIterator[list[Replica]]:
    """Replicas of ``chaosproxy serve`` with ``args`` (``--state URL`` and the rest),
    started together, stopped (SIGTERM) together."""
    started = await asyncio.gather(
        *(start_replica(n, tmp, *args) for n in names), return_exceptions=True
    )
    running = [r for r in started if isinstance(r, Replica)]
    try:
        for result in started:
            if isinstance(result, BaseException):
                raise result
        yield running
    finally:
        for replica, stderr in zip(
            running, await asyncio.gather(*(stop_serve(r.process) for r in running)), strict=True
        ):
            replica.stderr.append(stderr)


async def eventually(check: Callable[[], bool], within: float = 5.0) -> bool:
    """Whether ``check()`` holds within ``within`` seconds (asked every 50 ms)."""
    for _ in range(max(int(within / 0.05), 1)):
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()
