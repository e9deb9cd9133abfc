"""One worker of ``serve --workers N``: a whole proxy in its own process and event loop,
listening on the shared port with ``SO_REUSEPORT``, without an admin API of its own.

It obeys its supervisor over the control channel (:mod:`chaosproxy.workers.control`):
every admin change is made here too before the supervisor answers its caller, and the
supervisor asks here for this worker's requests, verdicts and metrics. Its request ids
carry its number (``r-3f9aw1-7``), its stream tokens too (``w1_…``: a reconnect that
lands on another worker is handed here, :mod:`chaosproxy.workers.handover`), its
``requests:`` ordinals and derived seeds come from the counters all workers share
(:mod:`chaosproxy.workers.counters`), and its frame-log lines go to the one log in
whole lines (:mod:`chaosproxy.workers.logfile`).

It stops as ``serve`` does (SIGTERM: stop accepting, the grace, the cut, exit within
grace + 1 s), and also when its supervisor goes away. A terminal's Ctrl-C reaches only
the supervisor (a worker has its own process group), which passes SIGTERM on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from chaosproxy.server.config import Config


@dataclass
class WorkerSpec:
    """What the supervisor hands a worker as it spawns it (pickled: sockets and the
    shared counters travel as file descriptors)."""

    index: int
    count: int
    #: The request-id tag: the run's tag and the worker's number (``3f9aw1``).
    tag: str
    config: Config
    control: socket.socket
    inbox: socket.socket
    #: The sending end of every worker's inbox (None at this worker's own place).
    outboxes: list[socket.socket | None]
    counters: Any
    lock: Any
    #: Each scenario's counter slot.
    slots: dict[str, int]
    #: The tenant key's secret, the same in every worker.
    tenant_secret: bytes
    #: ``file`` (append to config.log), ``stdout`` (fd 1, a regular file), ``relay``
    #: (write to log_socket; the supervisor copies), ``none``.
    log_mode: str = "none"
    log_socket: socket.socket | None = None
    log_format: str = "json"


def run_worker(spec: WorkerSpec) -> None:
    """The worker process's entry point (``multiprocessing``, spawned)."""
    with contextlib.suppress(OSError):
        os.setpgrp()  # a terminal's SIGINT is the supervisor's to pass on
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (until the proxy's own handling)
    from chaosproxy.control.process import _run

    code = _run(lambda: _serve(spec))
    # Everything is written and closed: nothing of this process is worth waiting for
    # (the interpreter's own exit, in a spawned child, waited past the grace).
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _open_log(spec: WorkerSpec) -> Any:
    from chaosproxy.observe.logs import FrameLog
    from chaosproxy.workers.logfile import LineWriter, open_append

    config = spec.config
    stream: Any = None
    if spec.log_mode == "file" and config.log is not None:
        stream = LineWriter(open_append(config.log), name=config.log)
    elif spec.log_mode == "stdout":
        stream = LineWriter(sys.stdout.fileno(), name="stdout", owns=False)
    elif spec.log_mode == "relay" and spec.log_socket is not None:
        stream = LineWriter(spec.log_socket.detach(), name="stdout")
    fmt: Any = spec.log_format
    return FrameLog(stream, content=config.log_content, fmt=fmt, level=config.log_level)


async def _serve(spec: WorkerSpec) -> int:
    from chaosproxy.control.process import EXIT_MARGIN, _Stop, settle_gc
    from chaosproxy.control.start import StartupError, start_proxy
    from chaosproxy.core.tenancy import TenantKeys
    from chaosproxy.scenario import ScenarioError
    from chaosproxy.server.memory import IdleReclaimer
    from chaosproxy.server.net import CLIENT_GUARD
    from chaosproxy.server.proxy import STATE, set_process_tag
    from chaosproxy.workers.control import WorkerEnd
    from chaosproxy.workers.counters import SharedCounters
    from chaosproxy.workers.handover import Inbox, WorkerHandover, token_prefix

    config = spec.config
    control = WorkerEnd(spec.control)
    await control.open()
    set_process_tag(spec.tag)
    try:
        log = _open_log(spec)
    except OSError as exc:
        control.hello("failed", reason=f"cannot open log {config.log}: {exc.strerror or exc}")
        await control.flush()
        return 2
    stop = _Stop(config.grace + EXIT_MARGIN, flush=log.flush)
    try:
        proxy = await start_proxy(config, log=log, reuse_port=True)
    except (StartupError, ScenarioError) as exc:
        log.close()
        control.hello("failed", reason=str(exc).splitlines()[0])
        await control.flush()
        return 2
    state = proxy.state
    state.resume.token_prefix = token_prefix(spec.index)
    state.tenants = TenantKeys(spec.tenant_secret, config.tenant_header)
    counters = SharedCounters(spec.counters, spec.lock, spec.slots)
    state.scenarios.counters = counters
    runner = next(r for r in proxy.runners if STATE in getattr(r, "app", {}))
    assert isinstance(runner, web.AppRunner)
    guard = runner.app[CLIENT_GUARD]
    guard.handover = WorkerHandover(spec.index, spec.outboxes)
    inbox = Inbox(spec.inbox, runner.server)  # type: ignore[arg-type]
    inbox.start()
    stop.last_words = proxy.last_words
    settle_gc()
    reclaimer = IdleReclaimer(lambda: proxy.in_flight)
    reclaimer.start()
    answers = _Answers(spec, proxy, counters, guard)
    control.hello(
        "ready",
        pid=os.getpid(),
        url=proxy.url,
        bound=proxy.bound,
        upstream=proxy.upstream,
        upstreams=proxy.upstreams,
        warnings=proxy.warnings,
        scenarios=len(state.scenarios.scenarios),
    )
    serving = asyncio.create_task(control.serve(answers.answer))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not stopping.done():  # the supervisor is gone: stop as on SIGTERM
        stop._signalled(signal.SIGTERM, None)
        await stopping
    await reclaimer.stop()
    inbox.stop()
    try:
        problems = await proxy.close(since=stop.signalled_at or time.monotonic())
    except Exception as exc:
        problems = [f"stopping failed: {type(exc).__name__}: {exc}"]
    for problem in problems:
        print(f"chaosproxy: warning: worker {spec.index}: {problem}", file=sys.stderr)
    log.close()
    stop.written()
    serving.cancel()
    if problems:
        stop.exit_now()
    return 0


class _Answers:
    """What a worker answers its supervisor (each control request's ``op``)."""

    def __init__(self, spec: WorkerSpec, proxy: Any, counters: Any, guard: Any) -> None:
        self.spec = spec
        self.proxy = proxy
        self.counters = counters
        self.guard = guard

    async def answer(self, op: str, message: dict[str, Any]) -> Any:
        method = getattr(self, f"op_{op}", None)
        if method is None:
            raise ValueError(f"unknown control request {op!r}")
        result = method(message)
        if asyncio.iscoroutine(result):
            result = await result
        return result

    # ---------------------------------------------------------------- changes

    def _remap(self, message: dict[str, Any]) -> None:
        slots = message.get("slots")
        if isinstance(slots, dict):
            self.counters.remap(slots)

    async def op_add_scenario(self, message: dict[str, Any]) -> None:
        from chaosproxy.control.admin import BODY_SOURCE
        from chaosproxy.scenario import parse_scenario

        body = base64.b64decode(message["body"])
        scenario = await asyncio.to_thread(
            parse_scenario, body, BODY_SOURCE, default_name=message.get("name"), read_only=True
        )
        self._remap(message)
        self.proxy.state.scenarios.add(scenario)

    def op_remove_scenario(self, message: dict[str, Any]) -> None:
        from chaosproxy.scenario.selection import UnknownScenario

        with contextlib.suppress(UnknownScenario):
            self.proxy.state.scenarios.remove(message["scenario"])
        self._remap(message)

    def op_set_default(self, message: dict[str, Any]) -> None:
        self.proxy.state.scenarios.set_default(message.get("scenario"))

    def op_reset(self, message: dict[str, Any]) -> None:
        proxy = self.proxy
        proxy.requests.reset()
        if proxy.fixtures is not None:
            proxy.fixtures.reset()
        proxy.state.scenarios.restore()
        proxy.state.streams.clear()
        proxy.state.resume.forget()
        self._remap(message)

    async def op_add_fixtures(self, message: dict[str, Any]) -> None:
        from chaosproxy.control.admin import BODY_SOURCE
        from chaosproxy.scenario import parse_fixtures

        if self.proxy.fixtures is None:
            return
        body = base64.b64decode(message["body"])
        added = await asyncio.to_thread(parse_fixtures, body, BODY_SOURCE)
        self.proxy.fixtures.add(added)

    def op_clear_fixtures(self, message: dict[str, Any]) -> None:
        if self.proxy.fixtures is not None:
            self.proxy.fixtures.clear()

    # ---------------------------------------------------------------- reads

    async def op_recent(self, message: dict[str, Any]) -> dict[str, Any]:
        """A page of this worker's requests, newest first, that began before
        ``before`` (None: any): ``found`` as [began, summary] pairs, and whether any
        is ``more`` (the supervisor merges the workers' pages: its cursor is a time)."""
        from chaosproxy.control.admin import build_page, refuse_contains
        from chaosproxy.observe.journal import Criteria

        store = self.proxy.requests
        given = message.get("criteria")
        criteria = Criteria(**given) if isinstance(given, dict) else None
        refuse_contains(store, criteria)
        before = message.get("before")
        records = [r for r in store.newest_first() if before is None or r.started < before]
        found, more = await build_page(
            records,
            int(message["limit"]),
            message.get("scenario"),
            criteria,
            int(message["max_bytes"]),
        )
        return {
            "found": [[r.started, orjson.loads(encoded)] for r, encoded in found],
            "more": more,
        }

    def op_detail(self, message: dict[str, Any]) -> dict[str, Any] | None:
        record = self.proxy.requests.get(message["request_id"])
        return None if record is None else record.detail()

    def op_records(self, message: dict[str, Any]) -> list[list[Any]]:
        """Every request kept: [started, request id, summary (None: in flight)]."""
        records = self.proxy.requests.records()
        return [[r.started, r.line["request_id"], r.summary] for r in records]

    def op_verdict(self, message: dict[str, Any]) -> None:
        from chaosproxy.control.admin import record_verdict

        proxy = self.proxy
        record_verdict(proxy.log, proxy.requests, message["request_id"], message["verdict"])

    def op_metrics(self, message: dict[str, Any]) -> list[list[Any]]:
        families: list[list[Any]] = []
        for family in self.proxy.metrics.registry.collect():
            samples = [[s.name, s.labels, s.value] for s in family.samples]
            families.append([family.name, family.documentation, family.type, samples])
        families.append(
            [
                "chaosproxy_connections_handed_over",
                "Client connections handed to the worker that keeps the stream their "
                "Last-Event-ID names (serve --workers N), counted where they were taken.",
                "counter",
                [["chaosproxy_connections_handed_over_total", {}, self.guard.taken_over]],
            ]
        )
        return families

    def op_health(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "in_flight": self.proxy.requests.in_flight(),
            "handed_over": self.guard.handed_over,
            "taken_over": self.guard.taken_over,
            "pid": os.getpid(),
        }


__all__ = ["WorkerSpec", "run_worker"]
