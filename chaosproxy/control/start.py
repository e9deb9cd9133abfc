"""Starting and stopping a proxy (and its mock upstream and admin API) in a running
event loop, from one :class:`~chaosproxy.server.config.Config`.

Used by the CLI, :class:`~chaosproxy.ChaosProxy`, the tests and anything embedding
chaosproxy: one place knows how the pieces are wired together.

Stopping (:meth:`RunningProxy.close`) is bounded: it stops accepting at once, lets the
streams in flight run for ``config.grace``, cuts those still running (their outcome is
``shutdown``), then cleans up what is left (the upstream client, the admin API, the
mock) in what remains of :data:`CLOSE_MARGIN`. Whatever has not finished by then is
abandoned and reported, never waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import ipaddress
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web

from chaosproxy.control.admin import AdminState, RequestStore, create_admin_app
from chaosproxy.control.changes import ChangeTarget
from chaosproxy.control.watcher import ScenarioWatcher
from chaosproxy.observe import looplag
from chaosproxy.observe.logs import FrameLog, Observer, describe, redact_url
from chaosproxy.observe.metrics import Metrics
from chaosproxy.observe.trace import TraceWriter
from chaosproxy.scenario import (
    Fixture,
    Scenario,
    ScenarioError,
    cross_tenant_warnings,
    load_fixture_files,
    load_scenarios,
    with_library,
)
from chaosproxy.scenario.selection import Rebased, ScenarioSet, UnknownScenario
from chaosproxy.scenario.watch import ScenarioFiles
from chaosproxy.server.config import Config
from chaosproxy.server.net import CLIENT_GUARD, SHUTDOWN_GRACE, StartupError, hostport, listen
from chaosproxy.server.proxy import STATE, ProxyState, create_proxy_app
from chaosproxy.server.routes import MOCK as MOCK_UPSTREAM
from chaosproxy.server.routes import RouteTable
from chaosproxy.server.state import tenant_keys
from chaosproxy.upstream import Upstream
from chaosproxy.upstream.tls import upstream_warnings

if TYPE_CHECKING:
    from chaosproxy.fleet import SharedState
    from chaosproxy.fleet.history import HistoryMirror
    from chaosproxy.fleet.journal import FleetJournal
    from chaosproxy.mock.app import MissHandler
    from chaosproxy.mock.fixtures import MockFixtures

#: After the grace, what cutting the streams and cleaning up may take at most, so that
#: :meth:`RunningProxy.close` returns within ``grace + CLOSE_MARGIN``. The CLI exits
#: within ``grace + 1 s`` of the signal whatever happens (docs/operations.md, Shutdown).
CLOSE_MARGIN = 0.25
#: The longest the exit's watchdog spends writing the ends of requests still running.
LAST_WORDS = 0.15
#: After the cut, what the cancelled requests' tasks get at least to unwind, even when
#: the deadline has passed (their ends are logged already).
CUT_UNWIND = 0.05
#: How long the mock upstream and the admin API give their own requests when they stop
#: (the proxy's streams have ended by then: the mock has nobody left to serve).
SIDE_GRACE = 0.1


class _InFlight:
    """The proxy's request handlers running now (an aiohttp middleware adds each
    request's task), so that stopping can wait for them, then cut them."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - aiohttp runs each request in a task
            return await handler(request)
        self.tasks.add(task)
        try:
            return await handler(request)
        finally:
            self.tasks.discard(task)


def uses_mock(config: Config) -> bool:
    """Whether one of the upstreams is the built-in mock (started once for all)."""
    return any(route.url == MOCK_UPSTREAM for route in config.routes)


def scenario_set(config: Config, scenarios: Mapping[str, Scenario]) -> ScenarioSet:
    """The scenario set ``config`` asks for over ``scenarios`` (the proxy's, and the
    one a fleet's supervisor changes for its workers)."""
    return ScenarioSet(
        scenarios,
        config.scenario,
        config.seed,
        trust_client=config.trust_client_scenarios,
        # a shared request number makes the fleet's seeds its own
        salt=None if config.shared else config.replica_id,
    )


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` listens on loopback only (``localhost``, 127.0.0.0/8,
    ``::1``). Anything else, a wildcard or a name that must be resolved, is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bound_urls(runner: web.BaseRunner) -> list[str]:
    """``http://HOST:PORT`` for every address ``runner`` actually listens on, as bound
    (``0.0.0.0`` stays ``0.0.0.0``)."""
    urls: list[str] = []
    for address in runner.addresses:
        host, port = address[0], address[1]
        host = f"[{host}]" if ":" in host else host
        url = f"http://{host}:{port}"
        if url not in urls:
            urls.append(url)
    return urls


def check_admin_binding(config: Config) -> str | None:
    """Refuse (StartupError) an admin API off loopback without a token, unless
    ``admin_insecure``; then the warning it deserves (for stderr and ``/health``)."""
    if config.admin is None:
        return None
    if config.admin_token is not None and not config.admin_token.strip():
        raise StartupError("--admin-token is empty: give a token, or leave it unset")
    host, port = config.admin
    if is_loopback(host) or config.admin_token is not None:
        return None
    where = hostport(host, port) if host not in ("0.0.0.0", "") else f"{host or '*'}:{port}"
    if not config.admin_insecure:
        raise StartupError(
            f"the admin API on {where} is not on loopback and has no token: set "
            "CHAOSPROXY_ADMIN_TOKEN (or --admin-token), bind it to 127.0.0.1, or pass "
            "--admin-insecure"
        )
    return f"the admin API on {where} is open to anyone who can reach it (--admin-insecure)"


@dataclass
class RunningProxy:
    url: str
    #: The upstream's base URL (the mock's own when the upstream is the mock): the
    #: fallback's, or the first route's when there is no fallback.
    upstream: str
    state: ProxyState
    runners: list[web.BaseRunner]
    _flusher: asyncio.Task[None] | None = None
    #: The loop-lag probe (``CHAOSPROXY_LOOP_LAG``, chaosproxy.observe.looplag), when on.
    _lag_probe: looplag.EnvironmentProbe | None = None
    #: The admin API's base URL, or None when it is off.
    admin_url: str | None = None
    #: Recent requests (what ``GET /requests`` shows), fed by the frame log.
    requests: RequestStore = field(default_factory=RequestStore)
    #: This proxy's Prometheus metrics (its own registry).
    metrics: Metrics = field(default_factory=Metrics)
    #: The trace writer, when ``trace_dir`` was given.
    traces: TraceWriter | None = None
    _observers: list[Observer] = field(default_factory=list)
    #: Whether :meth:`close` closes the log (start_proxy opened it).
    _owns_log: bool = False
    #: Every address the proxy listens on, as bound (``http://0.0.0.0:8080``).
    bound: list[str] = field(default_factory=list)
    #: Every address the admin API listens on, as bound (empty when it is off).
    admin_bound: list[str] = field(default_factory=list)
    #: Start-up warnings (also in the admin's ``GET /health``).
    warnings: list[str] = field(default_factory=list)
    #: The built-in mock's fixtures (None when no upstream is the mock).
    fixtures: MockFixtures | None = None
    _in_flight: _InFlight = field(default_factory=_InFlight)
    _closing: asyncio.Future[list[str]] | None = None
    #: The fleet's shared state (``--state redis://…``), None under ``memory``.
    shared: SharedState | None = None
    #: The fleet's shared history (its last writes are made when the proxy stops).
    _mirror: HistoryMirror | None = None
    #: The fleet's journal (this replica's last requests written when it stops).
    _journal: FleetJournal | None = None
    #: The ``--scenarios`` files watched for changes (None: not watched).
    watcher: ScenarioWatcher | None = None

    @property
    def config(self) -> Config:
        return self.state.config

    @property
    def log(self) -> FrameLog:
        return self.state.log

    @property
    def in_flight(self) -> int:
        """Requests the proxy is answering now."""
        return len(self._in_flight.tasks)

    @property
    def upstreams(self) -> dict[str, str]:
        """Every upstream by route prefix (``""``: the fallback), as base URLs (the
        mock's own for ``mock``), longest prefix first, the fallback last."""
        routes = self.state.routes
        out = {prefix: target.url for prefix, target in routes.prefixed}
        if routes.fallback is not None:
            out[""] = routes.fallback.url
        return out

    async def close(self, within: float | None = None, *, since: float | None = None) -> list[str]:
        """Stop, within ``config.grace + CLOSE_MARGIN`` (or ``within``) seconds of
        ``since`` (a reading of the proxy's clock, ``state.clock``: ``time.monotonic()``;
        when the stop was asked for, such as a signal's arrival, which a busy loop may
        see late; default: now).

        Stops accepting at once (on every listening socket, idle keep-alive
        connections closed), lets streams in flight run for the grace (those that end
        are ``completed`` as usual), cuts the rest (their outcome is ``shutdown``, their
        ``response_end`` logged at the cut, in one pass), then cleans up the proxy (its
        upstream client), the admin API and the mock in the time left. Returns what
        did not go as planned, one line each (empty: a clean stop); whatever missed the
        deadline is abandoned, its connections closed. Calling it again waits for the
        first call."""
        if self._closing is not None:
            return await asyncio.shield(self._closing)
        loop = asyncio.get_running_loop()
        self._closing = loop.create_future()
        try:
            problems = await self._close(within, self.state.clock() if since is None else since)
        except BaseException as exc:
            self._closing.set_exception(exc)
            self._closing.exception()  # retrieved: a second caller may never come
            raise
        self._closing.set_result(problems)
        return problems

    async def _close(self, within: float | None, start: float) -> list[str]:
        # The proxy's clock (time.monotonic()), not loop.time(): uvloop's is the time
        # its iteration began, which on a busy loop is well behind.
        grace = self.config.grace
        budget = grace + CLOSE_MARGIN if within is None else within
        grace_end = start + min(grace, budget)
        deadline = start + budget
        problems: list[str] = []
        self.state.stopping = True
        if self.watcher is not None:
            await self.watcher.stop()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        named = self._named_runners()
        # Stop accepting: no new connection to the proxy or the admin, idle keep-alive
        # ones closed. The mock goes on serving the streams in flight.
        for name, runner in named:
            if name == MOCK:
                continue
            for site in list(runner.sites):
                await site.stop()
            if runner.server is not None:
                runner.server.pre_shutdown()
        # The grace: streams in flight may end on their own.
        tasks = self._in_flight.tasks
        if tasks and grace_end > self.state.clock():
            await asyncio.wait(set(tasks), timeout=grace_end - self.state.clock())
        # The cut, always, however late this is: the rest end now, as ``shutdown``,
        # each logged in this one pass; then their tasks only have to unwind.
        self._cut()
        while tasks:
            running = set(tasks)
            for task in running:
                task.cancel()
            await asyncio.wait(running, timeout=max(deadline - self.state.clock(), CUT_UNWIND))
            self._cut()  # a request whose handler began meanwhile
            if self.state.clock() >= deadline:
                break
        if tasks:
            problems.append(f"{len(tasks)} request(s) did not end when cut; abandoned")
        # The rest: the proxy's own cleanup (its upstream client), the admin, the mock.
        for name, runner in reversed(named):
            problem = await _cleanup_within(name, runner, deadline - self.state.clock())
            if problem is not None:
                problems.append(problem)
        # Every response that could end has been logged by now: detach from the log.
        _detach(self.log, self._observers, self.traces)
        if self._owns_log:
            self.log.close()
        else:
            self.log.flush()
        if self._lag_probe is not None:
            self._lag_probe.stop()
        if self.shared is not None:
            if self._mirror is not None:  # what this replica's streams became, written
                await self._mirror.close()
            if self._journal is not None:  # and its last requests
                await self._journal.close()
            await self.shared.close()
        return problems

    def last_words(self, within: float = LAST_WORDS) -> int:
        """Write the ``response_end`` (outcome ``shutdown``) of every request still
        running, and flush the log: for the process's exit by its watchdog, from the
        watchdog's thread, when the event loop is too busy to have cut them. Takes
        ``within`` seconds at most (the exit must not wait: what is left then gets no
        line), waiting for a line the loop is writing included. Returns how many ends
        it wrote."""
        give_up = time.monotonic() + within
        ending = self.state.ending
        if not ending.acquire(timeout=within):
            return 0
        written = 0
        try:
            for exchange in list(self.state.exchanges):  # (one C call: no change midway)
                if time.monotonic() > give_up:
                    break
                with contextlib.suppress(Exception):  # (one bad line: the others go on)
                    written += exchange.last_words()
        finally:
            ending.release()
        self.log.flush()
        return written

    def _cut(self) -> None:
        """End every request still running, now: each one's outcome is ``shutdown``,
        its connections closed, its ``response_end`` written and flushed."""
        exchanges = self.state.exchanges
        if exchanges:
            for exchange in list(exchanges):
                exchange.stop()
            self.log.flush()

    def _named_runners(self) -> list[tuple[str, web.BaseRunner]]:
        named: list[tuple[str, web.BaseRunner]] = []
        for i, runner in enumerate(self.runners):
            app = getattr(runner, "app", None)
            if app is not None and STATE in app:
                named.append((PROXY, runner))
            elif i == 0 and uses_mock(self.config):
                named.append((MOCK, runner))
            else:
                named.append((ADMIN, runner))
        return named


PROXY = "the proxy (its upstream client)"
MOCK = "the mock upstream"
ADMIN = "the admin API"


async def _cleanup_within(name: str, runner: web.BaseRunner, seconds: float) -> str | None:
    """``runner.cleanup()``, given ``seconds`` at most (a little even when none are
    left); on time out its connections are closed and the cleanup abandoned. A problem
    is one line (never a traceback)."""
    server = runner.server
    task = asyncio.ensure_future(runner.cleanup())
    try:
        done, _ = await asyncio.wait({task}, timeout=max(seconds, 0.05))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        exc = task.exception()
        return None if exc is None else f"stopping {name} failed: {describe(exc)}"
    task.cancel()
    if server is not None:
        for connection in server.connections:
            connection.force_close()
    # Give the cancelled cleanup one chance to unwind; never wait longer for it.
    await asyncio.wait({task}, timeout=0.01)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, whatever it was
    return f"stopping {name} did not finish in time; abandoned"


def _recorded_file(config: Config) -> list[str]:
    """``--record-on-miss``'s file, when it exists and is not already a
    ``--mock-fixtures`` path: what was recorded before is served again."""
    path = config.record_on_miss
    if path is None or path in config.mock_fixtures:
        return []
    file = Path(path)
    return [path] if file.is_file() and file.stat().st_size > 0 else []


async def start_mock(
    host: str,
    port: int,
    *,
    tokens: int,
    interval: float,
    grace: float = SHUTDOWN_GRACE,
    fixtures: MockFixtures | None = None,
    miss: MissHandler | None = None,
    cleanup: Callable[[], Awaitable[None]] | None = None,
) -> tuple[web.AppRunner, str]:
    """The mock on ``host:port``; ``miss`` answers what no fixture matches instead of
    its corpus, and ``cleanup`` runs when it stops (the miss handler's upstream client)."""
    from chaosproxy.mock import create_mock_app

    app = create_mock_app(tokens=tokens, interval=interval, fixtures=fixtures, miss=miss)
    if cleanup is not None:

        async def clean(_app: web.Application) -> None:
            await cleanup()

        app.on_cleanup.append(clean)
    runner, bound = await listen(app, host, port, grace=grace)
    return runner, f"http://{hostport(host, bound)}"


@dataclass
class _Inputs:
    """What a proxy starts from, loaded and checked before anything starts."""

    scenarios: dict[str, Scenario]
    fixtures: Sequence[Fixture]
    #: The scenario files, as they were looked at before they were loaded (None: not
    #: watched), and the scenarios given that the files do not make (ChaosProxy's
    #: Scenario objects): they stay through the files' changes.
    watched: ScenarioFiles | None
    given: dict[str, Scenario]


def _inputs(
    config: Config,
    scenarios: Mapping[str, Scenario] | None,
    fixtures: Sequence[Fixture] | None,
    library: bool,
) -> _Inputs:
    """The scenarios and fixtures (loaded from the files when not given: ScenarioError),
    and the settings that cannot go together checked (StartupError)."""
    watched = ScenarioFiles(config.scenarios) if watches(config) else None
    given: dict[str, Scenario] = {}
    if watched is not None and scenarios is not None:
        from_files, _ = watched.load()
        given = {n: s for n, s in scenarios.items() if from_files.get(n) != s}
    if scenarios is None:
        scenarios = load_scenarios(list(config.scenarios))
    if fixtures is None:
        fixtures = load_fixture_files(list(config.mock_fixtures) + _recorded_file(config))
    if (config.record_on_miss is None) != (config.record_upstream is None):
        raise StartupError(
            "--record-on-miss and --record-upstream go together: the fixture file to record "
            "into and the real upstream to ask"
        )
    if config.record_on_miss is not None and not uses_mock(config):
        raise StartupError(
            "--record-on-miss records what the built-in mock has no fixture for: give "
            "--upstream mock (and the real upstream as --record-upstream)"
        )
    loaded = with_library(scenarios) if library else dict(scenarios)
    if config.scenario is not None and config.scenario not in loaded:
        close = difflib.get_close_matches(config.scenario, list(loaded), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise StartupError(
            f"--scenario {config.scenario!r} is not a loaded scenario{hint}; "
            "chaosproxy scenarios lists them"
        )
    return _Inputs(loaded, fixtures, watched, given)


@dataclass
class _Observed:
    """The frame log and what observes it: the admin's request store, the metrics, the
    traces (``--trace-dir``)."""

    log: FrameLog
    owns_log: bool
    store: RequestStore
    metrics: Metrics
    traces: TraceWriter | None
    observers: list[Observer]

    def undo(self) -> None:
        """A start that failed: the observers off the log, what was opened closed."""
        _detach(self.log, self.observers, self.traces)
        if self.owns_log:
            self.log.close()


def _detach(log: FrameLog, observers: Iterable[Observer], traces: TraceWriter | None) -> None:
    """The ``observers`` off ``log``, and the ``traces`` (if any) closed."""
    for observer in observers:
        log.remove_observer(observer)
    if traces is not None:
        traces.close()


def _observed(config: Config, log: FrameLog | None) -> _Observed:
    """The frame log (opened from ``config.log`` when not given) and its observers,
    added before the first request can arrive (StartupError: a file cannot be opened)."""
    owns_log = log is None
    if log is None:
        try:
            log = FrameLog.open(
                config.log,
                content=config.log_content,
                fmt=config.log_format,
                level=config.log_level,
            )
        except OSError as exc:
            raise StartupError(f"cannot open log {config.log}: {exc.strerror or exc}") from None
    traces: TraceWriter | None = None
    if config.trace_dir is not None:
        try:
            traces = TraceWriter.create(config.trace_dir)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise StartupError(f"cannot use --trace-dir {config.trace_dir}: {reason}") from None
    if log.replica is None:  # serve names every replica (ChaosProxy: when asked)
        log.replica = config.replica_id
    store = RequestStore(
        history=config.history,
        max_frames=config.history_frames,
        max_bytes=config.history_bytes,
        content=log.content,  # (the journal keeps prompts as the log does)
    )
    metrics = Metrics()
    metrics.count_history(store)
    metrics.replica = config.replica_id
    observers: list[Observer] = [store, metrics]
    if traces is not None:
        observers.append(traces)
    for observer in observers:
        log.add_observer(observer)
    return _Observed(log, owns_log, store, metrics, traces, observers)


async def _serve_mock(
    config: Config, fixtures: Sequence[Fixture]
) -> tuple[web.AppRunner, str, MockFixtures]:
    """The built-in mock, one however many routes lead to it, recording its misses
    from a real upstream with ``--record-on-miss``: its runner, URL and fixtures."""
    from chaosproxy.mock.fixtures import MockFixtures

    mock_fixtures = MockFixtures(fixtures)
    miss: MissHandler | None = None
    cleanup: Callable[[], Awaitable[None]] | None = None
    if config.record_on_miss is not None and config.record_upstream is not None:
        from chaosproxy.control.recording import AnswerRecorder

        recorder = AnswerRecorder(
            config.record_upstream,
            Path(config.record_on_miss),
            config,
            on_recorded=mock_fixtures.add_recorded,
        )
        miss, cleanup = recorder.forward, recorder.close
    runner, url = await start_mock(
        "127.0.0.1",
        0,
        tokens=config.mock_tokens,
        interval=config.mock_interval,
        grace=SIDE_GRACE,
        fixtures=mock_fixtures,
        miss=miss,
        cleanup=cleanup,
    )
    return runner, url, mock_fixtures


async def _serve_proxy(
    config: Config, state: ProxyState, metrics: Metrics, reuse_port: bool
) -> tuple[web.AppRunner, int, _InFlight]:
    """The proxy's app, listening: its runner, bound port and requests in flight."""
    host, port = config.listen
    app = create_proxy_app(state)
    metrics.count_connections(app[CLIENT_GUARD])
    in_flight = _InFlight()
    app.middlewares.append(in_flight.middleware)
    # close() gives the streams their grace itself; aiohttp's own shutdown is then
    # only for what slipped past it, briefly.
    try:
        runner, bound = await listen(app, host, port, grace=SIDE_GRACE, reuse_port=reuse_port)
    except StartupError:
        raise
    except Exception as exc:  # the upstream client refused its URL, say
        where = " ".join(redact_url(u) for u in config.upstream)
        raise StartupError(f"cannot start the proxy: {describe(exc)}; --upstream {where}") from None
    return runner, bound, in_flight


async def _serve_admin(
    config: Config,
    state: ProxyState,
    observed: _Observed,
    warnings: list[str],
    fixtures: MockFixtures | None,
    shared: SharedState | None,
    journal: FleetJournal | None,
) -> tuple[web.AppRunner, str, list[str]]:
    """The admin API over ``state``, listening on ``config.admin``: its runner, URL
    and bound addresses."""
    assert config.admin is not None
    admin_host, admin_port = config.admin
    admin = AdminState(
        state.scenarios,
        observed.store,
        observed.metrics,
        token=config.admin_token,
        warnings=warnings,
        streams=state.streams,
        resume=state.resume,
        log=observed.log,
        host=admin_host,
        fixtures=fixtures,
        shared=shared,
        client_timeout=config.admin_client_timeout,
        max_connections=config.admin_max_connections,
    )
    if shared is not None:
        admin.changed = shared_changes(shared)
    overrides = None
    if shared is not None and journal is not None:
        from chaosproxy.control.fleet_admin import fleet_overrides

        overrides = fleet_overrides(journal, shared)
    runner, bound = await listen(
        create_admin_app(admin, overrides),
        admin_host,
        admin_port,
        what="the admin API",
        grace=SIDE_GRACE,
        flag="--admin",
    )
    return runner, f"http://{hostport(admin_host, bound)}", _bound_urls(runner)


def _proxy_state(
    config: Config,
    scenarios: Mapping[str, Scenario],
    observed: _Observed,
    resolve: dict[str, str],
    upstream_factory: Callable[[], Upstream] | None,
    mock_fixtures: MockFixtures | None,
) -> ProxyState:
    """What every request of the proxy shares (``resolve``: the mock's address)."""
    routes = RouteTable(config.routes, resolve)
    state = ProxyState(
        config=config,
        upstream_url=routes.first.url,
        scenarios=scenario_set(config, scenarios),
        log=observed.log,
        upstream_factory=upstream_factory,
        routes=routes,
    )
    state.journal = observed.store.keep_request  # what each client sent, kept with it
    if mock_fixtures is not None:  # a scenario's mock: fixtures, by its name
        mock_fixtures.scenarios = _scenario_fixtures(state.scenarios)
    return state


async def start_proxy(
    config: Config,
    *,
    scenarios: Mapping[str, Scenario] | None = None,
    log: FrameLog | None = None,
    upstream_factory: Callable[[], Upstream] | None = None,
    library: bool = True,
    fixtures: Sequence[Fixture] | None = None,
    reuse_port: bool = False,
) -> RunningProxy:
    """Start the proxy (and the mock upstream when an upstream is ``mock``, and
    the admin API unless ``config.admin`` is None).

    ``scenarios`` are the loaded scenarios (default: loaded from ``config.scenarios``,
    raising :class:`~chaosproxy.scenario.ScenarioError`), added to the built-in library
    (one of the same name overrides a built-in one) unless ``library`` is False (then
    they are all there is); ``log`` the frame log
    (default: opened from ``config.log``); ``upstream_factory`` replaces the upstream
    client (a test double); ``fixtures`` the mock's fixtures from files (default: loaded
    from ``config.mock_fixtures``, raising ScenarioError); ``reuse_port`` listens with
    ``SO_REUSEPORT`` (a worker of ``serve --workers N``). Raises :class:`StartupError`
    with a one-line reason: among others, for an admin API off loopback without a token
    (unless ``admin_insecure``).
    """
    admin_warning = check_admin_binding(config)  # before anything starts
    inputs = _inputs(config, scenarios, fixtures, library)
    observed = _observed(config, log)
    runners: list[web.BaseRunner] = []
    admin_url: str | None = None
    admin_bound: list[str] = []
    mock_fixtures: MockFixtures | None = None
    shared: SharedState | None = None
    journal: FleetJournal | None = None
    try:
        resolve: dict[str, str] = {}
        if uses_mock(config):
            mock_runner, resolve[MOCK_UPSTREAM], mock_fixtures = await _serve_mock(
                config, inputs.fixtures
            )
            runners.append(mock_runner)
        state = _proxy_state(
            config, inputs.scenarios, observed, resolve, upstream_factory, mock_fixtures
        )
        if config.shared:  # before the first request: the fleet's set, its secret
            shared, journal = await _join_fleet(
                config, state, observed.store, mock_fixtures, observed.metrics
            )
        runner, bound, in_flight = await _serve_proxy(config, state, observed.metrics, reuse_port)
        runners.append(runner)
        warnings = [admin_warning] if admin_warning else []
        warnings += upstream_warnings(config)
        warnings += cross_tenant_warnings(inputs.scenarios.values())
        if config.admin is not None:
            admin_runner, admin_url, admin_bound = await _serve_admin(
                config, state, observed, warnings, mock_fixtures, shared, journal
            )
            runners.append(admin_runner)
    except BaseException:
        await _undo_start(runners, shared, observed)
        raise
    proxy = RunningProxy(
        url=f"http://{hostport(config.listen[0], bound)}",
        upstream=state.upstream_url,
        state=state,
        runners=runners,
        admin_url=admin_url,
        requests=observed.store,
        metrics=observed.metrics,
        traces=observed.traces,
        _observers=observed.observers,
        _owns_log=observed.owns_log,
        bound=_bound_urls(runner),
        admin_bound=admin_bound,
        warnings=warnings,
        fixtures=mock_fixtures,
        _in_flight=in_flight,
        shared=shared,
    )
    _begin(proxy, config, inputs, library, journal)
    return proxy


async def _undo_start(
    runners: Sequence[web.BaseRunner], shared: SharedState | None, observed: _Observed
) -> None:
    """A start that failed: what had started stopped, last first."""
    for r in reversed(runners):
        await r.cleanup()
    if shared is not None:
        await shared.close()
    observed.undo()


def _begin(
    proxy: RunningProxy,
    config: Config,
    inputs: _Inputs,
    library: bool,
    journal: FleetJournal | None,
) -> None:
    """What runs beside a started proxy: the log's flusher, the scenario files' watcher,
    the loop's lag probe."""
    state = proxy.state
    proxy._mirror = cast("HistoryMirror | None", state.resume.mirror)
    proxy._journal = journal
    proxy._flusher = asyncio.create_task(_flush_periodically(state.log, proxy.traces))
    if inputs.watched is not None:
        proxy.watcher = watch_scenarios(
            config, state.scenarios, library=library, files=inputs.watched, given=inputs.given
        )
        proxy.watcher.start()
    proxy._lag_probe = looplag.probe_from_environment()


async def _join_fleet(
    config: Config,
    state: ProxyState,
    store: RequestStore,
    fixtures: MockFixtures | None,
    metrics: Metrics,
) -> tuple[SharedState, FleetJournal]:
    """Reach the fleet's Redis (``--state``), take its tenant secret and its current
    set, and start applying its changes here; a StartupError when it cannot be reached
    (a replica never starts apart from its fleet)."""
    from chaosproxy.fleet import SharedState
    from chaosproxy.fleet.history import HistoryMirror
    from chaosproxy.fleet.journal import FleetJournal
    from chaosproxy.fleet.shared import StateCollector

    shared = SharedState(
        config.state,
        config.fleet,
        config.replica,
        config.state_timeout,
        member=config.fleet_member,
    )
    target = ChangeTarget(state, store, fixtures)
    try:
        startup = await shared.start(target.apply)
        secret = await shared.tenant_secret()
        await target.load(startup)
    except (OSError, TimeoutError) as exc:
        await shared.close()
        raise StartupError(str(exc) or f"--state {shared.label}: no answer in time") from None
    except (ScenarioError, UnknownScenario) as exc:
        await shared.close()
        raise StartupError(f"--state {shared.label}: the fleet's current set: {exc}") from None
    state.tenants = tenant_keys(config, secret)  # (--tenant-secret wins, when given)
    state.scenarios.fallback_salt = config.replica
    state.fleet = shared
    state.resume.mirror = HistoryMirror(shared)
    journal = FleetJournal(shared, store, config.history, config.history_bytes)
    store.flights = journal
    state.whose = journal.whose  # (a worker chains its own notes before it)
    metrics.registry.register(StateCollector(shared))
    return shared, journal


def shared_changes(shared: SharedState) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    """The admin's ``changed`` hook in a fleet: store the change and wait until every
    live replica applied it; what the answer says of it (``fleet``)."""

    async def changed(change: dict[str, Any]) -> dict[str, Any]:
        try:
            pending = await shared.publish(change)
        except OSError as exc:
            return {"applied": "here only", "reason": str(exc)}
        return {"applied": "everywhere" if not pending else "not everywhere", "pending": pending}

    return changed


def watches(config: Config) -> bool:
    """Whether the proxy watches its scenario files (``--scenarios-poll``)."""
    return bool(config.scenarios) and config.scenarios_poll > 0


def watch_scenarios(
    config: Config,
    scenarios: ScenarioSet,
    *,
    library: bool = True,
    files: ScenarioFiles | None = None,
    given: Mapping[str, Scenario] | None = None,
) -> ScenarioWatcher:
    """The watcher of ``config.scenarios`` that rebases ``scenarios`` on each valid
    change (on the built-in library too, unless ``library`` is False, and with the
    scenarios ``given`` apart from the files, which override them); ``files``: as they
    were looked at before they were loaded."""
    kept = dict(given or {})

    async def apply(files: dict[str, Scenario]) -> Rebased:
        _, default = scenarios.initial()
        now = {**files, **kept}
        return scenarios.rebase(with_library(now) if library else now, default)

    return ScenarioWatcher(
        list(config.scenarios),
        config.scenarios_poll,
        apply,
        default=lambda: scenarios.default,
        files=files,
    )


def _scenario_fixtures(scenarios: ScenarioSet) -> Callable[[str], Sequence[Fixture]]:
    def lookup(name: str) -> Sequence[Fixture]:
        scenario = scenarios.scenarios.get(name)
        return () if scenario is None else scenario.mock

    return lookup


async def _flush_periodically(
    log: FrameLog, traces: TraceWriter | None = None, every: float = 0.25
) -> None:
    while True:
        await asyncio.sleep(every)
        log.flush()
        if traces is not None:
            traces.flush()


__all__ = [
    "CLOSE_MARGIN",
    "RunningProxy",
    "StartupError",
    "check_admin_binding",
    "is_loopback",
    "start_mock",
    "start_proxy",
]
