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

from chaosproxy.logs import FrameLog
from chaosproxy.proxy import ProxySettings, create_proxy_app
from chaosproxy.scenario import Scenario
from chaosproxy.selection import ScenarioSet

#: Connections the kernel may queue before accept(); a burst of thousands must fit.
BACKLOG = 4096


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


@dataclass
class RunningProxy:
    url: str
    upstream: str
    settings: ProxySettings
    runners: list[web.BaseRunner]
    _flusher: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        for runner in reversed(self.runners):
            await runner.cleanup()
        self.settings.log.flush()


async def _site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=BACKLOG)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        reason = exc.strerror or str(exc)
        raise StartupError(f"cannot listen on {host}:{port}: {reason}") from None
    server = site._server
    assert isinstance(server, asyncio.base_events.Server)
    bound = server.sockets[0].getsockname()[1]
    return runner, int(bound)


async def start_mock(host: str, port: int, *, tokens: int, interval: float) -> tuple[web.AppRunner, str]:
    from chaosproxy.mock import create_mock_app

    runner, bound = await _site(create_mock_app(tokens=tokens, interval=interval), host, port)
    return runner, f"http://{_hostport(host, bound)}"


async def start_proxy(options: ProxyOptions) -> RunningProxy:
    """Start the proxy (and the mock upstream when ``upstream == "mock"``)."""
    runners: list[web.BaseRunner] = []
    upstream = options.upstream
    if options.default_scenario is not None and options.default_scenario not in options.scenarios:
        raise StartupError(f"--scenario {options.default_scenario!r} is not a loaded scenario")
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
    except BaseException:
        for r in reversed(runners):
            await r.cleanup()
        raise
    proxy = RunningProxy(
        url=f"http://{_hostport(options.listen_host, bound)}",
        upstream=upstream,
        settings=settings,
        runners=runners,
    )
    proxy._flusher = asyncio.create_task(_flush_periodically(options.log))
    return proxy


async def _flush_periodically(log: FrameLog, every: float = 0.25) -> None:
    while True:
        await asyncio.sleep(every)
        log.flush()


def _hostport(host: str, port: int) -> str:
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def default_scenario_paths() -> list[Path]:
    here = Path("scenarios")
    return [here] if here.is_dir() else []
