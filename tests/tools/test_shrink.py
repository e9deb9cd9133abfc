"""Shrinking (chaosproxy/tools/shrink.py): pure, so a "client" here is a function of the faults
and every test is a draft in, an exact minimal draft out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from chaosproxy.tools.fault_space import FaultDraw, Shape, Space, draft_key, run_seed
from chaosproxy.tools.shrink import Candidate, shrink

CHAT = Shape("openai-chat", "sse", 27, {"start": 1, "delta": 24, "other": 1, "terminal": 1}, 6704)
SPACE = Space(CHAT)

Faults = list[dict[str, Any]]


def client(fails: Callable[[Faults], bool]) -> tuple[Callable[..., list[bool]], list[Faults]]:
    """A ``test`` that answers with ``fails``, and the list of what it was asked."""
    asked: list[Faults] = []

    def test(candidates: Sequence[Candidate]) -> list[bool]:
        asked.extend(c.faults for c in candidates)
        return [fails(c.faults) for c in candidates]

    return test, asked


def has(name: str, **params: Any) -> Callable[[Faults], bool]:
    """Fails when a fault ``name`` with these parameters (a subset) is there."""

    def fails(faults: Faults) -> bool:
        return any(
            name in f and all(f[name].get(k) == v for k, v in params.items()) for f in faults
        )

    return fails


def draft_of(faults: Sequence[tuple[str, Sequence[int]]]) -> tuple[FaultDraw, ...]:
    return tuple(FaultDraw(name, tuple(choices)) for name, choices in faults)


# ids {start: 3}; duplicate {kind: delta, range: [10, 13], times: 2}; drop {kind: delta, nth: 3}
THREE = draft_of([("ids", [3]), ("duplicate", [0, 2, 9, 2, 1]), ("drop", [0, 0, 2])])


def test_a_drop_among_three_faults_shrinks_to_the_first_delta() -> None:
    test, asked = client(has("drop", kind="delta"))
    shrunk = shrink(SPACE, THREE, test)
    assert shrunk.faults == [{"drop": {"kind": "delta", "nth": 1}}]
    assert asked == [
        [{"ids": {"start": 3}}],
        [{"duplicate": {"kind": "delta", "range": [10, 13], "times": 2}}],
        [{"drop": {"kind": "delta", "nth": 3}}],  # alone: still fails
        [{"drop": {"kind": "delta", "nth": 1}}],  # its simplest
    ]
    assert (shrunk.tests, shrunk.asked, len(shrunk.steps), shrunk.exhausted) == (4, 4, 3, False)
    assert shrunk.steps[0] == THREE


def test_a_failure_that_needs_two_faults_keeps_both_each_at_its_simplest() -> None:
    """The bug needs a second terminal event, which only a duplicate of the terminal
    event makes, and a read holding two events (a coalesce)."""

    def fails(faults: Faults) -> bool:
        return has("duplicate", kind="terminal")(faults) and has("coalesce")(faults)

    start = draft_of(
        [
            ("comment", [3]),
            ("coalesce", [0, 2]),  # events: 4
            ("duplicate", [1, 0, 2]),  # kind: terminal, times: 3
            ("rechunk", [0, 40]),
        ]
    )
    assert SPACE.read(start)[1] == [
        {"comment": {"every": 4}},
        {"coalesce": {"events": 4}},
        {"duplicate": {"kind": "terminal", "nth": 1, "times": 3}},
        {"rechunk": {"size": 41}},
    ]
    test, _ = client(fails)
    shrunk = shrink(SPACE, start, test)
    assert shrunk.faults == [
        {"coalesce": {"events": 2}},
        {"duplicate": {"kind": "terminal", "nth": 1}},
    ]


def test_a_parameter_shrinks_as_far_as_the_failure_allows() -> None:
    """A client that fails only when a cut leaves at least 9 events: the cut moves as
    early as it can, and no further."""

    def fails(faults: Faults) -> bool:
        return any(isinstance(f.get("cut", {}).get("after"), int) and f["cut"]["after"] >= 9
                   for f in faults)  # fmt: skip

    start = draft_of([("cut", [0, 23, 0, 2])])  # cut {after: 23, how: reset}
    assert SPACE.read(start)[1] == [{"cut": {"after": 23, "how": "reset"}}]
    test, _ = client(fails)
    shrunk = shrink(SPACE, start, test)
    assert shrunk.faults == [{"cut": {"after": 9}}]
    assert shrunk.draft == draft_of([("cut", [0, 9])])


def test_the_kind_of_a_fault_never_changes() -> None:
    """Whatever the client fails on, a fault is shrunk within its kind: a reorder that
    fails stays a reorder (it is not traded for a drop that would fail too)."""
    test, asked = client(lambda faults: bool(faults))  # anything fails
    start = draft_of([("reorder", [3, 2, 1, 1]), ("drop", [1, 0, 0])])
    shrunk = shrink(SPACE, start, test)
    assert [next(iter(f)) for f in shrunk.faults] == ["reorder"]
    assert all(next(iter(f)) in ("reorder", "drop") for faults in asked for f in faults)
    assert shrunk.faults == [{"reorder": {"kind": "delta", "nth": 1}}]


def test_it_stops_at_max_tests() -> None:
    test, asked = client(has("drop", kind="delta"))
    shrunk = shrink(SPACE, THREE, test, max_tests=2)
    assert len(asked) == 2 and shrunk.exhausted
    assert shrunk.draft == THREE  # neither single fault it tried failed
    none = shrink(SPACE, THREE, test, max_tests=0)
    assert none.draft == THREE and none.tests == 0 and none.exhausted


def test_a_draft_nothing_simpler_fails_for_is_its_own_minimum() -> None:
    simplest = draft_of([("drop", [])])
    test, asked = client(lambda faults: False)
    shrunk = shrink(SPACE, simplest, test)
    assert (shrunk.draft, shrunk.tests, asked) == (simplest, 0, [])


@pytest.mark.parametrize("run", range(1, 41))
def test_batches_give_the_same_shrink_as_one_at_a_time(run: int) -> None:
    """Any draft, a client that fails on a few things: asking 2, 3 or 5 candidates at
    once ends where asking one at a time does, after the same number of tests, however
    small the budget."""
    draft = SPACE.draw(run_seed(11, run))

    def fails(faults: Faults) -> bool:
        return has("drop")(faults) or has("cut", how="close")(faults) or len(faults) > 2

    for budget in (3, 30):
        one = shrink(SPACE, draft, client(fails)[0], max_tests=budget)
        for batch in (2, 3, 5):
            many = shrink(SPACE, draft, client(fails)[0], batch=batch, max_tests=budget)
            assert (many.draft, many.tests, many.steps, many.exhausted) == (
                one.draft,
                one.tests,
                one.steps,
                one.exhausted,
            )
            assert many.asked >= many.tests
        sizes = iter([1, 4, 2, 3] * 100)  # as jobs come and go
        varying = shrink(SPACE, draft, client(fails)[0], batch=sizes.__next__, max_tests=budget)
        assert (varying.draft, varying.tests, varying.steps) == (one.draft, one.tests, one.steps)


@pytest.mark.parametrize("run", range(1, 61))
def test_each_step_is_smaller_and_anything_failing_ends_at_one_simplest_fault(run: int) -> None:
    draft = SPACE.draw(run_seed(12, run))
    test, asked = client(lambda faults: True)
    shrunk = shrink(SPACE, draft, test)
    keys = [draft_key(step) for step in shrunk.steps]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)
    # Everything fails: the first fault alone, then its simplest.
    assert shrunk.draft == (FaultDraw(draft[0].fault, ()),)
    assert len(asked) == shrunk.tests == len(shrunk.steps) - 1
