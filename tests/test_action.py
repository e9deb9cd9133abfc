"""action.yml, the GitHub Action (``uses: OWNER/chaosproxy@v1``): valid against the
schema of action files (vendored by check-jsonschema), and its steps run here as the
runner runs a composite action's: each ``run`` in ``bash -e -o pipefail`` with its
``env`` and the inputs given, ``RUNNER_TEMP``, ``GITHUB_ACTION_PATH``, ``GITHUB_OUTPUT``
and ``GITHUB_STEP_SUMMARY`` set, the ``if: always()`` step after a failing one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.repo import REPO
from tests.support.schema_check import check_jsonschema

ACTION = REPO / "action.yml"
pytestmark = pytest.mark.xdist_group("action")  # (one venv for the module's runs)
CAREFUL = f"{sys.executable} {REPO / 'examples' / 'clients' / 'httpx_sse_client.py'}"


def action() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(ACTION.read_text("utf-8"))
    return loaded


def test_valid_against_the_action_schema() -> None:
    done = check_jsonschema("vendor.github-actions", ACTION)
    assert done.returncode == 0, done.stdout + done.stderr


def test_inputs_reach_the_shell_through_the_environment_only() -> None:
    """No ``${{ inputs.X }}`` inside a script (a client command with a quote would
    break it, or run what it says): each arrives as a variable."""
    for step in action()["runs"]["steps"]:
        assert "${{" not in step["run"], step["name"]


def run_action(
    inputs: dict[str, str], tmp: Path, venv: Path, action_path: Path = REPO
) -> tuple[list[int], Path, str]:
    """The action's steps, as the runner runs them: each step's exit status, the
    summary file, what the matrix step wrote to GITHUB_OUTPUT."""
    given = {k: inputs.get(k, v.get("default", "")) for k, v in action()["inputs"].items()}
    summary, output = tmp / "summary.md", tmp / "output"
    summary.touch()
    output.touch()
    base = {
        **os.environ,
        "RUNNER_TEMP": str(venv.parent),
        "GITHUB_ACTION_PATH": str(action_path),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    statuses: list[int] = []
    for step in action()["runs"]["steps"]:
        if statuses and statuses[-1] != 0 and step.get("if") != "always()":
            continue
        env = {
            name: re.sub(r"\$\{\{ inputs\.([\w-]+) \}\}", lambda m: given[m.group(1)], str(value))
            for name, value in step.get("env", {}).items()
        }
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=tmp, env={**base, **env}, capture_output=True, text=True, timeout=600,
            check=False,
        )  # fmt: skip
        statuses.append(done.returncode)
    return statuses, summary, output.read_text()


@pytest.fixture(scope="module")
def runner_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RUNNER_TEMP: the action's venv is made there once for the module's runs (the
    first run installs it from a copy of the checkout, as the runner's own checkout of
    the action: a build never writes into this one)."""
    return tmp_path_factory.mktemp("runner") / "chaosproxy"


@pytest.fixture(scope="module")
def action_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The action as the runner checks it out: the repository's files, no more."""
    copy = tmp_path_factory.mktemp("action") / "chaosproxy"
    shutil.copytree(
        REPO,
        copy,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "node_modules", "build", "dist", "*.egg-info", "__pycache__",
            ".mypy_cache", ".ruff_cache", ".pytest_cache",
        ),
    )  # fmt: skip
    return copy


@pytest.mark.slow
@pytest.mark.timeout(600)  # (the first run installs the action: a build and pip, minutes at load)
def test_the_steps_install_run_the_matrix_and_fill_the_summary(
    tmp_path: Path, runner_temp: Path, action_path: Path
) -> None:
    # (The careful client raises on a reset: detected; it reads a duplicated delta
    # twice: silent_corruption, not in this gate.)
    scenarios = "duplicate-third-delta\n  cut-before-terminal-reset"
    statuses, summary, output = run_action(
        {"client": CAREFUL, "scenarios": scenarios, "fail-on": "false_alarm,hung"},
        tmp_path,
        runner_temp,
        action_path,
    )
    assert statuses == [0, 0, 0]
    assert output == "report=chaos-matrix\n"
    table = summary.read_text()
    assert "duplicate-third-delta" in table and "cut-before-terminal-reset" in table
    assert (tmp_path / "chaos-matrix" / "junit.xml").is_file()
    version = subprocess.run(
        [str(runner_temp / "bin" / "chaosproxy"), "--version"], capture_output=True, text=True
    )
    assert version.stdout == "chaosproxy 0.1.0 (pure)\n"


@pytest.mark.slow
@pytest.mark.timeout(600)  # (the first run installs the action: a build and pip, minutes at load)
def test_a_verdict_named_in_fail_on_fails_the_step_and_the_summary_still_comes(
    tmp_path: Path, runner_temp: Path, action_path: Path
) -> None:
    statuses, summary, _ = run_action(
        {"client": CAREFUL, "scenarios": "duplicate-third-delta"},  # (the default gate)
        tmp_path,
        runner_temp,
        action_path,
    )
    assert statuses == [0, 1, 0]
    assert "| `duplicate-third-delta` | **silent_corruption** |" in summary.read_text()


@pytest.mark.slow
@pytest.mark.timeout(600)  # (the first run installs the action: a build and pip, minutes at load)
def test_a_known_verdict_passes_the_default_gate(
    tmp_path: Path, runner_temp: Path, action_path: Path
) -> None:
    statuses, summary, _ = run_action(
        {
            "client": CAREFUL,
            "scenarios": "duplicate-third-delta",
            "known": "duplicate-third-delta=silent_corruption",
        },
        tmp_path,
        runner_temp,
        action_path,
    )
    assert statuses == [0, 0, 0]
    assert "| `duplicate-third-delta` | silent_corruption (known) |" in summary.read_text()
