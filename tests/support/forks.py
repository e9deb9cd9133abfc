"""The client of the suite's fork server (tests/clients/zygote.py, the program): starts
one, or attaches to one another process started, and makes the command lines that run
a client through it (tests/clients/zygote_shim.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
#: The shim, and how to run it: no site packages, no user environment (-I -S): ~10 ms.
SHIM = CLIENTS / "zygote_shim.py"
REPO = CLIENTS.parents[1]


class ForkServer:
    """A running fork server (``python -m tests.clients.zygote``) that has imported
    ``preload``; :meth:`command` is the shell command that runs a client through it."""

    def __init__(self, preload: list[str], directory: Path, *, wait: bool = True) -> None:
        """Start one in ``directory``; ``wait``: until it has imported ``preload`` (a
        client that comes before waits in its backlog meanwhile, once it listens)."""
        self.path = str(directory / "zygote.sock")
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-m", "tests.clients.zygote", self.path, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
                ),
            },
        )
        from tests.support.reaper import spare  # (lives for the session, not the test)

        spare(self._process.pid)
        assert self._process.stdout is not None
        said = self._process.stdout.readline()
        assert said == b"listening\n", f"the fork server did not start: {said!r}"
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Until the server has imported what it preloads (it says ``ready``)."""
        assert self._process is not None and self._process.stdout is not None
        ready = self._process.stdout.readline()
        assert ready == b"ready\n", f"the fork server did not start: {ready!r}"

    @classmethod
    def attach(cls, path: str) -> ForkServer:
        """A handle on the server another process started, listening at ``path`` (a
        pytest-xdist worker's, on its controller's): closing it leaves the server be."""
        server = cls.__new__(cls)
        server.path = path
        server._process = None
        return server

    def argv(self, *argv: str | Path) -> list[str]:
        """The command line of ``python ARGV...``, forked from the server."""
        return [sys.executable, "-I", "-S", str(SHIM), self.path, *map(str, argv)]

    def command(self, *argv: str | Path) -> str:
        """``python ARGV...``, forked from the server (a shell command for the matrix)."""
        return shlex.join(self.argv(*argv))

    def close(self) -> None:
        if self._process is None:
            return  # (attached: its starter closes it)
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
