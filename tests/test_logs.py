"""The frame log itself: rendering (JSON or pretty), observers, redaction."""

from __future__ import annotations

import io
import os
import sys
import types
from typing import Any

import orjson
import pytest

from chaosproxy.logs import FrameLog, redact_path, redact_text


def _lines(log: FrameLog) -> list[bytes]:
    seen: list[bytes] = []
    log.add_listener(seen.append)
    return seen


def test_json_lines_carry_the_bound_request_and_render_to_bytes() -> None:
    out = io.BytesIO()
    log = FrameLog(out)
    rendered = _lines(log)
    bound = log.for_request(request_id="r-1", scenario="dup")
    bound.info("frame", seq=0, offset=0, size=5, t_ms=1.5)
    bound.info("response_end", outcome="completed", bytes=5)
    log.flush()
    parsed = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert parsed == [
        {"request_id": "r-1", "scenario": "dup", "seq": 0, "offset": 0, "size": 5, "t_ms": 1.5,
         "event": "frame"},
        {"request_id": "r-1", "scenario": "dup", "outcome": "completed", "bytes": 5,
         "event": "response_end"},
    ]  # fmt: skip
    assert b"".join(rendered) == out.getvalue()
    assert not log.pretty


def test_pretty_format_uses_the_console_renderer_and_keeps_observed_dicts_intact() -> None:
    out = io.BytesIO()
    log = FrameLog(out, fmt="pretty")
    observed: list[dict[str, Any]] = []
    log.add_observer(observed.append)
    log.for_request(request_id="r-9", scenario=None).info("frame", seq=3, size=12)
    text = out.getvalue().decode()
    assert log.pretty
    assert text.startswith("frame")
    assert "request_id=r-9" in text and "seq=3" in text and "size=12" in text
    assert text.endswith("\n") and text.count("\n") == 1
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    # ConsoleRenderer pops keys from what it renders; observers keep the whole line.
    assert observed == [
        {"request_id": "r-9", "scenario": None, "seq": 3, "size": 12, "event": "frame"}
    ]


def test_auto_format_is_pretty_on_a_terminal_and_json_on_a_file() -> None:
    master, slave = os.openpty()
    try:
        with os.fdopen(slave, "wb", closefd=True) as tty:
            assert FrameLog(tty, fmt="auto").pretty
        assert not FrameLog(io.BytesIO(), fmt="auto").pretty
        assert not FrameLog(None, fmt="auto").pretty
        assert FrameLog.open(None).pretty is False
    finally:
        os.close(master)


def test_log_dash_is_pretty_only_when_stdout_is_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    master, slave = os.openpty()
    try:
        with os.fdopen(slave, "wb", closefd=True) as tty:
            monkeypatch.setattr(sys, "stdout", types.SimpleNamespace(buffer=tty))
            assert FrameLog.open("-").pretty
            assert not FrameLog.open("-", fmt="json").pretty
        piped = io.BytesIO()
        monkeypatch.setattr(sys, "stdout", types.SimpleNamespace(buffer=piped))
        log = FrameLog.open("-")
        assert not log.pretty
        log.for_request(request_id="r-5", scenario=None).info("request")
        log.close()  # never closes stdout
        assert orjson.loads(piped.getvalue())["request_id"] == "r-5"
    finally:
        os.close(master)


def test_open_appends_json_to_a_file(tmp_path: Any) -> None:
    path = tmp_path / "frames.jsonl"
    path.write_bytes(b'{"old":1}\n')
    log = FrameLog.open(str(path))
    log.for_request(request_id="r-2", scenario=None).info("request", method="GET", path="/")
    log.close()
    lines = path.read_bytes().splitlines()
    assert orjson.loads(lines[0]) == {"old": 1}
    assert orjson.loads(lines[1])["request_id"] == "r-2"


def test_a_failing_observer_never_breaks_logging(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.BytesIO()
    log = FrameLog(out)
    calls: list[str] = []

    def broken(line: dict[str, Any]) -> None:
        raise OSError("disk full")

    log.add_observer(broken)
    log.add_observer(lambda line: calls.append(line["event"]))
    bound = log.for_request(request_id="r-3", scenario=None)
    bound.info("request")
    bound.info("response_end")
    assert calls == ["request", "response_end"]
    assert len(out.getvalue().splitlines()) == 2
    assert log.observer_errors == 2
    assert capsys.readouterr().err.count("disk full") == 1  # said once

    log.remove_observer(broken)
    log.remove_observer(broken)  # no error the second time
    bound.info("frame")
    assert log.observer_errors == 2


def test_error_texts_are_redacted_before_observers_and_rendering() -> None:
    out = io.BytesIO()
    log = FrameLog(out)
    observed: list[dict[str, Any]] = []
    log.add_observer(observed.append)
    secret_url = "http://up:1/v1beta/models/x:streamGenerateContent?alt=sse&key=AIzaSECRET"
    log.for_request(request_id="r-4", scenario=None).info(
        "response_end", error=f"400, message='bad', url='{secret_url}'"
    )
    assert b"AIzaSECRET" not in out.getvalue()
    assert observed[0]["error"] == (
        "400, message='bad', "
        "url='http://up:1/v1beta/models/x:streamGenerateContent?alt=sse&key=***'"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET /x?key=abc&alt=sse", "GET /x?key=***&alt=sse"),
        ("url='http://h/p?API_KEY=abc'", "url='http://h/p?API_KEY=***'"),
        ("/p?a=1;token=t0k3n#frag", "/p?a=1;token=***#frag"),
        ("Authorization: Bearer sk-live-123.abc", "Authorization: Bearer ***"),
        ("basic dXNlcjpwYXNz", "basic ***"),
        ("monkey=banana ?keyboard=1", "monkey=banana ?keyboard=1"),
        ("nothing to hide", "nothing to hide"),
    ],
)
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_redact_path_masks_credential_parameters_only() -> None:
    assert redact_path("/v1beta/m:streamGenerateContent?alt=sse&key=AIza") == (
        "/v1beta/m:streamGenerateContent?alt=sse&key=***"
    )
    assert redact_path("/v1/chat/completions?x=1") == "/v1/chat/completions?x=1"
    assert redact_path("/plain") == "/plain"
