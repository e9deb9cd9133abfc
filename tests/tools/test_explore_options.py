"""``chaosproxy explore``'s options (chaosproxy/tools/explore_options.py): each value
parsed or refused with a message that says what is expected, a budget of runs or of
time and how it is shown, and the subcommand's defaults. Exploring is test_explore.py's."""

from __future__ import annotations

import argparse

import pytest

from chaosproxy.tools.explore_options import (
    DEFAULT_BUDGET,
    DEFAULT_TIMEOUT,
    Budget,
    add_parser,
    n_runs,
    parse_budget,
    parse_confirm,
    parse_faults,
    parse_runs,
)
from chaosproxy.tools.shrink import MAX_TESTS


@pytest.mark.parametrize(
    ("text", "budget", "shown", "json"),
    [
        ("200", Budget(runs=200), "200 runs", {"runs": 200}),
        (" 1 ", Budget(runs=1), "1 run", {"runs": 1}),
        ("90s", Budget(seconds=90.0), "1m30s", {"seconds": 90.0}),
        ("5m", Budget(seconds=300.0), "5m00s", {"seconds": 300.0}),
        ("1500ms", Budget(seconds=1.5), "2s", {"seconds": 1.5}),
        ("59s", Budget(seconds=59.0), "59s", {"seconds": 59.0}),
    ],
)
def test_a_budget_is_runs_or_a_time(
    text: str, budget: Budget, shown: str, json: dict[str, float]
) -> None:
    got = parse_budget(text)
    assert (got, str(got), got.as_json()) == (budget, shown, json)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0", "a budget of runs must be at least 1"),
        ("0s", "a budget of time must be more than 0"),
        ("5", None),
        ("five", "expected a number of runs (200) or a duration with a unit (90s, 5m), got 'five'"),
        ("-3", "expected a number of runs (200) or a duration with a unit (90s, 5m), got '-3'"),
        ("", "expected a number of runs (200) or a duration with a unit (90s, 5m), got ''"),
    ],
)
def test_a_bad_budget_says_what_is_expected(text: str, problem: str | None) -> None:
    if problem is None:
        assert parse_budget(text) == Budget(runs=5)
        return
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_budget(text)
    assert str(caught.value) == problem


def test_an_empty_budget_shows_as_no_runs() -> None:
    assert str(Budget()) == "0 runs"
    assert n_runs(1) == "1 run"
    assert n_runs(0) == "0 runs"


def test_run_numbers_are_from_one_in_order_without_repeats() -> None:
    assert parse_runs("3, 17,3,1") == (3, 17, 1)
    for bad in ("", "0", "3,x", "-1", ",,"):
        with pytest.raises(argparse.ArgumentTypeError) as caught:
            parse_runs(bad)
        assert str(caught.value) == f"expected run numbers from 1 (3,17), got {bad!r}"


def test_confirm_is_zero_to_a_hundred() -> None:
    assert [parse_confirm(v) for v in ("0", "1", "100")] == [0, 1, 100]
    for bad in ("101", "-1", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError) as caught:
            parse_confirm(bad)
        assert str(caught.value) == f"expected a number of runs from 0 to 100, got {bad!r}"


def test_faults_are_names_of_the_space_each_once() -> None:
    assert parse_faults("drop, cut,drop") == ("drop", "cut")
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_faults("drop,nope,zzz")
    message = str(caught.value)
    assert message.startswith("not in the space: nope, zzz; choose from ")
    choices = message.removeprefix("not in the space: nope, zzz; choose from ").split(", ")
    assert choices == sorted(choices) and {"drop", "cut"} <= set(choices)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^no faults given; choose from "):
        parse_faults(" , ")


def test_the_subcommand_and_its_defaults() -> None:
    parser = argparse.ArgumentParser(prog="chaosproxy")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["explore", "--client", "python client.py"])
    assert (args.command, args.client) == ("explore", "python client.py")
    assert args.budget == Budget(runs=DEFAULT_BUDGET)
    assert (args.seed, args.replay, args.faults) == (None, (), ())
    assert (args.out, args.timeout, args.shrink_runs, args.confirm) == (
        "chaos-explore",
        DEFAULT_TIMEOUT,
        MAX_TESTS,
        1,
    )
    given = parser.parse_args(
        ["explore", "--client", "c", "--budget", "2m", "--replay", "4,2", "--confirm", "0"]
    )
    assert (given.budget, given.replay, given.confirm) == (Budget(seconds=120.0), (4, 2), 0)
