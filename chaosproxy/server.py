"""Starting and stopping a proxy (and its mock upstream) inside a running event loop.

Used by the CLI, by the tests and by anything embedding chaosproxy: one place knows how
the pieces are wired together.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from chaosproxy.admin import (
    DEFAULT_HISTORY,
    DEFAULT_MAX_FRAMES,
    AdminState,
    RequestStore,
    create_admin_app,
)
from chaosproxy.logs import FrameLog, Observer
from chaosproxy.metrics import Metrics
from chaosproxy.proxy import ProxySettings, create_proxy_app
from chaosproxy.scenario import Scenario
from chaosproxy.selection import ScenarioSet
from chaosproxy.trace import TraceWriter

#: Connections the kernel may queue before accept(); a burst of thousands must fit.
BACKLOG = 4096
#: On shutdown, streams in flight get this long to finish before they are cancelled
#: (a ``hang`` or ``stall: {forever: true}`` stream never finishes on its own).
SHUTDOWN_GRACE = 2.0


class StartupError(Exception):
    """Start-up cannot go on; the message is the one-line reason."""


@dataclass
class ProxyOptions:
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    upstream: str = "mock"
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    default_scenario: str | None = None
    log: FrameLog = field(default_factory=lambda: FrameLog(None))
    seed: int | None = None
    mock_tokens: int = 24
    mock_interval: float = 0.02
    connect_timeout: float = 10.0
    #: Where the admin API listens ((host, 0) for a free port); None: no admin API.
    admin: tuple[str, int] | None = None
    #: Bearer token the admin API wants; None: no auth.
    admin_token: str | None = None
    #: Write one JSONL trace per request into this directory (made if missing).
    trace_dir: str | Path | None = None
    #: Recent requests the admin API keeps, and frame lines kept per request.
    history: int = DEFAULT_HISTORY
    history_frames: int = DEFAULT_MAX_FRAMES


@dataclass
class RunningProxy:
    url: str
    upstream: str
    settings: ProxySettings
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

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        for runner in reversed(self.runners):
            await runner.cleanup()
        # Every response has ended (and been logged) by now: detach from the log.
        for observer in self._observers:
            self.settings.log.remove_observer(observer)
        if self.traces is not None:
            self.traces.close()
        self.settings.log.flush()


async def _site(
    app: web.Application, host: str, port: int, *, what: str = ""
) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_GRACE
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=BACKLOG)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        reason = exc.strerror or str(exc)
        for_what = f" for {what}" if what else ""
        raise StartupError(f"cannot listen{for_what} on {host}:{port}: {reason}") from None
    sockets = getattr(site._server, "sockets", None)  # an asyncio or a uvloop Server
    assert sockets
    bound = sockets[0].getsockname()[1]
    return runner, int(bound)


async def start_mock(
    host: str, port: int, *, tokens: int, interval: float
) -> tuple[web.AppRunner, str]:
    from chaosproxy.mock import create_mock_app

    runner, bound = await _site(create_mock_app(tokens=tokens, interval=interval), host, port)
    return runner, f"http://{_hostport(host, bound)}"


async def start_proxy(options: ProxyOptions) -> RunningProxy:
    """Start the proxy (and the mock upstream when ``upstream == "mock"``, and the
    admin API when ``options.admin`` is set)."""
    runners: list[web.BaseRunner] = []
    upstream = options.upstream
    if options.default_scenario is not None and options.default_scenario not in options.scenarios:
        raise StartupError(f"--scenario {options.default_scenario!r} is not a loaded scenario")
    traces: TraceWriter | None = None
    if options.trace_dir is not None:
        try:
            traces = TraceWriter.create(options.trace_dir)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise StartupError(f"cannot use --trace-dir {options.trace_dir}: {reason}") from None
    store = RequestStore(history=options.history, max_frames=options.history_frames)
    metrics = Metrics()
    observers: list[Observer] = [store, metrics]
    if traces is not None:
        observers.append(traces)
    for observer in observers:  # before the first request can arrive
        options.log.add_observer(observer)
    admin_url: str | None = None
    try:
        if upstream == "mock":
            mock_runner, upstream = await start_mock(
                "127.0.0.1", 0, tokens=options.mock_tokens, interval=options.mock_interval
            )
            runners.append(mock_runner)
        settings = ProxySettings(
            upstream=upstream,
            scenarios=ScenarioSet(options.scenarios, options.default_scenario, options.seed),
            log=options.log,
            connect_timeout=options.connect_timeout,
        )
        runner, bound = await _site(
            create_proxy_app(settings), options.listen_host, options.listen_port
        )
        runners.append(runner)
        if options.admin is not None:
            admin_host, admin_port = options.admin
            state = AdminState(settings.scenarios, store, metrics, token=options.admin_token)
            admin_runner, admin_bound = await _site(
                create_admin_app(state), admin_host, admin_port, what="the admin API"
            )
            runners.append(admin_runner)
            admin_url = f"http://{_hostport(admin_host, admin_bound)}"
    except BaseException:
        for r in reversed(runners):
            await r.cleanup()
        for observer in observers:
            options.log.remove_observer(observer)
        if traces is not None:
            traces.close()
        raise
    proxy = RunningProxy(
        url=f"http://{_hostport(options.listen_host, bound)}",
        upstream=upstream,
        settings=settings,
        runners=runners,
        admin_url=admin_url,
        requests=store,
        metrics=metrics,
        traces=traces,
        _observers=observers,
    )
    proxy._flusher = asyncio.create_task(_flush_periodically(options.log, traces))
    return proxy


async def _flush_periodically(
    log: FrameLog, traces: TraceWriter | None = None, every: float = 0.25
) -> None:
    while True:
        await asyncio.sleep(every)
        log.flush()
        if traces is not None:
            traces.flush()


def _hostport(host: str, port: int) -> str:
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def default_scenario_paths() -> list[Path]:
    here = Path("scenarios")
    return [here] if here.is_dir() else []
