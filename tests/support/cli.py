"""``chaosproxy`` as a process: run once (:func:`run_cli`), or served
(:func:`start_serve`), forked from a server that imported the package already."""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from chaosproxy._build import PURE_ENV
from tests.support.forks import ForkServer
from tests.support.repo import REPO

#: What the fork server of :func:`run_cli` imports: the command line and what its
#: commands import when they run.
CLI_MODULES = (
    "chaosproxy.cli.main",
    "chaosproxy.control.start",
    "chaosproxy.scenario",
    "chaosproxy.server.memory",
    "chaosproxy.tools.explore",
    "chaosproxy.tools.matrix",
    "chaosproxy.tools.replay",
    "chaosproxy.tools.report",
    "chaosproxy.tools.schema",
    "chaosproxy.tools.simulate",
    "chaosproxy.upstream.tls",
    "chaosproxy.workers.supervisor",
    "uvloop",
)
_cli_server: ForkServer | None = None
#: Where pytest-xdist's workers find the fork servers their controller started, one of
#: each for the whole run (:func:`pytest_configure`), in place of one each a worker.
SHARED_CLI_SERVER = "CHAOSPROXY_TESTS_CLI_SERVER"


def cli_server() -> ForkServer:
    """The run's fork server for :func:`run_cli`: its controller's, or this process's
    own (started when first asked)."""
    global _cli_server
    if _cli_server is None:
        shared = os.environ.get(SHARED_CLI_SERVER)
        if shared:
            _cli_server = ForkServer.attach(shared)
        else:
            directory = Path(tempfile.mkdtemp(prefix="chaosproxy-cli-"))
            _cli_server = ForkServer(list(CLI_MODULES), directory)
            atexit.register(shutil.rmtree, directory, True)
            atexit.register(_cli_server.close)
    return _cli_server


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    stdin: bytes = b"",
    cwd: Path = REPO,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``python -m chaosproxy ARGS`` in ``cwd``, run with this checkout's package
    (wherever the test runs), its output as text; ``env`` adds to the environment.

    The process is forked from one that imported the package already
    (tests/clients/zygote.py): the same run, without a third of a second of imports.
    An ``env`` that chooses the build (``CHAOSPROXY_PURE``), which the package reads
    as it is imported, gets a fresh interpreter."""
    fresh = env is not None and PURE_ENV in env
    python = [sys.executable] if fresh else cli_server().argv()
    return subprocess.run(
        [*python, "-m", "chaosproxy", *args],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        check=False,
    )


def chaosproxy_argv() -> list[str]:
    """The command line of ``python -m chaosproxy``, forked from :func:`cli_server`: a
    process of its own, as one the test started (its argv, environment, working
    directory, standard streams, signals and exit status), without a third of a second
    of imports. A test that measures the process itself (its memory, its file
    descriptors, its exit under load) starts a fresh interpreter instead."""
    return [*cli_server().argv(), "-m", "chaosproxy"]


async def start_serve(
    *args: str, cwd: Path = REPO, command: Sequence[str] | None = None
) -> tuple[asyncio.subprocess.Process, str]:
    """``chaosproxy serve ARGS`` as a process (stdout dropped, stderr piped) and the first
    line it wrote on stderr: its start-up line, or why it did not start. ``command``
    stands for ``chaosproxy`` (default :func:`chaosproxy_argv`; a script that starts it
    otherwise)."""
    proc = await asyncio.create_subprocess_exec(
        *(command or chaosproxy_argv()), "serve", *args,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    async with asyncio.timeout(20):
        return proc, (await proc.stderr.readline()).decode()


def port_in(line: str) -> int:
    """The port of serve's start-up line (``listening on http://HOST:PORT``)."""
    found = re.search(r"listening on http://[0-9.]+:(\d+)", line)
    assert found, line
    return int(found.group(1))


async def stop_serve(proc: asyncio.subprocess.Process) -> str:
    """SIGTERM ``proc`` (from :func:`start_serve`) and the rest of its stderr once it
    ended; killed if it has not within 10 s."""
    assert proc.stderr is not None
    proc.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(10):
            stderr = (await proc.stderr.read()).decode()
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return stderr


async def serve_until_started(
    *args: str, env: dict[str, str] | None = None
) -> tuple[asyncio.subprocess.Process, list[str]]:
    """``chaosproxy serve`` as a process; its stderr lines up to the start-up line and
    the notices after it (read until a short quiet)."""
    proc = await asyncio.create_subprocess_exec(
        *chaosproxy_argv(), "serve", *args,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    async with asyncio.timeout(20):
        while not lines or "listening on" not in lines[-1]:
            line = (await proc.stderr.readline()).decode()
            assert line, lines
            lines.append(line.rstrip("\n"))
    while True:
        try:
            async with asyncio.timeout(0.5):
                line = (await proc.stderr.readline()).decode()
        except TimeoutError:
            break
        if not line:
            break
        lines.append(line.rstrip("\n"))
    return proc, lines


async def sigterm(proc: asyncio.subprocess.Process) -> str:
    assert proc.stderr is not None
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(10):
        await proc.wait()
    assert proc.returncode == 0
    return (await proc.stderr.read()).decode()


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def read_until(proc: subprocess.Popen[str], text: str, limit: float = 20) -> str:
    """Its stderr, at least up to ``text`` (a bounded wait). Read from the pipe itself,
    so that nothing waits unseen in a buffer: what is read is returned, and the rest is
    still in the pipe for ``proc.stderr.read()``."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + limit
    while text.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"no {text!r} within {limit}s: {seen!r}"
        chunk = os.read(fd, 65536)
        assert chunk, seen
        seen += chunk
    return seen.decode()


LISTENING = re.compile(r"listening on http://([0-9.]+):(\d+)")
