"""One worker of ``serve --workers N``: a whole proxy in its own process and event loop,
listening on the shared port with ``SO_REUSEPORT``, without an admin API of its own.

It obeys its supervisor over the control channel (:mod:`chaosproxy.workers.control`):
every admin change is made here too before the supervisor answers its caller, and the
supervisor asks here for this worker's requests, verdicts and metrics. Its request ids
carry its number (``r-3f9aw1-7``), its stream tokens too (``w1_…``: a reconnect that
lands on another worker is handed here, :mod:`chaosproxy.workers.handover`), its
``requests:`` ordinals and derived seeds come from the counters all workers share
(:mod:`chaosproxy.workers.counters`), and its frame-log lines go to the one log in
whole lines (:mod:`chaosproxy.workers.logfile`). It starts with the scenarios its
supervisor read (a replacement: with the state of now), and tells it which requests it
has in flight (:class:`Flights`), so that they get their end should it die.

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
from collections.abc import Callable
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
    #: The supervisor's scenarios (in order, the built-in library in them) and default
    #: (None: read from the configuration's files here).
    scenarios: dict[str, Any] | None = None
    default: str | None = None
    #: The mock fixtures of the files, as the supervisor read them (None: read here).
    fixture_files: tuple[Any, ...] | None = None
    #: A replacement for a worker that died: the set ``POST /reset`` goes back to, and
    #: the mock fixtures added at run time.
    initial: tuple[dict[str, Any], str | None] | None = None
    fixtures_added: tuple[Any, ...] = ()


class Flights:
    """Which requests this worker has in flight, told to its supervisor so that it can
    end them (``worker_lost``) should this worker die: a ``request`` line begins one, its
    ``response_end`` ends it (the request store's :attr:`flights`: no frame line comes
    here). What one loop iteration begins and ends is sent at its end in one note, and a
    request that ends in the iteration it began in is never sent at all."""

    def __init__(self, note: Callable[..., None]) -> None:
        self._note = note
        self._begun: dict[str, list[Any]] = {}
        self._ended: list[str] = []
        self._scheduled = False

    def __call__(self, line: Any) -> None:
        request_id = line["request_id"]
        if line["event"] == "request":
            self._begun[request_id] = [request_id, line["scenario"], time.monotonic()]
        elif self._begun.pop(request_id, None) is None:
            self._ended.append(request_id)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.send)

    def send(self) -> None:
        self._scheduled = False
        if self._begun or self._ended:
            self._note("flights", begun=list(self._begun.values()), ended=self._ended)
            self._begun = {}
            self._ended = []


def _both(first: Callable[[Any], None], then: Callable[[Any], None]) -> Callable[[Any], None]:
    def both(line: Any) -> None:
        first(line)
        then(line)

    return both


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
    from chaosproxy.scenario import ScenarioError
    from chaosproxy.server.memory import IdleReclaimer
    from chaosproxy.server.net import CLIENT_GUARD
    from chaosproxy.server.proxy import STATE, set_process_tag
    from chaosproxy.server.state import tenant_keys
    from chaosproxy.workers.control import WorkerEnd
    from chaosproxy.workers.counters import SharedCounters
    from chaosproxy.workers.handover import Inbox, WorkerHandover, token_prefix

    config = spec.config
    if config.shared:  # one of the fleet's members: its changes and counters are Redis's
        config = config.replace(fleet_member=f"{config.replica}/w{spec.index}")
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
        if spec.scenarios is None:
            proxy = await start_proxy(config, log=log, reuse_port=True, fixtures=spec.fixture_files)
        else:  # the supervisor's set (now, for a replacement), whatever the files say
            proxy = await start_proxy(
                config.replace(scenario=spec.default),
                scenarios=spec.scenarios,
                library=False,
                log=log,
                reuse_port=True,
                fixtures=spec.fixture_files,
            )
            if spec.initial is not None:
                proxy.state.scenarios.rebase(*spec.initial, apply=False)
            if proxy.fixtures is not None and spec.fixtures_added:
                proxy.fixtures.add(spec.fixtures_added)
    except (StartupError, ScenarioError) as exc:
        log.close()
        control.hello("failed", reason=str(exc).splitlines()[0])
        await control.flush()
        return 2
    state = proxy.state
    notes = Flights(control.note)
    fleet = proxy.requests.flights  # (a fleet's journal, under --state redis)
    proxy.requests.flights = notes if fleet is None else _both(notes, fleet)
    state.resume.token_prefix = token_prefix(spec.index)
    if not config.shared:  # (a fleet's replica took the fleet's secret)
        state.tenants = tenant_keys(config, spec.tenant_secret)
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

    async def op_rebase(self, message: dict[str, Any]) -> None:
        """The scenario files changed (the supervisor's watcher): each scenario of the
        new base by name, with its document when it is new or changed (None: this
        worker's own, unchanged)."""
        from chaosproxy.scenario import parse_scenario

        scenarios = self.proxy.state.scenarios
        old, _ = scenarios.initial()
        base = {}
        for name, document in message["base"]:
            if document is None:
                base[name] = old[name]
            else:
                text = orjson.dumps(document)
                base[name] = await asyncio.to_thread(
                    parse_scenario, text, f"<{name}>", default_name=name, read_only=True
                )
        self._remap(message)
        scenarios.rebase(base, message.get("default"))

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
