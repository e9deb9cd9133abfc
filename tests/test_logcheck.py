"""The suite's check of every frame-log line against the shipped schema
(tests/support/logcheck.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from chaosproxy.observe.logs import COPY_ENV, FrameLog
from tests.support.log_lines import FRAME
from tests.support.logcheck import LineValidator, invalid_lines

REPO = Path(__file__).resolve().parents[1]
#: The inner run loads the check alone (not the package's own pytest plugin: not needed).
PLUGINS = ("-p", "tests.support.logcheck", "-p", "no:randomly", "-p", "no:chaosproxy")


def test_a_frame_log_copies_every_line_to_the_directory_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(COPY_ENV, str(tmp_path))
    log = FrameLog(None, level="off")  # (the copy is made whatever the level)
    bound = log.for_request(request_id="r-1", scenario=None)
    bound.info("request", seed=1, method="GET", path="/")
    bound.frame({"seq": 0, "offset": 0, "size": 5, "t_ms": 1.5})
    (copy,) = tmp_path.glob("*.jsonl")
    lines = [orjson.loads(line) for line in copy.read_bytes().splitlines()]
    assert [(line["event"], line["request_id"]) for line in lines] == [
        ("request", "r-1"),
        ("frame", "r-1"),
    ]
    assert list(invalid_lines(tmp_path)) == []


def test_the_validator_names_the_key_at_fault() -> None:
    check = LineValidator()
    assert check.reason(FRAME) is None
    assert check.reason({**FRAME, "size": "5"}) == "frame: size: '5' is not of type 'integer'"
    missing = {k: v for k, v in FRAME.items() if k != "offset"}
    assert check.reason(missing) == "frame: the line: 'offset' is a required property"
    assert check.reason({**FRAME, "extra": 1}) == (
        "frame: the line: Additional properties are not allowed ('extra' was unexpected)"
    )
    assert check.reason({**FRAME, "ts": "yesterday"}) == (
        r"frame: ts: 'yesterday' does not match '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:"
        r"\\d{2}\\.\\d{3}Z$'"
    )
    assert check.reason({**FRAME, "event": "nonsense"}) is not None


def test_invalid_lines_are_found_in_order_with_their_place(tmp_path: Path) -> None:
    good = orjson.dumps(FRAME)
    bad = orjson.dumps({**FRAME, "seq": -1.5})
    (tmp_path / "1.jsonl").write_bytes(b"\n".join([good, bad, b"{not json", good]) + b"\n")
    found = list(invalid_lines(tmp_path))
    assert [(i.path.name, i.line_number) for i in found] == [("1.jsonl", 2), ("1.jsonl", 3)]
    assert found[0].reason == "frame: seq: -1.5 is not of type 'integer'"
    assert found[1].reason.startswith("not JSON: ")


@pytest.mark.parametrize("workers", ["0", "2"], ids=["serial", "xdist"])
def test_a_run_that_logs_an_invalid_line_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    """Under pytest-xdist too: the workers' lines are checked by the controller."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # (this checkout's chaosproxy and tests)
    pytester.makepyfile(
        test_lines="""
        from chaosproxy.observe.logs import FrameLog

        def test_a_valid_line():
            log = FrameLog(None).for_request(request_id="r-1", scenario=None)
            log.frame({"seq": 0, "offset": 0, "size": 5, "t_ms": 1.5})

        def test_a_frame_line_without_its_offset():
            log = FrameLog(None).for_request(request_id="r-2", scenario=None)
            log.info("frame", seq=0, size=5, t_ms=1.5)
        """
    )
    result = pytester.runpytest_subprocess(*PLUGINS, "-n", workers)
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "logcheck: frame-log line *.jsonl:* does not validate against "
            "chaosproxy/schemas/log.schema.json: frame: the line: 'offset' is a required "
            "property",
            '  {"request_id":"r-2",*',
        ]
    )


def test_a_run_whose_lines_all_validate_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(
        test_lines="""
        from chaosproxy.observe.logs import FrameLog

        def test_a_valid_line():
            log = FrameLog(None).for_request(request_id="r-1", scenario=None)
            log.frame({"seq": 0, "offset": 0, "size": 5, "t_ms": 1.5})
        """
    )
    result = pytester.runpytest_subprocess(*PLUGINS)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["logcheck: 1 frame-log lines valid"])
