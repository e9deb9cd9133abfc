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
once). A worker that dies on its own (a bug, the OOM killer, a stray ``kill -9``) is
replaced and the others go on serving (:class:`Keeper`): each worker tells the
supervisor which requests it has in flight (a note when a request begins and one when
it ends, batched per loop iteration: :class:`~chaosproxy.workers.worker.Flights`), so
the supervisor writes their ``response_end`` (outcome ``worker_lost``) with how the
worker ended (``killed by SIGKILL``); the replacement starts with the scenarios, the
default and the fixtures of now, and the counters all share. A worker that dies again
and again within :data:`RAPID` of its start is restarted after a growing delay, and
after :data:`GIVE_UP` such deaths in a row the supervisor stops (exit 1).
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
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from chaosproxy.control import admin as admin_api
from chaosproxy.control.watcher import ScenarioWatcher
from chaosproxy.core.records import AdminSummary, RequestSummary
from chaosproxy.core.summary import worker_lost_end
from chaosproxy.observe.logs import FrameLog
from chaosproxy.observe.metrics import CONTENT_TYPE_LATEST, NO_SCENARIO, Metrics, with_replica
from chaosproxy.scenario import Fixture, Scenario
from chaosproxy.scenario.selection import Rebased, ScenarioSet, UnknownScenario
from chaosproxy.scenario.watch import ScenarioFiles
from chaosproxy.server.config import Config
from chaosproxy.server.net import StartupError
from chaosproxy.workers.control import Channel, ControlError
from chaosproxy.workers.counters import SLOTS, SharedCounters, Slots
from chaosproxy.workers.handover import inbox_pair
from chaosproxy.workers.logfile import (
    LineWriter,
    Relay,
    is_regular,
    open_append,
    stdout_writer,
)
from chaosproxy.workers.worker import WorkerSpec, run_worker

if TYPE_CHECKING:
    from chaosproxy.control.process import _Stop
    from chaosproxy.fleet import SharedState

#: The longest the workers may take to start (import, load the scenarios, listen).
START_LIMIT = 60.0
#: The longest a worker may take to make an admin change or answer a read.
ASK_LIMIT = 30.0
#: After the signal, the supervisor exits within ``grace + EXIT_MARGIN`` whatever its
#: workers do (each exits within grace + 0.3 s of its own signal, a moment later).
EXIT_MARGIN = 0.85

#: A worker that dies within this long of its start died *at once*: a replacement of
#: it waits first (:data:`BACKOFF`), and :data:`GIVE_UP` such deaths in a row stop the
#: proxy.
RAPID = 10.0
#: The wait before a worker's replacement starts, after its k-th death at once in a
#: row (the first, and the death of a worker that ran a while: at once).
BACKOFF = (0.0, 0.5, 1.0, 2.0, 4.0)
#: Deaths at once in a row after which a worker is not replaced again: the proxy stops.
GIVE_UP = 5

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
    #: ``time.monotonic()`` when it was started.
    born: float = 0.0
    #: Its requests in flight, as it told: request id → (scenario, when it began).
    flights: dict[str, tuple[str | None, float]] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return bool(self.process.is_alive())

    @property
    def ready(self) -> bool:
        """Started, serving, and not gone."""
        return (
            self.hello is not None
            and self.hello.get("op") == "ready"
            and not self.channel.closed
            and self.alive
        )

    def noted(self, message: dict[str, Any]) -> None:
        """A note from the worker (control.py): the requests it began and ended."""
        if message.get("op") != "flights":
            return
        flights = self.flights
        for request_id, scenario, began in message.get("begun", ()):
            flights[str(request_id)] = (scenario, float(began))
        for request_id in message.get("ended", ()):
            flights.pop(request_id, None)


def ended_how(exitcode: int | None) -> str:
    """How a worker's process ended, in words (``killed by SIGKILL``, ``exit code 3``)."""
    if exitcode is None:
        return "ended"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class Workers:
    """The running workers, as the admin API sees them."""

    def __init__(self, workers: list[Worker], slots: Slots) -> None:
        #: Worker ``i`` at index ``i`` (a replacement takes its place).
        self.workers = workers
        #: Requests ended ``worker_lost`` (by the Keeper), by scenario label.
        self.lost: dict[str, int] = {}
        self.slots = slots
        self._changing = asyncio.Lock()
        #: The label on every merged metric (``--replica-id``).
        self.replica: str | None = None

    async def ask_all(self, op: str, **fields: Any) -> list[Any]:
        """Ask every worker serving now (sent at once, in call order); their answers,
        in order (a worker that died meanwhile: none). Raises
        web.HTTPServiceUnavailable when one cannot answer."""
        asked = [w for w in self.workers if w.ready]
        futures = [w.channel.send(op, **fields) for w in asked]
        return [r for r in await self._gather(futures, asked) if r is not _GONE]

    async def ask(self, index: int, op: str, **fields: Any) -> Any:
        worker = self.workers[index]
        result = (await self._gather([worker.channel.send(op, **fields)], [worker]))[0]
        if result is _GONE:
            raise web.HTTPServiceUnavailable(reason=f"worker {index} died; it is being replaced")
        return result

    async def _gather(
        self, futures: Sequence[asyncio.Future[Any]], asked: Sequence[Worker]
    ) -> list[Any]:
        """The answers (:data:`_GONE` for a worker that died: its replacement starts
        with what is current)."""
        try:
            async with asyncio.timeout(ASK_LIMIT):
                results = await asyncio.gather(*futures, return_exceptions=True)
        except TimeoutError:
            for future in futures:
                future.cancel()
            raise web.HTTPServiceUnavailable(reason="a worker did not answer in time") from None
        out: list[Any] = []
        for worker, result in zip(asked, results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, ControlError) and worker.channel.closed:
                    out.append(_GONE)
                    continue
                raise web.HTTPServiceUnavailable(reason=f"a worker failed: {result}")
            out.append(result)
        return out

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
        elif op == "rebase":  # the scenario files changed (_watch_files)
            for name in change.pop("changed"):
                slots.fresh(name)
            for name in change.pop("removed"):
                slots.drop(name)
            slots.rebase(name for name, _ in change["base"])
        # Sent now, in this order, whatever the answers' order: each worker makes its
        # changes one after the other.
        # Every worker but one that is gone (its replacement starts with what is
        # current); one starting makes it once it has started.
        told = [w for w in self.workers if not w.channel.closed]
        futures = [w.channel.send(op, slots=slots.of, **change) for w in told]
        async with self._changing:
            try:
                await self._gather(futures, told)
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
        if self.lost:  # counted here: no worker saw them end
            answers.append(lost_family(self.lost))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(answers))
        return with_replica(generate_latest(registry), self.replica)


#: The answer of a worker that died before it answered.
_GONE = object()


def lost_family(lost: Mapping[str, int]) -> list[list[Any]]:
    """The ``worker_lost`` ends the supervisor wrote, as a worker's answer to
    ``metrics`` would give them (``chaosproxy_requests_total{outcome="worker_lost"}``),
    to be summed with the workers'."""
    samples = [
        ["chaosproxy_requests_total", {"scenario": scenario, "outcome": "worker_lost"}, n]
        for scenario, n in lost.items()
    ]
    return [["chaosproxy_requests", "Requests answered, by outcome.", "counter", samples]]


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


# --------------------------------------------------------------------------- files


def _watch_files(
    config: Config, scenarios: ScenarioSet, group: Workers, files: ScenarioFiles
) -> ScenarioWatcher:
    """The watcher of the scenario files: a valid change is made here, then by every
    worker (``rebase``: each scenario of the new base by name, with its document when
    it is new or changed), before the next poll."""
    from chaosproxy.scenario import with_library

    async def apply(files: dict[str, Scenario]) -> Rebased:
        old, default = scenarios.initial()
        rebased = scenarios.rebase(with_library(files), default)
        base, _ = scenarios.initial()
        entries = [
            [name, None if old.get(name) is scenario else scenario.as_dict()]
            for name, scenario in base.items()
        ]
        change = {
            "op": "rebase",
            "base": entries,
            "default": default,
            "changed": list(rebased.changed),
            "removed": list(rebased.removed),
        }
        try:
            await group.changed(change)
        except web.HTTPException as exc:
            say_line("warning", f"scenario files: not every worker has the change: {exc.reason}")
        return rebased

    return ScenarioWatcher(
        list(config.scenarios),
        config.scenarios_poll,
        apply,
        say=say_line,
        default=lambda: scenarios.default,
        files=files,
    )


# --------------------------------------------------------------------------- deaths


class Keeper:
    """Keeps every worker running: one that dies is replaced, the others serving on.

    Its requests in flight get their ``response_end`` (``worker_lost``, with how it
    ended) once everything it sent has been read (its notes, its relayed log lines);
    the counters' lock is freed if it died holding it; the replacement starts with the
    state of now (``current``). A worker that dies within :data:`RAPID` of its start
    (or before it started) is replaced after :data:`BACKOFF`; after :data:`GIVE_UP` of
    those in a row, :attr:`gave_up` is done with the line that says so."""

    def __init__(
        self,
        group: Workers,
        spawn: Callable[..., Awaitable[Worker]],
        current: Callable[[], dict[str, Any]],
        log: FrameLog | None,
        lock: Any,
    ) -> None:
        self.group = group
        self._spawn = spawn
        self._current = current
        self._log = log
        self._lock = lock
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._rapid = [0] * len(group.workers)
        self._stopping = False
        #: Done, with the line to say, once a worker is not replaced again.
        self.gave_up: asyncio.Future[str] = self._loop.create_future()
        #: Workers replaced so far.
        self.replaced = 0

    def start(self) -> None:
        for worker in self.group.workers:
            self._watch(worker)

    def _watch(self, worker: Worker) -> None:
        self._loop.add_reader(worker.process.sentinel, self._died, worker)

    def _died(self, worker: Worker) -> None:
        with contextlib.suppress(Exception):
            self._loop.remove_reader(worker.process.sentinel)
        if self._stopping:
            return
        task = self._loop.create_task(self._replace(worker))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """No more replacements (the proxy is stopping)."""
        self._stopping = True
        for worker in self.group.workers:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(worker.process.sentinel)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _replace(self, dead: Worker) -> None:
        index = dead.index
        await asyncio.to_thread(dead.process.join, 1.0)
        how = ended_how(dead.process.exitcode)
        # Everything it sent first: its last notes, its last relayed log lines.
        waits: list[asyncio.Future[None]] = []
        if dead.channel.ended is not None:
            waits.append(dead.channel.ended)
        if dead.relay is not None:
            waits.append(dead.relay.done)
        if waits:
            await asyncio.wait(waits, timeout=2.0)
        lost = self.lose(dead, how)
        await dead.channel.close()
        await asyncio.to_thread(_unlock, self._lock)
        started = dead.hello is not None and dead.hello.get("op") == "ready"
        if started and time.monotonic() - dead.born >= RAPID:
            self._rapid[index] = 0
        else:
            self._rapid[index] += 1
        rapid = self._rapid[index]
        pid = dead.process.pid
        if rapid >= GIVE_UP:
            if not self.gave_up.done():
                self.gave_up.set_result(
                    f"worker {index} (pid {pid}) {how}; {lost} request(s) in flight ended "
                    f"worker_lost; it died {rapid} times in a row within {RAPID:g}s of "
                    "starting: not replacing it again; stopping every worker"
                )
            return
        wait = BACKOFF[min(max(rapid - 1, 0), len(BACKOFF) - 1)]
        then = f"replacing it in {wait:g}s" if wait else "replacing it"
        say_line(
            "warning",
            f"worker {index} (pid {pid}) {how}; {lost} request(s) in flight ended "
            f"worker_lost; {then}",
        )
        if wait:
            await asyncio.sleep(wait)
        if self._stopping:
            return
        worker = await self._spawn(index, **self._current())
        self._watch(worker)
        assert worker.channel.hello is not None
        try:
            async with asyncio.timeout(START_LIMIT):
                hello = await worker.channel.hello
        except TimeoutError:
            worker.process.kill()  # its death is counted as one at once
            return
        worker.hello = hello
        if hello.get("op") == "ready":
            self.replaced += 1
            say_line("notice", f"worker {index} replaced (pid {hello.get('pid')})")
        else:
            reason = hello.get("reason") or "it failed to start"
            say_line("warning", f"worker {index}'s replacement did not start: {reason}")

    def lose(self, dead: Worker, how: str) -> int:
        """Write the ``response_end`` of every request ``dead`` had in flight
        (``worker_lost``); how many there were."""
        flights, dead.flights = dead.flights, {}
        lost = self.group.lost
        for scenario, _ in flights.values():
            label = scenario or NO_SCENARIO
            lost[label] = lost.get(label, 0) + 1
        log = self._log
        if log is not None and flights:
            now = time.monotonic()
            reason = f"worker {dead.index} {how}"
            for request_id, (scenario, began) in sorted(flights.items(), key=lambda f: f[1][1]):
                end = worker_lost_end((now - began) * 1000.0, reason)
                log.for_request(request_id=request_id, scenario=scenario).info(
                    "response_end", **end
                )
            log.flush()
        return len(flights)


def _unlock(lock: Any) -> None:
    """Free the counters' lock if a dead worker held it: a worker holds it for a few
    instructions, so one held for a second is the dead one's."""
    if lock.acquire(timeout=1.0):
        lock.release()
    else:
        with contextlib.suppress(ValueError):
            lock.release()


def say_line(kind: str, message: str) -> None:
    from chaosproxy.control.process import say

    say(kind, message)


class _WriteLines:
    """A binary stream of whole lines handed to ``write`` (the relay's stdout)."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self.closed = False
        self.name = "stdout"

    def write(self, data: bytes) -> int:
        self._write(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def _lost_log(
    config: Config, log_mode: str, log_format: str, write: Callable[[bytes], None]
) -> FrameLog | None:
    """The supervisor's own frame log, for the ends of a dead worker's requests: the
    same target and format as the workers' (None: no log)."""
    stream: Any
    if log_mode == "file" and config.log is not None:
        stream = LineWriter(open_append(config.log), name=config.log)
    elif log_mode == "stdout":
        stream = LineWriter(sys.stdout.fileno(), name="stdout", owns=False)
    elif log_mode == "relay":
        stream = _WriteLines(write)
    else:
        return None
    fmt: Any = log_format
    return FrameLog(stream, content=config.log_content, fmt=fmt, level=config.log_level)


# --------------------------------------------------------------------------- admin


def _overrides(workers: Workers, state: admin_api.AdminState) -> dict[tuple[str, str], Any]:
    """The admin's reads that ask the workers."""

    async def list_requests(request: web.Request) -> web.Response:
        query = admin_api.listing_query(request)
        if isinstance(query, web.Response):
            return query
        limit, scenario, criteria, page = query
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
        request_id = request.match_info["id"]
        records = await workers.records()
        verdict = await admin_api.judge_kept(request, [(rid, s) for _, rid, s in records])
        if isinstance(verdict, web.Response):
            return verdict
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


@dataclass
class _Prepared:
    """What the supervisor checked before it starts a worker."""

    #: The scenarios every worker has: the built-in library and the files'.
    library: dict[str, Scenario]
    #: How the workers write the frame log, in which format (see logfile).
    log_mode: str
    log_format: str
    #: The proxy's address, held with ``SO_REUSEPORT`` until the workers listen.
    held: socket.socket
    admin_warning: str | None


def _prepare(config: Config, scenarios: Mapping[str, Scenario]) -> _Prepared:
    """Every check a start-up can fail before a worker is spawned (StartupError)."""
    from chaosproxy.control.start import check_admin_binding
    from chaosproxy.scenario import with_library

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
    return _Prepared(library, log_mode, log_format, _placeholder(host, port), admin_warning)


class _Spawner:
    """Starts the workers, and each replacement, with what they all share: the
    counters, the scenarios' slots, the run's tag and tenant secret, every inbox (both
    ends of each stay here: a replacement takes its place, and the others' sending
    ends still reach it), the frame log's target."""

    def __init__(
        self, config: Config, prepared: _Prepared, port: int, fixtures: Sequence[Fixture]
    ) -> None:
        self.count = config.workers
        self.context = multiprocessing.get_context("spawn")
        self.array = self.context.RawArray("q", SLOTS + 1)
        self.lock = self.context.Lock()
        self.slots = Slots(SharedCounters(self.array, self.lock), prepared.library)
        self.tag = secrets.token_hex(8)
        self.secret = secrets.token_bytes(32)
        self.log_mode = prepared.log_mode
        self.log_format = prepared.log_format
        self.fixtures = tuple(fixtures)
        # Watching the scenario files is the supervisor's (workers change as it says).
        self.config = config.replace(
            listen=(config.listen[0], port), admin=None, scenarios_poll=0.0
        )
        self.inboxes = [inbox_pair() for _ in range(self.count)]
        self.workers: list[Worker] = []
        self.write = stdout_writer()
        self.generations = [0] * self.count

    async def spawn(self, i: int, **now: Any) -> Worker:
        """Start worker ``i`` (``now``: a replacement's current state, WorkerSpec). A
        replacement's request ids carry its generation after the run's tag
        (``r-3f9a1w0-1``), so that they never repeat its predecessor's."""
        generation = self.generations[i]
        self.generations[i] += 1
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log_mine = log_theirs = None
        if self.log_mode == "relay":
            log_mine, log_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            log_mine.shutdown(socket.SHUT_WR)
        spec = WorkerSpec(
            index=i,
            count=self.count,
            tag=f"{self.tag}{generation:x}w{i}" if generation else f"{self.tag}w{i}",
            config=self.config,
            control=theirs,
            inbox=self.inboxes[i][0],
            outboxes=[sender if j != i else None for j, (_, sender) in enumerate(self.inboxes)],
            counters=self.array,
            lock=self.lock,
            slots=dict(self.slots.of),
            tenant_secret=self.secret,
            log_mode=self.log_mode,
            log_socket=log_theirs,
            log_format=self.log_format,
            fixture_files=self.fixtures,
            **now,
        )
        process = self.context.Process(
            target=run_worker, args=(spec,), name=f"chaosproxy-worker-{i}", daemon=True
        )
        process.start()
        theirs.close()
        if log_theirs is not None:
            log_theirs.close()
        channel = Channel(mine)
        worker = Worker(i, process, channel, born=time.monotonic())
        channel.on_note = worker.noted
        if i < len(self.workers):  # a replacement takes its place at once
            self.workers[i] = worker
        await channel.open()
        if log_mine is not None:
            loop = asyncio.get_running_loop()
            write = self.write
            _, worker.relay = await loop.create_unix_connection(lambda: Relay(write), sock=log_mine)
        return worker

    def kill_all(self) -> None:
        for w in self.workers:
            with contextlib.suppress(Exception):
                if w.process.is_alive():
                    w.process.kill()

    def close(self) -> None:
        for pair in self.inboxes:
            for sock in pair:
                sock.close()


async def _started(
    workers: Sequence[Worker], signalled: asyncio.Future[Any], held: socket.socket
) -> list[str] | None:
    """Wait until every worker says it is ready (or why it is not), or a signal comes,
    then let the address ``held`` go: why start-up failed, each once; [] for a signal;
    None when every worker is ready (else they are stopped)."""
    hellos = [asyncio.ensure_future(_hello(w)) for w in workers]
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
        return list(dict.fromkeys(problems))  # (the same reason from each worker)
    return None


@dataclass
class _Admin:
    """The supervisor's admin API, when it has one."""

    runner: web.AppRunner | None = None
    url: str | None = None
    bound: list[str] = field(default_factory=list)


async def _serve_admin(
    config: Config,
    group: Workers,
    scenario_set: ScenarioSet,
    mirror: Any,
    warnings: list[str],
    shared: SharedState | None,
    changed: Callable[[dict[str, Any]], Awaitable[Any]],
) -> _Admin:
    """The admin API, here, obeyed by every worker (StartupError: it cannot listen)."""
    from chaosproxy.control.start import SIDE_GRACE, _bound_urls
    from chaosproxy.server.net import hostport, listen

    if config.admin is None:
        return _Admin()
    admin_host, admin_port = config.admin
    state = admin_api.AdminState(
        scenario_set,
        _no_requests(config.log_content),
        Metrics(),
        token=config.admin_token,
        warnings=warnings,
        host=admin_host,
        fixtures=mirror,
        client_timeout=config.admin_client_timeout,
        max_connections=config.admin_max_connections,
        changed=changed,
        shared=shared,
    )
    runner, bound_port = await listen(
        admin_api.create_admin_app(state, _admin_routes(group, state, shared, config)),
        admin_host,
        admin_port,
        what="the admin API",
        grace=SIDE_GRACE,
    )
    return _Admin(runner, f"http://{hostport(admin_host, bound_port)}", _bound_urls(runner))


async def _announce(
    config: Config,
    port: int,
    scenarios: Mapping[str, Scenario],
    library: Mapping[str, Scenario],
    workers: Sequence[Worker],
    admin: _Admin,
    warnings: Sequence[str],
    notices: Sequence[str],
) -> None:
    """The start-up line (as one process's ``serve``, with the workers' pids), the
    notices and the warnings, on stderr."""
    from chaosproxy.control.process import (
        _health_check_warning,
        _startup_line,
        _startup_notices,
        say,
    )
    from chaosproxy.server.net import hostport

    host = config.listen[0]
    first = workers[0].hello or {}
    shown = SimpleNamespace(
        url=first.get("url", f"http://{hostport(host, port)}"),
        bound=first.get("bound", []),
        upstream=first.get("upstream", ""),
        upstreams=first.get("upstreams", {}),
        admin_url=admin.url,
        admin_bound=admin.bound,
    )
    names = f"{len(library)} (the built-in library" + (
        f" and {', '.join(scenarios)})" if scenarios else ")"
    )
    line = _startup_line(config, shown, names=names)  # type: ignore[arg-type]
    pids = ", ".join(str((w.hello or {}).get("pid", "?")) for w in workers)
    print(f"{line}; workers: {len(workers)} (pids {pids})", file=sys.stderr)
    for notice in [*_startup_notices(config, shown), *notices]:  # type: ignore[arg-type]
        say("notice", notice)
    unreachable = await asyncio.to_thread(_health_check_warning, config, shown)  # type: ignore[arg-type]
    for warning in [*warnings, *([unreachable] if unreachable else [])]:
        say("warning", warning)
    sys.stderr.flush()


def _warnings(prepared: _Prepared, first: Mapping[str, Any]) -> list[str]:
    """The start-up warnings: the admin's binding, the first worker's, the library's."""
    from chaosproxy.scenario import cross_tenant_warnings

    admin_warning = prepared.admin_warning
    warnings = [admin_warning] if admin_warning else []
    warnings += [str(w) for w in first.get("warnings", []) if w != admin_warning]
    library = prepared.library.values()
    return warnings + [w for w in cross_tenant_warnings(library) if w not in warnings]


async def _wind_down(
    config: Config,
    spawner: _Spawner,
    admin: _Admin,
    since: float,
    closing: Sequence[Callable[[], Awaitable[Any]]],
) -> None:
    """Stop serving: the admin's sites, then every worker within its grace from
    ``since`` (the signal), their log relays drained, then what else ``closing`` ends."""
    if admin.runner is not None:
        for site in list(admin.runner.sites):
            await site.stop()
    workers = spawner.workers
    await _stop_workers(workers, since + config.grace + EXIT_MARGIN - 0.1)
    for w in workers:
        if w.relay is not None:
            left = since + config.grace + 0.8 - time.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.05, left)):
                    await w.relay.done
        await w.channel.close()
    if admin.runner is not None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(0.1):
                await admin.runner.cleanup()
    for close in closing:
        await close()


def _obeyed(
    config: Config, library: Mapping[str, Scenario], fixtures: Sequence[Fixture]
) -> tuple[ScenarioSet, Any]:
    """What the admin API changes here and every worker follows: the scenario set, and
    the mock's fixtures when the upstream is the mock (else None)."""
    from chaosproxy.control.start import scenario_set as scenario_set_of
    from chaosproxy.control.start import uses_mock

    scenario_set = scenario_set_of(config, library)
    mirror = None
    if uses_mock(config):
        from chaosproxy.mock.fixtures import MockFixtures

        mirror = MockFixtures(fixtures)
    return scenario_set, mirror


def _keeper(
    group: Workers,
    spawner: _Spawner,
    scenario_set: ScenarioSet,
    mirror: Any,
    lost_log: FrameLog | None,
) -> Keeper:
    """The keeper of the workers, started: a worker that dies is replaced, starting
    with the state of now."""

    def current() -> dict[str, Any]:
        """What a replacement starts with: the state of now (WorkerSpec)."""
        live, default = scenario_set.snapshot()
        return {
            "scenarios": live,
            "default": default,
            "initial": scenario_set.initial(),
            "fixtures_added": mirror.added if mirror is not None else (),
        }

    keeper = Keeper(group, spawner.spawn, current, lost_log, spawner.lock)
    keeper.start()
    return keeper


async def _until_stopped(
    config: Config, stop: _Stop, signalled: asyncio.Future[Any], keeper: Keeper
) -> tuple[int, float]:
    """Serve until a signal (exit 0) or until the keeper gives up on a worker (exit 1):
    the exit code, and when stopping began (the workers' grace counts from it)."""
    from chaosproxy.control.process import say

    await asyncio.wait({signalled, keeper.gave_up}, return_when=asyncio.FIRST_COMPLETED)
    if signalled.done():
        say("notice", f"{stop.reason}: stopping; streams in flight get {config.grace:g}s")
        return 0, stop.signalled_at
    say("error", keeper.gave_up.result())
    return 1, time.monotonic()


async def _supervise(
    config: Config,
    scenarios: Mapping[str, Scenario],
    fixtures: Sequence[Fixture],
    notices: Sequence[str] = (),
) -> int:
    from chaosproxy.control.process import _Stop, fail
    from chaosproxy.control.start import watches

    # (as early as can be: the CLI has just loaded them)
    watched = ScenarioFiles(config.scenarios) if watches(config) else None
    stop = _Stop(config.grace + EXIT_MARGIN)
    try:
        prepared = _prepare(config, scenarios)
    except StartupError as exc:
        return fail(str(exc))
    library = prepared.library
    port = prepared.held.getsockname()[1]
    spawner = _Spawner(config, prepared, port, fixtures)
    workers = spawner.workers
    for i in range(config.workers):
        # The supervisor's scenarios, not the files again: every worker has the same.
        workers.append(await spawner.spawn(i, scenarios=library, default=config.scenario))
    lost_log = _lost_log(config, spawner.log_mode, spawner.log_format, spawner.write)
    stop.last_words = spawner.kill_all
    signalled = asyncio.ensure_future(stop.wait())
    problems = await _started(workers, signalled, prepared.held)
    if problems is not None:
        for problem in problems:
            fail(problem)
        return 2 if problems else 0
    scenario_set, mirror = _obeyed(config, library, fixtures)
    warnings = _warnings(prepared, workers[0].hello or {})
    group = Workers(workers, spawner.slots)
    group.replica = config.replica_id
    shared = None
    changed: Callable[[dict[str, Any]], Awaitable[Any]] = group.changed
    try:
        if config.shared:  # the replica is a member of its fleet too (docs/fleet.md)
            shared = await _join_fleet(config, scenario_set, mirror)
            changed = _fleet_changes(group, shared)
        admin = await _serve_admin(config, group, scenario_set, mirror, warnings, shared, changed)
    except StartupError as exc:
        await _stop_workers(workers, time.monotonic() + config.grace + 0.5)
        return fail(str(exc))
    await _announce(config, port, scenarios, library, workers, admin, warnings, notices)
    # Serve until a signal, replacing a worker that dies (or giving up on one).
    keeper = _keeper(group, spawner, scenario_set, mirror, lost_log)
    watcher = None
    if watched is not None:
        watcher = _watch_files(config, scenario_set, group, watched)
        watcher.start()
    code, since = await _until_stopped(config, stop, signalled, keeper)
    await keeper.stop()
    if watcher is not None:
        await watcher.stop()
    closing: list[Callable[[], Awaitable[Any]]] = [shared.close] if shared is not None else []
    await _wind_down(config, spawner, admin, since, closing)
    if lost_log is not None:
        lost_log.close()
    spawner.close()
    stop.written()
    stop.last_words = None
    sys.stdout.flush()
    return code


async def _join_fleet(config: Config, scenarios: ScenarioSet, fixtures: Any) -> SharedState:
    """The supervisor as its fleet's member (``--state redis://…``): what the admin
    shows follows the fleet's changes; its workers are members of their own, which
    read those changes and count with the fleet (StartupError: Redis unreachable)."""
    from chaosproxy.fleet import SharedState
    from chaosproxy.scenario import parse_fixtures, parse_scenario

    async def apply(change: dict[str, Any]) -> None:  # the admin's view of the set
        op = change["op"]
        if op == "add_scenario":
            scenarios.add(
                await asyncio.to_thread(
                    parse_scenario,
                    change["body"],
                    admin_api.BODY_SOURCE,
                    default_name=change.get("name"),
                    read_only=True,
                )
            )
        elif op == "remove_scenario":
            with contextlib.suppress(UnknownScenario):
                scenarios.remove(change["scenario"])
        elif op == "set_default":
            scenarios.set_default(change.get("scenario"))
        elif op == "reset":
            scenarios.restore()
            if fixtures is not None:
                fixtures.reset()
        elif op == "add_fixtures" and fixtures is not None:
            fixtures.add(await asyncio.to_thread(parse_fixtures, change["body"], "body"))
        elif op == "clear_fixtures" and fixtures is not None:
            fixtures.clear()

    shared = SharedState(config.state, config.fleet, config.replica, config.state_timeout)
    try:
        startup = await shared.start(apply)
        for body, name in startup.scenarios:
            await apply({"op": "add_scenario", "body": body, "name": name})
        for body in startup.fixtures:
            await apply({"op": "add_fixtures", "body": body})
        if startup.default != "unset":
            await apply({"op": "set_default", "scenario": startup.default})
    except (OSError, TimeoutError) as exc:
        await shared.close()
        raise StartupError(str(exc) or f"--state {shared.label}: no answer in time") from None
    return shared


def _admin_routes(
    group: Workers, state: admin_api.AdminState, shared: SharedState | None, config: Config
) -> dict[tuple[str, str], Any]:
    """The admin's reads: the workers', or in a fleet the fleet's journal (the workers'
    with Redis away)."""
    routes = _overrides(group, state)
    if shared is not None:
        from chaosproxy.control.fleet_admin import fleet_overrides
        from chaosproxy.fleet.journal import FleetJournal

        journal = FleetJournal(shared, state.requests, config.history, config.history_bytes)
        routes.update(fleet_overrides(journal, shared, routes))
    return routes


def _fleet_changes(
    group: Workers, shared: SharedState
) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    """An admin change in a fleet's supervisor: made by its workers (its own channel,
    as ever), then given to the fleet, whose other members apply it."""
    from chaosproxy.control.start import shared_changes

    publish = shared_changes(shared)

    async def changed(change: dict[str, Any]) -> dict[str, Any]:
        await group.changed(change)
        return await publish(change)

    return changed


async def _hello(worker: Worker) -> dict[str, Any]:
    assert worker.channel.hello is not None
    return await worker.channel.hello


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


__all__ = [
    "ControlError",
    "Keeper",
    "Workers",
    "ended_how",
    "owner_of",
    "serve_workers",
]
