"""Node client runs through one long-lived process of tests/node/runner.mjs.

A Node process spends 0.3 s of CPU importing an SDK before its run begins: the Node
client tests started some 130 of them. The runner imports each client's modules once
and keeps, for each run, what a process of its own had: the run's settings, its own
connection pool (destroyed when the run ends) and its own deadline (tests/node/lib.mjs).

    with NodeRunner() as node:
        record = node.run("openai-chat", {"CHAOS_URL": proxy.url, "CHAOS_SCENARIO": "..."})

``run`` is thread-safe; runs sent at once run at once, as processes would.
"""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
RUNNER = NODE_DIR / "runner.mjs"


def node_missing() -> str | None:
    """Why the Node clients cannot run here (a test marked ``node`` is then skipped
    with it), or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (NODE_DIR / "node_modules").is_dir():
        return "tests/node/node_modules is absent: run `npm ci --prefix tests/node`"
    return None


class NodeRunner:
    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            ["node", str(RUNNER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=NODE_DIR,
        )
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, Future[str]] = {}
        #: The end of the runner's stderr: what a failure shows.
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        self._readers = [
            threading.Thread(target=self._read_replies, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def run(self, client: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
        """The record line of one run of ``tests/node/{client}.mjs`` with the CHAOS_*
        settings ``env``, parsed."""
        future: Future[str] = Future()
        with self._lock:
            self._next += 1
            job = self._next
            self._waiting[job] = future
            assert self._proc.stdin is not None
            message = {"id": job, "client": client, "env": env}
            self._proc.stdin.write(json.dumps(message).encode() + b"\n")
            self._proc.stdin.flush()
        try:
            line = future.result(timeout)
        except TimeoutError:
            raise AssertionError(f"no answer from the Node runner: {self.stderr()}") from None
        record: dict[str, Any] = json.loads(line)
        return record

    def stderr(self) -> str:
        return "".join(self._stderr)

    def _read_replies(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            reply = json.loads(raw)
            with self._lock:
                future = self._waiting.pop(reply["id"])
            if "line" in reply:
                future.set_result(reply["line"])
            else:
                failure = f"the client script failed: {reply['failure']}"
                future.set_exception(AssertionError(failure))
        # The runner exited: whatever still waits never gets its answer.
        self._proc.wait()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            failure = f"the Node runner exited ({self._proc.returncode}): {self.stderr()}"
            future.set_exception(AssertionError(failure))

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            self._stderr.append(raw.decode(errors="replace"))

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()  # the runner ends once its runs have
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for reader in self._readers:
            reader.join(5)

    def __enter__(self) -> NodeRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
