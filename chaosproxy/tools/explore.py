"""``chaosproxy explore``: run a client under random fault mixes, judge each run by the
verdicts, and shrink every failure to the smallest scenario that still fails
(docs/explore.md).

1. A clean run first (no faults): the client must get a clean stream right, and its
   stream's shape (events of each kind, bytes) is where positions are drawn.
2. Runs 1, 2, … (up to ``--budget``: a number of runs, or a time): run ``k`` of
   ``--seed S`` draws its scenario from its own seed
   (:func:`~chaosproxy.tools.fault_space.run_seed`),
   so any run is replayed exactly, and it is judged as the matrix judges a run
   (:func:`chaosproxy.tools.matrix.run_one`: the same command protocol and per-job proxies).
3. The runs that end ``silent_corruption``, ``false_alarm`` or ``hung`` are told apart by
   their *failure* (the verdict, the answer's content and its first defect, as Hypothesis
   tells bugs apart by their exception); the simplest run of each failure is shrunk
   (:mod:`chaosproxy.tools.shrink`), re-running the client for every candidate, and the
   minimal scenario is run once more to confirm it.
4. Each confirmed one is written as a scenario file under ``DIR/found/`` (what runs is
   the very text written, read back by the scenario loader); ``explore.json``,
   ``explore.md`` and ``report.html`` (the minimal runs) go into ``DIR``. The exit status
   is 1 when a failure in ``--fail-on`` was found.

The space and the shrinker are pure (:mod:`chaosproxy.tools.fault_space`,
:mod:`chaosproxy.tools.shrink`); running a scenario is a :class:`Runner`'s: a
:class:`CommandRunner` runs a command (the CLI), a :class:`FunctionRunner` calls a
function in process (the pytest plugin).
"""

from __future__ import annotations

import argparse
import itertools
import queue
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import yaml

from chaosproxy.core.seeds import MAX_SEED
from chaosproxy.core.verdict import FAILING, VERDICTS, describe_shortfall
from chaosproxy.server.routes import MOCK
from chaosproxy.tools.explore_options import (
    DEFAULT_BUDGET,
    DEFAULT_TIMEOUT,
    Budget,
    _clock,
    n_runs,
    parse_budget,
)
from chaosproxy.tools.fault_space import (
    Draft,
    Shape,
    Space,
    draft_json,
    draft_key,
    run_seed,
    scenario_data,
    scenario_yaml,
    shape_of,
    validated,
)
from chaosproxy.tools.matrix import (
    DEFAULT_STARTUP,
    ONE_CLIENT,
    Matrix,
    Run,
    estimate_left,
    fallbacks_of,
    run_one,
    run_workers,
    show_left,
)
from chaosproxy.tools.shrink import MAX_TESTS, Candidate, Shrunk, faults_key, shrink

if TYPE_CHECKING:
    from chaosproxy.control.api import ChaosProxy
    from chaosproxy.core.records import FaultShortfall
    from chaosproxy.scenario import Scenario

#: The verdicts whose runs are shrunk and written: the client did its user wrong.
FOUND_VERDICTS: frozenset[str] = frozenset(FAILING)

#: The name of the clean run's scenario.
CLEAN = "explore-clean"

#: What tells one failure from another: the verdict, the answer's content, its defect.
Failure = tuple[str, str | None, str | None]


class ExploreError(Exception):
    """Exploring cannot start or go on (the client fails a clean stream, say): one line."""


# ---------------------------------------------------------------------------- runs


@dataclass(frozen=True, slots=True)
class Trial:
    """One scenario to run the client under: its name, the scenario file's text (what
    runs is what would be written) and the scenario the loader read from that text."""

    name: str
    text: str
    scenario: Scenario


def make_trial_from_text(name: str, text: str) -> Trial:
    """A trial of a scenario file's text, validated by the scenario loader."""
    return Trial(name, text, validated(text, name))


def make_trial(
    name: str,
    faults: Sequence[Mapping[str, Any]],
    *,
    seed: int,
    description: str = "",
    comment: Sequence[str] = (),
) -> Trial:
    """A trial whose text is a scenario file, validated by the scenario loader."""
    text = scenario_yaml(scenario_data(name, faults, seed=seed, description=description), comment)
    return make_trial_from_text(name, text)


@dataclass(slots=True)
class TrialResult:
    """What one run gave: its verdict, and what the proxy knew of the answer judged."""

    verdict: str
    reason: str
    #: The answer's content (``intact``, ``altered``, ``incomplete``; None: unframed).
    content: str | None = None
    #: The first thing wrong with the answer as sent (``a gap in the events``, …).
    defect: str | None = None
    request_id: str | None = None
    requests: list[str] = field(default_factory=list)
    duration_ms: float = 0.0
    #: What the client raised (its telling line), if it did.
    error: str | None = None
    #: The frame-log lines of the run's requests (and its verdict).
    lines: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: The matrix's record of the run (a command's run).
    run: Run | None = field(default=None, repr=False)

    @property
    def failure(self) -> Failure:
        return self.verdict, self.content, self.defect

    @property
    def fallbacks(self) -> list[FaultShortfall]:
        """The faults that did not do what the trial asked on the run, and why."""
        if self.run is not None:
            return self.run.fallbacks
        return fallbacks_of(self.lines, self.requests)


class Runner(Protocol):
    """Runs the client under trials and judges each run."""

    @property
    def jobs(self) -> int: ...

    def run(
        self,
        trials: Iterable[Trial],
        *,
        stop: Callable[[], bool] | None = None,
        started: Callable[[Trial, int], None] | None = None,
        ended: Callable[[Trial, TrialResult], None] | None = None,
    ) -> list[TrialResult]:
        """The outcome of each trial, in order. Trials are taken one by one as a job
        is free, until they run out or ``stop()`` says so; ``started`` (the trial, how
        many run now) and ``ended`` are told as each starts and ends."""
        ...


def _defect(proxy: ChaosProxy, request_id: str | None) -> str | None:
    if request_id is None:
        return None
    try:
        answer = proxy.summary(request_id, timeout=0).get("answer")
    except KeyError:
        return None
    defect = answer.get("defect") if isinstance(answer, Mapping) else None
    return defect if isinstance(defect, str) else None


def _lines_of(proxy: ChaosProxy, start: int, requests: Sequence[str]) -> list[dict[str, Any]]:
    wanted = set(requests)
    return [line for line in proxy.lines[start:] if line.get("request_id") in wanted]


class CommandRunner:
    """Runs a client command under each trial as the matrix does (its command protocol,
    :func:`chaosproxy.tools.matrix.run_one`), ``jobs`` at a time, each run on an in-process
    proxy of its own (so requests of two runs never mix): a pool of ``jobs`` proxies,
    shared by every :meth:`run` in progress (the shrinks of several failures at once).
    Use it in a ``with`` block."""

    def __init__(
        self,
        command: str,
        *,
        upstream: str = MOCK,
        jobs: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        startup: float | None = DEFAULT_STARTUP,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """``timeout`` counts from each run's first request, which the command has
        ``startup`` seconds to make (as in the matrix; None: from its start)."""
        self.command = command
        self.upstream = upstream
        self._jobs = max(1, jobs)
        self.timeout = timeout
        self.startup = startup
        self.settings = {**ONE_CLIENT, **(settings or {})}
        self._stack = ExitStack()
        self._free: queue.Queue[ChaosProxy] = queue.Queue()
        self._started = False

    @property
    def jobs(self) -> int:
        return self._jobs

    def __enter__(self) -> CommandRunner:
        from chaosproxy.control.api import ChaosProxy

        with ExitStack() as stack:
            for _ in range(self._jobs):
                proxy = ChaosProxy(upstream=self.upstream, **self.settings)
                self._free.put(stack.enter_context(proxy))
            self._stack = stack.pop_all()
        self._started = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._started = False
        self._stack.close()

    def run(
        self,
        trials: Iterable[Trial],
        *,
        stop: Callable[[], bool] | None = None,
        started: Callable[[Trial, int], None] | None = None,
        ended: Callable[[Trial, TrialResult], None] | None = None,
    ) -> list[TrialResult]:
        if not self._started:
            raise RuntimeError("the runner is not started: use it in a with block")
        source = enumerate(trials)
        lock = threading.Lock()
        results: dict[int, TrialResult] = {}
        errors: list[BaseException] = []
        running = 0

        def worker() -> None:
            nonlocal running
            while True:
                with lock:
                    if errors or (stop is not None and stop()):
                        return
                    taken = next(source, None)
                    if taken is None:
                        return
                index, trial = taken
                proxy = self._free.get()
                try:
                    with lock:
                        running += 1
                        now_running = running
                    if started is not None:
                        started(trial, now_running)
                    outcome = self._one(proxy, trial)
                except BaseException as exc:
                    with lock:
                        errors.append(exc)
                    return
                finally:
                    self._free.put(proxy)
                with lock:
                    running -= 1
                    results[index] = outcome
                if ended is not None:
                    ended(trial, outcome)

        run_workers(worker, self._jobs, "explore", errors)
        return [results[i] for i in sorted(results)]

    def _one(self, proxy: ChaosProxy, trial: Trial) -> TrialResult:
        start = len(proxy.lines)
        with proxy.scenario(trial.text):
            run = run_one(
                proxy, trial.scenario, self.command, timeout=self.timeout, startup=self.startup
            )
        return TrialResult(
            verdict=run.verdict,
            reason=run.reason,
            content=run.content,
            defect=_defect(proxy, run.request_id),
            request_id=run.request_id,
            requests=list(run.requests),
            duration_ms=run.duration_ms,
            error=run.error,
            lines=_lines_of(proxy, start, run.requests),
            run=run,
        )


#: What a :class:`FunctionRunner` calls: runs the client once, through the proxy, and
#: returns the verdict recorded on the run (``proxy.verdict(...)``'s answer, with its
#: ``request_id``); its argument is where the run's lines begin in ``proxy.lines``.
ClientCall = Callable[[int], Mapping[str, Any]]


class SerialRunner:
    """A :class:`Runner` with one job: runs each trial by :meth:`one`, in turn."""

    @property
    def jobs(self) -> int:
        return 1

    def run(
        self,
        trials: Iterable[Trial],
        *,
        stop: Callable[[], bool] | None = None,
        started: Callable[[Trial, int], None] | None = None,
        ended: Callable[[Trial, TrialResult], None] | None = None,
    ) -> list[TrialResult]:
        outcomes = []
        for trial in trials:
            if stop is not None and stop():
                break
            if started is not None:
                started(trial, 1)
            outcome = self.one(trial)
            outcomes.append(outcome)
            if ended is not None:
                ended(trial, outcome)
        return outcomes

    def one(self, trial: Trial) -> TrialResult:
        """Runs the client under ``trial`` and judges the run."""
        raise NotImplementedError


class FunctionRunner(SerialRunner):
    """Runs the client in process, one trial at a time, through one proxy: ``call`` runs
    it and returns its verdict (the pytest plugin's ``@pytest.mark.chaos_explore``). A
    scenario that splices from the previous stream is preceded by one unjudged call
    under no faults, as in the matrix."""

    def __init__(self, proxy: ChaosProxy, call: ClientCall) -> None:
        self.proxy = proxy
        self.call = call

    def one(self, trial: Trial) -> TrialResult:
        from chaosproxy.tools.matrix import WARM_UP

        proxy = self.proxy
        if any(name == "splice" for name, _ in trial.scenario.faults):
            with proxy.scenario(WARM_UP):
                proxy.reset_ordinals()
                self.call(len(proxy.lines))
            proxy.requests()
        with proxy.scenario(trial.text):
            proxy.reset_ordinals()
            start = len(proxy.lines)
            began = time.monotonic()
            verdict = self.call(start)
        request_id = verdict.get("request_id")
        requests = list(verdict.get("requests") or ([request_id] if request_id else []))
        return TrialResult(
            verdict=str(verdict["verdict"]),
            reason=str(verdict.get("reason") or ""),
            content=verdict.get("content"),
            defect=_defect(proxy, request_id),
            request_id=request_id,
            requests=requests,
            duration_ms=round((time.monotonic() - began) * 1000, 1),
            error=verdict.get("error"),
            lines=_lines_of(proxy, start, requests),
        )


# ---------------------------------------------------------------------------- the search


@dataclass(frozen=True, slots=True)
class Settings:
    """What to explore: ``seed``, the ``budget``, the ``faults`` of the space (default
    all that fit the stream), and how to shrink (``shrink_runs`` candidates at most per
    failure, then ``confirm`` more runs of the minimal scenario)."""

    seed: int
    budget: Budget = Budget(runs=DEFAULT_BUDGET)  # noqa: RUF009 (frozen)
    faults: tuple[str, ...] = ()
    shrink_runs: int = MAX_TESTS
    confirm: int = 1
    #: Whether the space may keep a stream open for ever (the client must be timed).
    endless: bool = True
    #: Only these runs of ``seed`` (each drawn as in the whole exploration), whatever
    #: the budget: a run replayed.
    replay: tuple[int, ...] = ()
    #: Shown in the files: what ran, and against what.
    client: str = ""
    upstream: str = MOCK
    #: How to check a found scenario again, for its file's comment (``FILE`` is the
    #: file, ``{name}`` the scenario's name); default: the matrix with ``client``.
    check: str | None = None


@dataclass(slots=True)
class ExploredRun:
    """One run of the exploration."""

    run: int
    seed: int
    draft: Draft
    faults: list[dict[str, Any]]
    outcome: TrialResult

    def as_json(self) -> dict[str, Any]:
        o = self.outcome
        return {
            "run": self.run,
            "seed": self.seed,
            "faults": self.faults,
            "draft": draft_json(self.draft),
            "verdict": o.verdict,
            "content": o.content,
            "defect": o.defect,
            "reason": o.reason,
            "request_id": o.request_id,
            "requests": o.requests,
            "duration_ms": o.duration_ms,
            "error": o.error,
            "fallbacks": o.fallbacks,
        }


@dataclass(slots=True)
class Found:
    """One distinct failure, shrunk: its minimal scenario and how it was found."""

    name: str
    failure: Failure
    reason: str
    seed: int
    draft: Draft
    faults: list[dict[str, Any]]
    #: The scenario file's text (what the confirming runs ran).
    text: str
    #: The exploration runs that ended in this failure.
    found_by: list[int]
    #: The run that was shrunk (the simplest of them).
    shrunk_from: int
    shrunk_from_faults: list[dict[str, Any]]
    #: Candidates tried while shrinking, and the steps taken.
    shrink_runs: int
    shrink_steps: int
    #: Whether every confirming run ended in the same failure.
    reproduced: bool
    #: The outcome of the last run of the minimal scenario (its lines go in the report).
    outcome: TrialResult

    @property
    def verdict(self) -> str:
        return self.failure[0]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "content": self.failure[1],
            "defect": self.failure[2],
            "reason": self.reason,
            "seed": self.seed,
            "faults": self.faults,
            "draft": draft_json(self.draft),
            "found_by": self.found_by,
            "shrunk_from": self.shrunk_from,
            "shrunk_from_faults": self.shrunk_from_faults,
            "shrink_runs": self.shrink_runs,
            "shrink_steps": self.shrink_steps,
            "reproduced": self.reproduced,
            "request_id": self.outcome.request_id,
            "fallbacks": self.outcome.fallbacks,
        }


@dataclass(slots=True)
class Exploration:
    """What an exploration did and found."""

    settings: Settings
    shape: Shape
    space: Space
    clean: TrialResult
    runs: list[ExploredRun]
    found: list[Found]
    seconds: float = 0.0

    @property
    def reproduced(self) -> list[Found]:
        return [f for f in self.found if f.reproduced]

    @property
    def flaky(self) -> list[Found]:
        return [f for f in self.found if not f.reproduced]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {v: 0 for v in VERDICTS}
        for run in self.runs:
            counts[run.outcome.verdict] = counts.get(run.outcome.verdict, 0) + 1
        return {k: v for k, v in counts.items() if v}

    def failed(self, fail_on: Iterable[str]) -> bool:
        gate = frozenset(fail_on)
        return any(f.verdict in gate for f in self.found)


Log = Callable[[str], None]


def explore(
    runner: Runner,
    settings: Settings,
    *,
    log: Log | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Exploration:
    """Explore: the clean run, the budget's runs, then each distinct failure shrunk and
    confirmed. Raises ExploreError when the client does not get a clean stream right."""
    say = log or (lambda line: None)
    began = clock()
    (clean,) = runner.run([make_trial(CLEAN, [], seed=settings.seed, description="no faults")])
    if clean.verdict not in ("tolerated", "not_exercised"):
        raise ExploreError(
            f"the client's clean run (no faults) was {clean.verdict}: {clean.reason}"
            + (f" ({clean.error})" if clean.error else "")
            + "; explore needs a client that gets a clean stream right"
        )
    shape = shape_of(clean.lines, clean.request_id or "")
    if shape is None:
        raise ExploreError(
            "the client's clean run had no framed stream to explore (its last request "
            f"{clean.request_id} had no events)"
        )
    try:
        space = Space(shape, settings.faults, endless=settings.endless)
    except ValueError as exc:
        raise ExploreError(f"--faults: {exc}") from None
    say(
        f"chaosproxy explore: seed {settings.seed}, {_what(settings)}; the clean run: "
        f"{shape.provider}, {shape.format}, {shape.events} events, {shape.bytes} bytes"
    )
    runs = _explore_runs(runner, settings, space, say, clock)
    found = _shrink_failures(runner, settings, space, runs, say)
    return Exploration(settings, shape, space, clean, runs, found, round(clock() - began, 1))


def _explore_runs(
    runner: Runner, settings: Settings, space: Space, say: Log, clock: Callable[[], float]
) -> list[ExploredRun]:
    budget = settings.budget
    began = clock()
    drafts: dict[str, tuple[int, int, Draft, list[dict[str, Any]]]] = {}

    order: list[int] = []
    total = len(settings.replay) or budget.runs

    def trials() -> Iterator[Trial]:
        numbers: Iterable[int] = settings.replay or (
            range(1, budget.runs + 1) if budget.runs is not None else itertools.count(1)
        )
        for k in numbers:
            order.append(k)
            seed = run_seed(settings.seed, k)
            draft, faults = space.read(space.draw(seed))
            name = f"explore-{k}"
            drafts[name] = (k, seed, draft, faults)
            yield make_trial(name, faults, seed=seed, description=f"explore run {k}")

    def stop() -> bool:
        timed = budget.seconds is not None and not settings.replay
        return timed and clock() - began >= (budget.seconds or 0)

    durations: list[float] = []
    lock = threading.Lock()

    def started(trial: Trial, running: int) -> None:
        say(f"  ... {trial.name}: {describe_faults(drafts[trial.name][3])} ({running} running)")

    def ended(trial: Trial, outcome: TrialResult) -> None:
        with lock:
            durations.append(outcome.duration_ms / 1000)
            done = len(durations)
            # From the runs completed so far, as a range (the matrix's estimate).
            left = estimate_left(durations, (total or 0) - done, runner.jobs)
        k = drafts[trial.name][0]
        if total is not None:
            position = f"[{done}/{total}]"
            rest = f"; {show_left(*left)} left" if done < total else ""
        else:
            position = f"[{done}]"
            until = max(0.0, (budget.seconds or 0) - (clock() - began))
            rest = f"; {_clock(until)} left" if until else ""
        say(f"{position} run {k} {outcome.verdict} ({outcome.duration_ms / 1000:.1f}s){rest}")

    outcomes = runner.run(trials(), stop=stop, started=started, ended=ended)
    runs = []
    for k, outcome in zip(order, outcomes, strict=False):
        _, seed, draft, faults = drafts[f"explore-{k}"]
        runs.append(ExploredRun(k, seed, draft, faults, outcome))
    return runs


def _shrink_failures(
    runner: Runner, settings: Settings, space: Space, runs: list[ExploredRun], say: Log
) -> list[Found]:
    """Shrink each distinct failure from its simplest run (several at once: one per job
    of the runner; each shrink asks one candidate at a time, or several when there are
    fewer failures than jobs), then name each minimal scenario and confirm it."""
    groups: dict[Failure, list[ExploredRun]] = {}
    for run in runs:
        if run.outcome.verdict in FOUND_VERDICTS:
            groups.setdefault(run.outcome.failure, []).append(run)
    if not groups:
        return []
    # The shrinks running now share the jobs: a shrink asks as many candidates at once
    # as there are jobs for it (all of them for the last one), which changes only how
    # fast it ends, never where.
    active = [0]
    lock = threading.Lock()

    def batch() -> int:
        with lock:
            return max(1, runner.jobs // max(1, active[0]))

    firsts = [
        min(members, key=lambda r: (draft_key(r.draft), r.run)) for members in groups.values()
    ]

    def work(number: int, failure: Failure, first: ExploredRun) -> tuple[Shrunk, TrialResult]:
        members = groups[failure]
        say(
            f"shrinking {number}/{len(groups)}: {_failure_text(failure)}, found by "
            f"{len(members)} run{'s' if len(members) != 1 else ''}; from run {first.run}: "
            f"{describe_faults(first.faults)}"
        )
        with lock:
            active[0] += 1
        try:
            shrunk, last = _shrink_one(runner, settings, space, first, failure, batch, number, say)
        finally:
            with lock:
                active[0] -= 1
        say(
            f"  [{number}] minimal after {n_runs(shrunk.tests)} ({len(shrunk.steps) - 1} steps): "
            f"{describe_faults(shrunk.faults)}"
        )
        return shrunk, last

    jobs = list(enumerate(zip(groups, firsts, strict=True), start=1))
    if runner.jobs == 1:  # in this thread (a FunctionRunner calls a test function)
        shrunk_all = [work(number, failure, first) for number, (failure, first) in jobs]
    else:
        with ThreadPoolExecutor(max_workers=runner.jobs, thread_name_prefix="shrink") as pool:
            futures = [pool.submit(work, n, failure, first) for n, (failure, first) in jobs]
            shrunk_all = [future.result() for future in futures]

    found: list[Found] = []
    names: set[str] = set()
    for (failure, members), first, (shrunk, last) in zip(
        groups.items(), firsts, shrunk_all, strict=True
    ):
        same = next((f for f in found if faults_key(f.faults) == faults_key(shrunk.faults)), None)
        if same is not None:  # two failures, one scenario: it gave both (flaky)
            same.found_by = sorted({*same.found_by, *(r.run for r in members)})
            same.reproduced = False
            continue
        name = _unique(_name_for(failure, shrunk.faults), names)
        trial = _found_trial(name, failure, last.reason, first, members, shrunk, settings)
        found.append(
            Found(
                name=name,
                failure=failure,
                reason=last.reason,
                seed=first.seed,
                draft=shrunk.draft,
                faults=shrunk.faults,
                text=trial.text,
                found_by=[r.run for r in members],
                shrunk_from=first.run,
                shrunk_from_faults=first.faults,
                shrink_runs=shrunk.tests,
                shrink_steps=len(shrunk.steps) - 1,
                reproduced=True,
                outcome=last,
            )
        )
    _confirm(runner, settings, found, say)
    return found


def _confirm(runner: Runner, settings: Settings, found: list[Found], say: Log) -> None:
    """Run each minimal scenario's file ``settings.confirm`` more times: a failure that
    does not come back every time is flaky."""
    if settings.confirm < 1 or not found:
        return
    trials = [make_trial_from_text(f.name, f.text) for f in found for _ in range(settings.confirm)]
    outcomes = runner.run(trials)
    for i, f in enumerate(found):
        mine = outcomes[i * settings.confirm : (i + 1) * settings.confirm]
        if f.reproduced:
            f.reproduced = all(o.failure == f.failure for o in mine)
        f.outcome = mine[-1]
        verdicts = ", ".join(o.verdict for o in mine)
        say(
            f"confirmed {f.name}: {describe_faults(f.faults)}"
            if f.reproduced
            else f"NOT reproduced {f.name} ({verdicts}): flaky, written to flaky/"
        )


def _shrink_one(
    runner: Runner,
    settings: Settings,
    space: Space,
    first: ExploredRun,
    failure: Failure,
    batch: Callable[[], int],
    number: int,
    say: Log,
) -> tuple[Shrunk, TrialResult]:
    """``first`` shrunk; and the outcome of the smallest failing run."""
    outcomes: dict[str, TrialResult] = {faults_key(first.faults): first.outcome}
    counter = itertools.count(1)

    def test(candidates: Sequence[Candidate]) -> list[bool]:
        trials = [
            make_trial(
                f"explore-{first.run}-shrink-{next(counter)}",
                c.faults,
                seed=first.seed,
                description=f"shrinking explore run {first.run}",
            )
            for c in candidates
        ]
        done = runner.run(trials)
        answers = []
        for candidate, outcome in zip(candidates, done, strict=True):
            fails = outcome.failure == failure
            if fails:
                outcomes[faults_key(candidate.faults)] = outcome
            other = not fails and outcome.verdict in FOUND_VERDICTS
            say(
                f"  [{number}] {describe_faults(candidate.faults)}: {outcome.verdict}"
                + (f" ({_failure_text(outcome.failure)}: another failure)" if other else "")
                + f" ({outcome.duration_ms / 1000:.1f}s)"
            )
            answers.append(fails)
        return answers

    shrunk = shrink(space, first.draft, test, batch=batch, max_tests=max(0, settings.shrink_runs))
    return shrunk, outcomes[faults_key(shrunk.faults)]


def _found_trial(
    name: str,
    failure: Failure,
    reason: str,
    first: ExploredRun,
    members: Sequence[ExploredRun],
    shrunk: Shrunk,
    settings: Settings,
) -> Trial:
    """The minimal scenario as a file: a comment says what it found and how."""
    verdict = failure[0]
    runs = len(members)
    comment = [
        f"{verdict}: {reason}",
        f"found by chaosproxy explore --seed {settings.seed}, run {first.run} "
        f"(its seed {first.seed}); {runs} run{'s' if runs != 1 else ''} of {_what(settings)} "
        "ended so",
        f"shrunk from {describe_faults(first.faults)}",
        f"in {n_runs(shrunk.tests)} of the client ({len(shrunk.steps) - 1} steps)",
    ]
    check = settings.check
    if check is None and settings.client:
        check = f"chaosproxy matrix --client {_quote(settings.client)} --scenarios FILE"
    if check:
        comment.append("check: " + check.replace("{name}", name))
    return make_trial(
        name,
        shrunk.faults,
        seed=first.seed,
        description=f"{verdict}: {reason} (found by chaosproxy explore)",
        comment=comment,
    )


def _what(settings: Settings) -> str:
    """What is run: the budget, or the runs replayed."""
    if settings.replay:
        return (
            "run"
            + ("s " if len(settings.replay) > 1 else " ")
            + ", ".join(str(k) for k in settings.replay)
        )
    return str(settings.budget)


def _quote(text: str) -> str:
    return text if re.fullmatch(r"[\w./:=@+-]+", text) else "'" + text.replace("'", "'\\''") + "'"


def _failure_text(failure: Failure) -> str:
    verdict, content, defect = failure
    what = ", ".join(x for x in (content, defect) if x)
    return f"{verdict} ({what})" if what else verdict


def _name_for(failure: Failure, faults: Sequence[Mapping[str, Any]]) -> str:
    kinds = [next(iter(f)) for f in faults]
    return "-".join([failure[0].replace("_", "-"), *kinds])[:100]


def _unique(name: str, names: set[str]) -> str:
    chosen = name
    for n in itertools.count(2):
        if chosen not in names:
            break
        chosen = f"{name}-{n}"
    names.add(chosen)
    return chosen


def describe_faults(faults: Sequence[Mapping[str, Any]]) -> str:
    """Faults on one line, as a scenario file's flow style: ``drop {kind: delta, nth:
    1}; rechunk {size: 1}``; ``no faults`` for none."""
    parts = []
    for fault in faults:
        ((name, params),) = fault.items()
        if params:
            flow = yaml.safe_dump(params, default_flow_style=True, sort_keys=False, width=1 << 16)
            flow = flow.strip()
            parts.append(f"{name} {flow}")
        else:
            parts.append(name)
    return "; ".join(parts) or "no faults"


# ---------------------------------------------------------------------------- writing


def as_json(exploration: Exploration, fail_on: Iterable[str]) -> dict[str, Any]:
    """``explore.json``."""
    s = exploration.settings
    gate = sorted(frozenset(fail_on))
    return {
        "client": s.client,
        "upstream": s.upstream,
        "seed": s.seed,
        "budget": s.budget.as_json(),
        "replay": list(s.replay),
        "faults": list(exploration.space.faults),
        "shape": exploration.shape.as_json(),
        "clean": {"verdict": exploration.clean.verdict, "request_id": exploration.clean.request_id},
        "runs": [run.as_json() for run in exploration.runs],
        "found": [
            {
                **f.as_json(),
                "file": f"found/{f.name}.yaml" if f.reproduced else f"flaky/{f.name}.yaml",
            }
            for f in exploration.found
        ],
        "counts": exploration.counts(),
        "failed": exploration.failed(gate),
        "fail_on": gate,
        "seconds": exploration.seconds,
    }


def _file_of(found: Found) -> str:
    return f"{'found' if found.reproduced else 'flaky'}/{found.name}.yaml"


def render_summary(exploration: Exploration, fail_on: Iterable[str]) -> str:
    """``explore.md``: one row per distinct failure, with how many runs found it."""
    s = exploration.settings
    counts = ", ".join(f"{n} {v}" for v, n in exploration.counts().items()) or "none"
    gate = sorted(frozenset(fail_on))
    failed = exploration.failed(gate)
    out = [
        "# chaosproxy explore",
        "",
        f"- client: `{s.client}`" if s.client else "- client: (in process)",
        f"- upstream: {s.upstream}; stream: {exploration.shape.provider}, "
        f"{exploration.shape.format}, {exploration.shape.events} events",
        f"- seed {s.seed}; {n_runs(len(exploration.runs))}"
        + ("" if s.budget.seconds is None else f" (budget {s.budget})")
        + " in "
        f"{_clock(exploration.seconds)}; verdicts: {counts}",
        f"- faults: {', '.join(exploration.space.faults)}",
        f"- gate (`--fail-on {','.join(gate)}`): " + ("**failed**" if failed else "passed"),
    ]
    out += _not_exercised(exploration)
    out.append("")
    if not exploration.found:
        out.append("Nothing found: no run ended " + ", ".join(sorted(FOUND_VERDICTS)) + ".")
        return "\n".join(out) + "\n"
    out += [
        "| # | verdict | why | minimal scenario | faults not as asked | runs | shrunk from "
        "| file |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, f in enumerate(exploration.found, start=1):
        where = f"found/{f.name}.yaml" if f.reproduced else f"flaky/{f.name}.yaml (not reproduced)"
        fell = "; ".join(describe_shortfall(x) for x in f.outcome.fallbacks) or "-"
        out.append(
            f"| {i} | {f.verdict} | {_cell(f.reason)} | {_cell(describe_faults(f.faults))} | "
            f"{_cell(fell)} | {len(f.found_by)} | run {f.shrunk_from} ({n_runs(f.shrink_runs)}) "
            f"| {where} |"
        )
    return "\n".join(out) + "\n"


def _not_exercised(exploration: Exploration) -> list[str]:
    """``explore.md``'s line on the runs that were ``not_exercised``: how many, and why
    most often (each fault that did not do as asked, as the log says)."""
    runs = [r for r in exploration.runs if r.outcome.verdict == "not_exercised"]
    if not runs:
        return []
    reasons = Counter(describe_shortfall(f) for r in runs for f in r.outcome.fallbacks)
    often = "; ".join(f"{_cell(text)} ({n})" for text, n in reasons.most_common(3))
    return [
        f"- not exercised: {len(runs)} run{'s' if len(runs) != 1 else ''} whose faults did "
        "not all fire as asked (no evidence either way)"
        + (f"; most often: {often}" if often else "")
    ]


def _cell(text: str) -> str:
    from chaosproxy.tools.matrix import printable

    text = " ".join(printable(text).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|")


def write_outputs(exploration: Exploration, out: Path, fail_on: Iterable[str]) -> list[Path]:
    """``found/*.yaml`` (``flaky/*.yaml`` for failures that did not reproduce),
    ``explore.json``, ``explore.md`` and ``report.html`` (the minimal runs) in ``out``."""
    from chaosproxy.tools.report import render_report

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for folder in ("found", "flaky"):
        directory = out / folder
        if directory.is_dir():  # a new exploration: no file of an older one stays
            for old in directory.glob("*.yaml"):
                old.unlink()
    for f in exploration.found:
        directory = out / ("found" if f.reproduced else "flaky")
        directory.mkdir(exist_ok=True)
        path = directory / f"{f.name}.yaml"
        path.write_text(f.text, encoding="utf-8")
        written.append(path)
    minimal = [_as_run(f) for f in exploration.found]
    matrix = Matrix(exploration.settings.client, exploration.settings.upstream, minimal, FAILING)
    lines = [line for f in exploration.found for line in f.outcome.lines]
    files = {
        "explore.json": orjson.dumps(
            as_json(exploration, fail_on), option=orjson.OPT_INDENT_2
        ).decode()
        + "\n",
        "explore.md": render_summary(exploration, fail_on),
        "report.html": render_report(
            lines, matrix.as_json(), limit=None, title="chaosproxy explore: the minimal runs"
        ),
    }
    for name, text in files.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _as_run(found: Found) -> Run:
    o = found.outcome
    if o.run is not None:
        return o.run
    return Run(
        scenario=found.name,
        verdict=o.verdict,
        integrity=None,
        reason=o.reason,
        request_id=o.request_id,
        requests=o.requests,
        duration_ms=o.duration_ms,
        error=o.error,
        content=o.content,
        fallbacks=o.fallbacks,
    )


# ---------------------------------------------------------------------------- the command


def parse_gate(value: str) -> frozenset[str]:
    """``--fail-on``: verdicts, comma-separated; empty: never fail."""
    from chaosproxy.tools.matrix import parse_fail_on

    return parse_fail_on(value)


def cmd_explore(args: argparse.Namespace) -> int:
    from chaosproxy.control.process import fail
    from chaosproxy.observe.logs import describe as describe_error
    from chaosproxy.server.config import ConfigError
    from chaosproxy.tools.matrix import ENVIRONMENT_SETTINGS, proxy_settings

    # The proxies' settings, as the matrix takes them, but the seed: --seed draws the
    # runs, and each run has a seed of its own.
    try:
        upstream, settings_of_proxies = proxy_settings(
            "explore", args, (name for name in ENVIRONMENT_SETTINGS if name != "seed")
        )
    except ConfigError as exc:
        return fail(str(exc))
    if args.replay and args.seed is None:
        return fail("explore: --replay needs the --seed of the exploration it replays")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(MAX_SEED + 1)
    settings = Settings(
        seed=seed,
        budget=args.budget,
        faults=args.faults,
        shrink_runs=args.shrink_runs,
        confirm=args.confirm,
        replay=args.replay,
        client=args.client,
        upstream=upstream,
    )

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        with CommandRunner(
            args.client,
            upstream=upstream,
            jobs=args.jobs,
            timeout=args.timeout,
            startup=args.startup_timeout,
            settings=settings_of_proxies,
        ) as runner:
            exploration = explore(runner, settings, log=say)
    except ExploreError as exc:
        return fail(f"explore: {exc}")
    except Exception as exc:  # the proxy could not start: one line, never a traceback
        return fail(f"explore: {describe_error(exc)}")
    written = write_outputs(exploration, Path(args.out), args.fail_on)
    sys.stdout.write(render_summary(exploration, args.fail_on))
    failed = exploration.failed(args.fail_on)
    say(
        f"chaosproxy explore: {n_runs(len(exploration.runs))} in {_clock(exploration.seconds)}; "
        f"{len(exploration.reproduced)} found, {len(exploration.flaky)} flaky; wrote "
        f"{Path(args.out)} ({len(written)} files)" + ("; FAILED" if failed else "")
    )
    return 1 if failed else 0


__all__ = [
    "CLEAN",
    "DEFAULT_TIMEOUT",
    "FOUND_VERDICTS",
    "Budget",
    "CommandRunner",
    "Exploration",
    "ExploreError",
    "ExploredRun",
    "Found",
    "FunctionRunner",
    "Runner",
    "SerialRunner",
    "Settings",
    "Trial",
    "TrialResult",
    "as_json",
    "cmd_explore",
    "describe_faults",
    "explore",
    "make_trial",
    "parse_budget",
    "render_summary",
    "write_outputs",
]
