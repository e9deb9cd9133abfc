"""``ChaosProxy``: the proxy in-process, for tests (DESIGN.md section 8).

::

    async with ChaosProxy(scenarios=["scenarios/"]) as proxy:      # in a running loop
        client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="test")

    with ChaosProxy(upstream="mock", scenarios=["scenarios/"]) as proxy:   # sync tests
        requests.post(proxy.url + "/v1/chat/completions", headers={"X-Chaos-Scenario": …})

The sync form runs the proxy on its own event loop in a background thread. Either way
the proxy listens on a free port of 127.0.0.1, and every frame-log line is kept in
memory (:attr:`ChaosProxy.lines`) so a test can see exactly what its client received.

Leaving the block never hangs: streams still running get ``grace`` (``2s`` by default;
``ChaosProxy(grace=0)`` cuts them at once, as ``shutdown``), and whatever does not stop
within ``grace`` plus a margin is abandoned (its connections closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from chaosproxy.config import Config
from chaosproxy.logs import FrameLog
from chaosproxy.scenario import Scenario, load_scenarios
from chaosproxy.server import CLOSE_MARGIN, RunningProxy, start_proxy

#: What differs from ``chaosproxy serve`` when the proxy runs inside a test: a free
#: port, no admin API, no log file (the lines are kept in memory instead).
EMBEDDED = Config(listen=("127.0.0.1", 0), admin=None, log=None)

#: What the background thread may take beyond the close itself (tasks cancelled, loop
#: closed) before ``__exit__`` stops waiting for it.
THREAD_MARGIN = 0.5


class ChaosProxy:
    """A proxy on a free local port, started and stopped by a ``with`` block.

    Every setting of :class:`~chaosproxy.config.Config` (each ``chaosproxy serve``
    flag) is a keyword argument: ``ChaosProxy(connect_timeout=0.5, seed=7)``.
    """

    def __init__(
        self,
        upstream: str = "mock",
        scenarios: Sequence[str | Path] | Iterable[Scenario] = (),
        *,
        scenario: str | None = None,
        seed: int | None = None,
        log: str | None = None,
        log_content: bool = False,
        trace_dir: str | Path | None = None,
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
        self._log = (
            FrameLog.open(log, content=log_content, fmt=self.config.log_format)
            if log
            else FrameLog(None, content=log_content)
        )
        #: Every frame-log line of every request, as dicts, in order.
        self.lines: list[dict[str, Any]] = []
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

    def _keep(self, line: dict[str, Any]) -> None:
        with self._changed:
            self.lines.append(dict(line))
            self._changed.notify_all()

    def summary(self, request_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """The ``response_end`` line of a request (from its ``X-Chaos-Request-Id``).

        A client can see the last byte a moment before the proxy logs the end, so this
        waits up to ``timeout`` seconds for the line (from sync code only)."""

        def find() -> dict[str, Any] | None:
            line: dict[str, Any]
            for line in reversed(self.lines):
                if line.get("request_id") == request_id and line.get("event") == "response_end":
                    return line
            return None

        with self._changed:
            found: dict[str, Any] | None = self._changed.wait_for(find, timeout)
        if found is None:
            raise KeyError(request_id)
        return found

    def frames(self, request_id: str) -> list[dict[str, Any]]:
        """The ``frame`` lines of a request, one per write to the client, in order."""
        return [
            line
            for line in self.lines
            if line.get("request_id") == request_id and line["event"] == "frame"
        ]

    # ------------------------------------------------------------------ async

    async def start(self) -> ChaosProxy:
        self._running = await start_proxy(self.config, scenarios=self._scenarios, log=self._log)
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
