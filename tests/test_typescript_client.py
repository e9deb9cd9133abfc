"""The TypeScript client (clients/typescript, docs/typescript.md): its Vitest suite run
against real ``chaosproxy serve`` processes of this checkout, started by the suite
itself with this Python (``CHAOSPROXY_PYTHON``), after ``tsc`` type-checks the package
and its tests. Skipped, saying why, without ``node`` or the package's node_modules
(``npm ci --prefix clients/typescript``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "clients" / "typescript"
#: The whole Vitest run, start-ups of some eight proxies included, at most.
DEADLINE = 480.0


def _missing() -> str | None:
    if shutil.which("node") is None or shutil.which("npx") is None:
        return "node is not installed"
    if not (PACKAGE / "node_modules").is_dir():
        return "clients/typescript/node_modules is absent: run `npm ci --prefix clients/typescript`"
    return None


pytestmark = [
    pytest.mark.node,
    pytest.mark.slow,
    pytest.mark.timeout(DEADLINE + 60),
    pytest.mark.skipif(_missing() is not None, reason=_missing() or ""),
]


def _run(
    command: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``command`` in the package, in a process group of its own: on a timeout the
    whole group (npx, node, Vitest's workers, the proxies they started) is killed."""
    proc = subprocess.Popen(
        command,
        cwd=PACKAGE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        process_group=0,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(command)} did not finish in {timeout:.0f} s:\n{out[-4000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, out)


def test_the_package_type_checks() -> None:
    done = _run(
        ["npx", "--no-install", "tsc", "-p", "tsconfig.json", "--noEmit"], dict(os.environ), 120
    )
    assert done.returncode == 0, done.stdout


def test_the_vitest_suite_passes_against_a_real_proxy(tmp_path: Path) -> None:
    report = tmp_path / "vitest.json"
    env = {**os.environ, "CHAOSPROXY_PYTHON": sys.executable, "NO_COLOR": "1", "CI": "1"}
    env.pop("CHAOSPROXY_ADMIN_TOKEN", None)
    done = _run(
        [
            "npx",
            "--no-install",
            "vitest",
            "run",
            "--reporter=default",
            "--reporter=json",
            f"--outputFile.json={report}",
        ],
        env,
        DEADLINE,
    )
    assert done.returncode == 0, done.stdout[-8000:]
    results = json.loads(report.read_text())
    assert results["numFailedTests"] == 0, done.stdout[-8000:]
    assert results["numPendingTests"] == 0 and results["numTodoTests"] == 0
    assert results["numPassedTests"] == results["numTotalTests"]
    files = {Path(r["name"]).name: r["status"] for r in results["testResults"]}
    assert files == {
        "client.test.ts": "passed",
        "helpers.test.ts": "passed",
        "jest.test.ts": "passed",
        "match.test.ts": "passed",
    }
