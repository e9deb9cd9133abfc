"""``chaosproxy matrix`` over the whole library with each example client
(examples/clients/: the Python openai SDK, a careful ``httpx-sse`` client, the Node
openai SDK) against the built-in mock: every verdict is the one docs/verdicts.md
records for that client, read from its table, so the docs and the test cannot
disagree; and every one is what the rules give, worked out again by the oracle of
tests/verdict_oracle.py from what the client printed, its clean answer and the bytes
the proxy logged as sent."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chaosproxy.core.verdict import VERDICTS
from chaosproxy.scenario import load_library
from chaosproxy.tools.matrix import run_matrix
from tests.clients.zygote import ForkServer
from tests.conftest import REPO
from tests.tools.test_verdict_oracle import clean_text, scenario_clean
from tests.verdict_oracle import expected

DOC = REPO / "docs" / "verdicts.md"
#: The example clients: a Python script (run forked from tests/clients/zygote.py), or a
#: shell command.
CLIENTS: dict[str, Path | str] = {
    "openai (Python)": REPO / "examples" / "clients" / "openai_python.py",
    "httpx-sse": REPO / "examples" / "clients" / "httpx_sse_client.py",
    "openai (Node)": f"node {REPO / 'examples' / 'clients' / 'openai_node.mjs'}",
}
FAST = {"mock_interval": 0.001, "mock_tokens": 12}


def documented() -> dict[str, dict[str, str]]:
    """The table between ``<!-- verdicts:clients -->`` and its end marker: client →
    scenario → verdict."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("<!-- verdicts:clients -->") : text.index("<!-- /verdicts:clients -->")]
    rows = [line for line in table.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    out: dict[str, dict[str, str]] = {name: {} for name in header[1:-1]}
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        scenario = re.fullmatch(r"`([a-z0-9-]+)`", cells[0])
        assert scenario is not None, row
        for name, verdict in zip(header[1:-1], cells[1:-1], strict=True):
            out[name][scenario[1]] = verdict
    return out


def test_the_table_names_every_scenario_once_for_each_client() -> None:
    table = documented()
    assert sorted(table) == sorted(CLIENTS)
    for rows in table.values():
        assert sorted(rows) == sorted(load_library())
        assert set(rows.values()) <= set(VERDICTS)


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
    got = {r.scenario: r.verdict for r in matrix.results}
    wrong = {
        r.scenario: (r.verdict, table[r.scenario], r.reason, r.error)
        for r in matrix.results
        if r.verdict != table[r.scenario]
    }
    assert not wrong, wrong
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
