"""The pytest plugin (chaosproxy/tools/pytest_plugin.py), run with pytester in a
subprocess against the built-in mock: ``@pytest.mark.chaos_matrix`` and the
``chaos_verdict`` fixture; ``@pytest.mark.chaos_explore``, a test run by the
exploration with its client in process."""

from __future__ import annotations

import pytest

from tests.support.repo import REPO

#: Each test runs pytest in a subprocess, the proxy and its clients inside it.
pytestmark = pytest.mark.slow


@pytest.fixture
def plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # this checkout's plugin and test clients


CLIENT = """
import functools, pytest

from tests.clients import chat_client

chat = functools.partial(chat_client.chat, timeout=10)
"""


def test_one_run_per_scenario_with_its_verdict(pytester: pytest.Pytester, plugin_env: None) -> None:
    pytester.makeini("[pytest]\nchaos_upstream = mock\n")
    pytester.makepyfile(
        CLIENT
        + """
SCENARIOS = ["one-event-per-read", "drop-third-delta", "cut-before-terminal-reset",
             "service-unavailable", "splice-previous-delta"]

@pytest.mark.chaos_matrix(scenarios=SCENARIOS)
def test_client(chaos_proxy, chaos_verdict, chaos_matrix_scenario):
    with chaos_verdict.run() as run:
        run.text = chat(chaos_proxy.url)
    assert chaos_proxy.last()["scenario"] == chaos_matrix_scenario
    assert run.verdict["scenario"] == chaos_matrix_scenario

@pytest.mark.chaos_matrix(scenarios=["drop-third-delta"], fail_on=[])
def test_record_only(chaos_proxy, chaos_verdict):
    verdict = chaos_verdict(text=chat(chaos_proxy.url))
    assert verdict["verdict"] == "silent_corruption"
    assert verdict["requests"] == [verdict["request_id"]]

def test_no_request(chaos_proxy, chaos_verdict):
    chaos_verdict(text="")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-rA")
    # drop-third-delta: the client accepts the gap: silent_corruption fails that run.
    result.assert_outcomes(passed=5, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*silent_corruption under drop-third-delta: the client accepted an altered answer "
            "(a gap in the events) (request r-*",
            "*chaos_verdict: the test made no request through chaos_proxy*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "PASSED *test_client[[]one-event-per-read[]]",
            "PASSED *test_client[[]cut-before-terminal-reset[]]",
            "PASSED *test_client[[]service-unavailable[]]",
            # A fresh proxy per test: no previous stream to splice from, as in the
            # matrix when none came before. Shown as such, and failing no gate.
            "PASSED *test_client[[]splice-previous-delta[]]",
            "PASSED *test_record_only[[]drop-third-delta[]]",
            "FAILED *test_client[[]drop-third-delta[]]*",
            "FAILED *test_no_request*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*chaosproxy verdicts*",
            "one-event-per-read * tolerated *test_client*",
            "drop-third-delta * silent_corruption *test_client*",
            "cut-before-terminal-reset * detected *test_client*",
            "service-unavailable * detected *test_client*",
            "splice-previous-delta * not_exercised *test_client*",
        ]
    )


def test_the_matrix_covers_the_library_by_default(
    pytester: pytest.Pytester, plugin_env: None
) -> None:
    pytester.makepyfile(
        """
import pytest
from chaosproxy.scenario import load_library

@pytest.mark.chaos_matrix
def test_each(chaos_matrix_scenario, chaos_proxy):
    assert chaos_proxy.scenario  # the fixture is there
    assert chaos_matrix_scenario in load_library()
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    from chaosproxy.scenario import load_library

    result.stdout.fnmatch_lines([f"*test_each[[]{name}[]]" for name in load_library()])


def test_the_matrix_marker_is_registered(pytester: pytest.Pytester, plugin_env: None) -> None:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.chaos_matrix(scenarios=None, fail_on=None): *"])


# --------------------------------------------------------------------------- explore


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
