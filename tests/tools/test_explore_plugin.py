"""``@pytest.mark.chaos_explore``: a test run by the exploration, its client in process,
run with pytester in a subprocess against the built-in mock."""

from __future__ import annotations

import pytest

from tests.support.repo import REPO

#: Each test runs pytest in a subprocess, the proxy and its clients inside it.
pytestmark = pytest.mark.slow


@pytest.fixture
def plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # this checkout's plugin and test clients


TESTS = """
import pytest
from tests.clients.responses_client import answer

FAULTS = ["duplicate", "drop", "reorder", "rechunk", "comment"]

@pytest.mark.chaos_explore(budget=8, seed=4, faults=FAULTS)
def test_second_terminal(chaos_proxy, chaos_verdict):
    with chaos_verdict.run() as run:
        run.text = answer(chaos_proxy.url, "second-terminal")

@pytest.mark.chaos_explore(budget=8, seed=4, faults=FAULTS)
def test_careful(chaos_proxy, chaos_verdict):
    with chaos_verdict.run() as run:
        run.text = answer(chaos_proxy.url, "careful")

@pytest.mark.chaos_explore(budget="4", seed=4, faults=FAULTS, fail_on=[])
def test_record_only(chaos_proxy, chaos_verdict):
    with chaos_verdict.run() as run:
        run.text = answer(chaos_proxy.url, "second-terminal")

@pytest.mark.chaos_explore(budget=2)
def test_without_a_verdict(chaos_proxy):
    pass

@pytest.mark.chaos_explore(budget=2, seed=1)
def test_no_verdict_recorded(chaos_proxy, chaos_verdict):
    answer(chaos_proxy.url, "careful")
"""


def test_the_test_is_explored_and_fails_with_the_minimal_scenario(
    pytester: pytest.Pytester, plugin_env: None
) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-rA")
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*chaos_explore (seed 4, 8 runs) found 1 failure; the minimal scenarios:",
            "*--- silent-corruption-duplicate (reproduced) ---",
            "*# silent_corruption: the client was sent the clean answer but accepted a "
            "different text",
            "*# found by chaosproxy explore --seed 4, run 1 (its seed *); 1 run of 8 runs ended so",
            "*# shrunk from comment {every: 4}; duplicate {kind: terminal, nth: 1, times: 3}",
            "*# in 7 runs of the client (2 steps)",
            "*# check: pytest *test_second_terminal --chaos-scenarios FILE, marked "
            '@pytest.mark.chaos("silent-corruption-duplicate")',
            "*name: silent-corruption-duplicate",
            "*- duplicate: {kind: terminal, nth: 1}",
        ]
    )
    result.stdout.fnmatch_lines(["*the test must use the chaos_proxy and chaos_verdict fixtures*"])
    result.stdout.fnmatch_lines(
        ["*chaos_explore: the test recorded no verdict (use chaos_verdict)*"]
    )
    result.stdout.fnmatch_lines(
        [
            "PASSED *test_careful",
            "PASSED *test_record_only",
            "FAILED *test_second_terminal*",
            "FAILED *test_without_a_verdict*",
            "FAILED *test_no_verdict_recorded*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*chaosproxy verdicts*",
            "silent-corruption-duplicate * silent_corruption *test_second_terminal*",
            "silent-corruption-duplicate * silent_corruption *test_record_only*",
        ]
    )


def test_the_explore_marker_is_registered(pytester: pytest.Pytester, plugin_env: None) -> None:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.chaos_explore(budget=20, seed=None, *"])
