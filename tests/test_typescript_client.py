"""The TypeScript client (clients/typescript, docs/typescript.md): its Vitest suite run
against real ``chaosproxy serve`` processes of this checkout, started by the suite
itself with this Python (``CHAOSPROXY_PYTHON``), after ``tsc`` type-checks the package
and its tests; the package as ``npm pack`` makes it, imported and type-checked by a
project that installed it. Those are skipped, saying why, without ``node`` or the
package's node_modules (``npm ci --prefix clients/typescript``). Its version is the
project's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from tests.support.repo import REPO

PACKAGE = REPO / "clients" / "typescript"
#: The whole Vitest run, start-ups of some eight proxies included, at most.
DEADLINE = 480.0


def _missing() -> str | None:
    if shutil.which("node") is None or shutil.which("npx") is None:
        return "node is not installed"
    if not (PACKAGE / "node_modules").is_dir():
        return "clients/typescript/node_modules is absent: run `npm ci --prefix clients/typescript`"
    return None


node = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


def test_the_package_version_is_the_projects() -> None:
    package = json.loads((PACKAGE / "package.json").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert package["name"] == "@chaosproxy/client"
    assert package["version"] == project["version"]
    lock = json.loads((PACKAGE / "package-lock.json").read_text())
    assert lock["version"] == package["version"]
    # No runtime dependency; the devDependencies pinned exactly.
    assert "dependencies" not in package
    assert all(v[0].isdigit() for v in package["devDependencies"].values())


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


@pytest.mark.node
@node
def test_the_package_type_checks() -> None:
    done = _run(
        ["npx", "--no-install", "tsc", "-p", "tsconfig.json", "--noEmit"], dict(os.environ), 120
    )
    assert done.returncode == 0, done.stdout


@pytest.mark.node
@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 60)
@node
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
        "transport.test.ts": "passed",
    }


CONSUMER = """
import { ChaosClient, ChaosClientError, scenarioHeaders } from "@chaosproxy/client";
import type { RequestSummary } from "@chaosproxy/client";
import { setupChaosProxy as jestSetup } from "@chaosproxy/client/jest";
// The Vitest module runs only inside Vitest: here its types alone.
import type { ChaosFixtures, chaosTest, setupChaosProxy } from "@chaosproxy/client/vitest";

const client: ChaosClient = new ChaosClient("http://127.0.0.1:8478", { token: "t" });
const last: Promise<RequestSummary> = client.last();
last.catch(() => undefined);
const headers: Record<string, string> = scenarioHeaders("drop-third-delta");
type Fixture = ChaosFixtures["chaosproxy"]["url"];
const url: Fixture = "http://127.0.0.1:1";
type Setup = ReturnType<typeof setupChaosProxy>["client"];
const same: Setup = client;
const extended: typeof chaosTest | undefined = undefined;
console.log(JSON.stringify([String(client), headers, new ChaosClientError("m", 400).status,
  typeof jestSetup, url, String(same), extended ?? null]));
"""


@pytest.mark.node
@node
def test_the_packed_package_is_imported_and_typed_by_a_project(tmp_path: Path) -> None:
    """``npm pack`` builds it (tsc); a project with the tarball's contents installed
    type-checks against the declarations of its three entry points and runs (the
    Vitest one runs only inside Vitest: its types are checked)."""
    done = _run(["npm", "pack", "--pack-destination", str(tmp_path)], dict(os.environ), 120)
    assert done.returncode == 0, done.stdout
    (tarball,) = tmp_path.glob("chaosproxy-client-*.tgz")
    with tarfile.open(tarball) as packed:
        names = set(packed.getnames())
        packed.extractall(tmp_path, filter="data")
    for entry in ("index", "vitest", "jest"):
        assert {f"package/dist/{entry}.js", f"package/dist/{entry}.d.ts"} <= names
    assert "package/README.md" in names
    assert not any(n.startswith(("package/test/", "package/node_modules/")) for n in names)

    project = tmp_path / "project"
    modules = project / "node_modules"
    (modules / "@chaosproxy").mkdir(parents=True)
    (tmp_path / "package").rename(modules / "@chaosproxy" / "client")
    (modules / "vitest").symlink_to(PACKAGE / "node_modules" / "vitest")  # its peer dependency
    (project / "package.json").write_text('{"type": "module"}')
    (project / "consumer.ts").write_text(CONSUMER)
    tsc = PACKAGE / "node_modules" / ".bin" / "tsc"
    checked = _run(
        [
            str(tsc),
            "--outDir",
            str(project / "out"),
            "--strict",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            "--target",
            "es2022",
            "--skipLibCheck",
            str(project / "consumer.ts"),
        ],
        dict(os.environ),
        120,
    )
    assert checked.returncode == 0, checked.stdout
    ran = subprocess.run(
        ["node", "out/consumer.js"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == [
        "ChaosClient(http://127.0.0.1:8478)",
        {"X-Chaos-Scenario": "drop-third-delta"},
        400,
        "function",
        "http://127.0.0.1:1",
        "ChaosClient(http://127.0.0.1:8478)",
        None,
    ]
