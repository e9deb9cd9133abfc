"""Shrinking a failing scenario of the space to the smallest that still fails, as
Hypothesis shrinks (docs/explore.md). Pure: whether a candidate still fails is asked of
the ``test`` given (``chaosproxy explore`` runs the client; the tests give a function).

A draft (:mod:`chaosproxy.tools.fault_space`) is shrunk greedily: the candidates of the current
draft are tried in a fixed order, simplest first, and the first that still fails becomes
the current draft; it ends when none does, or when ``max_tests`` candidates were tried.
Every candidate is strictly smaller in :func:`~chaosproxy.tools.fault_space.draft_key`'s order,
so shrinking always ends, and the same draft, space and answers give the same result.
A fault is never changed into another fault: a failure keeps the faults that make it.

The candidates, in order: each fault alone; the faults less one; each fault with all its
choices the simplest (``drop: {kind: delta, nth: 1}``); each choice the simplest; each
choice halved, three quarters, one less; each choice left out (the next ones move up).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the space is loaded when a shrink runs: explore's options need
    # MAX_TESTS only (chaosproxy/tools/explore_options.py)
    from chaosproxy.tools.fault_space import Draft, Space

#: How many candidates a shrink tries at most, by default.
MAX_TESTS = 30


@dataclass(frozen=True, slots=True)
class Candidate:
    """A draft to try, read: its faults as scenario data."""

    draft: Draft
    faults: list[dict[str, Any]]


#: Whether each candidate still fails (one answer per candidate, in order).
Test = Callable[[Sequence[Candidate]], Sequence[bool]]


@dataclass(frozen=True, slots=True)
class Shrunk:
    """The end of a shrink: the smallest failing draft found, and how it got there."""

    draft: Draft
    faults: list[dict[str, Any]]
    #: How many candidates a one-at-a-time shrink asks to get here (whatever ``batch``).
    tests: int
    #: The drafts it went through, the one it started from first.
    steps: tuple[Draft, ...]
    #: True when it stopped at ``max_tests`` with candidates left untried.
    exhausted: bool = False
    #: How many candidates were asked in fact (more than ``tests`` with a ``batch``).
    asked: int = 0


def proposals(draft: Draft) -> Iterator[Draft]:
    """The candidates of ``draft``, in the order they are tried (not yet read: some may
    read back to the same scenario, or to no smaller one)."""
    from chaosproxy.tools.fault_space import FaultDraw

    n = len(draft)
    if n > 1:
        for item in draft:
            yield (item,)
    if n > 2:
        for i in range(n):
            yield draft[:i] + draft[i + 1 :]

    def with_choices(i: int, choices: Sequence[int]) -> Draft:
        return (*draft[:i], FaultDraw(draft[i].fault, tuple(choices)), *draft[i + 1 :])

    for i, item in enumerate(draft):
        if item.choices:
            yield with_choices(i, ())
    for i, item in enumerate(draft):
        for j, value in enumerate(item.choices):
            if value:
                yield with_choices(i, (*item.choices[:j], 0, *item.choices[j + 1 :]))
    for i, item in enumerate(draft):
        for j, value in enumerate(item.choices):
            for lower in _lower(value):
                yield with_choices(i, (*item.choices[:j], lower, *item.choices[j + 1 :]))
    for i, item in enumerate(draft):
        for j in range(len(item.choices)):
            yield with_choices(i, item.choices[:j] + item.choices[j + 1 :])


def _lower(value: int) -> list[int]:
    """Smaller values to try for a choice, beyond 0: about a binary search's."""
    return sorted({value // 2, value * 3 // 4, value - 1} - {0, value}) if value > 1 else []


def faults_key(faults: Sequence[Any]) -> str:
    """Two drafts that read to the same faults are the same scenario."""
    return json.dumps(faults, sort_keys=True, separators=(",", ":"))


def shrink(
    space: Space,
    draft: Draft,
    test: Test,
    *,
    batch: int | Callable[[], int] = 1,
    max_tests: int = MAX_TESTS,
) -> Shrunk:
    """The smallest draft reachable from ``draft`` (which fails) whose candidates
    ``test`` says still fail, asking at most ``max_tests`` candidates.

    With ``batch`` > 1, that many candidates are asked at once (in order; the first
    that fails is taken) and the answers for those after it are kept for when the
    shrink comes to them: the result, ``tests`` included, is that of asking one at a
    time, whatever ``batch`` is; only ``asked`` grows. ``batch`` may be a function,
    asked before each batch (how many jobs are idle now)."""
    run = _Shrink(space, test, batch, max_tests)
    current, faults = space.read(draft)
    run.answers[faults_key(faults)] = True
    steps = [current]
    while True:
        found = run.first_failing(current)
        if found is None:
            return Shrunk(current, faults, run.charged, tuple(steps), run.exhausted, run.asked)
        current, faults = found.draft, found.faults
        steps.append(current)


class _Shrink:
    """The state of one shrink: every answer known, and what asking one at a time
    would have cost so far (``charged``)."""

    def __init__(
        self, space: Space, test: Test, batch: int | Callable[[], int], budget: int
    ) -> None:
        self.space = space
        self.test = test
        self._batch = batch
        self.budget = budget
        #: What each candidate asked gave, by its faults.
        self.answers: dict[str, bool] = {}
        #: Answers got ahead of their turn (after a batch's winner), not yet charged.
        self.ahead: set[str] = set()
        self.charged = 0
        self.asked = 0
        self.exhausted = False

    @property
    def batch(self) -> int:
        return max(1, self._batch() if callable(self._batch) else self._batch)

    def first_failing(self, current: Draft) -> Candidate | None:
        """The first candidate of ``current`` that still fails, in order; None when
        none does, or the budget ran out (``exhausted``)."""
        from chaosproxy.tools.fault_space import draft_key

        key = draft_key(current)
        pending: list[Candidate] = []
        for proposal in proposals(current):
            read, faults = self.space.read(proposal)
            seen = faults_key(faults)
            if draft_key(read) >= key or any(faults_key(p.faults) == seen for p in pending):
                continue
            if seen in self.ahead:  # its turn: charged now, as if asked now
                found = self.ask(pending)
                if found is not None:
                    return found
                if self.charged >= self.budget:
                    self.exhausted = True
                    return None
                self.ahead.discard(seen)
                self.charged += 1
                if self.answers[seen]:
                    return Candidate(read, faults)
                continue
            if seen in self.answers:
                continue
            if self.charged + len(pending) >= self.budget:
                found = self.ask(pending)
                self.exhausted = found is None
                return found
            pending.append(Candidate(read, faults))
            if len(pending) >= self.batch:
                found = self.ask(pending)
                if found is not None:
                    return found
        return self.ask(pending)

    def ask(self, pending: list[Candidate]) -> Candidate | None:
        """Ask ``pending`` (emptied); the first that fails. Each up to it is charged;
        the answers after it are kept ahead of their turn."""
        if not pending:
            return None
        replies = list(self.test(pending))
        self.asked += len(pending)
        winner = None
        for candidate, fails in zip(pending, replies, strict=True):
            seen = faults_key(candidate.faults)
            self.answers[seen] = bool(fails)
            if winner is None:
                self.charged += 1
                if fails:
                    winner = candidate
            else:
                self.ahead.add(seen)
        pending.clear()
        return winner


__all__ = ["MAX_TESTS", "Candidate", "Shrunk", "Test", "faults_key", "proposals", "shrink"]
