"""``chaosproxy matrix``: the command run per scenario, its verdicts, and the files it
writes; rendering checked on a matrix built here, running through the live proxy with a
small httpx client (tests/clients/chat_client.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaosproxy.cli.main import build_parser
from chaosproxy.core.verdict import FAILING
from chaosproxy.tools.matrix import (
    NO_REQUEST,
    CommandResult,
    Matrix,
    MatrixInputError,
    Progress,
    Run,
    choose_scenarios,
    estimate_left,
    printable,
    render_junit,
    render_markdown,
    run_command,
    run_matrix,
    run_workers,
    show_left,
    telling_line,
    write_outputs,
)
from tests.support.cli import chaosproxy_argv
from tests.support.repo import LIBRARY, REPO

CLIENT = f"{sys.executable} {REPO / 'tests' / 'clients' / 'chat_client.py'}"
FAST = {"mock_interval": 0.001, "mock_tokens": 8}


def run(scenario: str, verdict: str, **kw: object) -> Run:
    fields: dict[str, object] = {
        "integrity": "altered",
        "content": "altered",
        "reason": f"why {scenario}",
        "request_id": "r-2",
        "requests": ["r-1", "r-2"],
        "exit_code": 0,
        "duration_ms": 1500.0,
        "text_matches": False,
    }
    fields.update(kw)
    return Run(scenario, verdict, **fields)  # type: ignore[arg-type]


CUT_FELL_BACK = {
    "fault": "cut",
    "position": 1,
    "requested": "mid_utf8",
    "actual": "boundary",
    "reason": "the event has no multi-byte UTF-8 character",
}
COMMENT_SKIPPED = {
    "fault": "comment",
    "position": 2,
    "requested": None,
    "actual": "skipped",
    "reason": "comments need SSE; NDJSON has no comment syntax",
}

MATRIX = Matrix(
    client="python client.py",
    upstream="mock",
    results=[
        run("drop-third-delta", "silent_corruption"),
        run("cut-before-terminal-reset", "detected", exit_code=1, error="ReadError: reset"),
        run(
            "one-event-per-read",
            "tolerated",
            integrity="intact",
            content="intact",
            text_matches=True,
        ),
        run("hang-after-last-event", "hung", exit_code=None, reason="a|b"),
        run(
            "resume-after-mid-utf8-cut",
            "not_exercised",
            exit_code=1,
            error="APIConnectionError: terminated",
            text_matches=None,
            printed=False,
            reason="the faults did not all fire as asked",
            fallbacks=[CUT_FELL_BACK, COMMENT_SKIPPED],
        ),
    ],
    fail_on=FAILING,
)


def test_run_workers_runs_every_thread_to_its_end_then_raises_the_first_error() -> None:
    lock = threading.Lock()
    names: list[str] = []
    errors: list[BaseException] = []

    def worker() -> None:
        name = threading.current_thread().name
        with lock:
            names.append(name)
            if name == "t-2":
                errors.append(ValueError(name))

    with pytest.raises(ValueError, match=r"^t-2$"):
        run_workers(worker, 3, "t", errors)
    assert sorted(names) == ["t-0", "t-1", "t-2"]
    names.clear()
    errors.clear()
    run_workers(lambda: names.append("ran"), 2, "t", errors)  # no error: returns
    assert names == ["ran", "ran"]


def test_the_json_shape() -> None:
    data = MATRIX.as_json()
    assert list(data) == [
        "client", "upstream", "results", "counts", "failed", "fail_on", "known"
    ]  # fmt: skip
    assert data["known"] == {}
    assert data["counts"] == {
        "silent_corruption": 1,
        "hung": 1,
        "detected": 1,
        "tolerated": 1,
        "not_exercised": 1,
    }
    assert data["failed"] is True
    first = data["results"][0]
    assert first == {
        "scenario": "drop-third-delta",
        "verdict": "silent_corruption",
        "integrity": "altered",
        "reason": "why drop-third-delta",
        "request_id": "r-2",
        "requests": ["r-1", "r-2"],
        "exit_code": 0,
        "duration_ms": 1500.0,
        "startup_ms": None,
        "text_matches": False,
        "error": None,
        "content": "altered",
        "fallbacks": [],
        "printed": True,
        "known": False,
    }
    assert data["results"][4]["fallbacks"] == [CUT_FELL_BACK, COMMENT_SKIPPED]
    passing = Matrix("c", "mock", MATRIX.results[1:3], FAILING)
    assert passing.as_json()["failed"] is False
    assert Matrix("c", "mock", MATRIX.results, frozenset()).failed is False
    no_request = run("x", NO_REQUEST)
    assert Matrix("c", "mock", [no_request], frozenset()).failed is True  # always fails


def test_the_markdown_table() -> None:
    text = render_markdown(MATRIX)
    assert "- gate (`--fail-on false_alarm,hung,silent_corruption`): **failed**" in text
    assert (
        "- not exercised: 1 scenario whose faults did not all fire as asked (the `faults not "
        "as asked` column says which and why): no evidence either way about the client"
    ) in text
    assert (
        "| scenario | verdict | faults not as asked | answer | text | requests | exit | ms "
        "| reason |"
    ) in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `drop-third-delta` | **silent_corruption** | - | altered | differs | r-1, r-2 | 0 "
        "| 1500 | why drop-third-delta |",
        "| `cut-before-terminal-reset` | detected | - | altered | differs | r-1, r-2 | 1 | 1500 "
        "| why cut-before-terminal-reset (ReadError: reset) |",
        "| `one-event-per-read` | tolerated | - | intact | same | r-1, r-2 | 0 | 1500 "
        "| why one-event-per-read |",
        "| `hang-after-last-event` | **hung** | - | altered | differs | r-1, r-2 | killed | 1500 "
        "| a\\|b |",
        "| `resume-after-mid-utf8-cut` | not_exercised | cut at boundary instead of mid_utf8: "
        "the event has no multi-byte UTF-8 character; comment skipped: comments need SSE; "
        "NDJSON has no comment syntax | altered | none | r-1, r-2 | 1 | 1500 "
        "| the faults did not all fire as asked (APIConnectionError: terminated) |",
    ]


def test_the_text_column_never_says_same_for_a_client_that_printed_nothing() -> None:
    """A client that raised and printed nothing (or only a newline) has no text."""
    assert run("x", "detected", exit_code=1, printed=False, text_matches=None).text_column == (
        "none"
    )
    assert run("x", "hung", exit_code=None, printed=False, text_matches=None).text_column == "-"
    # It printed part of the answer, then raised: its text is still compared.
    assert run("x", "detected", exit_code=1, text_matches=False).text_column == "differs"
    assert run("x", "tolerated", exit_code=0, text_matches=True).text_column == "same"
    raised = CommandResult(exit_code=1, stdout="\n", stderr="Error: x", duration_ms=1.0)
    assert raised.text is None
    assert CommandResult(exit_code=1, stdout="Hel", stderr="", duration_ms=1.0).text == "Hel"
    assert CommandResult(exit_code=0, stdout="\n", stderr="", duration_ms=1.0).text == "\n"


def test_junit_one_case_per_scenario_failing_on_the_gate() -> None:
    root = ET.fromstring(render_junit(MATRIX))
    (suite,) = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("5", "2")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [r.scenario for r in MATRIX.results]
    failed = {c.get("name"): c.find("failure") for c in cases}
    assert failed["drop-third-delta"] is not None
    assert failed["drop-third-delta"].get("message") == "silent_corruption: why drop-third-delta"
    assert failed["hang-after-last-event"] is not None
    assert failed["cut-before-terminal-reset"] is None and failed["one-event-per-read"] is None
    out = cases[1].find("system-out")
    assert out is not None and "error: ReadError: reset" in (out.text or "")
    # not_exercised: skipped, with what was asked, what happened and why.
    skipped = {c.get("name"): c.find("skipped") for c in cases}
    assert [name for name, s in skipped.items() if s is not None] == ["resume-after-mid-utf8-cut"]
    assert skipped["resume-after-mid-utf8-cut"].get("message") == (  # type: ignore[union-attr]
        "not_exercised: cut at boundary instead of mid_utf8: the event has no multi-byte "
        "UTF-8 character; comment skipped: comments need SSE; NDJSON has no comment syntax"
    )
    details = cases[4].find("system-out").text or ""  # type: ignore[union-attr]
    assert (
        "fault not as asked: cut at boundary instead of mid_utf8: the event has no multi-byte "
        "UTF-8 character (requested: mid_utf8; actual: boundary)\n"
        "fault not as asked: comment skipped: comments need SSE; NDJSON has no comment syntax "
        "(requested: comment; actual: skipped)\n"
    ) in details
    assert "text: none\n" in details


def test_a_command_that_outlives_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    outcome = run_command(
        f"sleep 30 & echo $! > {pid_file}; echo partial; wait", dict(os.environ), 0.5
    )
    assert time.monotonic() - started < 10
    assert outcome.exit_code is None and outcome.timed_out and outcome.error is None
    assert outcome.stdout == "partial\n"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        if "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break  # a zombie: dead, its parent (init) has yet to reap it
        time.sleep(0.01)
    alive = (
        Path(f"/proc/{child}").exists()
        and "Z" not in (Path(f"/proc/{child}/stat").read_text().split()[2])
    )
    assert not alive


def test_the_error_is_the_telling_line_of_stderr() -> None:
    outcome = run_command("echo noise >&2; echo 'Boom: it broke' >&2; exit 3", {}, 5)
    assert (outcome.exit_code, outcome.error) == (3, "Boom: it broke")
    assert run_command("exit 4", {}, 5).error == "exit status 4"
    assert run_command("echo -n text", {}, 5).error is None
    leaky = run_command("echo 'Error: GET https://u:pw@host/?key=sk-1 failed' >&2; exit 1", {}, 5)
    assert leaky.error == "Error: GET https://u:***@host/?key=*** failed"


PYTHON_TRACEBACK = """\
Traceback (most recent call last):
  File "client.py", line 9, in <module>
    main()
openai.APIConnectionError: Connection error.
"""
NODE_STACK = """\
file:///client.mjs:12
        throw err;
        ^

TypeError: terminated
    at Fetch.onAborted (node:internal/deps/undici/undici:11190:53)
    at process.processTicksAndRejections (node:internal/process/task_queues:95:5) {
  [cause]: SocketError: other side closed
}

Node.js v20.20.2
"""


@pytest.mark.parametrize(
    ("stderr", "line"),
    [
        (PYTHON_TRACEBACK, "openai.APIConnectionError: Connection error."),
        (NODE_STACK, "TypeError: terminated"),
        (
            "warning: slow\n\x1b[31mStreamError: no [DONE]\x1b[0m\ncleaning up\n",
            "StreamError: no [DONE]",
        ),
        ("just words\nmore words\n", "more words"),
        ("", None),
    ],
    ids=["python", "node", "coloured", "plain", "empty"],
)
def test_the_telling_line_is_the_exception(stderr: str, line: str | None) -> None:
    assert telling_line(stderr) == line


@pytest.fixture
def scenarios(tmp_path: Path) -> Path:
    """A few library scenarios, a stall no client outlives, and a 429 then OK."""
    directory = tmp_path / "scenarios"
    directory.mkdir()
    for name in ("one-event-per-read", "drop-third-delta", "cut-before-terminal-reset"):
        (directory / f"{name}.yaml").write_text((LIBRARY / f"{name}.yaml").read_text())
    (directory / "stall-forever.yaml").write_text(
        "description: the stream stops after two events, connection open\n"
        "faults:\n  - stall: {after: 2, forever: true}\n"
    )
    (directory / "limited-once.yaml").write_text(
        "requests: [1]\nfaults:\n  - status: {code: 429}\n"
    )
    return directory


def test_the_matrix_runs_the_client_under_each_scenario(scenarios: Path) -> None:
    matrix, lines = run_matrix(
        CLIENT,
        scenarios=[str(scenarios)],
        timeout=3.0,
        settings=FAST,
    )
    results = {r.scenario: r for r in matrix.results}
    assert list(results) == [
        "cut-before-terminal-reset",
        "drop-third-delta",
        "limited-once",
        "one-event-per-read",
        "stall-forever",
    ]
    verdicts = {name: r.verdict for name, r in results.items()}
    assert verdicts == {
        "cut-before-terminal-reset": "detected",
        "drop-third-delta": "silent_corruption",
        "limited-once": "detected",  # this client does not retry: it raises on the 429
        "one-event-per-read": "tolerated",
        "stall-forever": "hung",
    }
    hung = results["stall-forever"]
    assert hung.exit_code is None and hung.duration_ms >= 3000
    assert results["one-event-per-read"].text_matches is True
    assert results["drop-third-delta"].text_matches is False
    assert (results["cut-before-terminal-reset"].error or "").startswith(
        ("ReadError", "RemoteProtocolError")
    )
    for r in matrix.results:  # one request each, the verdict logged on it
        assert r.requests == [r.request_id]
        (line,) = [x for x in lines if x["event"] == "verdict" and x["request_id"] == r.request_id]
        assert line["verdict"] == r.verdict
    assert matrix.counts == {
        "silent_corruption": 1,
        "hung": 1,
        "detected": 2,
        "tolerated": 1,
    }
    assert matrix.failed


def test_a_retry_is_listed_and_the_verdict_is_about_the_last_request(
    scenarios: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MATRIX_RETRY", "1")
    (scenarios / "stall-forever.yaml").unlink()
    matrix, _ = run_matrix(
        CLIENT, scenarios=[str(scenarios / "limited-once.yaml")], timeout=10, settings=FAST
    )
    (limited,) = matrix.results
    assert len(limited.requests) == 2 and limited.request_id == limited.requests[-1]
    # The retry is not the scenario's (requests: [1]): no fault, but its answer is known.
    assert (limited.verdict, limited.content, limited.exit_code) == ("tolerated", "intact", 0)
    assert not matrix.failed


def test_faults_not_as_asked_are_not_exercised_and_shown_in_every_file(tmp_path: Path) -> None:
    """A cut that fell back to the boundary (no id line to cut after) and a fault that
    never applied (LF endings on a stream already LF): not_exercised, with what was
    asked, what happened and the log's reason, in matrix.md, matrix.json, junit.xml and
    report.html; a cut that seeks its character is exercised."""
    directory = tmp_path / "scenarios"
    directory.mkdir()
    (directory / "after-id-without-ids.yaml").write_text(
        "faults:\n  - cut: {after: 2, position: after_id, how: reset}\n"
    )
    (directory / "lf-already.yaml").write_text("faults:\n  - line_endings: {style: lf}\n")
    (directory / "seek-a-character.yaml").write_text(
        "faults:\n  - cut: {after: 2, position: mid_utf8, seek: true}\n"
    )
    # (the mock's whole answers: each has a multi-byte character within 16 tokens)
    settings = {"mock_interval": 0.001}
    matrix, lines = run_matrix(CLIENT, scenarios=[str(directory)], timeout=10, settings=settings)
    results = {r.scenario: r for r in matrix.results}
    no_id = {
        "fault": "cut",
        "position": 0,
        "requested": "after_id",
        "actual": "boundary",
        "reason": "the event has no id line",
    }
    lf = {
        "fault": "line_endings",
        "position": 0,
        "requested": None,
        "actual": "skipped",
        "reason": "every line already ended in lf",
    }
    assert [(r.verdict, r.fallbacks) for r in matrix.results] == [
        ("not_exercised", [no_id]),
        ("not_exercised", [lf]),
        ("detected", []),
    ]
    cut = results["after-id-without-ids"]
    assert cut.reason.startswith(
        "the scenario's faults did not all fire as asked (cut at boundary instead of after_id: "
        "the event has no id line): the run is no evidence about what the scenario names; "
        "the client would be detected (the client raised: the stream was not sound (cut "
    )
    assert (cut.exit_code, cut.text_column) == (1, "none")  # it raised, printed nothing
    assert results["lf-already"].reason == (
        "the scenario's faults never fired for this run (line_endings skipped: every line "
        "already ended in lf): it says nothing about the client, which would be tolerated "
        "(the client accepted the clean answer)"
    )
    seeking = results["seek-a-character"].request_id
    [seek] = [x for x in lines if x["event"] == "action" and x["request_id"] == seeking]
    assert seek["position"] == "mid_utf8" and "requested" not in seek  # inside é, ☕…
    assert not matrix.failed  # not_exercised fails no gate (unless --fail-on names it)
    assert Matrix("c", "mock", matrix.results, frozenset({"not_exercised"})).failed

    out = tmp_path / "out"
    write_outputs(matrix, lines, out)
    md = (out / "matrix.md").read_text()
    assert "- not exercised: 2 scenarios whose faults did not all fire as asked" in md
    assert (
        "| `after-id-without-ids` | not_exercised | cut at boundary instead of after_id: the "
        "event has no id line | incomplete | none |"
    ) in md
    assert (
        "| `lf-already` | not_exercised | line_endings skipped: every line already ended "
        "in lf | intact | same |"
    ) in md
    data = json.loads((out / "matrix.json").read_text())
    assert [r["fallbacks"] for r in data["results"]] == [[no_id], [lf], []]
    assert data["counts"] == {"detected": 1, "not_exercised": 2}
    cases = ET.fromstring((out / "junit.xml").read_text()).findall("testsuite/testcase")
    skipped = {c.get("name"): c.find("skipped") for c in cases}
    assert skipped["seek-a-character"] is None
    assert skipped["after-id-without-ids"].get("message") == (  # type: ignore[union-attr]
        "not_exercised: cut at boundary instead of after_id: the event has no id line"
    )
    assert skipped["lf-already"].get("message") == (  # type: ignore[union-attr]
        "not_exercised: line_endings skipped: every line already ended in lf"
    )
    html = (out / "report.html").read_text()
    assert "<b>cut: boundary instead of after_id</b>: the event has no id line" in html
    assert "<b>line_endings skipped</b>: every line already ended in lf" in html
    # Each request's section says it too, from its response_end line.
    assert "fell back <b>cut at boundary instead of after_id: the event has no id line</b>" in (
        html
    )
    assert "skipped <b>line_endings: every line already ended in lf</b>" in html


def test_a_command_that_makes_no_request(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text("faults: []\n")
    matrix, _ = run_matrix("echo 'ImportError: no openai' >&2; exit 1", scenarios=[str(one)])
    (result,) = matrix.results
    assert (result.verdict, result.request_id, result.requests) == (NO_REQUEST, None, [])
    ran = f"{result.duration_ms / 1000:.1f}s"
    assert result.reason == (
        f"the client made no request through the proxy; it exited with 1 after {ran}: "
        "ImportError: no openai"
    )
    assert (result.exit_code, result.startup_ms) == (1, None)
    assert matrix.failed


@pytest.mark.slow
def test_timeout_counts_from_the_first_request(scenarios: Path) -> None:
    """A client that takes 3 s to start (a slow import, simulated by a sleep before it
    runs) gets, at ``--timeout 1s``, the verdicts it gets at 30 s: its start-up has a
    clock of its own. Counted from the command's start, as before, the same timeout
    kills it before its first request."""
    slow = f"sleep 3; {CLIENT}"
    short, _ = run_matrix(
        slow, timeout=1.0, startup=10.0, settings=FAST, scenarios=[str(scenarios)], jobs=2
    )
    (scenarios / "stall-forever.yaml").unlink()  # (hung at any timeout, only later)
    long, _ = run_matrix(
        slow, timeout=30.0, startup=10.0, settings=FAST, scenarios=[str(scenarios)], jobs=2
    )
    verdicts = {r.scenario: r.verdict for r in short.results}
    assert verdicts == {r.scenario: r.verdict for r in long.results} | {"stall-forever": "hung"}
    assert verdicts == {
        "cut-before-terminal-reset": "detected",
        "drop-third-delta": "silent_corruption",
        "limited-once": "detected",
        "one-event-per-read": "tolerated",
        "stall-forever": "hung",
    }
    for r in short.results:
        assert r.startup_ms is not None and r.startup_ms >= 3000, r
    hung = next(r for r in short.results if r.scenario == "stall-forever")
    # Killed a second after its first request, not a second after it started.
    assert hung.exit_code is None and hung.duration_ms >= hung.startup_ms + 1000  # type: ignore[operator]
    assert hung.reason.endswith(
        f" (--timeout 1s from its first request, which it made "
        f"{hung.startup_ms / 1000:.1f}s after it started)"  # type: ignore[operator]
    )
    # From the command's start, the start-up eats the whole timeout: no request at all.
    early, _ = run_matrix(
        slow,
        timeout=1.0,
        startup=None,
        settings=FAST,
        scenarios=[str(scenarios / "one-event-per-read.yaml")],
    )
    (cut,) = early.results
    assert (cut.verdict, cut.exit_code, cut.startup_ms) == (NO_REQUEST, None, None)


def test_a_command_still_starting_after_its_allowance_is_no_request_not_hung(
    tmp_path: Path,
) -> None:
    one = tmp_path / "one.yaml"
    one.write_text("faults: []\n")
    started = time.monotonic()
    matrix, _ = run_matrix(f"sleep 30; {CLIENT}", scenarios=[str(one)], timeout=30, startup=1.0)
    assert time.monotonic() - started < 15  # killed at its allowance, its sleep with it
    (result,) = matrix.results
    assert (result.verdict, result.exit_code, result.startup_ms) == (NO_REQUEST, None, None)
    assert result.reason == (
        "the client made no request within its start-up allowance (--startup-timeout 1s): "
        f"still starting after {result.duration_ms / 1000:.1f}s, it was killed"
    )
    assert result.duration_ms >= 1000


def test_a_chatty_start_up_does_not_block_on_its_pipes(tmp_path: Path) -> None:
    """A client that writes a megabyte to stderr before its first request: its output is
    read while its first request is awaited (a full pipe would stop it)."""
    one = tmp_path / "one.yaml"
    one.write_text("faults: []\n")
    noisy = f"{sys.executable} -c \"import sys; sys.stderr.write('x' * 2**20)\"; {CLIENT}"
    matrix, _ = run_matrix(noisy, scenarios=[str(one)], timeout=10, startup=10, settings=FAST)
    (result,) = matrix.results
    assert (result.verdict, result.exit_code) == ("tolerated", 0)


@pytest.mark.parametrize(
    ("durations", "left", "jobs", "expected"),
    [
        ([], 10, 2, (0.0, 0.0)),
        ([2.0, 2.0, 2.0], 0, 2, (0.0, 0.0)),
        # Alike runs: one figure, the runs left shared by the jobs.
        ([2.0, 2.0, 2.0, 2.0], 10, 2, (10.0, 10.0)),
        # A time out among fast runs widens the range (the mean), never swings the low end.
        ([1.0, 1.0, 1.0, 21.0], 10, 2, (5.0, 30.0)),
        # A slow start-up among the first runs: the median holds the low end.
        ([30.0, 2.0, 2.0, 3.0, 2.0], 8, 1, (16.0, 62.4)),
        # Fewer runs left than jobs: one run's time.
        ([4.0, 6.0], 1, 4, (5.0, 6.0)),
    ],
)
def test_the_time_left_is_a_range_from_the_completed_runs(
    durations: list[float], left: int, jobs: int, expected: tuple[float, float]
) -> None:
    low, high = estimate_left(durations, left, jobs)
    assert (low, high) == pytest.approx(expected)


def test_the_time_left_is_said_as_a_range() -> None:
    assert show_left(40.0, 40.4) == "about 40s"
    assert show_left(69.0, 72.0) == "about 1m12s"  # (within a tenth: one figure)
    assert show_left(40.0, 70.0) == "about 40s to 1m10s"


def test_every_matrix_flag_has_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert isinstance(sub.choices, dict)
    matrix = sub.choices["matrix"]
    flags = {a.option_strings[0]: a.help for a in matrix._actions if a.option_strings}
    assert set(flags) >= {
        "--client",
        "--upstream",
        "--scenarios",
        "--out",
        "--timeout",
        "--startup-timeout",
        "--fail-on",
    }
    assert all(text and len(text) > 10 for text in flags.values()), flags
    assert matrix.parse_args(["--client", "x"]).timeout == 20.0
    assert matrix.parse_args(["--client", "x", "--timeout", "1500ms"]).timeout == 1.5
    assert matrix.parse_args(["--client", "x"]).startup_timeout == 120.0
    assert matrix.parse_args(["--client", "x", "--startup-timeout", "2m"]).startup_timeout == 120
    assert matrix.parse_args(["--client", "x", "--fail-on", "hung"]).fail_on == {"hung"}


def test_a_bad_fail_on_is_a_usage_error() -> None:
    result = subprocess.run(
        [*chaosproxy_argv(), "matrix", "--client", "x", "--fail-on", "hung,nope"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown verdict(s) nope" in result.stderr


@pytest.mark.slow
def test_the_command_writes_four_files_and_gates(scenarios: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for name in ("stall-forever", "one-event-per-read", "cut-before-terminal-reset"):
        (scenarios / f"{name}.yaml").unlink()
    args = [
        *chaosproxy_argv(),
        "matrix",
        "--client",
        CLIENT,
        "--scenarios",
        str(scenarios),
        "--out",
        str(out),
        "--timeout",
        "10s",
        "--mock-interval-ms",
        "1",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 1, result.stderr  # drop-third-delta: silent_corruption
    assert "] drop-third-delta silent_corruption (" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "junit.xml",
        "matrix.json",
        "matrix.md",
        "report.html",
    ]
    data = json.loads((out / "matrix.json").read_text())
    assert data["client"] == CLIENT and data["upstream"] == "mock" and data["failed"] is True
    assert {r["scenario"]: r["verdict"] for r in data["results"]} == {
        "drop-third-delta": "silent_corruption",
        "limited-once": "detected",
    }
    html = (out / "report.html").read_text()
    for r in data["results"]:
        assert r["request_id"] in html
        assert f'<td class="verdict verdict-{r["verdict"]}">{r["verdict"]}</td>' in html
    # Gate on something else: the same run passes.
    out2 = tmp_path / "out2"
    args[args.index(str(out))] = str(out2)
    passing = subprocess.run(
        [*args, "--fail-on", "hung"], capture_output=True, text=True, env=env, check=False
    )
    assert passing.returncode == 0, passing.stderr


def test_scenarios_are_built_in_names_or_files(scenarios: Path) -> None:
    names, paths = choose_scenarios(["drop-third-delta", str(scenarios / "limited-once.yaml")])
    assert (names, paths) == (
        ["drop-third-delta", "limited-once"],
        [str(scenarios / "limited-once.yaml")],
    )
    assert choose_scenarios([])[0] == sorted(choose_scenarios([])[0])  # the whole library
    with pytest.raises(MatrixInputError, match="did you mean 'drop-third-delta'"):
        choose_scenarios(["drop-third-deltas"])


def test_jobs_run_clients_at_once_each_with_a_proxy_of_its_own(scenarios: Path) -> None:
    """Four scenarios, two jobs: the same verdicts as one job, no request of one run in
    another's, and a proxy per job (the process tag is one, the ports two)."""
    (scenarios / "stall-forever.yaml").unlink()
    started: list[tuple[str, int]] = []
    ended: list[tuple[str, int, int]] = []
    progress = Progress(
        started=lambda name, running: started.append((name, running)),
        ended=lambda run, done, total, left: ended.append((run.scenario, done, total)),
    )
    one, _ = run_matrix(CLIENT, scenarios=[str(scenarios)], settings=FAST, jobs=1)
    two, lines = run_matrix(
        CLIENT, scenarios=[str(scenarios)], settings=FAST, jobs=2, progress=progress
    )
    assert [(r.scenario, r.verdict) for r in two.results] == [
        (r.scenario, r.verdict) for r in one.results
    ]
    assert sorted(name for name, _ in started) == sorted(r.scenario for r in two.results)
    assert max(running for _, running in started) == 2
    assert [(done, total) for _, done, total in ended] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    owner = {line["request_id"]: line["scenario"] for line in lines if line["event"] == "request"}
    for run in two.results:
        assert {owner[r] for r in run.requests} == {run.scenario}


def test_what_a_client_writes_is_text_in_the_matrix_files() -> None:
    nasty = Run(
        "x",
        "detected",
        integrity=None,
        reason="the client raised",
        request_id="r-1",
        requests=["r-1"],
        exit_code=1,
        error="\x1b[31mError\x1b[0m: <script>alert(1)</script> \x00\x07 & `tick`",
    )
    matrix = Matrix("python `client`.py <x>", "mock", [nasty], FAILING)
    junit = render_junit(matrix)
    ET.fromstring(junit)  # valid XML: no control character left
    assert "\x1b" not in junit and "\\x00\\x07" in junit
    markdown = render_markdown(matrix)
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    assert "- client: ``python `client`.py <x>``" in markdown
    assert printable("a\x1b[1mb\x00") == "ab\\x00"


# --------------------------------------------------------------------------- --known

GATE = REPO / "examples" / "gates" / "openai-chat-sdk.yaml"
OPENAI_PYTHON = f"{sys.executable} {REPO / 'examples' / 'clients' / 'openai_python.py'}"


def test_a_known_verdict_is_shown_and_fails_no_gate_another_verdict_still_does() -> None:
    known = {"drop-third-delta": frozenset({"silent_corruption"})}
    matrix = Matrix(MATRIX.client, MATRIX.upstream, MATRIX.results, FAILING, known)
    drop, _, _, hang, _ = matrix.results
    assert not matrix.failing(drop) and matrix.is_known(drop)
    assert matrix.failing(hang) and matrix.failed  # (hung: not known)
    table = render_markdown(matrix)
    assert "| `drop-third-delta` | silent_corruption (known) |" in table
    assert "- known: 1 verdict the client cannot avoid by design (`--known`)" in table
    shape = matrix.as_json()
    assert shape["known"] == {"drop-third-delta": ["silent_corruption"]}
    assert [r["known"] for r in shape["results"]] == [True, False, False, False, False]
    suite = ET.fromstring(render_junit(matrix))
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["drop-third-delta"].find("failure") is None
    assert "(known: --known)" in (cases["drop-third-delta"].findtext("system-out") or "")
    # Known as something else: the verdict met is judged as ever.
    other = Matrix(MATRIX.client, MATRIX.upstream, MATRIX.results, FAILING,
                   {"drop-third-delta": frozenset({"detected"})})  # fmt: skip
    assert other.failing(drop)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("drop-third-delta=nope", "unknown verdict(s) nope"),
        ("no-such-file.yaml", "no-such-file.yaml: expected SCENARIO=VERDICT or a YAML file"),
        ("drop-thrid-delta=silent_corruption", "--known drop-thrid-delta: no such scenario "
         "(did you mean 'drop-third-delta'?)"),
    ],
)  # fmt: skip
def test_a_bad_known_is_a_usage_error(value: str, said: str) -> None:
    result = subprocess.run(
        [*chaosproxy_argv(), "matrix", "--client", "true", "--scenarios", "drop-third-delta",
         "--known", value],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert said in result.stderr


def test_the_openai_gate_names_what_the_sdk_table_says_the_sdks_miss() -> None:
    """examples/gates/openai-chat-sdk.yaml is the OpenAI SDK columns of docs/verdicts.md's
    table: every silent_corruption of both, and nothing else."""
    from chaosproxy.tools.matrix import parse_known

    rows = (REPO / "docs" / "verdicts.md").read_text().split("<!-- verdicts:clients -->")[1]
    table = rows.split("<!-- /verdicts:clients -->")[0]
    missed: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and cells[0].startswith("`"):
            for verdict in (cells[1], cells[3]):  # openai (Python), openai (Node)
                if verdict == "silent_corruption":
                    missed.setdefault(cells[0].strip("`"), set()).add(verdict)
    assert {k: set(v) for k, v in parse_known(str(GATE)).items()} == missed


@pytest.mark.slow
def test_the_openai_sdk_passes_the_default_gate_with_its_known_verdicts(tmp_path: Path) -> None:
    """The official Python SDK's example client over the scenarios it cannot detect by
    design and one it detects: with the gate file, the default gate passes; without, it
    fails."""
    from chaosproxy.tools.matrix import parse_known

    known = parse_known(str(GATE))
    chosen = [*sorted(known), "cut-before-terminal-reset"]
    settings = {"mock_interval": 0.001}
    matrix, _ = run_matrix(OPENAI_PYTHON, scenarios=chosen, known=known, settings=settings,
                           jobs=2, timeout=20)  # fmt: skip
    verdicts = {r.scenario: (r.verdict, matrix.is_known(r)) for r in matrix.results}
    assert verdicts == {
        **{name: ("silent_corruption", True) for name in known},
        "cut-before-terminal-reset": ("detected", False),
    }
    assert not matrix.failed
    assert Matrix(matrix.client, matrix.upstream, matrix.results, FAILING).failed
