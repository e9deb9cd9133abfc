# ruff: noqa: E402  (the bytecode cache is set up before anything else is imported)
from __future__ import annotations

import functools
import gc
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Generator, Iterator
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

import pytest
from hypothesis import HealthCheck, settings

from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.start import RunningProxy, start_proxy
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import parse_scenario
from tests.support.cli import CLI_MODULES, SHARED_CLI_SERVER
from tests.support.forks import ForkServer
from tests.support.node import NodeRunner, node_missing
from tests.support.properties import THOROUGH
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import BigUpstream, ScriptedUpstream, scripted_upstream
from tests.support.scripted_upstream import big_upstream as serve_big_upstream

pytest_plugins = ["pytester", "tests.support.logcheck", "tests.support.reaper"]

#: Where pytest-xdist's workers find the fork server of the Python clients that their
#: controller started (:func:`pytest_configure`; the CLI's: tests/support/cli.py).
SHARED_CLIENT_SERVER = "CHAOSPROXY_TESTS_CLIENT_SERVER"

#: No deadline and no "too slow" health check: on a loaded machine (a two-core CI runner
#: at load 10) an example's time says nothing of the code under test, and a property
#: test must not fail for it; speed is benchmarks/' to measure.
_UNTIMED: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("quick", max_examples=25, **_UNTIMED)
settings.register_profile("thorough", max_examples=100, **_UNTIMED)
settings.load_profile("thorough" if THOROUGH else "quick")


def _unset(variable: str) -> None:
    os.environ.pop(variable, None)


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
        config.add_cleanup(functools.partial(_unset, variable))
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
