"""Traces (``--trace-dir``) and ``chaosproxy replay``: record through the proxy, replay,
and compare what a raw-socket client receives — byte for byte, chunk for chunk, gap for
gap."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from chaosproxy.cli.main import main
from chaosproxy.observe.trace import TraceWriter
from chaosproxy.tools.replay import Trace, TraceError, load_trace, parse_trace, start_replay
from tests.support.cli import chaosproxy_argv
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.repo import REPO
from tests.support.scripted_upstream import Script, ScriptedUpstream

#: A replayed write is served at its recorded time (from the request's arrival), never
#: sooner (but for what the client's clock started earlier: the request's way in), and
#: at most this much later: what a busy machine adds to a sleep. A replay that ignored
#: the gaps is early (the waits here are 30 to 120 ms); one that added them up, or
#: served them twice as long, is late by more.
EARLY_MS = 10.0
LATE_MS = 250.0


# --------------------------------------------------------------------------- a raw client


@dataclass
class RawResponse:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    #: (ms after the request was sent, chunk payload), as each chunk completed.
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    #: The terminating zero-size chunk arrived.
    ended: bool = False
    #: The peer reset the connection.
    reset: bool = False

    @property
    def body(self) -> bytes:
        return b"".join(c for _, c in self.chunks)

    @property
    def sizes(self) -> list[int]:
        return [len(c) for _, c in self.chunks]


async def fetch_chunks(url: str, *, headers: dict[str, str] | None = None) -> RawResponse:
    """POST to ``url`` on a plain socket and parse the chunked response as it arrives,
    timing each chunk when its last byte is in."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    body = b'{"stream": true}'
    head = [
        f"POST {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    await writer.drain()
    sent = time.monotonic()
    result = RawResponse()
    buf = b""
    in_body = False
    try:
        async with asyncio.timeout(10):
            while True:
                data = await reader.read(65536)
                now = (time.monotonic() - sent) * 1000.0
                if not data:
                    break
                buf += data
                if not in_body:
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        continue
                    lines = buf[:end].decode("latin-1").split("\r\n")
                    result.status = int(lines[0].split()[1])
                    for line in lines[1:]:
                        name, _, value = line.partition(":")
                        result.headers[name.strip().lower()] = value.strip()
                    assert result.headers.get("transfer-encoding") == "chunked", result.headers
                    buf = buf[end + 4 :]
                    in_body = True
                while True:
                    line_end = buf.find(b"\r\n")
                    if line_end < 0:
                        break
                    size = int(buf[:line_end].split(b";")[0], 16)
                    if size == 0:
                        result.ended = True
                        break
                    if len(buf) < line_end + 2 + size + 2:
                        break
                    start = line_end + 2
                    result.chunks.append((now, buf[start : start + size]))
                    buf = buf[start + size + 2 :]
                if result.ended:
                    break
    except ConnectionResetError:
        result.reset = True
    writer.close()
    return result


# --------------------------------------------------------------------------- helpers


def trace_lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def frames_of(trace: list[dict[str, Any]]) -> list[bytes]:
    return [base64.b64decode(x["raw"]) for x in trace if x["event"] == "frame"]


@asynccontextmanager
async def replaying(trace: Trace) -> AsyncIterator[str]:
    runner, url = await start_replay(trace, "127.0.0.1", 0)
    try:
        yield url
    finally:
        await runner.cleanup()


def assert_served_on_time(recorded: list[float], served: list[float]) -> None:
    """Each write ``served`` (ms from the request) at its ``recorded`` time: no sooner,
    and no more than LATE_MS later (a sleep is never early, and late only by what the
    machine's load adds, which gaps between two late writes would count twice)."""
    assert len(recorded) == len(served)
    for i, (want, got) in enumerate(zip(recorded, served, strict=True)):
        assert want - EARLY_MS <= got <= want + LATE_MS, (i, recorded, served)


SSE = b"".join(b'data: {"n": %d, "text": "h\xc3\xa9llo"}\n\n' % i for i in range(5)) + (
    b"data: [DONE]\n\n"
)


# --------------------------------------------------------------------------- traces


async def test_one_trace_per_request_holds_exactly_its_log_lines(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture, tmp_path: Path
) -> None:
    upstream.route("/stream", Script.events(SSE))
    proxy = await make_proxy(upstream=upstream.url, trace_dir=tmp_path / "traces")
    ids = []
    for _ in range(3):
        got = await fetch_chunks(proxy.url + "/stream")
        assert got.body == SSE
        ids.append(got.headers["x-chaos-request-id"])
    for request_id in ids:
        await log_capture.wait_end(request_id)
    files = sorted(p.name for p in (tmp_path / "traces").iterdir())
    assert files == sorted(f"{i}.jsonl" for i in ids)
    for request_id in ids:
        lines = trace_lines(tmp_path / "traces" / f"{request_id}.jsonl")
        assert lines == log_capture.for_request(request_id)
        assert next(x["event"] for x in lines) == "request"
        assert lines[-1]["event"] == "response_end"
        assert all("raw" not in x for x in lines)  # no --log-content, no payload
    assert proxy.traces is not None and proxy.traces.open_files == 0


def test_trace_files_never_clobber_earlier_runs(tmp_path: Path) -> None:
    earlier = tmp_path / "r-1.jsonl"
    earlier.write_bytes(b"from an earlier process\n")
    (tmp_path / "r-1.2.jsonl").write_bytes(b"and another\n")
    writer = TraceWriter(tmp_path)
    writer({"event": "request", "request_id": "r-1"})
    assert writer.path_for("r-1") == tmp_path / "r-1.3.jsonl"
    writer({"event": "response_end", "request_id": "r-1"})
    assert earlier.read_bytes() == b"from an earlier process\n"
    assert [x["event"] for x in trace_lines(tmp_path / "r-1.3.jsonl")] == [
        "request",
        "response_end",
    ]


def test_open_trace_files_are_bounded(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, max_open=2)
    ids = [f"r-{n}" for n in range(1, 6)]
    for request_id in ids:
        writer({"event": "request", "request_id": request_id})
        assert writer.open_files <= 2
    for request_id in ids:  # every request writes again: files reopen to append
        writer({"event": "frame", "request_id": request_id, "seq": 0})
        assert writer.open_files <= 2
    for request_id in ids:
        writer({"event": "response_end", "request_id": request_id})
    assert writer.open_files == 0 and writer.completed == len(ids)
    for request_id in ids:
        events = [x["event"] for x in trace_lines(tmp_path / f"{request_id}.jsonl")]
        assert events == ["request", "frame", "response_end"]
    # Lines of a request the writer never saw begin are ignored, not written.
    writer({"event": "frame", "request_id": "r-99"})
    assert not (tmp_path / "r-99.jsonl").exists()


# --------------------------------------------------------------------------- replay


RECORD_CASES = {
    # Passthrough, paced by the upstream with uneven gaps.
    "paced": (None, [0.0, 0.08, 0.03, 0.12, 0.05, 0.0]),
    # A fault: every event split into 7-byte writes, events 50 ms apart.
    "rechunk": ("faults:\n  - rechunk: {size: 7}\n", [0.0, 0.05, 0.05, 0.05, 0.05, 0.05]),
}


@pytest.mark.parametrize("case", sorted(RECORD_CASES))
async def test_replay_serves_the_recorded_bytes_boundaries_and_gaps(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    tmp_path: Path,
    case: str,
) -> None:
    scenario, waits = RECORD_CASES[case]
    events = Script.events(SSE).writes
    assert len(events) == len(waits)
    upstream.route(
        "/v1/stream", Script(writes=[(e, w) for (e, _), w in zip(events, waits, strict=True)])
    )
    scenarios = {"rec": "provider: generic\n" + scenario} if scenario else None
    proxy = await make_proxy(
        upstream=upstream.url, scenarios=scenarios, content=True, trace_dir=tmp_path
    )
    headers = {"X-Chaos-Scenario": "rec"} if scenario else {}
    original = await fetch_chunks(proxy.url + "/v1/stream", headers=headers)
    request_id = original.headers["x-chaos-request-id"]
    end = await log_capture.wait_end(request_id)
    assert original.ended and original.body == SSE

    path = tmp_path / f"{request_id}.jsonl"
    recorded = trace_lines(path)
    assert frames_of(recorded) == [c for _, c in original.chunks]  # what the client got
    if scenario:
        assert max(original.sizes) == 7 and len(original.chunks) > len(events)

    trace = load_trace(path)
    async with replaying(trace) as url:
        replayed = await fetch_chunks(url + "/anything/at/all")
    assert replayed.status == end["status"] == 200
    assert replayed.headers["content-type"] == end["content_type"]
    assert replayed.headers["x-chaos-replay"] == request_id
    assert replayed.ended
    assert [c for _, c in replayed.chunks] == [c for _, c in original.chunks]
    # Scheduled from the request's arrival: each write, the first one too, comes when
    # it came.
    t_ms = [x["t_ms"] for x in recorded if x["event"] == "frame"]
    assert_served_on_time(t_ms, [t for t, _ in replayed.chunks])


@pytest.mark.parametrize("how", ["close", "abort", "reset"])
async def test_replay_ends_a_cut_stream_the_same_way(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    tmp_path: Path,
    how: str,
) -> None:
    upstream.route("/v1/stream", Script.events(SSE))
    scenario = f"provider: generic\nfaults:\n  - cut: {{after: 2, how: {how}}}\n"
    proxy = await make_proxy(
        upstream=upstream.url, scenarios={"cut": scenario}, content=True, trace_dir=tmp_path
    )
    original = await fetch_chunks(proxy.url + "/v1/stream", headers={"X-Chaos-Scenario": "cut"})
    request_id = original.headers["x-chaos-request-id"]
    assert (await log_capture.wait_end(request_id))["outcome"] == "cut"
    trace = load_trace(tmp_path / f"{request_id}.jsonl")
    assert trace.cut_how == how
    async with replaying(trace) as url:
        replayed = await fetch_chunks(url + "/")
    assert [c for _, c in replayed.chunks] == [c for _, c in original.chunks]
    assert len(replayed.chunks) == 2
    assert (replayed.ended, replayed.reset) == (original.ended, original.reset)
    assert replayed.ended is (how == "close")
    assert replayed.reset is (how == "reset")


async def test_replay_refuses_a_trace_without_content(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream.route("/v1/stream", Script.events(SSE))
    proxy = await make_proxy(upstream=upstream.url, trace_dir=tmp_path)
    got = await fetch_chunks(proxy.url + "/v1/stream")
    request_id = got.headers["x-chaos-request-id"]
    await log_capture.wait_end(request_id)
    path = tmp_path / f"{request_id}.jsonl"
    with pytest.raises(TraceError, match="--log-content"):
        load_trace(path)

    assert main(["replay", str(path), "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--log-content" in err and str(path) in err


TS = "2026-01-01T00:00:00.000Z"
BOUND = {"request_id": "r-1", "scenario": None, "ts": TS}
REQUEST = {**BOUND, "event": "request", "seed": 1, "method": "POST", "path": "/v1/x"}
FRAME = {**BOUND, "event": "frame", "seq": 0, "offset": 0, "t_ms": 1.0}
END = {**BOUND, "event": "response_end", "outcome": "completed", "status": 200, "bytes": 3,
       "frames": 1, "duration_ms": 2.0}  # fmt: skip


def jsonl(*lines: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(x) + b"\n" for x in lines)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "no response_end"),
        (jsonl(REQUEST), "no response_end"),
        (b"not json\n", "t.jsonl:1: not JSON"),
        (b"[1, 2]\n", "t.jsonl:1: not a JSON object"),
        (jsonl(REQUEST, {**END, "status": "200"}), "t.jsonl:2: response_end line: status '200'"),
        (jsonl({**FRAME, "raw": "%%%", "size": 1}, END), "not base64"),
        (jsonl({**FRAME, "raw": "YWJj", "size": 5}, END), "size says 5"),
        (jsonl(REQUEST, END) + b'{"event":"response_e', "t.jsonl:3: not JSON"),
    ],
)
def test_parse_trace_refuses_broken_traces(data: bytes, reason: str) -> None:
    with pytest.raises(TraceError, match=reason):
        parse_trace(data, "t.jsonl")


def test_replay_of_a_missing_file_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read" in err


async def test_replay_of_a_proxy_error_answers_the_same_error() -> None:
    message = "upstream unreachable: Cannot connect to host 127.0.0.1:9"
    trace = parse_trace(
        orjson.dumps({**REQUEST, "request_id": "r-5"})
        + b"\n"
        + orjson.dumps(
            {
                **END,
                "request_id": "r-5",
                "outcome": "proxy_error",
                "status": 502,
                "bytes": 0,
                "frames": 0,
                "duration_ms": 1.0,
                "error": message,
            }
        )
    )
    async with replaying(trace) as url:
        reader, writer = await asyncio.open_connection(*urlsplit(url).netloc.split(":"))
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = await reader.read()
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 502")
    assert orjson.loads(body) == {"error": {"type": "chaosproxy_error", "message": message}}


async def test_replay_command_serves_until_sigterm(tmp_path: Path) -> None:
    frames = [b"data: a\n\n", b"data: b\n\n"]
    lines: list[dict[str, Any]] = [REQUEST]
    lines += [
        {**FRAME, "seq": i, "offset": 9 * i, "size": len(f), "t_ms": 5.0 * i,
         "raw": base64.b64encode(f).decode()}
        for i, f in enumerate(frames)
    ]  # fmt: skip
    lines.append(
        {**END, "outcome": "completed", "status": 201, "bytes": 18, "frames": 2,
         "content_type": "text/event-stream", "duration_ms": 10.0}
    )  # fmt: skip
    path = tmp_path / "r-1.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        *chaosproxy_argv(), "replay", str(path), "--listen", "127.0.0.1:0",
        env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(15):
            line = (await proc.stderr.readline()).decode()
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert found, line
        assert "2 frames" in line and "status 201" in line
        got = await fetch_chunks(found.group(1) + "/v1/chat/completions")
        assert got.status == 201 and got.ended
        assert [c for _, c in got.chunks] == frames
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            await proc.wait()
    assert proc.returncode == 0
