"""Reading the frame log typed (chaosproxy/observe/reading.py): every kind of line a
real proxy writes comes back as its record, value for value; what is no line of the log
(truncated, not JSON, not an object, an unknown kind, a required key missing or of the
wrong type) is unreadable with a reason, never an exception; an optional key of the
wrong type is left out and the rest of the line read."""

from __future__ import annotations

import contextlib
import socket
import time
import typing
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from chaosproxy.control.api import ChaosProxy
from chaosproxy.core.records import LINE_KINDS, LogLine
from chaosproxy.observe.reading import (
    Unreadable,
    check_line,
    parse_log_line,
    read_line,
    read_lines,
    read_log,
)
from tests.support.log_lines import FRAME

BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """The lines of a real log with every kind: requests under scenarios that cut, break
    the contract (violations) and pass, with content; a verdict; a rejected head."""
    log = tmp_path_factory.mktemp("reading") / "frames.jsonl"
    with ChaosProxy(log=str(log), log_content=True, mock_interval=0.001) as proxy:
        for scenario in ("terminal-event-twice", "cut-before-terminal-reset", "stall-mid-stream"):
            with proxy.scenario(scenario), contextlib.suppress(httpx.HTTPError):  # (a reset)
                httpx.post(proxy.url + "/v1/chat/completions", json=BODY)
        proxy.verdict(proxy.last()["request_id"], text="")
        host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(b"NOT HTTP\r\n\r\n")
            raw.recv(1024)
        deadline = time.monotonic() + 10
        while not any(line["event"] == "rejected" for line in proxy.lines):
            assert time.monotonic() < deadline, "no rejected line"
            time.sleep(0.01)  # (polled: the line is logged on the proxy's thread)
    return [line for line in log.read_bytes().splitlines() if line.strip()]


def test_every_kind_of_a_real_log_is_read_as_its_record(real_log: list[bytes]) -> None:
    kinds = set()
    for text in real_log:
        line = read_line(text)
        assert not isinstance(line, Unreadable), (text, line)
        # Value for value what was written (a float field's integral value as a float).
        assert line == orjson.loads(text)
        kinds.add(line["event"])
    assert kinds == set(LINE_KINDS)
    frames = [line for line in map(parse_log_line, real_log) if line and line["event"] == "frame"]
    assert frames and all(isinstance(f["raw"], str) and "data" in f for f in frames)


def test_read_log_and_read_lines_skip_and_tell_what_is_unreadable(
    real_log: list[bytes], tmp_path: Path
) -> None:
    path = tmp_path / "edited.jsonl"
    truncated = real_log[-1][: len(real_log[-1]) // 2]
    path.write_bytes(b"\n".join([b"console: hello", *real_log, b"", b"[1]", truncated]) + b"\n")
    told: list[tuple[int, str]] = []
    lines = list(read_log(path, lambda n, why: told.append((n, why.reason))))
    assert [line["ts"] for line in lines] == [orjson.loads(t)["ts"] for t in real_log]
    n = len(real_log)
    assert [number for number, _ in told] == [1, n + 3, n + 4]  # the blank one passed over
    assert told[0][1].startswith("not JSON") and told[2][1].startswith("not JSON")
    assert told[1][1] == "not a JSON object"
    # Text lines (a file opened in text mode) read the same, and nothing needs telling.
    assert list(read_lines(t.decode() for t in real_log)) == lines


END: dict[str, Any] = {
    "request_id": "r-1",
    "scenario": "s",
    "outcome": "completed",
    "status": 200,
    "bytes": 5,
    "frames": 1,
    "duration_ms": 3,
    "integrity": "intact",
    "answer": {
        "generation": "r-1",
        "connections": 1,
        "content": "intact",
        "prefix": True,
        "sound": True,
        "defect": None,
        "text_sha256": {"clean": "a", "sent": "a"},
    },
    "event": "response_end",
    "ts": "2026-01-01T00:00:00.003Z",
}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"", "not JSON (EOF while parsing a value at line 1 column 0)"),
        (b'{"event":"frame","request_id":', "not JSON (EOF while parsing a value"),
        (b"\xff\xfe", "not JSON"),
        (b'{"event":"frame","t_ms":NaN', "not JSON"),
        (b"[]", "not a JSON object"),
        (b'"frame"', "not a JSON object"),
        (b"{}", "no event"),
        (b'{"event":null}', "no event"),
        (b'{"event":"integrity","integrity":"intact"}', "unknown event 'integrity'"),
        (b'{"event":["frame"]}', "unknown event ['frame']"),
        (b'{"event":"' + b"x" * 200 + b'"}', "unknown event 'xxxxxxxx"),
        # A required key missing, or of the wrong type (strict: no coercion).
        (
            orjson.dumps({**FRAME, "seq": None}),
            "frame line: seq None: Input should be a valid integer",
        ),
        (
            orjson.dumps({k: v for k, v in FRAME.items() if k != "size"}),
            "frame line: size: Field required",
        ),
        (
            orjson.dumps({**FRAME, "seq": "0"}),
            "frame line: seq '0': Input should be a valid integer",
        ),
        (
            orjson.dumps({**FRAME, "seq": True}),
            "frame line: seq True: Input should be a valid integer",
        ),
        (
            orjson.dumps({**FRAME, "t_ms": "1.5"}),
            "frame line: t_ms '1.5': Input should be a valid number",
        ),
        (b'{"event":"frame","t_ms":1e999}', "frame line: "),
        (
            orjson.dumps({**END, "outcome": "timeout"}),
            "response_end line: outcome 'timeout': Input should be",
        ),
        (orjson.dumps({**END, "scenario": 3}), "response_end line: scenario 3: "),
    ],
)
def test_what_is_no_line_of_the_log_is_unreadable_with_its_reason(line: bytes, reason: str) -> None:
    read = read_line(line)
    assert isinstance(read, Unreadable) and read.reason.startswith(reason), read
    assert len(read.reason) < 120  # one short line, whatever the input
    assert read.json_object == (not reason.startswith("not "))
    assert parse_log_line(line) is None
    # The same line already decoded: the same answer (when it decodes at all).
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return
    checked = check_line(value)
    assert isinstance(checked, Unreadable) and checked.reason == read.reason


@pytest.mark.parametrize(
    ("record", "key", "value"),
    [
        (FRAME, "kinds", [1]),
        (FRAME, "faults", "cut"),
        (FRAME, "events", [1.5]),
        (END, "integrity", "unheard-of"),
        (END, "answer", {"content": "intact"}),
        (END, "ttfb_ms", float("inf")),
        (END, "faults_applied", {"cut": "once"}),
    ],
)
def test_an_optional_key_of_the_wrong_type_is_left_out(
    record: dict[str, Any], key: str, value: object
) -> None:
    line = check_line({**record, key: value})
    assert not isinstance(line, Unreadable), line
    assert line == {k: v for k, v in record.items() if k != key}
    if value != float("inf"):  # (no JSON text has an infinity)
        assert read_line(orjson.dumps({**record, key: value})) == line


def test_keys_a_later_version_adds_are_kept_and_numbers_are_exact() -> None:
    text = orjson.dumps({**FRAME, "shiny": {"new": [1]}}).replace(
        b'"size":5', b'"size":' + str(2**70).encode()
    )
    line = parse_log_line(text)
    assert line is not None and line["event"] == "frame"
    assert line["size"] == 2**70 and dict(line)["shiny"] == {"new": [1]}
    assert isinstance(line["t_ms"], float)
    end = parse_log_line(orjson.dumps(END))
    assert end is not None and end["event"] == "response_end"
    assert end["duration_ms"] == 3.0 and isinstance(end["duration_ms"], float)


def test_every_kind_has_its_record() -> None:
    kinds = [
        typing.get_args(typing.get_type_hints(r)["event"])[0] for r in typing.get_args(LogLine)
    ]
    assert sorted(kinds) == sorted(LINE_KINDS)
