"""Starting and stopping a proxy (and its mock upstream and admin API) in a running
event loop, from one :class:`~chaosproxy.config.Config`.

Used by the CLI, :class:`~chaosproxy.ChaosProxy`, the tests and anything embedding
chaosproxy: one place knows how the pieces are wired together.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from chaosproxy.admin import AdminState, RequestStore, create_admin_app
from chaosproxy.config import Config
from chaosproxy.logs import FrameLog, Observer
from chaosproxy.metrics import Metrics
from chaosproxy.net import StartupError, hostport, listen
from chaosproxy.proxy import ProxyState, create_proxy_app
from chaosproxy.scenario import Scenario, load_scenarios, with_library
from chaosproxy.selection import ScenarioSet
from chaosproxy.trace import TraceWriter
from chaosproxy.upstream import Upstream


@dataclass
class RunningProxy:
    url: str
    #: The upstream's base URL (the mock's own when the upstream is the mock).
    upstream: str
    state: ProxyState
    runners: list[web.BaseRunner]
    _flusher: asyncio.Task[None] | None = None
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

    @property
    def config(self) -> Config:
        return self.state.config

    @property
    def log(self) -> FrameLog:
        return self.state.log

    async def close(self) -> None:
        self.state.stopping = True
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        for runner in reversed(self.runners):
            await runner.cleanup()
        # Every response has ended (and been logged) by now: detach from the log.
        for observer in self._observers:
            self.log.remove_observer(observer)
        if self.traces is not None:
            self.traces.close()
        if self._owns_log:
            self.log.close()
        else:
            self.log.flush()


async def start_mock(
    host: str, port: int, *, tokens: int, interval: float
) -> tuple[web.AppRunner, str]:
    from chaosproxy.mock import create_mock_app

    runner, bound = await listen(create_mock_app(tokens=tokens, interval=interval), host, port)
    return runner, f"http://{hostport(host, bound)}"


async def start_proxy(
    config: Config,
    *,
    scenarios: Mapping[str, Scenario] | None = None,
    log: FrameLog | None = None,
    upstream_factory: Callable[[], Upstream] | None = None,
    library: bool = True,
) -> RunningProxy:
    """Start the proxy (and the mock upstream when ``config.upstream`` is ``mock``, and
    the admin API unless ``config.admin`` is None).

    ``scenarios`` are the loaded scenarios (default: loaded from ``config.scenarios``,
    raising :class:`~chaosproxy.scenario.ScenarioError`), added to the built-in library
    (one of the same name overrides a built-in one) unless ``library`` is False (then
    they are all there is); ``log`` the frame log
    (default: opened from ``config.log``); ``upstream_factory`` replaces the upstream
    client (a test double). Raises :class:`StartupError` with a one-line reason.
    """
    if scenarios is None:
        scenarios = load_scenarios(list(config.scenarios))
    if library:
        scenarios = with_library(scenarios)
    if config.scenario is not None and config.scenario not in scenarios:
        raise StartupError(f"--scenario {config.scenario!r} is not a loaded scenario")
    owns_log = log is None
    if log is None:
        try:
            log = FrameLog.open(config.log, content=config.log_content, fmt=config.log_format)
        except OSError as exc:
            raise StartupError(f"cannot open log {config.log}: {exc.strerror or exc}") from None
    traces: TraceWriter | None = None
    if config.trace_dir is not None:
        try:
            traces = TraceWriter.create(config.trace_dir)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise StartupError(f"cannot use --trace-dir {config.trace_dir}: {reason}") from None
    store = RequestStore(history=config.history, max_frames=config.history_frames)
    metrics = Metrics()
    observers: list[Observer] = [store, metrics]
    if traces is not None:
        observers.append(traces)
    for observer in observers:  # before the first request can arrive
        log.add_observer(observer)
    runners: list[web.BaseRunner] = []
    admin_url: str | None = None
    try:
        upstream = config.upstream
        if upstream == "mock":
            mock_runner, upstream = await start_mock(
                "127.0.0.1", 0, tokens=config.mock_tokens, interval=config.mock_interval
            )
            runners.append(mock_runner)
        state = ProxyState(
            config=config,
            upstream_url=upstream,
            scenarios=ScenarioSet(scenarios, config.scenario, config.seed),
            log=log,
            upstream_factory=upstream_factory,
        )
        host, port = config.listen
        runner, bound = await listen(create_proxy_app(state), host, port, grace=config.grace)
        runners.append(runner)
        if config.admin is not None:
            admin_host, admin_port = config.admin
            admin = AdminState(state.scenarios, store, metrics, token=config.admin_token)
            admin_runner, admin_bound = await listen(
                create_admin_app(admin), admin_host, admin_port, what="the admin API"
            )
            runners.append(admin_runner)
            admin_url = f"http://{hostport(admin_host, admin_bound)}"
    except BaseException:
        for r in reversed(runners):
            await r.cleanup()
        for observer in observers:
            log.remove_observer(observer)
        if traces is not None:
            traces.close()
        if owns_log:
            log.close()
        raise
    proxy = RunningProxy(
        url=f"http://{hostport(host, bound)}",
        upstream=upstream,
        state=state,
        runners=runners,
        admin_url=admin_url,
        requests=store,
        metrics=metrics,
        traces=traces,
        _observers=observers,
        _owns_log=owns_log,
    )
    proxy._flusher = asyncio.create_task(_flush_periodically(log, traces))
    return proxy


async def _flush_periodically(
    log: FrameLog, traces: TraceWriter | None = None, every: float = 0.25
) -> None:
    while True:
        await asyncio.sleep(every)
        log.flush()
        if traces is not None:
            traces.flush()


def default_scenario_paths() -> list[Path]:
    """No paths: the scenario library is built in (start_proxy always loads it), and
    nothing is read from the working directory unless given."""
    return []


__all__ = [
    "RunningProxy",
    "StartupError",
    "default_scenario_paths",
    "start_mock",
    "start_proxy",
]
