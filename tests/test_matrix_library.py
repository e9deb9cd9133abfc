"""``chaosproxy matrix`` over the whole library with the Python openai SDK client
(examples/clients/openai_python.py) against the built-in mock: every verdict is the one
docs/verdicts.md records for that SDK, read from its table, so the docs and the test
cannot disagree."""

from __future__ import annotations

import re
import sys

import pytest

from chaosproxy.matrix import run_matrix
from chaosproxy.scenario import load_library
from chaosproxy.verdict import VERDICTS
from tests.conftest import REPO

DOC = REPO / "docs" / "verdicts.md"
CLIENT = f"{sys.executable} {REPO / 'examples' / 'clients' / 'openai_python.py'}"
ROW = re.compile(r"^\| `(?P<scenario>[a-z0-9-]+)` \| (?P<verdict>[a-z_]+) \| .+ \|$")


def documented(column: str = "openai-python") -> dict[str, str]:
    """The table between ``<!-- verdicts:COLUMN -->`` and its end marker."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"<!-- verdicts:{column} -->")
    end = text.index(f"<!-- /verdicts:{column} -->")
    rows = {}
    for line in text[start:end].splitlines():
        m = ROW.match(line)
        if m is not None:
            rows[m["scenario"]] = m["verdict"]
    return rows


def test_the_table_names_every_scenario_once_with_a_real_verdict() -> None:
    rows = documented()
    assert sorted(rows) == sorted(load_library())
    assert set(rows.values()) <= set(VERDICTS)


@pytest.mark.timeout(300)
def test_the_openai_sdk_across_the_library() -> None:
    pytest.importorskip("openai")
    matrix, lines = run_matrix(
        CLIENT, timeout=10.0, settings={"mock_interval": 0.001, "mock_tokens": 12}
    )
    expected = documented()
    got = {r.scenario: r.verdict for r in matrix.results}
    wrong = {
        name: (got[name], expected[name], r.reason, r.error)
        for name, r in ((r.scenario, r) for r in matrix.results)
        if got[name] != expected[name]
    }
    assert not wrong, wrong
    results = {r.scenario: r for r in matrix.results}
    # The retries the table mentions: the verdict is about the last request.
    assert len(results["rate-limited-then-ok"].requests) == 2
    assert len(results["service-unavailable"].requests) == 3
    # Every run's verdict went to the log, on the request it is about.
    logged = {line["request_id"]: line["verdict"] for line in lines if line["event"] == "verdict"}
    assert {r.request_id: r.verdict for r in matrix.results} == logged
