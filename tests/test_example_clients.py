"""The example matrix clients in examples/clients/ follow the command protocol: run by
``chaosproxy matrix`` over a few scenarios, each prints the right text, exits non-zero
when its client raised, and gets the verdict its behaviour deserves."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from chaosproxy.matrix import run_matrix
from tests.conftest import LIBRARY, REPO

CLIENTS = REPO / "examples" / "clients"
FAST = {"mock_interval": 0.001, "mock_tokens": 8}
SCENARIOS = ("one-event-per-read", "cut-before-terminal-close", "truncated-json-delta")


@pytest.fixture(scope="module")
def few(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("scenarios")
    for name in SCENARIOS:
        shutil.copy(LIBRARY / f"{name}.yaml", directory)
    return directory


def verdicts(command: str, scenarios: Path) -> dict[str, tuple[str, int | None, bool | None]]:
    matrix, _ = run_matrix(command, scenario_paths=[str(scenarios)], timeout=20, settings=FAST)
    return {r.scenario: (r.verdict, r.exit_code, r.text_matches) for r in matrix.results}


def test_the_careful_httpx_sse_client_detects_a_missing_done(few: Path) -> None:
    got = verdicts(f"{sys.executable} {CLIENTS / 'httpx_sse_client.py'}", few)
    assert got == {
        "cut-before-terminal-close": ("detected", 1, None),
        "one-event-per-read": ("tolerated", 0, True),
        "truncated-json-delta": ("detected", 1, None),
    }


def test_the_python_openai_sdk(few: Path) -> None:
    pytest.importorskip("openai")
    got = verdicts(f"{sys.executable} {CLIENTS / 'openai_python.py'}", few)
    assert got == {
        "cut-before-terminal-close": ("silent_corruption", 0, True),
        "one-event-per-read": ("tolerated", 0, True),
        "truncated-json-delta": ("detected", 1, None),
    }


def test_the_node_openai_sdk_runs_from_the_checkout(few: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    if not (REPO / "tests" / "node" / "node_modules" / "openai").is_dir():
        pytest.skip("tests/node/node_modules is absent: npm ci --prefix tests/node")
    got = verdicts(f"node {CLIENTS / 'openai_node.mjs'}", few)
    assert got == {
        "cut-before-terminal-close": ("silent_corruption", 0, True),
        "one-event-per-read": ("tolerated", 0, True),
        "truncated-json-delta": ("detected", 1, None),
    }
