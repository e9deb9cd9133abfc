"""Per-request trace files (chaosproxy/observe/trace.py), written from literal log lines
into a temporary directory: one JSONL file per request, closed at its end; a later
verdict appended to it; an existing file never overwritten (``.2``, ``.3``…); a safe
file name from any id; at most ``max_open`` files open, a closed one reopened to
append; a request begun before the writer, or a rejected connection, written nowhere;
a write that fails warned about once. Recording and replaying through the proxy is
tests/tools/test_replay.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from chaosproxy.observe.trace import ENDED_KEPT, TraceWriter


def line(event: str, request_id: str, **fields: Any) -> Any:
    return {"event": event, "request_id": request_id, "scenario": None, **fields}


def request(writer: TraceWriter, request_id: str, frames: int = 1, *, end: bool = True) -> None:
    writer(line("request", request_id, method="POST"))
    for n in range(frames):
        writer(line("frame", request_id, seq=n))
    if end:
        writer(line("response_end", request_id, outcome="completed"))


def read(path: Path) -> list[tuple[str, Any]]:
    return [
        (parsed["event"], parsed.get("seq", parsed.get("verdict")))
        for parsed in map(orjson.loads, path.read_bytes().splitlines())
    ]


def test_one_file_per_request_closed_at_its_end(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    request(writer, "r-1", frames=2, end=False)
    assert writer.path_for("r-1") == tmp_path / "r-1.jsonl"
    assert writer.open_files == 1
    writer(line("action", "r-1", action="cut"))
    writer(line("response_end", "r-1", outcome="aborted"))
    assert (writer.open_files, writer.completed, writer.path_for("r-1")) == (0, 1, None)
    assert read(tmp_path / "r-1.jsonl") == [
        ("request", None),
        ("frame", 0),
        ("frame", 1),
        ("action", None),
        ("response_end", None),
    ]


def test_a_later_verdict_is_appended_to_an_ended_requests_file(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    request(writer, "r-1")
    writer(line("verdict", "r-1", verdict="detected"))
    writer(line("verdict", "r-unknown", verdict="detected"))  # (no trace: nothing)
    assert read(tmp_path / "r-1.jsonl")[-1] == ("verdict", "detected")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-1.jsonl"]


def test_only_the_last_ended_requests_take_a_verdict(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    for n in range(ENDED_KEPT + 1):
        request(writer, f"r-{n}", frames=0)
    writer(line("verdict", "r-0", verdict="late"))  # forgotten: the oldest
    writer(line("verdict", "r-1", verdict="kept"))
    assert read(tmp_path / "r-0.jsonl")[-1] == ("response_end", None)
    assert read(tmp_path / "r-1.jsonl")[-1] == ("verdict", "kept")


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "r-1.jsonl").write_text("an earlier process's\n")
    writer = TraceWriter(tmp_path)
    request(writer, "r-1")
    request(writer, "r-1")  # (ids start again in a new process)
    assert (tmp_path / "r-1.jsonl").read_text() == "an earlier process's\n"
    assert read(tmp_path / "r-1.2.jsonl")[0] == ("request", None)
    assert read(tmp_path / "r-1.3.jsonl")[0] == ("request", None)


def test_an_id_becomes_a_safe_file_name(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    request(writer, "../../etc/passwd r:1")
    assert [p.name for p in tmp_path.iterdir()] == ["______etc_passwd_r_1.jsonl"]


def test_at_most_max_open_files_the_least_recent_reopened_to_append(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, max_open=2)
    for rid in ("a", "b", "c"):
        request(writer, rid, frames=1, end=False)
    assert writer.open_files == 2  # "a" closed
    writer(line("frame", "a", seq=1))  # reopened, "b" closed
    assert writer.open_files == 2
    writer.flush()
    for rid in ("a", "b", "c"):
        writer(line("response_end", rid, outcome="completed"))
    assert [e for e, _ in read(tmp_path / "a.jsonl")] == [
        "request",
        "frame",
        "frame",
        "response_end",
    ]
    assert writer.completed == 3


def test_what_has_no_trace_is_written_nowhere(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    writer(line("frame", "r-before", seq=3))  # began before the writer
    writer(line("response_end", "r-before", outcome="completed"))
    writer({"event": "rejected", "reason": "timeout"})  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    assert writer.completed == 0


def test_close_keeps_what_requests_in_flight_wrote(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    request(writer, "r-1", frames=2, end=False)
    writer.close()
    assert writer.open_files == 0
    writer(line("frame", "r-1", seq=2))  # (forgotten: not written)
    assert [e for e, _ in read(tmp_path / "r-1.jsonl")] == ["request", "frame", "frame"]


def test_a_write_that_fails_is_warned_about_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = tmp_path / "gone"
    writer = TraceWriter.create(gone)
    gone.rmdir()
    request(writer, "r-1")
    request(writer, "r-2")
    err = capsys.readouterr().err
    assert err.count("chaosproxy: warning: cannot write trace: ") == 1
    assert str(gone / "r-1.jsonl") in err
    assert writer.open_files == 0


def test_the_directory_is_made_or_refused(tmp_path: Path) -> None:
    assert TraceWriter.create(tmp_path / "a" / "b").directory.is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        TraceWriter.create(tmp_path / "file")
    with pytest.raises(ValueError, match="max_open must be >= 1"):
        TraceWriter(tmp_path, max_open=0)
