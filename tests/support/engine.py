"""Helpers of the container tests: the ``docker`` command, polling with a deadline, and
HTTP by hand (to tell a reset from a close). One module, imported by conftest.py and
the tests alike, so that the session's label and tag are one."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

#: Where ../shared/tools/container-runtime.sh puts the Compose v2 plug-in.
RUNTIME_DOCKER_CONFIG = (
    Path(os.environ.get("TMPDIR", "/tmp")) / "chaosproxy-container" / "docker-config"
)
SESSION = uuid.uuid4().hex[:10]
LABEL = f"chaosproxy.test={SESSION}"
TAG = f"chaosproxy-test:{SESSION}"
#: The image's ports, as its Dockerfile says.
PROXY_PORT = 8080
ADMIN_PORT = 8478
CHAT = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}

T = TypeVar("T")


def wait_until(what: str, check: Callable[[], T | None], timeout: float, every: float = 0.1) -> T:
    """Poll ``check`` until it returns something true, at most ``timeout`` seconds; fail
    the test naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"{what}: not within {timeout:g}s", pytrace=False)
        time.sleep(every)


@dataclass
class Engine:
    """The ``docker`` command, with the environment that finds Compose v2."""

    env: dict[str, str]
    compose: bool
    #: Figures measured in the session, printed at its end.
    figures: list[tuple[str, str]] = field(default_factory=list)

    def run(
        self, *args: str, timeout: float = 60, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["docker", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            input=input,
            check=False,
        )
        if check and done.returncode != 0:
            pytest.fail(
                f"docker {' '.join(args)[:200]} exited {done.returncode}: "
                f"{(done.stderr or done.stdout)[-2000:]}",
                pytrace=False,
            )
        return done

    def inspect(self, container: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(self.run("inspect", container).stdout)
        return found[0]

    def address(self, container: str) -> str:
        """The container's own address on its network (no userland proxy in between)."""
        networks = self.inspect(container)["NetworkSettings"]["Networks"]
        address: str = next(n["IPAddress"] for n in networks.values() if n["IPAddress"])
        return address

    def published(self, container: str, port: int) -> int:
        """The host port that ``port`` of the container is published on."""
        out = self.run("port", container, f"{port}/tcp").stdout.split()
        return int(out[0].rpartition(":")[2])

    def health(self, container: str) -> str:
        state = self.inspect(container)["State"]
        if not state["Running"]:
            return f"exited {state['ExitCode']}"
        return str(state.get("Health", {}).get("Status", "none"))

    def wait_healthy(self, container: str, timeout: float = 30) -> None:
        status = wait_until(
            f"container {container} healthy",
            lambda: (s := self.health(container)) != "starting" and s,
            timeout,
        )
        if status != "healthy":
            logs = self.run("logs", container, check=False)
            pytest.fail(f"container {container}: {status}\n{logs.stderr[-2000:]}", pytrace=False)

    def logs(self, container: str, *, timestamps: bool = False) -> list[str]:
        args = ["logs", *(["--timestamps"] if timestamps else []), container]
        done = self.run(*args, check=False)
        return (done.stdout + done.stderr).splitlines()

    def note(self, what: str, value: str) -> None:
        self.figures.append((what, value))

    @contextlib.contextmanager
    def container(self, *args: str, image: str = TAG, healthy: bool = True) -> Iterator[str]:
        """``docker run -d`` with ``args`` (options, then after ``--`` the command), its
        id; removed at the end of the block, whatever happened."""
        options, _, command = _split(list(args))
        cid = self.run("run", "-d", "--label", LABEL, *options, image, *command).stdout.strip()
        try:
            if healthy:
                self.wait_healthy(cid)
            yield cid
        finally:
            self.run("rm", "-f", "-v", cid, check=False)

    @contextlib.contextmanager
    def volume(self) -> Iterator[str]:
        name = f"chaosproxy-test-{SESSION}-{uuid.uuid4().hex[:6]}"
        self.run("volume", "create", "--label", LABEL, name)
        try:
            yield name
        finally:
            self.run("volume", "rm", "-f", name, check=False)


def compose_runner(
    project: str, file: Path, env: dict[str, str], default_timeout: float = 120
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``compose(*args, timeout=...)``: ``docker compose -p PROJECT -f FILE ARGS`` in
    ``env``, its output as text, never raising on its exit status."""

    def compose(*args: str, timeout: float = default_timeout) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "compose", "-p", project, "-f", str(file), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )

    return compose


def _split(args: list[str]) -> tuple[list[str], str, list[str]]:
    if "--" in args:
        i = args.index("--")
        return args[:i], "--", args[i + 1 :]
    return args, "", []


def parse_time(stamp: str) -> float:
    """Seconds since the epoch of Docker's RFC 3339 time (nanoseconds cut to micro)."""
    stamp = stamp.strip().replace("Z", "+00:00")
    head, _, rest = stamp.partition(".")
    if rest:
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits) :]
        stamp = f"{head}.{digits[:6]}{zone}"
    return datetime.fromisoformat(stamp).timestamp()


@dataclass
class Build:
    tag: str
    seconds: float
    output: str


def build(
    engine: Engine, context: Path, tag: str | None, timeout: float = 900, target: str = ""
) -> Build:
    """``docker build -t tag context`` with the legacy builder (no BuildKit: the image
    must build on Docker 20.10 without it), timed. ``target``: up to that stage only;
    without a tag, the image is the builder's own (``Build.tag`` its id), kept as its cache
    like every stage it builds (removing a stage's only name would remove that cache)."""
    env_builder = {**engine.env, "DOCKER_BUILDKIT": "0"}
    options = [*(["-t", tag] if tag else []), *(["--target", target] if target else [])]
    start = time.monotonic()
    done = subprocess.run(
        ["docker", "build", *options, str(context)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env_builder,
        check=False,
    )
    seconds = time.monotonic() - start
    if done.returncode != 0:
        pytest.fail(f"docker build failed:\n{(done.stdout + done.stderr)[-4000:]}", pytrace=False)
    built = re.findall(r"^Successfully built ([0-9a-f]+)$", done.stdout, re.MULTILINE)
    return Build(tag or built[-1], seconds, done.stdout)


# ------------------------------------------------------------------ HTTP, by hand


def chat_request(path: str = "/v1/chat/completions", **headers: str) -> bytes:
    body = json.dumps(CHAT).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: chaosproxy",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@dataclass
class Received:
    data: bytes
    #: How the connection ended: "eof" (a FIN), "reset" (an RST), or "open" (still open
    #: when ``until`` was seen).
    end: str


def stream(
    host: str, port: int, request: bytes, *, until: bytes | None = None, timeout: float = 10
) -> Received:
    """Send ``request`` on a new connection and read until the connection ends, or until
    ``until`` has been received; bounded by ``timeout`` in all."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no end of the response within {timeout:g}s: {data[-300:]!r}")
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return Received(data, "reset")
            if not chunk:
                return Received(data, "eof")
            data += chunk
            if until is not None and until in data:
                return Received(data, "open")


def dechunked(body: bytes) -> bytes:
    """What a body in chunked transfer coding carries (how it was cut into chunks aside:
    that is the batching of a run, which may differ between two runs of one stream)."""
    content = b""
    while True:
        size, _, body = body.partition(b"\r\n")
        length = int(size.split(b";")[0], 16)
        if length == 0:
            return content
        content += body[:length]
        assert body[length : length + 2] == b"\r\n", body[: length + 2][-20:]
        body = body[length + 2 :]


def wait_serving(host: str, port: int, timeout: float = 30) -> None:
    """Until the proxy at ``host:port`` answers a request (a container's own address)."""

    def answers() -> bool:
        try:
            got = stream(host, port, chat_request(), timeout=5)
        except OSError:
            return False
        return got.data.startswith(b"HTTP/1.1 200")

    wait_until(f"the proxy at {host}:{port} answering", answers, timeout, every=0.2)
