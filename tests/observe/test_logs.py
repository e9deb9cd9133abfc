"""The frame log itself: rendering (JSON or pretty), observers, redaction."""

from __future__ import annotations

import io
import os
import re
import sys
import time
import types
from typing import Any

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from chaosproxy.observe import logs
from chaosproxy.observe.logs import FrameLog, redact_path, redact_text, redact_url
from chaosproxy.observe.metrics import Metrics
from chaosproxy.observe.store import RequestStore
from tests.support.cli import chaosproxy_argv

#: The least a line of each kind carries (the shipped schema requires it:
#: tests/support/logcheck.py).
REQUEST = {"seed": 1, "method": "GET", "path": "/"}
FRAME = {"seq": 0, "offset": 0, "size": 1, "t_ms": 0.0}
RESPONSE_END = {"outcome": "completed", "status": 200, "bytes": 0, "frames": 0, "duration_ms": 0.0}

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


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
    bound.info("response_end", outcome="completed", status=200, bytes=5, frames=1, duration_ms=2.0)
    log.flush()
    parsed = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert all(TS.fullmatch(line.pop("ts")) for line in parsed)
    assert parsed == [
        {"request_id": "r-1", "scenario": "dup", "seq": 0, "offset": 0, "size": 5, "t_ms": 1.5,
         "event": "frame"},
        {"request_id": "r-1", "scenario": "dup", "outcome": "completed", "status": 200,
         "bytes": 5, "frames": 1, "duration_ms": 2.0, "event": "response_end"},
    ]  # fmt: skip
    assert b"".join(rendered) == out.getvalue()
    assert not log.pretty


def test_pretty_format_uses_the_console_renderer_and_keeps_observed_dicts_intact() -> None:
    out = io.BytesIO()
    log = FrameLog(out, fmt="pretty")
    observed: list[dict[str, Any]] = []
    log.add_observer(observed.append)
    log.for_request(request_id="r-9", scenario=None).info(
        "frame", seq=3, offset=0, size=12, t_ms=0.5
    )
    text = out.getvalue().decode()
    assert log.pretty
    assert text.startswith("frame")
    assert "request_id=r-9" in text and "seq=3" in text and "size=12" in text
    assert text.endswith("\n") and text.count("\n") == 1
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    # ConsoleRenderer pops keys from what it renders; observers keep the whole line.
    assert TS.fullmatch(observed[0].pop("ts"))
    assert observed == [
        {
            "request_id": "r-9",
            "scenario": None,
            "seq": 3,
            "offset": 0,
            "size": 12,
            "t_ms": 0.5,
            "event": "frame",
        }
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
        log.for_request(request_id="r-5", scenario=None).info("request", **REQUEST)
        log.close()  # never closes stdout
        assert orjson.loads(piped.getvalue())["request_id"] == "r-5"
    finally:
        os.close(master)


def test_open_appends_json_to_a_file(tmp_path: Any) -> None:
    path = tmp_path / "frames.jsonl"
    path.write_bytes(b'{"old":1}\n')
    log = FrameLog.open(str(path))
    log.for_request(request_id="r-2", scenario=None).info("request", **REQUEST)
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
    bound.info("request", **REQUEST)
    bound.info("response_end", **RESPONSE_END)
    assert calls == ["request", "response_end"]
    assert len(out.getvalue().splitlines()) == 2
    assert log.observer_errors == 2
    assert capsys.readouterr().err.count("disk full") == 1  # said once

    log.remove_observer(broken)
    log.remove_observer(broken)  # no error the second time
    bound.info("frame", **FRAME)
    assert log.observer_errors == 2


def test_an_observer_object_sees_every_line_until_removed() -> None:
    """An object with ``__call__`` (as the admin store and the metrics are) is called
    through its bound method on the frame lines' short way; removing it by the object
    added stops both ways."""

    class Seen:
        def __init__(self) -> None:
            self.events: list[str] = []

        def __call__(self, line: dict[str, Any]) -> None:
            self.events.append(line["event"])

    log = FrameLog(io.BytesIO())
    seen, other = Seen(), Seen()
    log.add_observer(seen)
    log.add_observer(other)
    bound = log.for_request(request_id="r-4", scenario=None)
    bound.info("request", **REQUEST)
    bound.frame({**FRAME, "seq": 0, "size": 1})
    log.remove_observer(seen)
    bound.frame({**FRAME, "seq": 1, "size": 1})
    bound.info("response_end", **RESPONSE_END)
    assert seen.events == ["request", "frame"]
    assert other.events == ["request", "frame", "frame", "response_end"]


def test_a_frame_observer_is_called_directly_with_the_lines_the_log_writes() -> None:
    """The admin store and the metrics (each a :class:`~chaosproxy.observe.logs.
    FrameObserver`) get every frame line's parts and text by a direct call, before the
    other observers, one line or one batch at a time, until removed; the other lines
    as any observer."""
    out = io.BytesIO()
    log = FrameLog(out)
    order: list[str] = []
    log.add_observer(lambda line: order.append(f"plain {line['event']}"))
    store, metrics = RequestStore(), Metrics()
    log.add_observer(store)
    log.add_observer(metrics)
    bound = log.for_request(request_id="r-5", scenario="s")
    bound.info("request", **REQUEST)
    bound.frame({**FRAME, "size": 3})
    bound.frames([{**FRAME, "seq": 1, "offset": 3, "size": 4}, {**FRAME, "seq": 2, "size": 5}])
    log.remove_observer(metrics)
    bound.frame({**FRAME, "seq": 3, "size": 6})
    bound.info("response_end", **{**RESPONSE_END, "bytes": 18, "frames": 4})
    written = out.getvalue().splitlines(keepends=True)
    frames = [line for line in written if b'"event":"frame"' in line]
    record = store.get("r-5")
    assert record is not None and record.done
    assert record.frames == frames  # each kept as the text the log wrote
    assert (record.sent_frames, record.sent_bytes) == (4, 18)
    assert {k: [v.frames, v.bytes] for k, v in metrics._sent.items()} == {
        "s": [3, 12]
    }  # (the last frame came after it was removed)
    assert order == ["plain request", *["plain frame"] * 4, "plain response_end"]


def _plain_run(plain: bool, observe: bool) -> tuple[list[bytes], Any, Any, list[Any]]:
    """One request of plain writes through a log with the store and the metrics (and,
    with ``observe``, an observer of every line's dict), each write logged through
    ``plain_frame`` or as ``frame`` with its fields' dict; the clock fixed. (The test
    run's copy of every line, an observer of dicts, is not added: the caller's
    environment has no :data:`~chaosproxy.observe.logs.COPY_ENV`.)"""
    out = io.BytesIO()
    log = FrameLog(out)
    assert not log._frame_calls and not log._frame_dict  # only the compiled observers
    log._stamp._clock = lambda: 1764603359.25  # (one millisecond: the same ts)
    store, metrics = RequestStore(), Metrics()
    log.add_observer(store)
    log.add_observer(metrics)
    seen: list[Any] = []
    if observe:
        log.add_observer(seen.append)
    bound = log.for_request(request_id='r-"7\u2028', scenario="s\x01")
    bound.info("request", **REQUEST)
    writes = [(0, 0, 5, 0.0), (1, 5, 7, 1.5), (2, 12, 3, 1.0001), (3, 15, 2, 0.25)]
    for seq, offset, size, t_ms in writes:  # (1.0001: left to orjson by the routine)
        if plain:
            bound.plain_frame(seq, offset, size, t_ms)
        else:
            bound.frame({"seq": seq, "offset": offset, "size": size, "t_ms": t_ms})
    bound.info("response_end", **{**RESPONSE_END, "bytes": 17, "frames": 4})
    return out.getvalue().splitlines(keepends=True), store, metrics, seen


@pytest.mark.parametrize("observe", [False, True])
def test_a_plain_write_is_logged_and_observed_as_its_fields_dict_would_be(
    observe: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plain_frame`` (a passthrough write's line, made from its numbers without a
    dict: observe/frameline.py) writes the same bytes and feeds the store and the
    metrics the same as ``frame`` with the fields' dict, whether or not an observer
    takes every line's dict (then the dict is made: the general way)."""
    monkeypatch.delenv(logs.COPY_ENV, raising=False)
    lines, store, metrics, seen = _plain_run(plain=True, observe=observe)
    want, want_store, want_metrics, want_seen = _plain_run(plain=False, observe=observe)
    assert lines == want
    assert lines[2] == (
        b'{"request_id":"r-\\"7\xe2\x80\xa8","scenario":"s\\u0001","seq":1,"offset":5,"size":7,'
        b'"t_ms":1.5,"event":"frame","ts":"2025-12-01T15:35:59.250Z"}\n'
    )
    record, want_record = store.get('r-"7\u2028'), want_store.get('r-"7\u2028')
    assert record.frames == want_record.frames == lines[1:5]
    assert (record.sent_frames, record.sent_bytes, store.held) == (4, 17, want_store.held)
    assert {k: [v.frames, v.bytes] for k, v in metrics._sent.items()} == {"s\x01": [4, 17]}
    assert {k: [v.frames, v.bytes] for k, v in want_metrics._sent.items()} == {"s\x01": [4, 17]}
    assert seen == want_seen
    assert len(seen) == (6 if observe else 0)


def test_a_plain_write_past_the_stores_bound_is_omitted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(logs.COPY_ENV, raising=False)
    log = FrameLog(io.BytesIO())
    store = RequestStore(max_frames=2)
    log.add_observer(store)
    bound = log.for_request(request_id="r-8", scenario=None)
    bound.info("request", **REQUEST)
    for seq in range(3):
        bound.plain_frame(seq, seq, 1, 0.5)
    record = store.get("r-8")
    assert record is not None
    # two lines kept (max_frames), the third counted as omitted; all three sent
    assert (len(record.frames), record.omitted, record.sent_frames, record.sent_bytes) == (
        2,
        1,
        3,
        3,
    )


def test_error_texts_are_redacted_before_observers_and_rendering() -> None:
    out = io.BytesIO()
    log = FrameLog(out)
    observed: list[dict[str, Any]] = []
    log.add_observer(observed.append)
    secret_url = "http://up:1/v1beta/models/x:streamGenerateContent?alt=sse&key=AIzaSECRET"
    log.for_request(request_id="r-4", scenario=None).info(
        "response_end", **RESPONSE_END, error=f"400, message='bad', url='{secret_url}'"
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
        ("GET /x?alt=sse;key=SECRET", "GET /x?alt=sse;key=***"),
        ("cannot reach http://user:PASSWORD@host/v1", "cannot reach http://user:***@host/v1"),
        ("url='https://u:p/a@ss@h:8443/x'", "url='https://u:***@h:8443/x'"),
        ("http://user@host/ and http://host:80/x", "http://user@host/ and http://host:80/x"),
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


def test_every_line_carries_ts_in_utc_with_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([1764603359.9996, 1764603360.0, 1764603360.1234, 1764603361.5])
    monkeypatch.setattr(logs.time, "time", lambda: next(clock))  # (before the log is made)
    out = io.BytesIO()
    log = FrameLog(out)
    observed: list[dict[str, Any]] = []
    log.add_observer(observed.append)
    bound = log.for_request(request_id="r-1", scenario=None)
    for _ in range(4):
        bound.info("frame", **{**FRAME, "size": 1})
    stamps = [orjson.loads(line)["ts"] for line in out.getvalue().splitlines()]
    assert stamps == [
        "2025-12-01T15:35:59.999Z",
        "2025-12-01T15:36:00.000Z",
        "2025-12-01T15:36:00.123Z",  # the cached second, new milliseconds
        "2025-12-01T15:36:01.500Z",
    ]
    assert [x["ts"] for x in observed] == stamps  # traces and the admin API see it too


def test_pretty_lines_carry_ts_too() -> None:
    out = io.BytesIO()
    FrameLog(out, fmt="pretty").for_request(request_id="r-1", scenario=None).info(
        "request", **REQUEST
    )
    assert TS.search(out.getvalue().decode())


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/m:streamGenerateContent?alt=sse;key=SECRET", "/m:streamGenerateContent?alt=sse;key=***"),
        ("/p?key=A;alt=sse&token=B", "/p?key=***;alt=sse&token=***"),
        ("/p?Access_Token=A&x=1", "/p?Access_Token=***&x=1"),
        ("/p?%6Bey=A", "/p?%6Bey=***"),  # a name is compared decoded
        ("/p?q=a%20b+c&sig=S&e=", "/p?q=a%20b+c&sig=***&e="),  # the rest as it was
        ("/p?key", "/p?key"),  # no value, nothing to mask
        ("/p?keyboard=1;monkey=2", "/p?keyboard=1;monkey=2"),
        ("/p?", "/p?"),
    ],
)
def test_redact_path_splits_on_ampersands_and_semicolons(path: str, expected: str) -> None:
    assert redact_path(path) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://user:PASSWORD@host", "http://user:***@host"),
        ("https://user:PASSWORD@host:8443/v1?key=K", "https://user:***@host:8443/v1?key=***"),
        ("https://user:pa/ss@host/v1", "https://user:***@host/v1"),  # a raw / in it
        ("https://user:p@ss@host/v1", "https://user:***@host/v1"),  # a raw @ in it
        ("https://user@host/v1", "https://user@host/v1"),
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_redact_url_masks_the_password(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_a_line_logged_after_close_is_dropped(tmp_path: Any) -> None:
    path = tmp_path / "frames.jsonl"
    log = FrameLog.open(str(path))
    bound = log.for_request(request_id="r-1", scenario=None)
    bound.info("request", **REQUEST)
    log.close()
    bound.info(
        "response_end", **{**RESPONSE_END, "outcome": "shutdown"}
    )  # a request still unwinding: no error
    assert [orjson.loads(x)["event"] for x in path.read_bytes().splitlines()] == ["request"]


@pytest.mark.parametrize(
    ("level", "written"),
    [
        ("frames", ["request", "frame", "frame", "response_end"]),
        ("requests", ["request", "response_end"]),
        ("off", []),
    ],
)
def test_the_log_level_chooses_what_is_written_and_observers_see_every_line(
    level: logs.LogLevel, written: list[str]
) -> None:
    out = io.BytesIO()
    log = FrameLog(out, level=level)
    observed: list[str] = []
    log.add_observer(lambda line: observed.append(line["event"]))
    bound = log.for_request(request_id="r-1", scenario=None)
    bound.info("request", **{**REQUEST, "seed": 1})
    bound.info("frame", **{**FRAME, "seq": 0, "size": 1})
    bound.info("frame", **{**FRAME, "seq": 1, "size": 1})
    bound.info("response_end", **{**RESPONSE_END, "outcome": "completed"})
    log.flush()
    assert [orjson.loads(x)["event"] for x in out.getvalue().splitlines()] == written
    assert observed == ["request", "frame", "frame", "response_end"]


def test_serve_with_log_level_requests_writes_no_frame_lines(tmp_path: Any) -> None:
    import signal
    import subprocess
    import urllib.request

    path = tmp_path / "frames.jsonl"
    proc = subprocess.Popen(
        [*chaosproxy_argv(), "serve", "--listen", "127.0.0.1:0",
         "--admin", "off", "--log", str(path), "--log-level", "requests",
         "--mock-interval-ms", "0"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert url, line
        request = urllib.request.Request(
            url.group(1) + "/v1/chat/completions",
            data=b'{"model":"m","stream":true,"messages":[]}',
            headers={"Content-Type": "application/json", "X-Chaos-Scenario": "drop-third-delta"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert b"data: [DONE]" in resp.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    events = [orjson.loads(x)["event"] for x in path.read_bytes().splitlines()]
    assert events == ["request", "response_end"]


class _BrokenStream(io.BytesIO):
    """A stream whose reader leaves after ``fail_after`` writes."""

    def __init__(self, fail_after: int, error: OSError) -> None:
        super().__init__()
        self.fail_after = fail_after
        self.error = error
        self.writes = 0

    def write(self, data: Any) -> int:
        self.writes += 1
        if self.writes > self.fail_after:
            raise self.error
        return super().write(data)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (BrokenPipeError(32, "Broken pipe"), "Broken pipe"),
        (OSError(28, "No space left on device"), "No space left on device"),
    ],
)
def test_a_stream_that_fails_stops_the_log_not_the_requests(
    capsys: pytest.CaptureFixture[str], error: OSError, reason: str
) -> None:
    out = _BrokenStream(2, error)
    log = FrameLog(out)
    seen = _lines(log)
    observed: list[str] = []
    log.add_observer(lambda line: observed.append(line["event"]))
    bound = log.for_request(request_id="r-9", scenario=None)
    bound.info("request", **REQUEST)
    bound.frame({"seq": 0, "offset": 0, "size": 3, "t_ms": 1.0})
    bound.frame({"seq": 1, "offset": 3, "size": 3, "t_ms": 2.0})  # this write fails
    bound.info("response_end", **{**RESPONSE_END, "outcome": "completed"})
    # No exception reached the request; the stream was tried once more, not again.
    assert out.writes == 3
    assert [orjson.loads(x)["event"] for x in out.getvalue().splitlines()] == ["request", "frame"]
    # Observers and listeners still see every line (the admin API, metrics, traces).
    assert observed == ["request", "frame", "frame", "response_end"]
    assert len(seen) == 4
    assert log.write_error == f"the frame log stopped: cannot write to ?: {reason}"
    err = capsys.readouterr().err
    assert err == f"chaosproxy: warning: {log.write_error}; serving goes on\n"


def test_a_flush_that_fails_stops_the_log_once(capsys: pytest.CaptureFixture[str]) -> None:
    class Unflushable(io.BytesIO):
        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    out = Unflushable()
    out.name = "frames.jsonl"
    log = FrameLog(out)
    log.for_request(request_id="r-1", scenario=None).info("request", **REQUEST)
    log.flush()
    log.flush()
    log.for_request(request_id="r-1", scenario=None).info("response_end", **RESPONSE_END)
    assert len(out.getvalue().splitlines()) == 1  # nothing after the failure
    assert log.write_error == "the frame log stopped: cannot write to frames.jsonl: Broken pipe"
    assert capsys.readouterr().err.count("warning") == 1


def test_serve_goes_on_when_the_reader_of_its_log_leaves() -> None:
    """``chaosproxy serve --log - | head -1``: the reader goes away; requests go on
    being served, stderr has one warning and no traceback, ``/health`` says it, and
    the process stops cleanly."""
    import fcntl
    import json
    import signal
    import subprocess
    import urllib.request

    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [*chaosproxy_argv(), "serve", "--listen", "127.0.0.1:0",
         "--admin", "127.0.0.1:0", "--log", "-", "--mock-interval-ms", "0"],
        stdout=write, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(write)
    os.close(read)  # the reader is gone before the first line
    try:
        assert proc.stderr is not None
        start = proc.stderr.readline()
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", start)
        admin = re.search(r"admin: (http://127\.0\.0\.1:\d+)", start)
        assert url and admin, start
        body = b'{"model":"m","stream":true,"messages":[]}'
        for _ in range(5):
            request = urllib.request.Request(
                url.group(1) + "/v1/chat/completions",
                data=body,
                headers={
                    "Content-Type": "application/json",
                    "X-Chaos-Scenario": "one-byte-per-read",
                },
            )
            with urllib.request.urlopen(request, timeout=10) as resp:
                assert resp.status == 200
                assert resp.read().endswith(b"data: [DONE]\n\n")
        # 5 framed streams of ~1,200 one-byte writes: far more than stdout's buffer,
        # so the log has met the broken pipe by now.
        warning = proc.stderr.readline()
        assert warning == (
            "chaosproxy: warning: the frame log stopped: cannot write to stdout: "
            "Broken pipe; serving goes on\n"
        )
        with urllib.request.urlopen(admin.group(1) + "/health", timeout=10) as resp:
            health = json.load(resp)
        assert health["warnings"] == ["the frame log stopped: cannot write to stdout: Broken pipe"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert "Traceback" not in rest and "Exception" not in rest, rest


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(
    context=st.dictionaries(
        st.sampled_from(["request_id", "scenario", "route", 'é\u2028"\\']),
        st.none() | st.text(),
        min_size=1,
    ),
    fields=st.dictionaries(st.text(), _JSON, min_size=1, max_size=8),
    ms=st.integers(min_value=0, max_value=2**42),
)
def test_a_frame_line_made_from_its_parts_is_the_dumped_dict(
    context: dict[str, Any], fields: dict[str, Any], ms: int
) -> None:
    """``frame_text`` (the frame log's hot path: no dict of the line) gives the bytes
    ``orjson.dumps`` gives for the line's dict, for any JSON values and keys, as long
    as the write's fields and the request's context share no key (a frame line's never
    do)."""
    fields = {k: v for k, v in fields.items() if k not in context and k not in ("event", "ts")}
    assume(fields)
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"
    line = {**context, **fields, "event": "frame", "ts": ts}
    expected = orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
    assert logs.frame_text(logs.json_prefix(context), fields, ts.encode()) == expected


def test_the_timestamp_changes_with_the_millisecond_and_the_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([1764600000.2501, 1764600000.2509, 1764600000.2511, 1764600001.0004])
    monkeypatch.setattr(logs.time, "time", lambda: next(clock))
    stamp = logs._Timestamp()
    first = stamp.now_bytes()
    assert first == b"2025-12-01T14:40:00.250Z"
    assert stamp.text(first) == "2025-12-01T14:40:00.250Z"
    again = stamp.now_bytes()  # the same millisecond: the same stamp, not made again
    assert again is first and stamp.text(again) is stamp.text(first)
    assert stamp.now() == "2025-12-01T14:40:00.251Z"
    assert stamp.now() == "2025-12-01T14:40:01.000Z"
