# ruff: noqa: E402  (the bytecode cache is set up before anything else is imported)
from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any


def _cache_bytecode() -> None:
    """Compiled bytecode, kept even where the environment says PYTHONDONTWRITEBYTECODE
    (this machine's does): in a cache of its own outside the tree (PYTHONPYCACHEPREFIX,
    inherited by pytest-xdist's workers and every process a test starts), never next to
    the sources. Without it each worker compiled, and rewrote the assertions of, some
    400 modules on every run (16 s of CPU before its first test; 6 s with it), and each
    ``python -m chaosproxy`` a test starts compiled the package afresh (0.57 s of CPU to
    import it; 0.43 s)."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = Path(tempfile.gettempdir()) / f"chaosproxy-tests-pycache-{os.getuid()}"
    try:
        prefix.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return  # (a read-only machine: no cache, as the environment asked)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(prefix)


_cache_bytecode()


def _trust_no_one() -> None:
    """A trust store of one CA whose key was thrown away (tests/fixtures/tls/), in place
    of the system's, for every process of the run: SSL_CERT_FILE (read by OpenSSL's
    default paths, by httpx and by the SDKs built on it), also where the environment
    names the system's bundle (this machine's does), SSL_CERT_DIR with no certificate
    in it, and no NODE_EXTRA_CA_CERTS. No test reaches a public host; the TLS tests make
    their own CA and pass it. Loading the system's ~150 certificates took 20 ms of CPU
    for each TLS context, and every httpx client, SDK client and aiohttp import builds
    one (over a minute of CPU a run); this one takes 0.5 ms. Node read the bundle at
    start: 30 ms a process."""
    tls = Path(__file__).parent / "fixtures" / "tls"
    os.environ["SSL_CERT_FILE"] = str(tls / "trust-no-one.pem")
    os.environ["SSL_CERT_DIR"] = str(tls)  # (no hashed names there: nothing is looked up)
    os.environ.pop("NODE_EXTRA_CA_CERTS", None)


_trust_no_one()

import orjson
import pytest
from hypothesis import HealthCheck, settings

from chaosproxy._build import PURE_ENV
from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.start import RunningProxy, start_proxy
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import parse_scenario
from tests.support.node import NodeRunner, node_missing
from tests.clients.zygote import ForkServer
from tests.support.scripted_upstream import BigUpstream, ScriptedUpstream, scripted_upstream
from tests.support.scripted_upstream import big_upstream as serve_big_upstream

pytest_plugins = ["pytester", "tests.support.logcheck", "tests.support.reaper"]

REPO = Path(__file__).resolve().parents[1]
#: The built-in scenario library: its one home, at the top of the repository (setup.py
#: builds it into the package as chaosproxy/scenarios/).
LIBRARY = REPO / "scenarios"
#: The recorded provider captures (see PROVENANCE.md there): part of the repo, so a
#: missing one is an error, never a skip. Every test reads them from here.
FIXTURES = REPO / "tests" / "fixtures" / "providers"


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
SHARED_CLIENT_SERVER = "CHAOSPROXY_TESTS_CLIENT_SERVER"


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


@contextlib.contextmanager
def busy_port() -> Iterator[int]:
    """A port of 127.0.0.1 that a socket listens on, while the block runs."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


#: The property tests' examples: ``max_examples=examples(N)`` draws N of them with
#: ``CHAOSPROXY_HYPOTHESIS=thorough`` (the compiled run of .ci/run sets it) and a quarter
#: (at least 10) by default, each run new ones (docs/testing.md).
THOROUGH = os.environ.get("CHAOSPROXY_HYPOTHESIS", "") == "thorough"
#: No deadline and no "too slow" health check: on a loaded machine (a two-core CI runner
#: at load 10) an example's time says nothing of the code under test, and a property
#: test must not fail for it; speed is benchmarks/' to measure.
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("quick", max_examples=25, **_UNTIMED)
settings.register_profile("thorough", max_examples=100, **_UNTIMED)
settings.load_profile("thorough" if THOROUGH else "quick")


@pytest.hookimpl(wrapper=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> Generator[None, int, int]:
    """``-n auto``: two workers for each core xdist counts (unless
    PYTEST_XDIST_AUTO_NUM_WORKERS says how many). The suite waits more than it computes
    (clients and servers in other processes, deadlines, stalls, a browser): with one
    worker a core, the cores were idle a third of the time (2 cores: 4 min 48 s, 388
    CPU-s; with 4 workers, 3 min 26 s to 3 min 51 s and no more CPU)."""
    cores = yield
    return cores if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") else 2 * cores


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the controller starts the run's two fork servers (the CLI's,
    the Python clients'), and its workers, which inherit its environment, use them: one
    of each for the run instead of one each a worker (a second or two of imports
    each). They listen at once and import while the workers collect; a client that
    comes earlier waits in the backlog."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    directory = Path(tempfile.mkdtemp(prefix="chaosproxy-forks-"))
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))  # (runs last)
    for variable, preload in (
        (SHARED_CLI_SERVER, CLI_MODULES),
        (SHARED_CLIENT_SERVER, CLIENT_LIBRARIES),
    ):
        (directory / variable).mkdir()
        server = ForkServer(list(preload), directory / variable, wait=False)
        config.add_cleanup(server.close)
        config.add_cleanup(lambda variable=variable: os.environ.pop(variable, None))
        os.environ[variable] = server.path


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``node`` is skipped, saying why, where the Node clients cannot run
    (no ``node``, or no ``tests/node/node_modules``: a fresh clone before ``npm ci``)."""
    if item.get_closest_marker("node") is not None:
        missing = node_missing()
        if missing is not None:
            pytest.skip(missing)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """What collection makes (every test module, the SDKs' thousands of types, some
    4,600 items) lives as long as the session. The garbage collector is kept out of it:
    off while it is made (five full collections of a growing heap, 0.8 s of CPU a
    worker), then frozen out of its sight (gc.freeze), so that each full collection
    scans what the tests make, not all of it again (each took 0.2 s, and a worker made
    dozens)."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()


def examples(n: int) -> int:
    """How many examples a property test that asks for ``n`` draws in this run."""
    return n if THOROUGH else max(10, n // 4)


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where connections are refused while the block runs: bound, never
    listening, so no other test (another xdist worker) can listen there meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def fixture_bytes(name: str) -> bytes:
    """One capture's bytes, exactly as recorded (a missing file raises)."""
    return (FIXTURES / name).read_bytes()


def fixture_paths(*suffixes: str) -> list[Path]:
    """The captures whose names end with one of ``suffixes``, sorted; at least one, so a
    parametrization over them never silently collects nothing."""
    paths = sorted(p for p in FIXTURES.iterdir() if p.name.endswith(suffixes))
    if not paths:
        raise FileNotFoundError(f"no provider capture ending in {suffixes} in {FIXTURES}")
    return paths


class LogCapture:
    """Every frame-log line the proxy writes, parsed."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self._ended: dict[str, asyncio.Event] = {}

    def __call__(self, line: bytes) -> None:
        parsed = orjson.loads(line)
        self.lines.append(parsed)
        if parsed["event"] == "response_end":
            self._event(parsed["request_id"]).set()

    def _event(self, request_id: str) -> asyncio.Event:
        return self._ended.setdefault(request_id, asyncio.Event())

    async def wait_end(self, request_id: str) -> dict[str, Any]:
        """The request's response_end line, once the proxy has written it."""
        async with asyncio.timeout(5):
            await self._event(request_id).wait()
        return self.end(request_id)

    def for_request(self, request_id: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("request_id") == request_id]

    def frames(self, request_id: str) -> list[dict[str, Any]]:
        return [line for line in self.for_request(request_id) if line["event"] == "frame"]

    def end(self, request_id: str) -> dict[str, Any]:
        ends = [x for x in self.for_request(request_id) if x["event"] == "response_end"]
        assert len(ends) == 1, self.for_request(request_id)
        return ends[0]


ProxyFactory = Callable[..., Awaitable[RunningProxy]]


#: What the fork server imports before it forks a client: the Python matrix clients' libraries.
#: (With what they import lazily, at their first request: the openai SDK's chat
#: resources, 2.5 s of pydantic models over a library run, were imported by every fork.)
CLIENT_LIBRARIES = (
    "httpx",
    "httpx_sse",
    "openai",
    "openai.resources.chat",
    "httpcore2",
    "encodings.idna",
    "orjson",
    "examples.clients.httpx_sse_client",
    "tests.support.browser",
)


@pytest.fixture(scope="session")
def python_clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """Python matrix clients run as processes forked from one that imported their
    libraries (tests/clients/zygote.py): ``python_clients.command(SCRIPT, ...)`` is the
    shell command for ``python SCRIPT ...``, and costs a fork instead of a second of
    imports. Under pytest-xdist, the one the controller started for the run; else
    started the first time a test asks."""
    shared = os.environ.get(SHARED_CLIENT_SERVER)
    if shared:
        yield ForkServer.attach(shared)
        return
    server = ForkServer(list(CLIENT_LIBRARIES), tmp_path_factory.mktemp("clients"))
    yield server
    server.close()


@pytest.fixture(scope="session")
def node_runner() -> Iterator[NodeRunner]:
    """Node client runs (tests/node/*.mjs) through one long-lived Node process
    (tests/support/node.py): the SDKs are imported once, not once a run; each run still
    has its own settings, connection pool and deadline. One per xdist worker, started
    the first time a test asks (the tests that ask are skipped without Node)."""
    with NodeRunner() as runner:
        yield runner


@pytest.fixture
async def big_upstream() -> AsyncIterator[BigUpstream]:
    """An upstream that streams 48 MiB as fast as it can (tests/support/scripted_upstream.py)."""
    async with serve_big_upstream() as up:
        yield up


#: The installed plugins a run inside a run leaves out: none of its tests uses them, and
#: each costs its import (0.3 s of CPU together, some fifteen runs). pytest-randomly
#: stays out so that the runs keep their written order; the chaosproxy plugin comes in
#: by its entry point, as in a user's run, and pytest-xdist stays for the runs that ask.
INNER_RUN_WITHOUT = ("randomly", "aiohttp", "anyio", "asyncio", "hypothesispytest")


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's ``pytester``, its runs without :data:`INNER_RUN_WITHOUT`: in their written
    order (the plugin's tests depend on it: one session proxy for two tests)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(f"-p no:{name}" for name in INNER_RUN_WITHOUT))
    return pytester


@pytest.fixture
async def upstream() -> AsyncIterator[ScriptedUpstream]:
    """A scripted upstream on a port of its own (tests/support/scripted_upstream.py): the test
    routes each path to what it should answer, and reads what it was sent."""
    async with scripted_upstream() as up:
        yield up


@pytest.fixture
def log_capture() -> LogCapture:
    return LogCapture()


@pytest.fixture
async def make_proxy(log_capture: LogCapture) -> AsyncIterator[ProxyFactory]:
    """Start a proxy: ``await make_proxy(upstream=url, scenarios={name: yaml_text})``.

    Only the given scenarios are loaded, unless ``library=True`` (the built-in library
    first, as ``chaosproxy serve`` does)."""
    started: list[RunningProxy] = []

    async def factory(
        upstream: str | tuple[str, ...] = "mock",
        scenarios: dict[str, str] | None = None,
        default: str | None = None,
        content: bool = False,
        seed: int | None = None,
        library: bool = False,
        **kw: Any,
    ) -> RunningProxy:
        log = FrameLog(None, content=content)
        log.add_listener(log_capture)
        parsed = {
            name: parse_scenario(text, f"<{name}>", default_name=name)
            for name, text in (scenarios or {}).items()
        }
        config = EMBEDDED.replace(upstream=upstream, scenario=default, seed=seed, **kw)
        proxy = await start_proxy(config, scenarios=parsed, log=log, library=library)
        started.append(proxy)
        return proxy

    yield factory
    for proxy in started:
        await proxy.close()
