"""``chaosproxy matrix``: run a client command across the scenario library and judge
each run (docs/verdicts.md).

For each scenario the proxy (in process, in front of the mock or ``--upstream``) gets
it as its default, and ``CMD`` runs in a shell with ``CHAOSPROXY_URL`` (the proxy's
root URL) and ``CHAOSPROXY_SCENARIO`` set. The command protocol: print the final text
on stdout, exit non-zero when the client raised (its stderr says why). A command has
``--startup-timeout`` to make its first request (its start-up: an interpreter, imports),
then ``--timeout`` from that request; one that outlives either is killed, with its
whole process group: ``hung`` after its first request, ``no_request`` before it. The
verdict is about the last request the command made; the others (retries) are listed.

Writes ``matrix.md``, ``matrix.json``, ``junit.xml`` and ``report.html`` into ``--out``;
the exit status is 1 when any verdict is in ``--fail-on``.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from xml.sax.saxutils import escape, quoteattr

import orjson
import yaml

from chaosproxy.core.verdict import FAILING, VERDICTS, describe_shortfall, shortfalls
from chaosproxy.server.routes import MOCK

if TYPE_CHECKING:
    from chaosproxy.control.api import ChaosProxy
    from chaosproxy.core.records import FaultShortfall, RequestSummary
    from chaosproxy.scenario import Scenario

#: A command that made no request through the proxy cannot be judged on a stream: its
#: verdict is this, and it always fails the gate (the matrix itself is mis-set).
NO_REQUEST = "no_request"

#: How long, after the command ended, the proxy may take to log the end of its requests.
SETTLE = 5.0
#: The most of a command's stderr kept as its error.
ERROR_CHARS = 500

#: Per run, from the command's first request through the proxy (``--timeout``).
DEFAULT_TIMEOUT = 20.0
#: Per run, for the command's start-up: until its first request (``--startup-timeout``).
#: Generous: an SDK's imports take tens of seconds on a loaded machine.
DEFAULT_STARTUP = 120.0
#: How often a command's start-up is checked for its end while its first request is
#: awaited (the request itself wakes the wait at once).
STARTUP_POLL = 0.05


@dataclass
class Run:
    """One scenario's run of the command, and its verdict (a ``results`` item of
    ``matrix.json``)."""

    scenario: str
    verdict: str
    integrity: str | None
    reason: str
    #: The request the verdict is about: the command's last one (None: it made none).
    request_id: str | None
    #: Every request the command made, in order (the last is ``request_id``).
    requests: list[str] = field(default_factory=list)
    #: None when the command was killed (timed out, or its start-up did).
    exit_code: int | None = None
    duration_ms: float = 0.0
    #: From the command's start to its first request through the proxy: its start-up
    #: (None: it made none, or was run without a start-up allowance).
    startup_ms: float | None = None
    text_matches: bool | None = None
    #: What the client raised (the telling line of its stderr), if it did.
    error: str | None = None
    #: The answer's content as the client was sent it, over every connection
    #: (``intact``, ``altered``, ``incomplete``; None for an unframed answer).
    content: str | None = None
    #: The scenario's faults that did not do what it asked on any request of the run:
    #: skipped, or applied otherwise (a cut on the boundary instead of inside a
    #: character), each with what was asked, what happened and why, from the log.
    fallbacks: list[FaultShortfall] = field(default_factory=list)
    #: Whether the command printed anything (a run that raised may have printed part).
    printed: bool = True

    @property
    def text_column(self) -> str:
        """What the client's text was: ``same`` or ``differs`` (from the clean text),
        ``none`` when it raised and printed nothing, ``-`` when there is nothing to
        compare (killed, or an answer with no clean text)."""
        if not self.printed and self.exit_code != 0:
            return "none" if self.exit_code is not None else "-"
        return {True: "same", False: "differs", None: "-"}[self.text_matches]

    @property
    def fallback_text(self) -> str:
        """The faults that did not do as asked, in a few words each (empty: none)."""
        return "; ".join(describe_shortfall(f) for f in self.fallbacks)


@dataclass
class Matrix:
    client: str
    upstream: str
    results: list[Run]
    fail_on: frozenset[str]
    #: Verdicts known and accepted per scenario (``--known``): what a client cannot
    #: detect by design (docs/verdicts.md, "A gate for an SDK client"). Shown, failing
    #: no gate; any other verdict of that scenario is judged as ever.
    known: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def is_known(self, run: Run) -> bool:
        return run.verdict in self.known.get(run.scenario, ())

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {v: 0 for v in VERDICTS}
        for run in self.results:
            counts[run.verdict] = counts.get(run.verdict, 0) + 1
        return {k: v for k, v in counts.items() if v}

    def failing(self, run: Run) -> bool:
        if run.verdict == NO_REQUEST:
            return True
        return run.verdict in self.fail_on and not self.is_known(run)

    @property
    def failed(self) -> bool:
        return any(self.failing(run) for run in self.results)

    def as_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "upstream": self.upstream,
            "results": [{**asdict(run), "known": self.is_known(run)} for run in self.results],
            "counts": self.counts,
            "failed": self.failed,
            "fail_on": sorted(self.fail_on),
            "known": {name: sorted(v) for name, v in sorted(self.known.items())},
        }


# ---------------------------------------------------------------------------- running


@dataclass
class CommandResult:
    """What the command did: its exit code (None: killed on time out), its stdout and
    stderr; with a start-up allowance, how long it took to make its first request
    (``startup_ms``; None: it made none) and whether it was killed for taking longer
    (``startup_expired``)."""

    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: float
    startup_ms: float | None = None
    startup_expired: bool = False

    @property
    def timed_out(self) -> bool:
        """Killed on ``timeout`` (not for its start-up)."""
        return self.exit_code is None and not self.startup_expired

    @property
    def text(self) -> str | None:
        """The final text: stdout, or None when the command was killed, or raised
        without printing anything."""
        if self.exit_code is None or (self.exit_code != 0 and not self.stdout.strip()):
            return None  # (killed; or raised, printing nothing but maybe a newline)
        return self.stdout

    @property
    def error(self) -> str | None:
        """What the client raised, from its stderr: the most telling line (the
        exception), else the last one; None when it exited 0 or was killed."""
        if self.exit_code in (0, None):
            return None
        from chaosproxy.observe.logs import redact_text

        line = telling_line(self.stderr) or f"exit status {self.exit_code}"
        # It goes into the matrix files, which CI publishes: credentials masked.
        return redact_text(line)[:ERROR_CHARS]


#: A line that names an exception: ``openai.APIConnectionError: ...``, ``Error: ...``,
#: ``TypeError: terminated``, ``json.decoder.JSONDecodeError: ...``.
_EXCEPTION = re.compile(
    r"^(?:Uncaught )?(?:[A-Za-z_][\w.]*\.)?"
    r"[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Timeout|Failure)(?:\s*\[[^]]*\])?"
    r"(?::|$)"
    r"|^Error\b"
)
#: Lines that are never the telling one: stack frames, source excerpts, carets.
_NOISE = re.compile(
    r"^(?:at |File \"|Traceback |During handling|The above exception|\^+$|~+$|Node\.js v)"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def telling_line(stderr: str) -> str | None:
    """The line of a client's stderr that says what it raised: the last line naming an
    exception (a Python traceback ends with it; Node prints it first, then its stack),
    else the last line that is not a stack frame; None for an empty stderr."""
    lines = [_ANSI.sub("", line).strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line]
    named = [line for line in lines if _EXCEPTION.match(line)]
    if named:
        return named[-1]
    plain = [line for line in lines if not _NOISE.match(line)]
    return plain[-1] if plain else (lines[-1] if lines else None)


def run_command(
    command: str,
    env: Mapping[str, str],
    timeout: float,
    *,
    startup: float | None = None,
    first_request: Callable[[float], bool] | None = None,
) -> CommandResult:
    """Run ``command`` in a shell, in its own process group; on time out the whole
    group is killed (SIGKILL), so a client's children never outlive it.

    Without ``first_request``, ``timeout`` counts from the command's start. With it (it
    waits up to the seconds it is given for the command's first request through the
    proxy, and says whether it came), the command has ``startup`` seconds to make that
    request, and ``timeout`` counts from it: a client's start-up (an interpreter, an
    SDK's imports) is not its answer's time."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        shell=True,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    if first_request is None:
        try:
            out, err = process.communicate(timeout=timeout)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            _kill_group(process)
            out, err = process.communicate()
            code = None
        return CommandResult(
            exit_code=code,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            duration_ms=_ms_since(started),
        )
    # Its output is read meanwhile (a full pipe would stop a chatty client).
    output: list[tuple[bytes, bytes]] = []
    ended = threading.Event()

    def drain() -> None:
        try:
            output.append(process.communicate())
        finally:
            ended.set()

    threading.Thread(target=drain, name="matrix-command", daemon=True).start()
    allowance = DEFAULT_STARTUP if startup is None else startup
    startup_ms: float | None = None
    while not ended.is_set():
        left = allowance - (time.monotonic() - started)
        if left <= 0:
            break
        if first_request(min(left, STARTUP_POLL)):
            startup_ms = _ms_since(started)
            break
    if startup_ms is None and ended.is_set() and first_request(0):
        startup_ms = _ms_since(started)  # (it ended as its request began: at most this)
    expired = startup_ms is None and not ended.is_set()
    killed = expired
    if startup_ms is not None and not ended.wait(timeout):
        killed = True
    if killed:
        _kill_group(process)
    ended.wait()
    out, err = output[0] if output else (b"", b"")
    return CommandResult(
        exit_code=None if killed else process.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        duration_ms=_ms_since(started),
        startup_ms=startup_ms,
        startup_expired=expired,
    )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _ms_since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


def _request_ids(lines: Sequence[Mapping[str, Any]], start: int) -> list[str]:
    """The ids of the requests begun in ``lines[start:]``, in the order they began."""
    return [
        line["request_id"]
        for line in lines[start:]
        if line.get("event") == "request" and isinstance(line.get("request_id"), str)
    ]


def summaries_of(
    lines: Iterable[Mapping[str, Any]], requests: Sequence[str]
) -> list[RequestSummary]:
    """The finished ``requests`` as summaries (each one's ``request`` line merged with its
    ``response_end`` line), in the order given, from frame-log ``lines``."""
    merged: dict[str, dict[str, Any]] = {}
    ended: set[str] = set()
    wanted = set(requests)
    for line in lines:
        rid = line.get("request_id")
        if rid in wanted and line.get("event") in ("request", "response_end"):
            merged.setdefault(rid, {}).update(line)
            if line["event"] == "response_end":
                ended.add(rid)
    return [cast("RequestSummary", merged[r]) for r in requests if r in ended]


def fallbacks_of(
    lines: Iterable[Mapping[str, Any]], requests: Sequence[str]
) -> list[FaultShortfall]:
    """What of the scenario's faults did not happen as asked on the run of ``requests``
    (:func:`~chaosproxy.core.verdict.shortfalls`), from frame-log ``lines``."""
    return shortfalls(summaries_of(lines, requests))


def run_scenario(
    proxy: ChaosProxy,
    scenario: str,
    command: str,
    *,
    timeout: float,
    startup: float | None = DEFAULT_STARTUP,
    environ: Mapping[str, str] | None = None,
) -> Run:
    """One run of ``command`` under ``scenario`` (made the proxy's default), judged:
    every request the command made is one run, and its last is the answer judged.
    ``timeout`` counts from the command's first request, which it has ``startup``
    seconds to make (None: ``timeout`` counts from its start)."""
    env = dict(os.environ if environ is None else environ)
    env.update(CHAOSPROXY_URL=proxy.url, CHAOSPROXY_SCENARIO=scenario)
    start = len(proxy.lines)
    with proxy.scenario(scenario):
        outcome = _run_under(proxy, command, env, timeout, startup)
    proxy.requests(settle=SETTLE)  # the requests it made have ended (or SETTLE passed)
    ids = _request_ids(proxy.lines, start)
    base: dict[str, Any] = {
        "scenario": scenario,
        "exit_code": outcome.exit_code,
        "duration_ms": outcome.duration_ms,
        "startup_ms": outcome.startup_ms,
        "error": outcome.error,
        "requests": ids,
        "fallbacks": fallbacks_of(proxy.lines[start:], ids),
        "printed": outcome.text is not None,
    }
    if not ids:
        return Run(
            verdict=NO_REQUEST,
            integrity=None,
            reason=_no_request(outcome, startup),
            request_id=None,
            **base,
        )
    last = ids[-1]
    try:
        verdict = proxy.verdict(
            last,
            text=outcome.text,
            error=outcome.error,
            timed_out=outcome.timed_out,
            requests=ids,
            timeout=SETTLE,
        )
    except KeyError:  # still in flight after SETTLE: judged on what is known
        return Run(
            verdict="hung" if outcome.timed_out else NO_REQUEST,
            integrity=None,
            reason=f"request {last} had not ended {SETTLE:g}s after the client did",
            request_id=last,
            **base,
        )
    reason = verdict["reason"]
    if outcome.timed_out and outcome.startup_ms is not None:
        from chaosproxy.server.config import show_duration

        reason += (
            f" (--timeout {show_duration(timeout)} from its first request, which it made "
            f"{outcome.startup_ms / 1000:.1f}s after it started)"
        )
    return Run(
        verdict=verdict["verdict"],
        integrity=verdict["integrity"],
        content=verdict["content"],
        reason=reason,
        request_id=last,
        text_matches=verdict["text_matches"],
        **base,
    )


def _run_under(
    proxy: ChaosProxy,
    command: str,
    env: Mapping[str, str],
    timeout: float,
    startup: float | None,
) -> CommandResult:
    """:func:`run_command`, its ``timeout`` counted from its first request through
    ``proxy`` (within ``startup``; None: from its start)."""
    if startup is None:
        return run_command(command, env, timeout)
    begun = proxy.requests_begun()
    return run_command(
        command,
        env,
        timeout,
        startup=startup,
        first_request=lambda wait: proxy.wait_begun(begun, wait),
    )


def _no_request(outcome: CommandResult, startup: float | None) -> str:
    """Why a command made no request, and how long it ran: a misconfigured client
    exits (or fails) at once, a slow one runs out of its start-up allowance."""
    from chaosproxy.server.config import show_duration

    ran = f"{outcome.duration_ms / 1000:.1f}s"
    if outcome.startup_expired:
        allowance = show_duration(DEFAULT_STARTUP if startup is None else startup)
        return (
            f"the client made no request within its start-up allowance (--startup-timeout "
            f"{allowance}): still starting after {ran}, it was killed"
        )
    what = (
        f"timed out after {ran}"
        if outcome.timed_out
        else (f"exited with {outcome.exit_code} after {ran}")
    )
    detail = f": {outcome.error}" if outcome.error else ""
    return f"the client made no request through the proxy; it {what}{detail}"


class MatrixInputError(ValueError):
    """``--scenarios`` named something that is neither a file nor a loaded scenario."""


def choose_scenarios(values: Sequence[str]) -> tuple[list[str], list[str]]:
    """``--scenarios`` values as (the names to run, in order, the files and directories
    to load): each value is a path when one exists, else a built-in scenario's name.
    Without values, the whole library. Raises ScenarioError for invalid files and
    MatrixInputError for a value that is neither."""
    from chaosproxy.scenario import load_library, load_scenarios

    library = load_library()
    if not values:
        return list(library), []
    names: list[str] = []
    paths: list[str] = []
    for value in values:
        if Path(value).exists():
            paths.append(value)
            names += [n for n in load_scenarios([value]) if n not in names]
        elif value in library:
            if value not in names:
                names.append(value)
        else:
            close = difflib.get_close_matches(value, list(library), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise MatrixInputError(
                f"--scenarios {value}: no such file or directory, and no built-in "
                f"scenario of that name{hint}"
            )
    return names, paths


def _needs_previous(scenario: Scenario) -> bool:
    """Whether the scenario splices from the previous stream (which a run needs)."""
    return any(
        kind == "splice" and getattr(config, "from_", None) == "previous"
        for kind, config in scenario.faults
    )


#: The scenario a job runs the client under once, unjudged, right before a scenario that
#: splices from the previous stream: so that stream is the client's own clean answer,
#: whichever scenario the job ran before (or none).
WARM_UP: dict[str, Any] = {"name": "matrix-warm-up", "faults": []}


@dataclass
class Progress:
    """What ``run_matrix`` reports as it goes (each callback is optional)."""

    #: A scenario starts: (its name, how many are running now).
    started: Callable[[str, int], None] | None = None
    #: A scenario ended: (its run, how many have ended, how many there are, the
    #: estimated seconds left, as a range: :func:`estimate_left`).
    ended: Callable[[Run, int, int, tuple[float, float]], None] | None = None


def estimate_left(durations: Sequence[float], left: int, jobs: int) -> tuple[float, float]:
    """The seconds ``left`` more runs will take on ``jobs`` workers, as a range, from
    the ``durations`` of the runs completed so far (never those in progress): from the
    median run's time to the slower of the mean's and the upper quartile's. A few slow
    runs (a time out, a slow start) widen the range rather than swing it."""
    if not durations or left <= 0:
        return 0.0, 0.0
    ordered = sorted(durations)
    median = statistics.median(ordered)
    upper = ordered[round(0.75 * (len(ordered) - 1))]
    mean = statistics.fmean(ordered)
    per_job = left / max(1, min(jobs, left))
    return min(median, mean) * per_job, max(upper, mean) * per_job


def show_left(low: float, high: float) -> str:
    """An estimate of the time left, as progress lines say it: ``about 40s`` (a range
    within a tenth of its top) or ``about 40s to 1m10s``."""
    if _clock(low) == _clock(high) or high - low <= high / 10:
        return f"about {_clock(high)}"
    return f"about {_clock(low)} to {_clock(high)}"


def run_matrix(
    command: str,
    *,
    upstream: str = MOCK,
    scenarios: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT,
    startup: float | None = DEFAULT_STARTUP,
    fail_on: Iterable[str] = FAILING,
    known: Mapping[str, frozenset[str]] | None = None,
    settings: Mapping[str, Any] | None = None,
    jobs: int = 1,
    progress: Progress | None = None,
) -> tuple[Matrix, list[dict[str, Any]]]:
    """Run ``command`` once per scenario (``scenarios``: built-in names, files or
    directories; default the whole library) on ``jobs`` workers, each with a proxy of
    its own (so requests never mix); returns the matrix, in the scenarios' order, and
    every frame-log line of every proxy. ``timeout`` counts from each run's first
    request, which it has ``startup`` seconds to make (None: from its start)."""
    from chaosproxy.control.api import ChaosProxy
    from chaosproxy.scenario import load_library, load_scenarios

    names, paths = choose_scenarios(scenarios)
    loaded = {**load_library(), **(load_scenarios(paths) if paths else {})}
    for name in sorted(set(known or {}) - set(loaded)):
        close = difflib.get_close_matches(name, list(loaded), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise MatrixInputError(f"--known {name}: no such scenario{hint}")
    queue = deque(names)
    total = len(queue)
    jobs = max(1, min(jobs, total or 1))
    lock = threading.Lock()
    results: dict[str, Run] = {}
    lines: list[dict[str, Any]] = []
    running = 0
    durations: list[float] = []
    failures: list[BaseException] = []
    report = progress or Progress()

    def worker() -> None:
        nonlocal running
        try:
            chosen = {**ONE_CLIENT, **(settings or {})}
            with ChaosProxy(upstream=upstream, scenarios=list(paths), **chosen) as proxy:
                while True:
                    with lock:
                        if not queue or failures:
                            break
                        name = queue.popleft()
                        running += 1
                        now_running = running
                    if report.started is not None:
                        report.started(name, now_running)
                    run = run_one(proxy, loaded[name], command, timeout=timeout, startup=startup)
                    with lock:
                        running -= 1
                        results[name] = run
                        durations.append(run.duration_ms / 1000)
                        done = len(results)
                        left = estimate_left(durations, total - done, jobs)
                    if report.ended is not None:
                        report.ended(run, done, total, left)
                with lock:
                    lines.extend(proxy.lines)
        except BaseException as exc:  # the proxy could not start: reported by the caller
            with lock:
                failures.append(exc)

    run_workers(worker, jobs, "matrix", failures)
    ordered = [results[name] for name in names if name in results]
    return Matrix(command, upstream, ordered, frozenset(fail_on), dict(known or {})), lines


def run_workers(
    worker: Callable[[], None], jobs: int, name: str, errors: Sequence[BaseException]
) -> None:
    """Run ``worker`` on ``jobs`` threads (``name-0``...) until all end; then raise the
    first of the ``errors`` they recorded, if any."""
    threads = [threading.Thread(target=worker, name=f"{name}-{i}") for i in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def run_one(
    proxy: ChaosProxy,
    scenario: Scenario,
    command: str,
    *,
    timeout: float,
    startup: float | None = DEFAULT_STARTUP,
) -> Run:
    """One judged run of ``command`` under ``scenario`` as the matrix makes each (and
    ``chaosproxy explore`` too): an unjudged warm-up run first when the scenario splices
    from the previous stream, then the run, its requests counted from 1 (the same seeds
    and ordinals, whichever job). ``scenario`` must be loaded in the proxy (given to it
    at start, or added with ``proxy.scenario(...)`` around the call). ``timeout``
    counts from the run's first request, made within ``startup`` (:func:`run_scenario`)."""
    if _needs_previous(scenario):
        _warm_up(proxy, command, timeout, startup)
    proxy.reset_ordinals()
    return run_scenario(proxy, scenario.name, command, timeout=timeout, startup=startup)


def _warm_up(proxy: ChaosProxy, command: str, timeout: float, startup: float | None) -> None:
    """Run the client once, unjudged, under a scenario without faults: the stream a
    ``splice: {from: previous}`` takes from (the same client, so the same tenant)."""
    env = {**os.environ, "CHAOSPROXY_URL": proxy.url, "CHAOSPROXY_SCENARIO": WARM_UP["name"]}
    proxy.reset_ordinals()
    with proxy.scenario(WARM_UP):
        _run_under(proxy, command, env, timeout, startup)
    proxy.requests(settle=SETTLE)


# ---------------------------------------------------------------------------- writing


def render_markdown(matrix: Matrix) -> str:
    """``matrix.md``: what a client wrote (its command, its errors) is shown as text:
    control characters visible, HTML escaped, never markup."""
    counts = ", ".join(f"{n} {v}" for v, n in matrix.counts.items())
    out = [
        "# chaosproxy matrix",
        "",
        f"- client: {_code(matrix.client)}",
        f"- upstream: {_cell(matrix.upstream)}",
        f"- verdicts: {counts or 'none'}",
        f"- gate (`--fail-on {','.join(sorted(matrix.fail_on))}`): "
        + ("**failed**" if matrix.failed else "passed"),
    ]
    known = [run for run in matrix.results if matrix.is_known(run)]
    if known:
        out.append(
            f"- known: {len(known)} verdict{'s' if len(known) != 1 else ''} the client "
            "cannot avoid by design (`--known`), shown as `(known)`, failing no gate"
        )
    unexercised = [run for run in matrix.results if run.verdict == "not_exercised"]
    if unexercised:
        out.append(
            f"- not exercised: {len(unexercised)} scenario"
            + ("s" if len(unexercised) != 1 else "")
            + " whose faults did not all fire as asked (the `faults not as asked` column "
            "says which and why): no evidence either way about the client"
        )
    out += [
        "",
        "| scenario | verdict | faults not as asked | answer | text | requests | exit | ms "
        "| reason |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in matrix.results:
        verdict = f"**{run.verdict}**" if matrix.failing(run) else run.verdict
        if matrix.is_known(run):
            verdict += " (known)"
        exit_code = "killed" if run.exit_code is None else str(run.exit_code)
        reason = run.reason + (f" ({run.error})" if run.error else "")
        out.append(
            f"| {_code(run.scenario)} | {verdict} | {_cell(run.fallback_text or '-')} | "
            f"{run.content or '-'} | {run.text_column} | "
            f"{', '.join(run.requests) or '-'} | {exit_code} | {run.duration_ms:.0f} | "
            f"{_cell(reason)} |"
        )
    return "\n".join(out) + "\n"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` without terminal colour codes, any other control character (and what
    XML 1.0 cannot hold) written as ``\\xNN`` / ``\\uNNNN``: safe in XML and Markdown."""
    text = _ANSI.sub("", text)
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", text
    )


def _cell(text: str) -> str:
    """A Markdown table cell: one line, pipes escaped, HTML shown as text."""
    text = " ".join(printable(text).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    """Inline code in a table cell, whatever backticks the text holds."""
    text = " ".join(printable(text).split()).replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_junit(matrix: Matrix) -> str:
    failures = sum(1 for run in matrix.results if matrix.failing(run))
    total = sum(run.duration_ms for run in matrix.results) / 1000
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        "<testsuites><testsuite "
        f"name={quoteattr(printable('chaosproxy matrix: ' + matrix.client))} "
        f'tests="{len(matrix.results)}" failures="{failures}" errors="0" '
        f'time="{total:.3f}">',
    ]
    for run in matrix.results:
        out.append(
            f'  <testcase classname="chaosproxy.tools.matrix" name={quoteattr(run.scenario)} '
            f'time="{run.duration_ms / 1000:.3f}">'
        )
        fell = "".join(
            f"fault not as asked: {describe_shortfall(f)} (requested: "
            f"{f['requested'] or f['fault']}; actual: {f['actual']})\n"
            for f in run.fallbacks
        )
        known = " (known: --known)" if matrix.is_known(run) else ""
        details = printable(
            f"verdict: {run.verdict}{known}\nanswer: {run.content}\nintegrity: {run.integrity}\n"
            f"reason: {run.reason}\n{fell}requests: {', '.join(run.requests) or 'none'}\n"
            f"exit code: {run.exit_code}\ntext: {run.text_column}\n"
            + (f"error: {run.error}\n" if run.error else "")
        )
        if matrix.failing(run):
            message = printable(run.verdict + ": " + run.reason)
            out.append(
                f"    <failure type={quoteattr(run.verdict)} message={quoteattr(message)}>"
                f"{escape(details)}</failure>"
            )
        elif run.verdict == "not_exercised":  # shown as skipped: no evidence either way
            message = printable("not_exercised: " + (run.fallback_text or run.reason))
            out.append(f"    <skipped message={quoteattr(message)}/>")
        out.append(f"    <system-out>{escape(details)}</system-out>")
        out.append("  </testcase>")
    out.append("</testsuite></testsuites>")
    return "\n".join(out) + "\n"


def write_outputs(matrix: Matrix, lines: list[dict[str, Any]], out: Path) -> list[Path]:
    """``matrix.md``, ``matrix.json``, ``junit.xml`` and ``report.html`` in ``out``."""
    from chaosproxy.tools.report import render_report

    out.mkdir(parents=True, exist_ok=True)
    data = matrix.as_json()
    files = {
        "matrix.md": render_markdown(matrix),
        "matrix.json": orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n",
        "junit.xml": render_junit(matrix),
        "report.html": render_report(lines, data, limit=None),  # every request of the run
    }
    written = []
    for name, text in files.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


# ---------------------------------------------------------------------------- the command


def parse_known(value: str) -> dict[str, frozenset[str]]:
    """``--known``: ``SCENARIO=VERDICT[,VERDICT]``, or a YAML file mapping scenario names
    to a verdict, a list of them, or ``{verdict: ..., why: ...}`` (docs/verdicts.md)."""
    if "=" in value and not Path(value).exists():
        name, _, verdicts = value.partition("=")
        return {name.strip(): _known_verdicts(verdicts.split(","), value)}
    try:
        data = yaml.safe_load(Path(value).read_text(encoding="utf-8"))
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"{value}: expected SCENARIO=VERDICT or a YAML file ({exc.strerror or exc})"
        ) from None
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{value}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("known"), dict):
        raise argparse.ArgumentTypeError(
            f"{value}: expected a mapping with 'known': {{scenario: verdict}}"
        )
    found: dict[str, frozenset[str]] = {}
    for name, entry in data["known"].items():
        given = entry.get("verdict") if isinstance(entry, dict) else entry
        given = given if isinstance(given, list) else [given]
        found[str(name)] = _known_verdicts([str(v) for v in given], f"{value}: {name}")
    return found


def _known_verdicts(given: Iterable[str], where: str) -> frozenset[str]:
    names = frozenset(v.strip() for v in given if v.strip())
    unknown = sorted(names - set(VERDICTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{where}: unknown verdict(s) {', '.join(unknown) or '(none given)'}; choose "
            f"from {', '.join(VERDICTS)}"
        )
    return names


def merge_known(given: Iterable[Mapping[str, frozenset[str]]]) -> dict[str, frozenset[str]]:
    """Every ``--known`` together (a scenario named twice: either verdict)."""
    merged: dict[str, frozenset[str]] = {}
    for one in given:
        for name, verdicts in one.items():
            merged[name] = merged.get(name, frozenset()) | verdicts
    return merged


def parse_fail_on(value: str) -> frozenset[str]:
    names = frozenset(v.strip() for v in value.split(",") if v.strip())
    unknown = sorted(names - set(VERDICTS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown verdict(s) {', '.join(unknown)}; choose from {', '.join(VERDICTS)}"
        )
    return names


#: The proxy settings the matrix's own options set: ``serve``'s flags, generated from
#: :class:`~chaosproxy.server.config.Config` (``add_flags``), with the matrix's help. The
#: matrix takes one upstream URL.
PROXY_FLAGS: dict[str, dict[str, Any]] = {
    "upstream": {
        "kind": "store",
        "metavar": "URL",
        "help": "upstream URL (default: CHAOSPROXY_UPSTREAM, else mock, the built-in mock "
        "upstream)",
    },
    "seed": {"help": "the proxy's seed for every request (default: each scenario's, else random)"},
    "mock_interval": {
        "help": "milliseconds between the mock upstream's events (default {default})"
    },
}


def add_run_flags(
    parser: argparse.ArgumentParser, changes: Mapping[str, Mapping[str, Any]]
) -> None:
    """The options of a command that runs a client command under proxies (``matrix``,
    ``explore``), one per key of ``changes`` in its order, each as the matrix has it
    with ``changes`` (its help, its default) over it."""
    from chaosproxy.server.config import argtype, parse_duration, show_duration

    options: dict[str, dict[str, Any]] = {
        "--client": {
            "required": True,
            "metavar": "CMD",
            "help": "shell command of the client: it reads CHAOSPROXY_URL (and "
            "CHAOSPROXY_SCENARIO), prints its final text on stdout and exits non-zero "
            "when its client raised",
        },
        "--jobs": {
            "type": parse_jobs,
            "default": default_jobs(),
            "metavar": "N",
            "help": "run this many clients at once, each with a proxy of its own "
            f"(default: the number of cores, {default_jobs()})",
        },
        "--out": {
            "default": "chaos-matrix",
            "metavar": "DIR",
            "help": "directory for matrix.md, matrix.json, junit.xml and report.html "
            "(default: chaos-matrix)",
        },
        "--timeout": {
            "type": argtype(parse_duration),
            "default": DEFAULT_TIMEOUT,
            "metavar": "DURATION",
            "help": "per scenario, from the command's first request: a command still "
            f"running then is killed and judged hung (default {show_duration(DEFAULT_TIMEOUT)})",
        },
        "--startup-timeout": {
            "type": argtype(parse_duration),
            "default": DEFAULT_STARTUP,
            "metavar": "DURATION",
            "help": "per run, the command's start-up: a command that has made no "
            "request through the proxy then is killed and judged no_request, not hung "
            f"(default {show_duration(DEFAULT_STARTUP)})",
        },
        "--fail-on": {
            "type": parse_fail_on,
            "default": FAILING,
            "metavar": "VERDICTS",
            "help": "comma-separated verdicts that make the exit status 1 and fail their JUnit "
            "test case (default: silent_corruption,false_alarm,hung)",
        },
        "--known": {
            "type": parse_known,
            "action": "append",
            "default": [],
            "metavar": "SCENARIO=VERDICT|FILE",
            "help": "a verdict the client cannot avoid by design, shown as known and failing "
            "no gate (any other verdict of that scenario is judged as ever); or a YAML "
            "file of them (examples/gates/); repeatable",
        },
    }
    for name, change in changes.items():
        parser.add_argument(name, **{**options[name], **change})


def add_parser(sub: Any) -> None:
    """The ``matrix`` subcommand (``chaosproxy/cli/main.py`` calls this)."""
    from chaosproxy.server.config import add_flags

    matrix = sub.add_parser(
        "matrix",
        help="run a client command against every scenario and judge what it concluded",
        description="Run CMD once per scenario through an in-process proxy and write "
        "matrix.md, matrix.json, junit.xml and report.html (docs/verdicts.md).",
    )
    add_run_flags(matrix, {"--client": {}})
    add_flags(matrix, ["upstream"], PROXY_FLAGS)
    matrix.add_argument(
        "--scenarios",
        action="append",
        default=[],
        metavar="NAME|PATH",
        help="run only these: a built-in scenario's name, or the scenarios of a file or "
        "directory (repeatable; default: the whole built-in library)",
    )
    add_run_flags(
        matrix,
        {
            "--jobs": {},
            "--out": {},
            "--timeout": {},
            "--startup-timeout": {},
            "--fail-on": {},
            "--known": {},
        },
    )
    add_flags(matrix, ["seed", "mock_interval"], PROXY_FLAGS)


#: What the proxies of the matrix and of ``explore`` are: each serves one client command,
#: one run at a time, so its requests without credentials are one user (one anonymous
#: tenant): the warm-up answer a ``splice: {from: previous}`` takes from is that client's
#: own (docs/reconnection.md, Tenants).
ONE_CLIENT: dict[str, Any] = {"anonymous_requests": "shared"}

#: The settings of ``serve`` that the matrix's proxies also take from their
#: ``CHAOSPROXY_*`` variables (with ``upstream``): the upstream's and the mock's, the
#: seed, the envelope and the tenant header and cookie. Their address, admin API, log and scenarios
#: are the matrix's own.
ENVIRONMENT_SETTINGS = (
    "seed",
    "mock_tokens",
    "mock_interval",
    "connect_timeout",
    "head_timeout",
    "idle_timeout",
    "upstream_ca",
    "upstream_insecure",
    "upstream_cert",
    "upstream_key",
    "upstream_max_connections",
    "envelope",
    "tenant_header",
    "tenant_cookie",
)


def proxy_settings(
    command: str, args: argparse.Namespace, names: Iterable[str] = ENVIRONMENT_SETTINGS
) -> tuple[str, dict[str, Any]]:
    """The upstream and the settings ``names`` of the proxies of ``command`` (``matrix``,
    ``explore``): as its options give them, else their ``CHAOSPROXY_*`` variables.
    Raises ConfigError (a bad variable, several upstreams)."""
    from chaosproxy.server.config import ConfigError, command_settings, default

    settings = command_settings(args, ("upstream", *names))
    upstream = settings.pop("upstream", default("upstream"))
    upstreams = (upstream,) if isinstance(upstream, str) else upstream
    if len(upstreams) > 1:
        raise ConfigError(f"{command} takes one upstream: CHAOSPROXY_UPSTREAM has several (routes)")
    return upstreams[0], settings


def default_jobs() -> int:
    """One client per core."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def parse_jobs(value: str) -> int:
    if not value.isdigit() or int(value) < 1 or int(value) > 256:
        raise argparse.ArgumentTypeError(f"must be a number of jobs from 1 to 256, got {value!r}")
    return int(value)


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def cmd_matrix(args: argparse.Namespace) -> int:
    from chaosproxy.control.process import fail
    from chaosproxy.scenario import ScenarioError
    from chaosproxy.server.config import ConfigError

    try:  # the options given win over the proxies' settings from CHAOSPROXY_*
        upstream, settings = proxy_settings("matrix", args)
    except ConfigError as exc:
        return fail(str(exc))

    def started(name: str, running: int) -> None:
        print(f"  ... {name} ({running} running)", file=sys.stderr, flush=True)

    def ended(run: Run, done: int, total: int, left: tuple[float, float]) -> None:
        remaining = f"; {show_left(*left)} left" if done < total else ""
        fell = f" [{run.fallback_text}]" if run.fallbacks else ""
        print(
            f"[{done}/{total}] {run.scenario} {run.verdict}{printable(fell)} "
            f"({run.duration_ms / 1000:.1f}s){remaining}",
            file=sys.stderr,
            flush=True,
        )

    try:
        matrix, lines = run_matrix(
            args.client,
            upstream=upstream,
            scenarios=args.scenarios,
            timeout=args.timeout,
            startup=args.startup_timeout,
            fail_on=args.fail_on,
            known=merge_known(args.known),
            settings=settings,
            jobs=args.jobs,
            progress=Progress(started, ended),
        )
    except ScenarioError as exc:
        for problem in exc.problems:
            fail(str(problem))
        return 2
    except MatrixInputError as exc:
        return fail(str(exc))
    except Exception as exc:  # the proxy could not start: one line, never a traceback
        from chaosproxy.observe.logs import describe

        return fail(f"matrix: {describe(exc)}")
    out = Path(args.out)
    written = write_outputs(matrix, lines, out)
    counts = ", ".join(f"{n} {v}" for v, n in matrix.counts.items())
    print(
        f"chaosproxy matrix: {counts}; wrote {', '.join(str(p) for p in written)}"
        + ("; FAILED" if matrix.failed else ""),
        file=sys.stderr,
    )
    return 1 if matrix.failed else 0


__all__ = [
    "DEFAULT_STARTUP",
    "DEFAULT_TIMEOUT",
    "NO_REQUEST",
    "ONE_CLIENT",
    "CommandResult",
    "Matrix",
    "MatrixInputError",
    "Progress",
    "Run",
    "add_parser",
    "choose_scenarios",
    "cmd_matrix",
    "estimate_left",
    "fallbacks_of",
    "render_junit",
    "render_markdown",
    "run_command",
    "run_matrix",
    "run_one",
    "run_scenario",
    "show_left",
    "summaries_of",
    "telling_line",
    "write_outputs",
]
