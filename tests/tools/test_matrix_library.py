"""``chaosproxy matrix`` over the whole library with each example client
(examples/clients/: the Python openai SDK, a careful ``httpx-sse`` client, the Node
openai SDK) against the built-in mock: every verdict is the one docs/verdicts.md
records for that client, read from its table, so the docs and the test cannot
disagree; every one is what the rules give, worked out again by the oracle of
tests/support/verdict_oracle.py from what the client printed, its clean answer and the bytes
the proxy logged as sent; and the version each client ran with is the one the table's
first row says its verdicts were seen with."""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

import pytest

from chaosproxy.core.verdict import VERDICTS
from chaosproxy.scenario import load_library
from chaosproxy.tools.matrix import run_matrix
from tests.support.clean_runs import clean_text, scenario_clean
from tests.support.forks import ForkServer
from tests.support.repo import REPO
from tests.support.verdict_oracle import expected

DOC = REPO / "docs" / "verdicts.md"
#: The example clients: a Python script (run forked from tests/clients/zygote.py), or a
#: shell command.
CLIENTS: dict[str, Path | str] = {
    "openai (Python)": REPO / "examples" / "clients" / "openai_python.py",
    "httpx-sse": REPO / "examples" / "clients" / "httpx_sse_client.py",
    "openai (Node)": f"node {REPO / 'examples' / 'clients' / 'openai_node.mjs'}",
}
FAST = {"mock_interval": 0.001, "mock_tokens": 12}
#: The package each client's verdicts depend on: (its ecosystem, its name).
PACKAGES: dict[str, tuple[str, str]] = {
    "openai (Python)": ("python", "openai"),
    "httpx-sse": ("python", "httpx-sse"),
    "openai (Node)": ("node", "openai"),
}
NODE = REPO / "tests" / "node"


def table_rows() -> tuple[list[str], list[list[str]]]:
    """The header's cells and the cells of each row of the table between
    ``<!-- verdicts:clients -->`` and its end marker."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("<!-- verdicts:clients -->") : text.index("<!-- /verdicts:clients -->")]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("|")
    ]
    return rows[0], rows[2:]


def seen_with() -> dict[str, str]:
    """The table's first row: client → the version its verdicts were seen with."""
    header, rows = table_rows()
    assert rows[0][0] == "*seen with*", rows[0]
    versions = {}
    for name, cell in zip(header[1:-1], rows[0][1:-1], strict=True):
        found = re.fullmatch(r"`([\w.@/-]+)` (\d+\.\d+\.\d+)(?: \(npm\))?", cell)
        assert found is not None and found[1] == PACKAGES[name][1], cell
        versions[name] = found[2]
    return versions


def installed(name: str) -> str:
    """The version of client ``name``'s package the suite runs: the Python package
    installed, or the one tests/node pins (which ``npm ci`` installs)."""
    ecosystem, package = PACKAGES[name]
    if ecosystem == "python":
        return importlib.metadata.version(package)
    pinned: str = json.loads((NODE / "package.json").read_text())["dependencies"][package]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned), f"tests/node pins {package} loosely: {pinned}"
    return pinned


def documented() -> dict[str, dict[str, str]]:
    """The table's verdicts (its rows after the first): client → scenario → verdict."""
    header, rows = table_rows()
    out: dict[str, dict[str, str]] = {name: {} for name in header[1:-1]}
    for cells in rows[1:]:
        scenario = re.fullmatch(r"`([a-z0-9-]+)`", cells[0])
        assert scenario is not None, cells
        for name, verdict in zip(header[1:-1], cells[1:-1], strict=True):
            out[name][scenario[1]] = verdict
    return out


def test_the_table_names_every_scenario_once_for_each_client() -> None:
    table = documented()
    assert sorted(table) == sorted(CLIENTS) == sorted(PACKAGES)
    for rows in table.values():
        assert sorted(rows) == sorted(load_library())
        assert set(rows.values()) <= set(VERDICTS)


def test_the_table_says_the_versions_the_suite_runs() -> None:
    """Each column's version is the one the suite runs: a new SDK's verdicts are
    checked (below) before the row names it. Node's pin is what ``npm ci`` installs."""
    assert seen_with() == {name: installed(name) for name in PACKAGES}
    lock = json.loads((NODE / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/openai"]["version"] == installed("openai (Node)")
    present = NODE / "node_modules" / "openai" / "package.json"
    if present.exists():  # (installed: the one that runs)
        assert json.loads(present.read_text())["version"] == installed("openai (Node)")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.node) if "Node" in n else n for n in CLIENTS]
)
@pytest.mark.slow
def test_each_example_client_across_the_library(
    name: str, tmp_path: Path, python_clients: ForkServer
) -> None:
    pytest.importorskip("openai")
    client = CLIENTS[name]
    command = python_clients.command(client) if isinstance(client, Path) else client
    record = tmp_path / "record"
    record.mkdir()
    matrix, lines = run_matrix(
        f"{python_clients.command('-m', 'tests.clients.record', record)} {command}",
        timeout=10.0,
        jobs=2,
        settings={**FAST, "log_content": True},
    )
    table = documented()[name]
    version = installed(name)
    if PACKAGES[name][0] == "node":  # the one that ran: tests/node's
        present = NODE / "node_modules" / PACKAGES[name][1] / "package.json"
        version = json.loads(present.read_text())["version"]
    got = {r.scenario: r.verdict for r in matrix.results}
    wrong = {
        r.scenario: (r.verdict, table[r.scenario], r.reason, r.error)
        for r in matrix.results
        if r.verdict != table[r.scenario]
    }
    assert not wrong, f"with {PACKAGES[name][1]} {version}: {wrong}"
    # Verdicts that held are the row's only for the version it names.
    assert version == seen_with()[name], (
        f"{name}: the table's verdicts hold with {version}; docs/verdicts.md says they were "
        f"seen with {seen_with()[name]}: update its first row"
    )
    clean = clean_text(command)
    for run in matrix.results:
        printed = json.loads((record / f"{run.scenario}.json").read_text())[-1]["stdout"]
        oracle = expected(
            run.requests,
            lines,
            exit_code=run.exit_code,
            printed=printed,
            clean=scenario_clean(run.scenario, clean),
        )
        assert got[run.scenario] == oracle, (run.scenario, run.reason)
    results = {r.scenario: r for r in matrix.results}
    if name != "httpx-sse":  # the SDKs retry; the careful client raises on the 429
        # The retries the table mentions: one run, judged on its last request.
        assert len(results["rate-limited-then-ok"].requests) == 2
        assert len(results["service-unavailable"].requests) == 3
    # Every run's verdict went to the log, on the request it is about.
    logged = {line["request_id"]: line["verdict"] for line in lines if line["event"] == "verdict"}
    assert {r.request_id: r.verdict for r in matrix.results} == logged
