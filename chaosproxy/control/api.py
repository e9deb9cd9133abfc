"""``ChaosProxy``: the proxy in-process, for tests (docs/python-api.md).

::

    async with ChaosProxy() as proxy:      # in a running loop
        client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="test")

    with ChaosProxy(upstream="mock", scenarios=["my-scenarios/"]) as proxy:   # sync tests
        requests.post(proxy.url + "/v1/chat/completions", headers={"X-Chaos-Scenario": …})

The built-in scenario library is always loaded first; ``scenarios`` (files,
directories, :class:`~chaosproxy.scenario.Scenario` values) add to it, and one of the
same name overrides a built-in one. The sync form runs the proxy on its own event loop
in a background thread. Either way
the proxy listens on a free port of 127.0.0.1, and every frame-log line is kept in
memory (:attr:`ChaosProxy.lines`) so a test can see exactly what its client received.

Leaving the block never hangs: streams still running get ``grace`` (``2s`` by default;
``ChaosProxy(grace=0)`` cuts them at once, as ``shutdown``), and whatever does not stop
within ``grace`` plus a margin is abandoned (its connections closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson

from chaosproxy.control.admin import NO_MOCK, RequestStore
from chaosproxy.control.start import CLOSE_MARGIN, RunningProxy, start_proxy
from chaosproxy.core.records import LogLine, RequestLine, RequestSummary, RunVerdict
from chaosproxy.core.verdict import ClientReport, judge_run, run_of, verdict_line
from chaosproxy.observe.journal import Criteria, matches, verify
from chaosproxy.observe.logs import FrameLog
from chaosproxy.observe.store import recorded_verdict, request_summary
from chaosproxy.scenario import (
    NAME_PATTERN,
    Fixture,
    Scenario,
    load_fixture_files,
    load_scenarios,
    parse_fixtures,
    parse_scenario,
)
from chaosproxy.scenario.selection import ScenarioSet, UnknownScenario
from chaosproxy.server.config import Config

if TYPE_CHECKING:
    from chaosproxy.mock.fixtures import MockFixtures

#: How long the calls that read finished requests wait, by default, for the requests in
#: flight to end (a client sees its last byte a moment before the proxy logs the end).
SETTLE = 5.0

_NAME_RE = re.compile(NAME_PATTERN)


def is_scenario_name(name_or_yaml: str) -> bool:
    """True when ``name_or_yaml`` is a scenario name rather than YAML text."""
    return _NAME_RE.fullmatch(name_or_yaml) is not None


def scenario_text(spec: str | Mapping[str, Any]) -> str | bytes:
    """A scenario given as YAML text or as a mapping (the admin API's shape), as text
    :func:`~chaosproxy.scenario.parse_scenario` reads."""
    if isinstance(spec, str):
        return spec
    return orjson.dumps(dict(spec))


def fixture_text(spec: str | Mapping[str, Any] | Fixture) -> str | bytes:
    """A fixture (or a fixture file's ``{"fixtures": [...]}``) given as YAML text, a
    mapping or a :class:`~chaosproxy.scenario.Fixture`, as text
    :func:`~chaosproxy.scenario.parse_fixtures` reads."""
    if isinstance(spec, Fixture):
        return orjson.dumps(spec.as_dict())
    return scenario_text(spec)


#: Where a scenario added from Python says it came from.
ADDED_SOURCE = "add_scenario"
#: Where a fixture added from Python says it came from.
ADDED_FIXTURE = "add_fixture"

#: What differs from ``chaosproxy serve`` when the proxy runs inside a test: a free
#: port, no admin API, no log file (the lines are kept in memory instead).
EMBEDDED = Config(listen=("127.0.0.1", 0), admin=None, log=None)

#: What the background thread may take beyond the close itself (tasks cancelled, loop
#: closed) before ``__exit__`` stops waiting for it.
THREAD_MARGIN = 0.5


class RequestQueries:
    """What :class:`ChaosProxy` (in this process) and
    :class:`~chaosproxy.control.client.ChaosClient` (over the admin API) both answer
    about the requests that went through a proxy, with the same filters and results:
    each reads its finished requests (:meth:`_finished_requests`) and records a verdict
    (:meth:`_record_verdict`) its own way."""

    def requests(
        self,
        scenario: str | None = None,
        *,
        model: str | None = None,
        path: str | None = None,
        contains: str | None = None,
        tool: str | None = None,
        settle: float = SETTLE,
    ) -> list[RequestSummary]:
        """Summaries of the finished requests, oldest first, each as :meth:`summary`
        gives it (:class:`~chaosproxy.core.records.RequestSummary`), with the parsed
        ``request`` (docs/mock.md, The request journal) while the journal keeps it (the
        last ``history`` requests).

        Only those that meet every filter given: ``scenario`` (its name), ``model`` and
        ``path`` (``fnmatch`` globs; a plain name is exact), ``contains`` (a substring of
        any text the request sent: messages, system prompt, tools), ``tool`` (a tool it
        offered). Waits up to ``settle`` seconds for the requests in flight to end
        first, so a request whose response the client has just read is there."""
        return self._finished_requests(Criteria(model, path, contains, tool, scenario), settle)

    def verify(
        self,
        count: int | None = None,
        *,
        model: str | None = None,
        path: str | None = None,
        contains: str | None = None,
        tool: str | None = None,
        scenario: str | None = None,
        settle: float = SETTLE,
    ) -> list[RequestSummary]:
        """The finished requests that meet the filters (as :meth:`requests` takes them),
        asserting there are exactly ``count`` of them (None: at least one), as WireMock's
        ``verify``. Raises :class:`~chaosproxy.observe.journal.VerificationError` (an
        AssertionError) otherwise, listing the requests seen and what each lacked."""
        criteria = Criteria(model, path, contains, tool, scenario)
        return verify(self.requests(settle=settle), criteria, count)

    def last(self, *, settle: float = SETTLE) -> RequestSummary:
        """The summary of the most recently finished request (after waiting, as
        :meth:`requests` does, for those in flight); LookupError when none has."""
        finished = self.requests(settle=settle)
        if not finished:
            raise LookupError("no request has gone through the proxy yet")
        return finished[-1]

    def verdict(
        self,
        request_id: str,
        *,
        text: str | None = None,
        error: str | BaseException | None = None,
        timed_out: bool = False,
        requests: Sequence[str] = (),
        timeout: float = SETTLE,
    ) -> RunVerdict:
        """Record what the client concluded about an answer (the text it assembled, the
        error it raised, or that it timed out) and judge it (docs/verdicts.md):
        ``{"verdict", "integrity", "content", "reason", "text_matches", "requests"}``.

        The answer judged is ``request_id``'s, over every request that belongs to it
        (the reconnects of its stream, the generations they started) and the other
        requests of the same client run given in ``requests`` (retries); the last of
        them to begin is the one judged. The verdict is logged (a ``verdict`` line,
        on ``request_id``) and shown in that request's summary from then on.

        Waits up to ``timeout`` seconds for the requests to end first (as
        :meth:`summary`); KeyError when the proxy does not know one or it has not
        ended. An exception given as ``error`` is recorded as its type and message."""
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"
        report = ClientReport(text=text, error=error, timed_out=timed_out)
        return self._record_verdict(request_id, report, requests, timeout)

    def _finished_requests(self, criteria: Criteria, settle: float) -> list[RequestSummary]:
        """:meth:`requests`: the finished ones that meet ``criteria``, oldest first."""
        raise NotImplementedError

    def _record_verdict(
        self, request_id: str, report: ClientReport, requests: Sequence[str], timeout: float
    ) -> RunVerdict:
        """:meth:`verdict`, with the error already a string."""
        raise NotImplementedError


class ChaosProxy(RequestQueries):
    """A proxy on a free local port, started and stopped by a ``with`` block.

    Every setting of :class:`~chaosproxy.server.config.Config` (each ``chaosproxy serve``
    flag) is a keyword argument: ``ChaosProxy(connect_timeout=0.5, seed=7)``.
    ``upstream`` is one URL (or ``mock``), or a list of them with route prefixes:
    ``ChaosProxy(upstream=["/anthropic=https://api.anthropic.com", "https://api.openai.com"])``
    (docs/gateways.md).
    """

    def __init__(
        self,
        upstream: str | Sequence[str] = EMBEDDED.upstream,
        scenarios: Sequence[str | Path] | Iterable[Scenario] = (),
        *,
        scenario: str | None = EMBEDDED.scenario,
        seed: int | None = EMBEDDED.seed,
        log: str | None = EMBEDDED.log,
        log_content: bool = EMBEDDED.log_content,
        trace_dir: str | Path | None = EMBEDDED.trace_dir,
        **settings: Any,
    ) -> None:
        items = list(scenarios)
        parsed = [s for s in items if isinstance(s, Scenario)]
        paths = tuple(str(s) for s in items if not isinstance(s, Scenario))
        self.config = EMBEDDED.replace(
            upstream=upstream,
            scenarios=paths,
            scenario=scenario,
            seed=seed,
            log=log,
            log_content=log_content,
            trace_dir=None if trace_dir is None else str(trace_dir),
            **settings,
        )
        loaded = load_scenarios(list(paths)) if paths else {}
        loaded.update({s.name: s for s in parsed})
        self._scenarios = loaded
        self._fixtures = load_fixture_files(list(self.config.mock_fixtures))
        #: The running proxy's request store (the journal), kept after it stops.
        self._store: RequestStore | None = None
        self._log = (
            FrameLog.open(
                log, content=log_content, fmt=self.config.log_format, level=self.config.log_level
            )
            if log
            else FrameLog(None, content=log_content)
        )
        #: Every frame-log line of every request, as dicts, in order.
        self.lines: list[dict[str, Any]] = []
        #: The ``request`` lines of the requests in flight, by id.
        self._started: dict[str, RequestLine] = {}
        #: Finished requests: the request line merged with the response_end line.
        self._finished: list[RequestSummary] = []
        #: Every request's place in the order requests began (a run is judged in it).
        self._began: dict[str, int] = {}
        self._blocks = itertools.count(1)
        self._changed = threading.Condition()
        self._log.add_observer(self._keep)
        self._running: RunningProxy | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ access

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: point clients here."""
        if self._running is None:
            raise RuntimeError("the proxy is not running: use it in a with block")
        return self._running.url

    @property
    def admin_url(self) -> str | None:
        """The admin API's base URL (None unless started with ``admin=(HOST, PORT)``):
        for a :class:`~chaosproxy.ChaosClient`."""
        if self._running is None:
            raise RuntimeError("the proxy is not running: use it in a with block")
        return self._running.admin_url

    def _keep(self, record: LogLine) -> None:
        # Called on the proxy's thread; every reader takes the same lock.
        with self._changed:
            self.lines.append(dict(record))
            if record["event"] == "request":
                self._started[record["request_id"]] = record
                self._began[record["request_id"]] = len(self._began)
            elif record["event"] == "response_end":
                started = self._started.pop(record["request_id"], None)
                self._finished.append(request_summary(started, record))
            elif record["event"] == "verdict":
                for summary in self._finished[::-1]:
                    if summary["request_id"] == record["request_id"]:
                        summary["verdict"] = recorded_verdict(record)
                        break
            self._changed.notify_all()

    def requests_begun(self) -> int:
        """How many requests have begun so far (their ``request`` line logged)."""
        with self._changed:
            return len(self._began)

    def wait_begun(self, count: int, timeout: float) -> bool:
        """Whether more than ``count`` requests have begun (:meth:`requests_begun`),
        waiting up to ``timeout`` seconds for one to begin (from sync code only)."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._began) > count, timeout)

    def summary(self, request_id: str, timeout: float = SETTLE) -> RequestSummary:
        """The summary of a finished request (from its ``X-Chaos-Request-Id``): the
        fields of its ``response_end`` line plus those of its ``request`` line
        (:class:`~chaosproxy.core.records.RequestSummary`).

        A client can see the last byte a moment before the proxy logs the end, so this
        waits up to ``timeout`` seconds for it (from sync code only); KeyError if the
        request has not ended by then."""

        def find() -> RequestSummary | None:
            for finished in self._finished[::-1]:  # (reversed() gives mypy Any here)
                if finished["request_id"] == request_id:
                    return finished
            return None

        with self._changed:
            found: RequestSummary | None = self._changed.wait_for(find, timeout)
        if found is None:
            raise KeyError(request_id)
        return self._with_request(found)

    def _with_request(self, summary: RequestSummary) -> RequestSummary:
        """A copy of ``summary`` with the parsed ``request`` the journal kept of it."""
        out = summary.copy()
        store = self._store
        record = store.get(summary["request_id"]) if store is not None else None
        if record is not None and record.request is not None:
            out["request"] = record.request.as_dict()
        return out

    def frames(self, request_id: str) -> list[dict[str, Any]]:
        """The ``frame`` lines of a request, one per write to the client, in order."""
        with self._changed:
            return [
                line
                for line in self.lines
                if line.get("request_id") == request_id and line["event"] == "frame"
            ]

    def _finished_requests(self, criteria: Criteria, settle: float) -> list[RequestSummary]:
        with self._changed:
            self._changed.wait_for(lambda: not self._started, settle)
            finished = [s.copy() for s in self._finished]
        summaries = [self._with_request(s) for s in finished]
        return [s for s in summaries if matches(s, criteria)]

    def _record_verdict(
        self, request_id: str, report: ClientReport, requests: Sequence[str], timeout: float
    ) -> RunVerdict:
        # On the proxy's own event loop, judges what has ended without waiting.
        wait = self._wait(timeout)
        for rid in (request_id, *requests):
            self.summary(rid, timeout=wait)
        verdict = judge_run(self._run(request_id, requests), report)
        line = verdict_line(request_id, verdict)
        self._on_loop(lambda: self._log.for_request().info("verdict", **line))
        return verdict

    def _run(self, request_id: str, requests: Sequence[str]) -> list[RequestSummary]:
        """The finished requests of the answer of ``request_id`` plus ``requests``, in
        the order they began."""
        with self._changed:
            order = self._began
            finished = sorted(self._finished, key=lambda s: order.get(s["request_id"], -1))
        return [s.copy() for s in run_of(finished, request_id, requests)]

    def _wait(self, timeout: float) -> float:
        """``timeout``, or 0 on the proxy's own event loop (waiting there would block
        the very request being waited for)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return timeout
        return 0.0

    def _on_loop(self, call: Any) -> None:
        """Run ``call`` on the proxy's thread (the frame log and its observers are
        used from there), and wait for it."""
        loop = self._loop
        if loop is None or self._thread is None or threading.current_thread() is self._thread:
            call()
            return
        done = threading.Event()

        def run() -> None:
            try:
                call()
            finally:
                done.set()

        loop.call_soon_threadsafe(run)
        done.wait(SETTLE)

    # ------------------------------------------------------------------ run time

    @property
    def _set(self) -> ScenarioSet:
        if self._running is None:
            raise RuntimeError("the proxy is not running: use it in a with block")
        return self._running.state.scenarios

    def reset_ordinals(self) -> None:
        """Count requests from 1 again: ``requests:`` ordinals and the seeds derived
        from ``seed`` start over, as after ``POST /reset`` (scenarios, the default and
        the history of streams are kept)."""
        self._set.reset()

    def use(self, name: str | None) -> None:
        """Make ``name`` the default scenario (``None``: no default, passthrough) for
        the requests that select none; UnknownScenario if it is not loaded."""
        self._set.set_default(name)

    def add_scenario(self, scenario: str | Mapping[str, Any], name: str | None = None) -> str:
        """Add a scenario, given as YAML text or as a mapping (the shape of a scenario
        file, or what ``GET /scenarios/{name}`` shows), or replace the one of its name;
        returns its name. ``name`` names a scenario that has no ``name:`` (and must
        agree with one that has). Raises ScenarioError with the problems."""
        parsed = self._parse(scenario, name)
        if name is not None and parsed.name != name:
            raise ValueError(f"name {name!r} given, but the scenario says name: {parsed.name}")
        self._set.add(parsed)
        return parsed.name

    def _parse(self, scenario: str | Mapping[str, Any], name: str | None) -> Scenario:
        return parse_scenario(
            scenario_text(scenario), ADDED_SOURCE, default_name=name, read_only=True
        )

    def add_fixture(self, fixture: str | Mapping[str, Any] | Fixture) -> None:
        """Add mock fixtures (docs/mock.md, Fixtures): one fixture, or a fixture file's
        ``{"fixtures": [...]}``, as YAML text, a mapping or a
        :class:`~chaosproxy.scenario.Fixture`. They are tried after those added before
        and before the fixture files'. Raises ScenarioError with the problems, and
        RuntimeError when no upstream is the built-in mock."""
        fixtures = self._mock_fixtures()
        fixtures.add(parse_fixtures(fixture_text(fixture), ADDED_FIXTURE))

    def clear_fixtures(self) -> None:
        """Remove the fixtures added at run time (the fixture files' stay)."""
        self._mock_fixtures().clear()

    def _mock_fixtures(self) -> MockFixtures:
        if self._running is None:
            raise RuntimeError("the proxy is not running: use it in a with block")
        fixtures = self._running.fixtures
        if fixtures is None:
            raise RuntimeError(NO_MOCK)
        return fixtures

    @contextlib.contextmanager
    def scenario(self, name_or_yaml: str | Mapping[str, Any]) -> Iterator[str]:
        """The default scenario for the block (a loaded scenario's name, or a scenario
        as YAML text or a mapping, added for the block and then removed, or the one it
        replaced put back); the previous default is restored after. Yields the name."""
        scenarios = self._set
        _, previous = scenarios.snapshot()
        added: Scenario | None = None
        replaced: Scenario | None = None
        if isinstance(name_or_yaml, str) and is_scenario_name(name_or_yaml):
            name = name_or_yaml
        else:
            added = self._parse(name_or_yaml, f"block-{next(self._blocks)}")
            name = added.name
            current, _ = scenarios.snapshot()
            replaced = current.get(name)
            scenarios.add(added)
        try:
            scenarios.set_default(name)
            yield name
        finally:
            if replaced is not None:
                scenarios.add(replaced)
            elif added is not None:
                with contextlib.suppress(UnknownScenario):  # removed in the block
                    scenarios.remove(added.name)
            try:
                scenarios.set_default(previous)
            except UnknownScenario:  # the previous default was removed in the block
                scenarios.set_default(None)

    # ------------------------------------------------------------------ async

    async def start(self) -> ChaosProxy:
        self._running = await start_proxy(
            self.config, scenarios=self._scenarios, log=self._log, fixtures=self._fixtures
        )
        self._store = self._running.requests
        return self

    async def stop(self) -> None:
        """Stop within ``grace`` + a margin (see :meth:`RunningProxy.close`); what has
        not stopped by then is abandoned, never waited for."""
        running, self._running = self._running, None
        try:
            if running is not None:
                await running.close()
        finally:
            self._log.close()

    async def __aenter__(self) -> ChaosProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------------ sync

    def __enter__(self) -> ChaosProxy:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the caller of __enter__
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            try:
                loop.run_until_complete(self.stop())
            finally:
                _close_loop(loop)

        self._thread = threading.Thread(target=serve, name="chaosproxy", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._loop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self._loop.call_soon_threadsafe(self._loop.stop)
            # Bounded: the close is (grace + CLOSE_MARGIN); beyond that the thread (a
            # daemon) is left behind rather than hanging the test.
            self._thread.join(self.config.grace + CLOSE_MARGIN + THREAD_MARGIN)
            self._thread = None


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close the background thread's loop without waiting on anything for long: tasks
    left (abandoned by a close that ran out of time) are cancelled and given a moment,
    the default executor (DNS lookups) is not waited for."""
    try:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=THREAD_MARGIN / 2))
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: no "exception never retrieved" noise
        loop.run_until_complete(
            asyncio.wait({loop.create_task(loop.shutdown_asyncgens())}, timeout=0.1)
        )
    finally:
        loop.close()  # shuts the default executor down without waiting for it
