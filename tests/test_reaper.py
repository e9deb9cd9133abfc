"""The suite's reaper (tests/support/reaper.py): a test that leaves a process running, or times
out holding one, gets an error naming it, and the process is gone after the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.reaper import descendants

REPO = Path(__file__).resolve().parents[1]

INNER = """
import subprocess, sys, time

import pytest

def sleeper(tag):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", tag])

def test_leaves_one_running():
    sleeper("reaper-leak")

@pytest.mark.timeout(1)
def test_times_out_holding_one():
    child = sleeper("reaper-timeout")
    try:
        time.sleep(30)
    finally:
        pass  # (a test whose cleanup never stops it)

def test_cleans_up():
    child = sleeper("reaper-clean")
    child.kill()
    child.wait()
"""


def running(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the reaper reads /proc (Linux)")
def test_a_leaked_process_is_an_error_and_is_killed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.reaper", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0"
    )
    result.assert_outcomes(passed=2, failed=1, errors=2)
    result.stdout.re_match_lines([r".*the test left 1 process\(es\) running: .*reaper-leak.*"])
    result.stdout.re_match_lines([r".*the test left 1 process\(es\) running: .*reaper-timeout.*"])
    assert running("reaper-leak") == running("reaper-timeout") == running("reaper-clean") == []


def test_descendants_are_found_through_their_parents() -> None:
    assert os.getpid() not in descendants(os.getpid())
    assert descendants(os.getppid()) >= {os.getpid()}
