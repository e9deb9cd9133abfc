"""``chaosproxy replay``: serve a recorded trace again, same bytes, same timing.

A trace (``--trace-dir`` with ``--log-content``) holds every write the proxy made to
one client: its exact bytes (``raw``, base64) and when it happened (``t_ms``, from the
arrival of the request). Replay answers *any* request with the recorded status and
``Content-Type``, then makes the same writes — one write per recorded frame, so with
chunked transfer encoding one chunk each, the same boundaries — each at the same
``t_ms`` after the request arrived, and ends the response the way the original ended:

============== =======================================================================
outcome        how the replay ends
============== =======================================================================
completed      the body ends properly, at ``duration_ms``
cut            as the ``action`` line says: ``close`` (proper end), ``abort`` (FIN
               without the last chunk), ``reset`` (TCP RST), or before any header
upstream_error abort (FIN without the last chunk), as the proxy did
client_gone    the response never ends: held open until the client goes
proxy_error    the proxy's own JSON error answer, with the recorded status and message
============== =======================================================================

A trace recorded without ``--log-content`` has no bytes to serve and is refused
(:class:`TraceError`). Replay does not know the original response's other headers,
except ``Content-Encoding`` when the ``compress`` fault set it (sniffed from the
recorded bytes: gzip or deflate). Timing is scheduled from the request's arrival, so
gaps do not drift.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from chaosproxy.core.records import ActionLine, FrameLine, RequestLine, ResponseEndLine
from chaosproxy.core.session import error_answer
from chaosproxy.observe.reading import Unreadable, read_line
from chaosproxy.server.exchange import answer
from chaosproxy.server.net import cut_connection, hostport, listen

#: A trace larger than this is refused (it is read whole into memory).
MAX_TRACE_BYTES = 512 * 1024 * 1024


class TraceError(Exception):
    """The trace cannot be replayed; the message is the one-line reason."""


@dataclass(frozen=True, slots=True)
class ReplayFrame:
    t_ms: float
    data: bytes


@dataclass(frozen=True, slots=True)
class Trace:
    """What a trace file says the client received."""

    request_id: str
    status: int
    content_type: str | None
    content_encoding: str | None
    frames: tuple[ReplayFrame, ...]
    outcome: str
    #: When the original response ended (``duration_ms``), from the request's arrival.
    end_ms: float
    #: How a cut ended the response (``close``/``abort``/``reset``), if one did.
    cut_how: str | None = None
    #: The cut came before any response byte (``cut: {before: headers}``).
    cut_before_headers: bool = False
    error: str | None = None
    scenario: str | None = None
    seed: int | None = None

    @property
    def body(self) -> bytes:
        return b"".join(f.data for f in self.frames)


def load_trace(path: str | Path) -> Trace:
    """Read and check a trace file; raises TraceError with a one-line reason."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_TRACE_BYTES + 1)
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_TRACE_BYTES:
        raise TraceError(f"{path}: larger than {MAX_TRACE_BYTES} bytes")
    return parse_trace(data, str(path))


def parse_trace(data: bytes, source: str = "trace") -> Trace:
    """What the trace ``data`` says the client received, read as typed records
    (:mod:`chaosproxy.observe.reading`); raises TraceError on the first line that is no
    record of the log (replay serves exact bytes: nothing is guessed)."""
    request: RequestLine | None = None
    end: ResponseEndLine | None = None
    frames: list[ReplayFrame] = []
    cut: ActionLine | None = None
    for number, text in enumerate(data.splitlines(), 1):
        if not text.strip():
            continue
        line = read_line(text)
        if isinstance(line, Unreadable):
            raise TraceError(f"{source}:{number}: {line.reason}")
        if line["event"] == "request" and request is None:
            request = line
        elif line["event"] == "frame" and end is None:
            frames.append(_frame(line, source, number))
        elif line["event"] == "action" and line["action"] == "cut" and cut is None:
            cut = line
        elif line["event"] == "response_end" and end is None:
            end = line
    if end is None:
        raise TraceError(f"{source}: no response_end line (an incomplete trace)")
    return Trace(
        request_id=end["request_id"],
        status=end["status"],
        content_type=end.get("content_type"),
        content_encoding=_content_encoding(end, frames),
        frames=tuple(frames),
        outcome=end["outcome"],
        end_ms=end["duration_ms"] or (frames[-1].t_ms if frames else 0.0),
        cut_how=None if cut is None else cut.get("how", "close"),
        cut_before_headers=cut is not None and cut.get("before") == "headers",
        error=end.get("error"),
        scenario=None if request is None else request["scenario"],
        seed=None if request is None else request["seed"],
    )


def _frame(line: FrameLine, source: str, number: int) -> ReplayFrame:
    raw = line.get("raw")
    if raw is None:
        raise TraceError(
            f"{source}:{number}: frame has no content; record with --log-content to replay"
        )
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise TraceError(f"{source}:{number}: frame raw is not base64") from None
    if line["size"] != len(data):
        raise TraceError(
            f"{source}:{number}: frame raw is {len(data)} bytes, size says {line['size']}"
        )
    return ReplayFrame(line["t_ms"], data)


def _content_encoding(end: ResponseEndLine, frames: list[ReplayFrame]) -> str | None:
    recorded = end.get("content_encoding")
    if recorded is not None:
        return recorded
    if "compress" not in end.get("faults_applied", {}) or not frames:
        return None
    return "gzip" if frames[0].data.startswith(b"\x1f\x8b") else "deflate"


# --------------------------------------------------------------------------- serving

TRACE = web.AppKey("trace", Trace)


def create_replay_app(trace: Trace) -> web.Application:
    app = web.Application()
    app[TRACE] = trace
    app.router.add_route("*", "/{tail:.*}", _serve)
    return app


async def _serve(request: web.Request) -> web.StreamResponse:
    trace = request.app[TRACE]
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def until(ms: float) -> None:
        delay = start + ms / 1000.0 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    if trace.cut_before_headers:
        await until(trace.end_ms)
        await cut_connection(request, trace.cut_how or "close")
        return web.Response(status=500)  # never sent: the connection is gone
    if trace.outcome in ("proxy_error", "upstream_error") and not trace.frames and trace.status:
        await until(trace.end_ms)
        message = trace.error or trace.outcome.replace("_", " ")
        return answer(error_answer(trace.status, message, _headers(trace).items()))
    if not trace.status:  # the original never answered: the client left first
        await asyncio.Event().wait()
    headers = _headers(trace)
    if trace.content_type:
        headers["Content-Type"] = trace.content_type
    if trace.content_encoding:
        headers["Content-Encoding"] = trace.content_encoding
    resp = web.StreamResponse(status=trace.status, headers=headers)
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for frame in trace.frames:
        await until(frame.t_ms)
        await resp.write(frame.data)
    await until(trace.end_ms)
    how = _ending(trace)
    if how == "hold":
        await asyncio.Event().wait()
    if how == "close":
        await resp.write_eof()
    else:
        await cut_connection(request, how)
    return resp


def _headers(trace: Trace) -> dict[str, str]:
    headers = {"X-Chaos-Replay": trace.request_id}
    if trace.scenario:
        headers["X-Chaos-Scenario"] = trace.scenario
    if trace.seed is not None:
        headers["X-Chaos-Seed"] = str(trace.seed)
    return headers


def _ending(trace: Trace) -> str:
    if trace.outcome == "cut":
        return trace.cut_how or "close"
    if trace.outcome == "upstream_error":
        return "abort"
    if trace.outcome == "client_gone":
        return "hold"
    return "close"


async def start_replay(trace: Trace, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Serve ``trace`` on ``host:port`` (0 for a free port); returns (runner, url)."""
    runner, bound = await listen(create_replay_app(trace), host, port)
    return runner, f"http://{hostport(host, bound)}"


def describe_trace(trace: Trace) -> str:
    """One line about a trace, for the start-up message."""
    span = max(trace.end_ms, trace.frames[-1].t_ms if trace.frames else 0.0)
    end = trace.outcome if trace.cut_how is None else f"{trace.outcome} ({trace.cut_how})"
    return (
        f"request {trace.request_id}, status {trace.status}, {len(trace.frames)} frames, "
        f"{len(trace.body)} bytes over {span:.0f} ms, ends {end}"
    )


__all__ = [
    "Trace",
    "TraceError",
    "create_replay_app",
    "describe_trace",
    "load_trace",
    "parse_trace",
    "start_replay",
]
