"""``serve --workers N``: the supervisor (docs/operations.md, Workers).

The supervisor listens on nothing of the proxy's: it checks the address, spawns N
workers (fresh interpreters, :mod:`multiprocessing`'s ``spawn``: no event loop or thread
inherited), each a whole proxy listening on the same port with ``SO_REUSEPORT`` (the
kernel spreads new connections over them), and runs the admin API itself:

- a change (a scenario added or removed, the default, ``POST /reset``, mock fixtures)
  is made here, then sent to every worker over its control channel
  (:mod:`chaosproxy.workers.control`), and the call answers once every worker has
  made it: the next request, on any worker, sees it;
- a read (``GET /requests``, ``/requests/{id}``, a verdict, ``/metrics``, ``/health``'s
  count of requests in flight) asks the workers: a request id names its worker
  (``r-3f9aw1-7``), lists are merged in the order requests began, a verdict judges the
  run's requests of every worker, metrics are summed.

The counters shared by the workers (:mod:`chaosproxy.workers.counters`) are made here,
the frame log's target chosen here (:mod:`chaosproxy.workers.logfile`), and each
worker's stream tokens and request ids carry its number. SIGTERM or SIGINT is passed
on to every worker as SIGTERM; each stops as ``serve`` does, and the supervisor exits 0
within grace + 1 s of the signal, killing a worker that has not (a second signal: at
once). A worker that dies on its own stops the whole proxy (exit 1): a worker's death
is a bug, and half a proxy would answer half its reconnects wrong.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import multiprocessing
import os
import re
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from chaosproxy.control import admin as admin_api
from chaosproxy.core.records import AdminSummary, RequestSummary
from chaosproxy.observe.journal import ContentNotKept
from chaosproxy.observe.metrics import CONTENT_TYPE_LATEST, Metrics
from chaosproxy.scenario import Fixture, Scenario
from chaosproxy.server.config import Config
from chaosproxy.workers.control import Channel, ControlError
from chaosproxy.workers.counters import SLOTS, SharedCounters, Slots
from chaosproxy.workers.handover import inbox_pair
from chaosproxy.workers.logfile import Relay, is_regular, open_append, stdout_writer
from chaosproxy.workers.worker import WorkerSpec, run_worker

#: The longest the workers may take to start (import, load the scenarios, listen).
START_LIMIT = 60.0
#: The longest a worker may take to make an admin change or answer a read.
ASK_LIMIT = 30.0
#: After the signal, the supervisor exits within ``grace + EXIT_MARGIN`` whatever its
#: workers do (each exits within grace + 0.5 s of its own signal, a moment later).
EXIT_MARGIN = 0.85

#: ``r-<tag>w<worker>-<n>``: which worker a request id belongs to.
_REQUEST_ID = re.compile(r"r-[0-9a-f]+w(\d{1,4})-\d+")


def owner_of(request_id: str) -> int | None:
    """The worker that served ``request_id`` (None: not a worker's id)."""
    found = _REQUEST_ID.fullmatch(request_id)
    return int(found.group(1)) if found else None


# --------------------------------------------------------------------------- workers


@dataclass
class Worker:
    index: int
    process: Any
    channel: Channel
    hello: dict[str, Any] | None = None
    relay: Relay | None = None

    @property
    def alive(self) -> bool:
        return bool(self.process.is_alive())


class Workers:
    """The running workers, as the admin API sees them."""

    def __init__(self, workers: Sequence[Worker], slots: Slots) -> None:
        self.workers = list(workers)
        self.slots = slots
        self._changing = asyncio.Lock()

    async def ask_all(self, op: str, **fields: Any) -> list[Any]:
        """Ask every worker (sent at once, in call order); their answers, in order.
        Raises web.HTTPServiceUnavailable when one cannot answer."""
        futures = [w.channel.send(op, **fields) for w in self.workers]
        return await self._gather(futures)

    async def ask(self, index: int, op: str, **fields: Any) -> Any:
        return (await self._gather([self.workers[index].channel.send(op, **fields)]))[0]

    async def _gather(self, futures: Sequence[asyncio.Future[Any]]) -> list[Any]:
        try:
            async with asyncio.timeout(ASK_LIMIT):
                results = await asyncio.gather(*futures, return_exceptions=True)
        except TimeoutError:
            for future in futures:
                future.cancel()
            raise web.HTTPServiceUnavailable(reason="a worker did not answer in time") from None
        for result in results:
            if isinstance(result, BaseException):
                raise web.HTTPServiceUnavailable(reason=f"a worker failed: {result}")
        return results

    async def changed(self, change: dict[str, Any]) -> None:
        """An admin change made in the supervisor: made by every worker before the
        admin call answers (AdminState.changed). Sent in the order they were made."""
        change = dict(change)
        op = change.pop("op")
        slots = self.slots
        if op == "add_scenario":
            slots.fresh(change["scenario"])
            change["body"] = base64.b64encode(change["body"]).decode("ascii")
        elif op == "remove_scenario":
            slots.drop(change["scenario"])
        elif op == "reset":
            slots.restore()
        elif op == "add_fixtures":
            change["body"] = base64.b64encode(change["body"]).decode("ascii")
        # Sent now, in this order, whatever the answers' order: each worker makes its
        # changes one after the other.
        futures = [w.channel.send(op, slots=slots.of, **change) for w in self.workers]
        async with self._changing:
            try:
                await self._gather(futures)
                if op == "reset":  # every worker has its start-up scenarios back: anew
                    slots.counters.zero()
            finally:
                slots.release()

    # -- reads

    async def recent(
        self, limit: int, scenario: str | None, criteria: Any | None, page: admin_api.Page
    ) -> tuple[list[AdminSummary], str | None]:
        """A page of ``GET /requests`` over every worker: each lists a page of its own
        (newest first, begun before the cursor: a time), merged newest first within
        ``limit`` and the page's bytes; the cursor of the next (None: no more)."""
        given = None
        if criteria is not None:
            given = {k: getattr(criteria, k) for k in ("model", "path", "contains", "tool")}
        before = None if page.cursor is None else float(page.cursor)
        answers = await self.ask_all(
            "recent",
            limit=limit,
            scenario=scenario,
            criteria=given,
            before=before,
            max_bytes=page.max_bytes,
        )
        found = [(float(began), view) for answer in answers for began, view in answer["found"]]
        found.sort(key=lambda pair: pair[0], reverse=True)
        more = any(answer["more"] for answer in answers)
        out: list[AdminSummary] = []
        size = 0
        last = 0.0
        for began, view in found:
            length = len(orjson.dumps(view))
            if len(out) >= limit or (out and size + length > page.max_bytes):
                more = True
                break
            out.append(view)
            size += length + 1
            last = began
        return out, (repr(last) if more and out else None)

    async def records(self) -> list[tuple[float, str, RequestSummary | None]]:
        """Every request the workers keep, in the order they began: (when it began, its
        id, its summary; None while in flight)."""
        answers = await self.ask_all("records")
        out: list[tuple[float, str, RequestSummary | None]] = [
            (float(s), str(request_id), summary) for a in answers for s, request_id, summary in a
        ]
        out.sort(key=lambda record: record[0])
        return out

    async def in_flight(self) -> int:
        answers = await self.ask_all("health")
        return sum(int(a["in_flight"]) for a in answers)

    async def metrics(self) -> bytes:
        answers = await self.ask_all("metrics")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(answers))
        return generate_latest(registry)


class _Merged(Collector):
    """Every worker's metrics, summed sample by sample (``_created``: the earliest)."""

    def __init__(self, answers: Iterable[list[list[Any]]]) -> None:
        self._families: dict[str, tuple[str, str, dict[tuple[Any, ...], list[Any]]]] = {}
        for answer in answers:
            for name, documentation, kind, samples in answer:
                _, _, merged = self._families.setdefault(name, (documentation, kind, {}))
                for sample_name, labels, value in samples:
                    key = (sample_name, tuple(sorted(labels.items())))
                    if key not in merged:
                        merged[key] = [sample_name, labels, value]
                    elif sample_name.endswith("_created"):
                        merged[key][2] = min(merged[key][2], value)
                    else:
                        merged[key][2] += value

    def collect(self) -> Iterable[Metric]:
        for name, (documentation, kind, merged) in self._families.items():
            metric = Metric(name, documentation, kind)
            for sample_name, labels, value in merged.values():
                metric.add_sample(sample_name, labels, value)
            yield metric


# --------------------------------------------------------------------------- admin


def _overrides(workers: Workers, state: admin_api.AdminState) -> dict[tuple[str, str], Any]:
    """The admin's reads that ask the workers."""

    async def list_requests(request: web.Request) -> web.Response:
        query = admin_api.recent_query(request)
        if isinstance(query, web.Response):
            return query
        page = admin_api.page_query(request)
        if isinstance(page, web.Response):
            return page
        limit, scenario, criteria = query
        try:
            admin_api.refuse_contains(state.requests, criteria)
        except ContentNotKept as exc:
            return admin_api.content_not_kept(exc)
        found, cursor = await workers.recent(limit, scenario, criteria, page)
        return admin_api.page_json([orjson.dumps(view) for view in found], cursor)

    async def get_request(request: web.Request) -> web.Response:
        request_id = request.match_info["id"]
        owner = owner_of(request_id)
        detail = None
        if owner is not None and owner < len(workers.workers):
            detail = await workers.ask(owner, "detail", request_id=request_id)
        if detail is None:
            return admin_api.not_found(request_id)
        return admin_api.json_response(detail)

    async def post_verdict(request: web.Request) -> web.Response:
        from chaosproxy.core.verdict import judge_run, run_of

        request_id = request.match_info["id"]
        records = await workers.records()
        known = {rid: summary is not None for _, rid, summary in records}
        if request_id not in known:
            return admin_api.not_found(request_id)
        parsed = await admin_api.verdict_body(request)
        if isinstance(parsed, web.Response):
            return parsed
        report, others = parsed
        for rid in (request_id, *others):
            if rid not in known:
                return admin_api.not_found(rid)
            if not known[rid]:
                return admin_api.in_flight_answer(rid)
        done = [summary for _, _, summary in records if summary is not None]
        verdict = judge_run(run_of(done, request_id, others), report)
        owner = owner_of(request_id)
        if owner is not None and owner < len(workers.workers):
            await workers.ask(owner, "verdict", request_id=request_id, verdict=verdict)
        return admin_api.json_response(verdict)

    async def metrics(request: web.Request) -> web.Response:
        body = await workers.metrics()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(request: web.Request) -> web.StreamResponse:
        with contextlib.suppress(web.HTTPException):
            state.requests.elsewhere = await workers.in_flight()
        return await admin_api._health(request)

    return {
        ("GET", "/requests"): list_requests,
        ("GET", "/requests/{id}"): get_request,
        ("POST", "/requests/{id}/verdict"): post_verdict,
        ("GET", "/metrics"): metrics,
        ("GET", "/health"): health,
    }


def _no_requests(content: bool) -> admin_api.RequestStore:
    """The supervisor's store: it keeps no requests; ``/health`` counts the workers'
    (``content``: whether theirs keep the prompts, ``--log-content``)."""
    store = admin_api.RequestStore(content=content)
    store.elsewhere = 0
    return store


# --------------------------------------------------------------------------- serving


def _placeholder(host: str, port: int) -> socket.socket:
    """Check that ``host:port`` is free (as one process's bind would) and hold it, with
    ``SO_REUSEPORT``, so the workers can all bind it (port 0: the port picked)."""
    from chaosproxy.server.net import StartupError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    probe = socket.socket(family, kind, proto)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(address)  # no SO_REUSEPORT: another listener there is refused
        port = probe.getsockname()[1]
    except OSError as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    finally:
        probe.close()
    held = socket.socket(family, kind, proto)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        held.bind((address[0], port, *address[2:]))
    except OSError as exc:
        held.close()
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return held


def _log_mode(config: Config) -> tuple[str, str]:
    """(how the workers write the frame log, in which format): see logfile."""
    fmt = config.log_format
    if config.log is None:
        return "none", "json" if fmt == "auto" else fmt
    if config.log == "-":
        tty = sys.stdout.isatty()
        resolved = ("pretty" if tty else "json") if fmt == "auto" else fmt
        return ("stdout" if is_regular(sys.stdout.fileno()) else "relay"), resolved
    os.close(open_append(config.log))  # (OSError: the caller's one line)
    return "file", "json" if fmt == "auto" else fmt


def serve_workers(
    config: Config,
    scenarios: Mapping[str, Scenario],
    fixtures: Sequence[Fixture],
    run: Callable[[Callable[[], Coroutine[Any, Any, int]]], int],
    *,
    notices: Sequence[str] = (),
) -> int:
    """``chaosproxy serve`` with ``config.workers`` > 1; ``run`` runs the event loop;
    ``notices``: more start-up notices."""
    return run(lambda: _supervise(config, scenarios, fixtures, notices))


async def _supervise(
    config: Config,
    scenarios: Mapping[str, Scenario],
    fixtures: Sequence[Fixture],
    notices: Sequence[str] = (),
) -> int:
    from chaosproxy.control.process import (
        _health_check_warning,
        _startup_line,
        _startup_notices,
        _Stop,
        fail,
        say,
    )
    from chaosproxy.control.start import SIDE_GRACE, _bound_urls, check_admin_binding, uses_mock
    from chaosproxy.scenario import cross_tenant_warnings, with_library
    from chaosproxy.scenario.selection import ScenarioSet
    from chaosproxy.server.net import StartupError, hostport, listen

    count = config.workers
    stop = _Stop(config.grace + EXIT_MARGIN)
    try:
        admin_warning = check_admin_binding(config)
        library = with_library(scenarios)
        if config.scenario is not None and config.scenario not in library:
            raise StartupError(f"--scenario {config.scenario!r} is not a loaded scenario")
        if len(library) > SLOTS:
            raise StartupError(f"more than {SLOTS} scenarios: too many for --workers")
        try:
            log_mode, log_format = _log_mode(config)
        except OSError as exc:
            raise StartupError(f"cannot open log {config.log}: {exc.strerror or exc}") from None
        host, port = config.listen
        held = _placeholder(host, port)
    except StartupError as exc:
        return fail(str(exc))
    port = held.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    array = context.RawArray("q", SLOTS + 1)
    lock = context.Lock()
    counters = SharedCounters(array, lock)
    slots = Slots(counters, library)
    tag = secrets.token_hex(2)
    secret = secrets.token_bytes(32)
    worker_config = config.replace(listen=(host, port), admin=None)
    inboxes = [inbox_pair() for _ in range(count)]
    workers: list[Worker] = []
    loop = asyncio.get_running_loop()
    relays: list[socket.socket] = []
    for i in range(count):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log_mine = log_theirs = None
        if log_mode == "relay":
            log_mine, log_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            log_mine.shutdown(socket.SHUT_WR)
            relays.append(log_mine)
        spec = WorkerSpec(
            index=i,
            count=count,
            tag=f"{tag}w{i}",
            config=worker_config,
            control=theirs,
            inbox=inboxes[i][0],
            outboxes=[sender if j != i else None for j, (_, sender) in enumerate(inboxes)],
            counters=array,
            lock=lock,
            slots=dict(slots.of),
            tenant_secret=secret,
            log_mode=log_mode,
            log_socket=log_theirs,
            log_format=log_format,
        )
        process = context.Process(
            target=run_worker, args=(spec,), name=f"chaosproxy-worker-{i}", daemon=True
        )
        process.start()
        theirs.close()
        if log_theirs is not None:
            log_theirs.close()
        channel = Channel(mine)
        await channel.open()
        workers.append(Worker(i, process, channel))
    for inbox, sender in inboxes:
        inbox.close()
        sender.close()
    write = stdout_writer()
    for i, sock in enumerate(relays):
        _, relay = await loop.create_unix_connection(lambda: Relay(write), sock=sock)
        workers[i].relay = relay

    def kill_all() -> None:
        for w in workers:
            with contextlib.suppress(Exception):
                if w.process.is_alive():
                    w.process.kill()

    stop.last_words = kill_all
    # Start-up: every worker says it is ready (or why it is not), or a signal comes.
    hellos = [asyncio.ensure_future(_hello(w)) for w in workers]
    signalled = asyncio.ensure_future(stop.wait())
    try:
        async with asyncio.timeout(START_LIMIT):
            await asyncio.wait({*hellos, signalled}, return_when=asyncio.FIRST_COMPLETED)
            while not signalled.done() and not all(h.done() for h in hellos):
                failed = [h for h in hellos if h.done() and h.result().get("op") != "ready"]
                if failed:
                    break
                await asyncio.wait(
                    {*hellos, signalled} - {h for h in hellos if h.done()},
                    return_when=asyncio.FIRST_COMPLETED,
                )
    except TimeoutError:
        pass
    held.close()
    problems = []
    for w, h in zip(workers, hellos, strict=True):
        hello = h.result() if h.done() else None
        w.hello = hello
        if hello is None:
            if not signalled.done():
                problems.append(f"worker {w.index} did not start within {START_LIMIT:g}s")
        elif hello.get("op") != "ready":
            problems.append(str(hello.get("reason") or f"worker {w.index} failed to start"))
    if problems or signalled.done():
        for h in hellos:
            h.cancel()
        await _stop_workers(workers, time.monotonic() + 1.0)
        if problems:
            for problem in dict.fromkeys(problems):  # (the same reason from each worker)
                fail(problem)
            return 2
        return 0
    # The admin API: here, obeyed by every worker.
    scenario_set = ScenarioSet(
        library, config.scenario, config.seed, trust_client=config.trust_client_scenarios
    )
    mirror = None
    if uses_mock(config):
        from chaosproxy.mock.fixtures import MockFixtures

        mirror = MockFixtures(fixtures)
    first = workers[0].hello or {}
    warnings = [admin_warning] if admin_warning else []
    warnings += [str(w) for w in first.get("warnings", []) if w != admin_warning]
    warnings += [w for w in cross_tenant_warnings(library.values()) if w not in warnings]
    group = Workers(workers, slots)
    admin_runner = None
    admin_url = None
    admin_bound: list[str] = []
    if config.admin is not None:
        admin_host, admin_port = config.admin
        state = admin_api.AdminState(
            scenario_set,
            _no_requests(config.log_content),
            Metrics(),
            token=config.admin_token,
            warnings=warnings,
            host=admin_host,
            fixtures=mirror,
            changed=group.changed,
        )
        try:
            admin_runner, bound_port = await listen(
                admin_api.create_admin_app(state, _overrides(group, state)),
                admin_host,
                admin_port,
                what="the admin API",
                grace=SIDE_GRACE,
            )
        except StartupError as exc:
            await _stop_workers(workers, time.monotonic() + config.grace + 0.5)
            return fail(str(exc))
        admin_url = f"http://{hostport(admin_host, bound_port)}"
        admin_bound = _bound_urls(admin_runner)
    shown = SimpleNamespace(
        url=first.get("url", f"http://{hostport(host, port)}"),
        bound=first.get("bound", []),
        upstream=first.get("upstream", ""),
        upstreams=first.get("upstreams", {}),
        admin_url=admin_url,
        admin_bound=admin_bound,
    )
    names = f"{len(library)} (the built-in library" + (
        f" and {', '.join(scenarios)})" if scenarios else ")"
    )
    line = _startup_line(config, shown, names=names)  # type: ignore[arg-type]
    pids = ", ".join(str((w.hello or {}).get("pid", "?")) for w in workers)
    print(f"{line}; workers: {count} (pids {pids})", file=sys.stderr)
    for notice in [*_startup_notices(config, shown), *notices]:  # type: ignore[arg-type]
        say("notice", notice)
    unreachable = await asyncio.to_thread(_health_check_warning, config, shown)  # type: ignore[arg-type]
    for warning in [*warnings, *([unreachable] if unreachable else [])]:
        say("warning", warning)
    sys.stderr.flush()
    # Serve until a signal, or until a worker dies on its own.
    died = asyncio.ensure_future(_first_death(workers))
    await asyncio.wait({signalled, died}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if signalled.done():
        say("notice", f"{stop.reason}: stopping; streams in flight get {config.grace:g}s")
        since = stop.signalled_at
    else:
        dead = died.result()
        say(
            "warning",
            f"worker {dead.index} exited on its own (code {dead.process.exitcode}): "
            "stopping every worker",
        )
        code = 1
        since = time.monotonic()
    died.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await died  # (its readers of the sentinels gone before others are added)
    if admin_runner is not None:
        for site in list(admin_runner.sites):
            await site.stop()
    await _stop_workers(workers, since + config.grace + EXIT_MARGIN - 0.1)
    for w in workers:
        if w.relay is not None:
            left = since + config.grace + 0.8 - time.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.05, left)):
                    await w.relay.done
        await w.channel.close()
    if admin_runner is not None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(0.1):
                await admin_runner.cleanup()
    stop.written()
    stop.last_words = None
    sys.stdout.flush()
    if code:
        return code
    return 0


async def _hello(worker: Worker) -> dict[str, Any]:
    assert worker.channel.hello is not None
    return await worker.channel.hello


async def _first_death(workers: Sequence[Worker]) -> Worker:
    """The first worker whose process ends."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[Worker] = loop.create_future()

    def ended(worker: Worker) -> None:
        if not gone.done():
            gone.set_result(worker)

    for w in workers:
        loop.add_reader(w.process.sentinel, ended, w)
    try:
        return await gone
    finally:
        for w in workers:
            with contextlib.suppress(Exception):
                loop.remove_reader(w.process.sentinel)


async def _all_ended(workers: Sequence[Worker]) -> None:
    """Until every worker's process has ended."""
    loop = asyncio.get_running_loop()
    left = {w.index for w in workers if w.process.is_alive()}
    done: asyncio.Future[None] = loop.create_future()

    def ended(worker: Worker) -> None:
        with contextlib.suppress(Exception):
            loop.remove_reader(worker.process.sentinel)
        left.discard(worker.index)
        if not left and not done.done():
            done.set_result(None)

    if not left:
        return
    for w in workers:
        if w.index in left:
            loop.add_reader(w.process.sentinel, ended, w)
    try:
        await done
    finally:
        for w in workers:
            with contextlib.suppress(Exception):
                loop.remove_reader(w.process.sentinel)


async def _stop_workers(workers: Sequence[Worker], deadline: float) -> None:
    """SIGTERM to every worker; SIGKILL to those still running at ``deadline``."""
    for w in workers:
        if w.process.is_alive() and w.process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.process.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
            await _all_ended(workers)
    for w in workers:
        if w.process.is_alive():
            w.process.kill()
    for w in workers:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(w.process.join, 1.0)


__all__ = ["ControlError", "Workers", "owner_of", "serve_workers"]
