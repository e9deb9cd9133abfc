"""start_proxy's steps alone (chaosproxy/control/start.py): what a proxy starts from,
loaded and checked before anything starts (``_inputs``), and the frame log with its
observers (``_observed``). A proxy started whole is tests/control/test_api.py's and the
end to end tests'."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaosproxy.control.start import _inputs, _observed
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import ScenarioError, load_library, parse_scenario
from chaosproxy.server.config import Config
from chaosproxy.server.net import StartupError

MINE = "name: mine\nfaults: [{drop: {nth: 2}}]\n"


def test_the_scenarios_given_join_the_library_unless_told_not_to() -> None:
    mine = parse_scenario(MINE, "mine")
    inputs = _inputs(Config(), {"mine": mine}, (), library=True)
    assert inputs.scenarios == {**load_library(), "mine": mine}
    assert (inputs.fixtures, inputs.watched, inputs.given) == ((), None, {})
    alone = _inputs(Config(), {"mine": mine}, (), library=False)
    assert alone.scenarios == {"mine": mine}


def test_the_files_are_loaded_and_watched_with_what_was_given_apart(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(MINE)
    watched = Config().replace(scenarios=[str(tmp_path)], scenarios_poll=1.0)
    from_files = _inputs(watched, None, None, library=False)
    assert list(from_files.scenarios) == ["mine"] and from_files.watched is not None
    other = parse_scenario("name: other\nfaults: [{drop: {nth: 3}}]\n", "other")
    given = _inputs(watched, {**from_files.scenarios, "other": other}, (), library=False)
    assert given.given == {"other": other}  # the files' own are theirs: not kept apart
    (tmp_path / "bad.yaml").write_text("name: bad\nfaults: [nope]\n")
    with pytest.raises(ScenarioError, match="unknown fault 'nope'"):
        _inputs(watched, None, None, library=False)


def test_settings_that_cannot_go_together_are_refused(tmp_path: Path) -> None:
    record = str(tmp_path / "rec.yaml")
    with pytest.raises(StartupError, match=r"^--record-on-miss and --record-upstream go together"):
        _inputs(Config().replace(record_on_miss=record), {}, (), library=False)
    real = Config().replace(
        upstream=["http://127.0.0.1:9"], record_on_miss=record, record_upstream="http://x:1"
    )
    with pytest.raises(StartupError, match=r"^--record-on-miss records what the built-in mock"):
        _inputs(real, {}, (), library=False)
    with pytest.raises(
        StartupError,
        match=r"^--scenario 'mien' is not a loaded scenario \(did you mean 'mine'\?\); ",
    ):
        _inputs(
            Config().replace(scenario="mien"), {"mine": parse_scenario(MINE, "mine")}, (), False
        )


def test_the_log_is_observed_by_the_store_the_metrics_and_the_traces(tmp_path: Path) -> None:
    config = Config().replace(log=None, trace_dir=str(tmp_path / "traces"), replica_id="pod-a")
    observed = _observed(config, None)
    try:
        assert observed.owns_log and observed.traces is not None
        assert observed.observers == [observed.store, observed.metrics, observed.traces]
        assert (observed.log.replica, observed.metrics.replica) == ("pod-a", "pod-a")
        assert (tmp_path / "traces").is_dir()
    finally:
        observed.undo()
    given = FrameLog.open(None)
    kept = _observed(Config().replace(replica_id="pod-b"), given)
    assert kept.log is given and not kept.owns_log and kept.traces is None
    assert given.replica == "pod-b"
    kept.undo()
    given.close()


def test_a_log_or_trace_directory_that_cannot_be_opened(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "log.jsonl"
    with pytest.raises(StartupError, match=f"^cannot open log {missing}: "):
        _observed(Config().replace(log=str(missing)), None)
    afile = tmp_path / "a-file"
    afile.write_text("")
    with pytest.raises(StartupError, match=f"^cannot use --trace-dir {afile}: "):
        _observed(Config().replace(log=None, trace_dir=str(afile)), None)
