"""``chaosproxy explore``: the search (runs drawn, failures told apart, shrunk, confirmed)
with a stand-in runner whose "client" is a function of the faults, so every outcome is
exact; then live, with tests/clients/responses_client.py: a client that loses a delta
when two arrive in one read, one that appends after a second terminal event, and a
careful one that gets everything right."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaosproxy.core.verdict import FAILING
from chaosproxy.tools.explore import (
    CLEAN,
    Budget,
    CommandRunner,
    Exploration,
    ExploreError,
    SerialRunner,
    Settings,
    Trial,
    TrialResult,
    as_json,
    describe_faults,
    explore,
    make_trial,
    parse_budget,
    render_summary,
    write_outputs,
)
from chaosproxy.tools.fault_space import Shape
from tests.support.cli import run_cli
from tests.support.forks import ForkServer

#: The stream the stand-in's clean run shows: the mock's OpenAI Chat answer.
CHAT = Shape("openai-chat", "sse", 27, {"start": 1, "delta": 24, "other": 1, "terminal": 1}, 6704)

Faults = list[dict[str, Any]]


def clean_lines(shape: Shape, request_id: str = "r-0") -> list[dict[str, Any]]:
    """The frame-log lines of a clean run of ``shape``'s stream."""
    kinds = [k for k, n in shape.kinds.items() for _ in range(n)]
    lines: list[dict[str, Any]] = [{"event": "request", "request_id": request_id}]
    lines += [
        {"event": "frame", "request_id": request_id, "events": [i], "kinds": [kind]}
        for i, kind in enumerate(kinds, start=1)
    ]
    lines.append(
        {
            "event": "response_end",
            "request_id": request_id,
            "provider": shape.provider,
            "format": shape.format,
            "events_in": shape.events,
            "bytes": shape.bytes,
        }
    )
    return lines


def faults_of(trial: Trial) -> Faults:
    faults: Faults = yaml.safe_load(trial.text)["faults"]
    return faults


class StandIn(SerialRunner):
    """A runner whose client is ``judge``: faults in, (verdict, content, defect) out;
    ``jobs`` is what it says it has (it runs one trial at a time)."""

    def __init__(
        self,
        judge: Callable[[Faults], tuple[str, str | None, str | None]],
        *,
        jobs: int = 1,
        clean: str = "tolerated",
        shape: Shape = CHAT,
    ) -> None:
        self.judge = judge
        self._jobs = jobs
        self.clean = clean
        self.shape = shape
        #: The name of every trial run, in order.
        self.ran: list[str] = []

    @property
    def jobs(self) -> int:
        return self._jobs

    def one(self, trial: Trial) -> TrialResult:
        self.ran.append(trial.name)
        if trial.name == CLEAN:
            return TrialResult(
                self.clean,
                "clean",
                content="intact",
                request_id="r-0",
                requests=["r-0"],
                lines=clean_lines(self.shape),
            )
        verdict, content, defect = self.judge(faults_of(trial))
        outcome = TrialResult(verdict, f"{verdict}: {defect}", content=content, defect=defect)
        outcome.request_id = f"r-{len(self.ran)}"
        outcome.requests = [outcome.request_id]
        return outcome


def has(faults: Faults, name: str, **params: Any) -> bool:
    return any(name in f and all(f[name].get(k) == v for k, v in params.items()) for f in faults)


def sdk_like(faults: Faults) -> tuple[str, str | None, str | None]:
    """Accepts a gap silently; hangs on a stall for ever; raises on a comment after an
    event with an id (as the openai SDK does: a false alarm); else gets it right."""
    if has(faults, "drop", kind="delta"):
        return "silent_corruption", "altered", "a gap in the events"
    if any(f.get("stall", {}).get("forever") for f in faults):
        return "hung", "incomplete", "held open for ever before the terminal event"
    if has(faults, "ids") and has(faults, "comment"):
        return "false_alarm", "incomplete", None
    return "tolerated", "intact", None


def test_explore_finds_each_failure_and_shrinks_it() -> None:
    lines: list[str] = []
    exploration = explore(
        StandIn(sdk_like), Settings(seed=2, budget=Budget(runs=100)), log=lines.append
    )
    assert len(exploration.runs) == 100
    assert [(f.name, f.failure, f.faults) for f in exploration.found] == [
        (
            "hung-stall",
            ("hung", "incomplete", "held open for ever before the terminal event"),
            [{"stall": {"after": 1, "forever": True}}],
        ),
        (
            "silent-corruption-drop",
            ("silent_corruption", "altered", "a gap in the events"),
            [{"drop": {"kind": "delta", "nth": 1}}],
        ),
        (
            "false-alarm-comment-ids",
            ("false_alarm", "incomplete", None),
            [{"comment": {}}, {"ids": {}}],  # both: either alone is tolerated
        ),
    ]
    for found in exploration.found:
        # Every run that ended in this failure, and only those, found it.
        assert found.found_by == [
            run.run for run in exploration.runs if run.outcome.failure == found.failure
        ]
        assert found.shrunk_from in found.found_by and found.reproduced
        first = exploration.runs[found.shrunk_from - 1]
        assert first.faults == found.shrunk_from_faults
        assert found.seed == first.seed  # the run's seed stays the scenario's
    assert lines[0] == (
        "chaosproxy explore: seed 2, 100 runs; the clean run: openai-chat, sse, 27 events, "
        "6704 bytes"
    )
    assert any(line.startswith("[100/100] run ") for line in lines)
    assert any(line.startswith("confirmed silent-corruption-drop: drop") for line in lines)


def test_the_same_seed_explores_identically_and_jobs_change_nothing() -> None:
    settings = Settings(seed=9, budget=Budget(runs=60))
    one = as_json(explore(StandIn(sdk_like), settings), FAILING)
    again = as_json(explore(StandIn(sdk_like), settings), FAILING)
    three = as_json(explore(StandIn(sdk_like, jobs=3), settings), FAILING)
    for data in (one, again, three):
        data.pop("seconds")
        for found in data["found"]:  # the confirming run's: more runs were made with 3 jobs
            found.pop("request_id")
    assert one == again == three
    other = as_json(explore(StandIn(sdk_like), Settings(seed=10, budget=Budget(runs=60))), FAILING)
    assert other["runs"] != one["runs"]


def test_a_run_is_replayed_from_its_seed_and_number() -> None:
    whole = explore(StandIn(sdk_like), Settings(seed=2, budget=Budget(runs=100)))
    drop = whole.found[1]
    runner = StandIn(sdk_like)
    again = explore(runner, Settings(seed=2, replay=(drop.shrunk_from, 7)))
    assert [r.run for r in again.runs] == [drop.shrunk_from, 7]
    assert [r.faults for r in again.runs] == [
        whole.runs[drop.shrunk_from - 1].faults,
        whole.runs[6].faults,
    ]
    assert [(f.faults, f.found_by) for f in again.found] == [(drop.faults, [drop.shrunk_from])]
    assert runner.ran[:3] == [CLEAN, f"explore-{drop.shrunk_from}", "explore-7"]


def test_a_time_budget_draws_runs_until_it_is_spent() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 0.5  # every look at the clock: half a second on
        return now[0]

    exploration = explore(
        StandIn(lambda f: ("tolerated", "intact", None)),
        Settings(seed=2, budget=Budget(seconds=10)),
        clock=clock,
    )
    assert 5 <= len(exploration.runs) < 20
    assert [r.run for r in exploration.runs] == list(range(1, len(exploration.runs) + 1))
    assert exploration.found == []


def test_a_client_that_fails_a_clean_stream_cannot_be_explored() -> None:
    with pytest.raises(ExploreError, match=r"the client's clean run \(no faults\) was detected"):
        explore(StandIn(sdk_like, clean="detected"), Settings(seed=1))
    with pytest.raises(ExploreError, match="no framed stream"):
        explore(StandIn(sdk_like, shape=Shape("generic", "raw", 0, {}, 0)), Settings(seed=1))
    with pytest.raises(ExploreError, match="--faults: not in the space: status"):
        explore(StandIn(sdk_like), Settings(seed=1, faults=("status",)))


def test_a_failure_that_does_not_come_back_is_flaky() -> None:
    seen: set[str] = set()

    def once(faults: Faults) -> tuple[str, str | None, str | None]:
        key = json.dumps(faults, sort_keys=True)
        first = key not in seen
        seen.add(key)
        if first and has(faults, "drop", kind="delta"):
            return "silent_corruption", "altered", "a gap in the events"
        return "tolerated", "intact", None

    exploration = explore(StandIn(once), Settings(seed=1, budget=Budget(runs=40)))
    (found,) = exploration.found
    assert not found.reproduced and exploration.flaky == [found] and exploration.reproduced == []
    assert exploration.failed(FAILING)  # seen once is once too many


def test_the_files(tmp_path: Path) -> None:
    exploration = explore(StandIn(sdk_like), Settings(seed=2, budget=Budget(runs=100), client="c"))
    out = tmp_path / "out"
    (out / "found").mkdir(parents=True)
    (out / "found" / "older.yaml").write_text("faults: []\n")
    written = write_outputs(exploration, out, FAILING)
    assert sorted(p.relative_to(out).as_posix() for p in written) == [
        "explore.json",
        "explore.md",
        "found/false-alarm-comment-ids.yaml",
        "found/hung-stall.yaml",
        "found/silent-corruption-drop.yaml",
        "report.html",
    ]
    assert not (out / "found" / "older.yaml").exists()
    text = (out / "found" / "silent-corruption-drop.yaml").read_text()
    first = exploration.found[1]
    assert text == first.text
    assert text.splitlines()[:5] == [
        "# silent_corruption: silent_corruption: a gap in the events",
        f"# found by chaosproxy explore --seed 2, run {first.shrunk_from} (its seed "
        f"{first.seed}); 1 run of 100 runs ended so",
        f"# shrunk from {describe_faults(first.shrunk_from_faults)}",
        f"# in 1 run of the client ({first.shrink_steps} steps)",
        "# check: chaosproxy matrix --client c --scenarios FILE",
    ]
    validate = run_cli("validate", str(out / "found"))
    assert validate.returncode == 0 and validate.stdout.strip() == "3 scenarios OK"
    data = json.loads((out / "explore.json").read_text())
    assert list(data) == [
        "client",
        "upstream",
        "seed",
        "budget",
        "replay",
        "faults",
        "shape",
        "clean",
        "runs",
        "found",
        "counts",
        "failed",
        "fail_on",
        "seconds",
    ]
    assert data["budget"] == {"runs": 100} and data["failed"] is True
    assert data["found"][1]["file"] == "found/silent-corruption-drop.yaml"
    assert data["found"][1]["faults"] == [{"drop": {"kind": "delta", "nth": 1}}]
    assert sum(data["counts"].values()) == len(data["runs"]) == 100
    summary = (out / "explore.md").read_text()
    assert summary == render_summary(exploration, FAILING)
    assert (
        f"| 2 | silent_corruption | silent_corruption: a gap in the events | "
        f"drop {{kind: delta, nth: 1}} | - | {len(first.found_by)} | run {first.shrunk_from} "
        f"(1 run) | found/silent-corruption-drop.yaml |"  # (one run, not "1 runs")
    ) in summary
    assert first.shrink_runs == 1
    assert "- seed 2; 100 runs in " in summary  # (not "100 runs (100 runs)")
    assert "- gate (`--fail-on false_alarm,hung,silent_corruption`): **failed**" in summary
    html = (out / "report.html").read_text()
    assert "<h1>chaosproxy explore: the minimal runs</h1>" in html
    assert all(f.name in html for f in exploration.found)
    assert not exploration.failed({"detected"})


class Unexercised(StandIn):
    """A stand-in whose every run's ``comment`` is skipped (as on NDJSON): its runs'
    lines say so, and its verdict is what the proxy then gives, not_exercised."""

    def one(self, trial: Trial) -> TrialResult:
        outcome = super().one(trial)
        if trial.name == CLEAN or not has(faults_of(trial), "comment"):
            return outcome
        if outcome.verdict not in ("tolerated", "detected"):
            return outcome  # a failure stands, whatever the faults did
        rid = outcome.request_id or ""
        skipped = {"fault": "comment", "position": 0, "reason": "NDJSON has no comment syntax"}
        outcome.verdict, outcome.reason = "not_exercised", "comment skipped"
        outcome.lines = [
            {"event": "request", "request_id": rid},
            {
                "event": "response_end",
                "request_id": rid,
                "faults_applied": {},
                "faults_skipped": [skipped],
            },
        ]
        return outcome


def test_runs_whose_faults_did_not_fire_as_asked_are_counted_with_their_reasons(
    tmp_path: Path,
) -> None:
    settings = Settings(seed=2, budget=Budget(runs=60), faults=("comment", "drop"), client="c")
    exploration = explore(Unexercised(sdk_like), settings)
    unexercised = [r for r in exploration.runs if r.outcome.verdict == "not_exercised"]
    assert unexercised  # (the space draws comment alone in some runs)
    summary = render_summary(exploration, FAILING)
    assert (
        f"- not exercised: {len(unexercised)} runs whose faults did not all fire as asked "
        "(no evidence either way); most often: comment skipped: NDJSON has no comment syntax "
        f"({len(unexercised)})"
    ) in summary
    write_outputs(exploration, tmp_path, FAILING)
    data = json.loads((tmp_path / "explore.json").read_text())
    by_run = {r["run"]: r for r in data["runs"]}
    for run in unexercised:
        assert by_run[run.run]["fallbacks"] == [
            {
                "fault": "comment",
                "position": 0,
                "requested": None,
                "actual": "skipped",
                "reason": "NDJSON has no comment syntax",
            }
        ]
    assert all(r["fallbacks"] == [] for r in data["runs"] if r["verdict"] != "not_exercised")


def test_budgets() -> None:
    assert parse_budget("200") == Budget(runs=200)
    assert parse_budget("5m") == Budget(seconds=300.0)
    assert parse_budget("90s") == Budget(seconds=90.0)
    for bad in ("0", "-3", "1h", "soon", "0s"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"budget|expected"):
            parse_budget(bad)
    assert str(Budget(runs=3)) == "3 runs" and str(Budget(seconds=150)) == "2m30s"


def test_bad_flags_are_usage_errors() -> None:
    bad = run_cli("explore", "--client", "x", "--faults", "drop,status")
    assert bad.returncode == 2 and "not in the space: status" in bad.stderr
    budget = run_cli("explore", "--client", "x", "--budget", "tomorrow")
    assert budget.returncode == 2 and "expected a number of runs" in budget.stderr
    replay = run_cli("explore", "--client", "x", "--replay", "3")
    assert replay.returncode == 2
    assert replay.stderr.strip() == (
        "chaosproxy: error: explore: --replay needs the --seed of the exploration it replays"
    )
    runs = run_cli("explore", "--client", "x", "--seed", "1", "--replay", "3,x")
    assert runs.returncode == 2 and "expected run numbers from 1" in runs.stderr


# ---------------------------------------------------------------------------- live


@pytest.fixture
def client(python_clients: ForkServer) -> Callable[[str], str]:
    """The test client's command in a mode (forked from tests/clients/zygote.py's server)."""
    return lambda mode: python_clients.command("-m", "tests.clients.responses_client", mode)


def live(client: Callable[[str], str], mode: str, settings: Settings) -> Exploration:
    with CommandRunner(client(mode), jobs=2, timeout=15) as runner:
        return explore(runner, settings)


@pytest.mark.slow
def test_a_client_that_loses_a_delta_of_a_merged_read_is_found(
    monkeypatch: pytest.MonkeyPatch, client: Callable[[str], str]
) -> None:
    """The bug shows only when two deltas arrive in one read: among drops, duplicates
    and cuts (which this client notices), explore finds it within eight runs and
    shrinks it to the one fault that merges writes, at its simplest."""
    monkeypatch.setenv("RESPONSES_INTERVAL_MS", "40")  # never two events a read by chance
    exploration = live(
        client,
        "merged-reads",
        Settings(
            seed=4,
            budget=Budget(runs=8),
            faults=("coalesce", "comment", "drop", "duplicate", "cut"),
        ),
    )
    assert [(f.verdict, f.faults) for f in exploration.reproduced] == [
        ("silent_corruption", [{"coalesce": {"events": 2}}])
    ]
    (found,) = exploration.reproduced
    assert found.failure[1] == "intact"  # it was sent the clean answer, and lost a piece
    assert len(found.found_by) >= 2


@pytest.mark.slow
def test_a_client_that_appends_after_a_second_terminal_is_found_the_same_way_twice(
    tmp_path: Path, client: Callable[[str], str]
) -> None:
    """Through the command line: the second terminal event (a duplicated one) is found
    and shrunk to one fault; the same seed with one job instead of two finds and
    shrinks exactly the same; and the matrix, run on the scenario written, gives the
    same verdict."""
    args = [
        "explore",
        "--client",
        client("second-terminal"),
        "--budget",
        "8",
        "--seed",
        "4",
        "--faults",
        "duplicate,drop,reorder,rechunk,comment",
        "--timeout",
        "15s",
    ]
    first = run_cli(*args, "--out", str(tmp_path / "a"), "--jobs", "2", timeout=300)
    assert first.returncode == 1, first.stderr
    found = sorted((tmp_path / "a" / "found").iterdir())
    assert [p.name for p in found] == ["silent-corruption-duplicate.yaml"]
    scenario = yaml.safe_load(found[0].read_text())
    assert scenario["faults"] == [{"duplicate": {"kind": "terminal", "nth": 1}}]
    assert "| 1 | silent_corruption |" in first.stdout
    assert "] run 8 " in first.stderr and "confirmed silent-corruption-duplicate" in first.stderr

    second = run_cli(*args, "--out", str(tmp_path / "b"), "--jobs", "1", timeout=300)
    assert second.returncode == 1, second.stderr
    assert (tmp_path / "b" / "found" / found[0].name).read_text() == found[0].read_text()
    a, b = (json.loads((tmp_path / d / "explore.json").read_text()) for d in "ab")
    for data in (a, b):
        data.pop("seconds")
        data["clean"].pop("request_id")
        for item in data["runs"] + data["found"]:
            item.pop("duration_ms", None)
            item.pop("request_id", None)
            item.pop("requests", None)
    assert a == b

    matrix = run_cli(
        "matrix",
        "--client",
        client("second-terminal"),
        "--scenarios",
        str(tmp_path / "a" / "found"),
        "--out",
        str(tmp_path / "matrix"),
    )
    assert matrix.returncode == 1, matrix.stderr
    results = json.loads((tmp_path / "matrix" / "matrix.json").read_text())["results"]
    assert [(r["scenario"], r["verdict"]) for r in results] == [
        ("silent-corruption-duplicate", "silent_corruption")
    ]


@pytest.mark.slow
def test_a_careful_client_gives_nothing_found(client: Callable[[str], str]) -> None:
    """The careful client notices every fault of the whole space that changes its
    answer, and takes the others in its stride: nothing is found."""
    exploration = live(client, "careful", Settings(seed=7, budget=Budget(runs=30)))
    assert len(exploration.runs) == 30
    counts = exploration.counts()
    assert exploration.found == [], [(f.failure, f.faults) for f in exploration.found]
    assert set(counts) <= {"detected", "tolerated", "not_exercised"}
    assert counts.get("detected", 0) >= 5 and counts.get("tolerated", 0) >= 5


@pytest.mark.slow
def test_explore_counts_its_timeout_from_the_first_request(client: Callable[[str], str]) -> None:
    """A client that takes 2 s to start gets its verdict at ``--timeout 1s``: the start-up
    has its own allowance; counted from its start, the same timeout kills it first."""
    slow = f"sleep 2; {client('careful')}"
    trials = [
        make_trial("clean", [], seed=1),
        make_trial("dropped", [{"drop": {"kind": "delta", "nth": 2}}], seed=1),
    ]
    with CommandRunner(slow, jobs=2, timeout=1.0, startup=10.0) as runner:
        results = runner.run(trials)
    assert [r.verdict for r in results] == ["tolerated", "detected"]
    for result in results:
        assert result.run is not None and (result.run.startup_ms or 0) >= 2000
    with CommandRunner(slow, jobs=1, timeout=1.0, startup=None) as runner:
        (early,) = runner.run(trials[:1])
    assert early.verdict == "no_request"
