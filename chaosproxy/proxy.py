"""The I/O shell: an aiohttp server that forwards to the upstream and executes actions.

Everything that decides *what* to send lives in ``chaosproxy.core``; this module only
moves bytes. The upstream is reached with chaosproxy's own small HTTP/1.1 client
(:mod:`chaosproxy.upstream`), which hands over each socket read of the body as a
callback; :class:`_Pump` feeds it to the pipeline and writes the resulting ``Send``
actions to the client's transport at once, in that callback. Only what needs time (a
``Sleep``, a ``Cut``, a client that cannot keep up, the end of the body) goes through
the request's task, in order, and a slow client pushes back on the upstream. A request
without an active scenario frames nothing: each upstream read is written as it is.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import secrets
import socket
import struct
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from multidict import CIMultiDict

from chaosproxy.core.actions import Action, Cut, Respond, Send, Sleep
from chaosproxy.core.faults import Fault
from chaosproxy.core.frames import Format, format_for_content_type
from chaosproxy.core.framing import DEFAULT_MAX_SIZE, FramingError
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.engine import Run
from chaosproxy.logs import FrameLog, content_fields, redact_path, redact_text
from chaosproxy.scenario import Scenario
from chaosproxy.selection import Choice, ScenarioSet, UnknownScenario
from chaosproxy.upstream import (
    Reply,
    Upstream,
    UpstreamConnectError,
    UpstreamError,
    UpstreamPool,
    UpstreamProtocolError,
    UpstreamTimeout,
)

#: Hop-by-hop headers (RFC 9110 §7.6.1) plus those aiohttp recomputes.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_REQUEST_DROP = HOP_BY_HOP | {"host", "accept-encoding", "content-length"}
_RESPONSE_DROP = HOP_BY_HOP | {"content-length"}

#: Request bodies up to this size are read whole before they are forwarded.
BUFFERED_REQUEST_BODY = 2**20
#: Upstream body bytes held while the client's side catches up, before the upstream
#: connection is paused (as aiohttp's own stream reader does).
INBOX_LIMIT = 2**16


@dataclass(slots=True)
class ProxySettings:
    upstream: str
    scenarios: ScenarioSet
    log: FrameLog
    connect_timeout: float = 10.0
    max_event_size: int = DEFAULT_MAX_SIZE
    #: Builds the upstream client (tests: a scripted one); None: an UpstreamPool.
    upstream_factory: Callable[[], Upstream] | None = None


@dataclass(slots=True)
class Outcome:
    """What one request did, for ``response_end``."""

    outcome: str = "completed"
    status: int = 0
    bytes: int = 0
    frames: int = 0
    ttfb_ms: float | None = None
    max_gap_ms: float = 0.0
    error: str | None = None
    content_type: str | None = None
    content_encoding: str | None = None


SETTINGS = web.AppKey("settings", ProxySettings)
UPSTREAM = web.AppKey("upstream", Upstream)


class ProxyError(Exception):
    """A failure the proxy answers itself (status + message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str, headers: Mapping[str, str] = {}) -> web.Response:
    """The proxy's own error answer: JSON body plus ``X-Chaos-Proxy-Error``."""
    body = {"error": {"type": "chaosproxy_error", "message": message}}
    resp = web.json_response(body, status=status, headers=dict(headers))
    resp.headers["X-Chaos-Proxy-Error"] = message.encode("ascii", "replace").decode()[:200]
    return resp


def create_proxy_app(settings: ProxySettings) -> web.Application:
    app = web.Application(handler_args={"max_field_size": 65536})
    app[SETTINGS] = settings
    app.cleanup_ctx.append(_upstream_pool)
    app.router.add_route("*", "/{tail:.*}", _handle)
    return app


async def _upstream_pool(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    pool: Upstream
    if settings.upstream_factory is not None:
        pool = settings.upstream_factory()
    else:
        pool = UpstreamPool(settings.upstream, connect_timeout=settings.connect_timeout)
    app[UPSTREAM] = pool
    try:
        yield
    finally:
        await pool.close()


#: Request ids are ``r-<process tag>-<n>``: short, ordered within a run, and unique
#: across restarts, so trace files of two runs never collide.
_PROCESS_TAG = secrets.token_hex(2)
_ids = itertools.count(1)


def next_request_id() -> str:
    return f"r-{_PROCESS_TAG}-{next(_ids)}"


async def _handle(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    request_id = next_request_id()
    refusal: str | None = None
    try:
        choice = settings.scenarios.choose(request.method, request.path_qs, request.headers)
    except (UnknownScenario, ValueError) as exc:
        # Answered by the proxy itself, never forwarded; still logged and labelled.
        refusal = str(exc)
        choice = Choice(None, False, 0, secrets.randbelow(2**53), request.path_qs)
    exchange = Exchange(request, settings, request_id, choice)
    if isinstance(refusal, str) and "X-Chaos-Scenario" in request.headers:
        exchange.label = request.headers["X-Chaos-Scenario"][:128]
    return await exchange.run(refusal)


class Exchange:
    """One request through the proxy: forward, stream back, log."""

    def __init__(
        self, request: web.Request, settings: ProxySettings, request_id: str, choice: Choice
    ) -> None:
        self.request = request
        self.settings = settings
        self.request_id = request_id
        self.choice = choice
        self.scenario: Scenario | None = choice.scenario if choice.active else None
        self.result = Outcome()
        self.started = time.monotonic()
        self._last_write: float | None = None
        self._prepared = False
        self.run_: Run | None = None
        self.faults: list[Fault] = []
        self.fmt: Format = "raw"
        #: The scenario name reported in X-Chaos-Scenario and the log.
        self.label = choice.scenario.name if choice.scenario else "none"
        self.log = settings.log.for_request(
            request_id=request_id, scenario=choice.scenario.name if choice.scenario else None
        )

    # ------------------------------------------------------------------ headers

    def chaos_headers(self) -> dict[str, str]:
        return {
            "X-Chaos-Request-Id": self.request_id,
            "X-Chaos-Scenario": self.label,
            "X-Chaos-Seed": str(self.choice.seed),
        }

    def upstream_headers(self) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in self.request.headers.items():
            lower = name.lower()
            if lower in _REQUEST_DROP or lower.startswith("x-chaos-"):
                continue
            headers.add(name, value)
        # Connection-specific headers named in Connection are hop-by-hop too.
        for token in self.request.headers.get("Connection", "").split(","):
            headers.popall(token.strip(), None)
        headers["Accept-Encoding"] = "identity"
        return headers

    # ------------------------------------------------------------------ run

    async def run(self, refusal: str | None = None) -> web.StreamResponse:
        """Forward and stream back; with ``refusal``, answer 400 with that reason."""
        request = self.request
        self.log.info(
            "request",
            seed=self.choice.seed,
            method=request.method,
            path=redact_path(self.choice.path),
            **({"ordinal": self.choice.ordinal} if self.choice.scenario else {}),
            **({} if self.choice.active else {"inactive": True}),
        )
        try:
            if refusal is not None:
                raise ProxyError(400, refusal)
            if self.scenario is not None:
                # An active scenario always frames, even with no faults: one event per
                # write is itself a useful scenario. Only "no scenario" is unframed.
                self.run_ = Run.start(self.scenario, self.choice.seed)
                self.faults = self.run_.faults
                early = await self._http_stage()
                if early is not None:
                    return early
            return await self._forward()
        except asyncio.CancelledError:
            self.result.outcome = "client_gone"
            raise
        except ProxyError as exc:
            self.result.outcome = "proxy_error"
            self.result.status = exc.status
            self.result.error = str(exc)
            return error_response(exc.status, str(exc), self.chaos_headers())
        except Exception as exc:  # a bug of ours: explained, logged, never a traceback
            self.result.outcome = "proxy_error"
            self.result.error = f"internal error: {type(exc).__name__}: {_describe(exc)}"
            if self._prepared:  # the head is out: all we can do is not end cleanly
                await self._cut_connection("abort")
                return web.Response(status=500)  # never sent
            self.result.status = 500
            return error_response(500, self.result.error, self.chaos_headers())
        finally:
            self._end()

    async def _http_stage(self) -> web.StreamResponse | None:
        """HTTP faults: a canned answer, held headers, or a cut before any byte."""
        for fault in self.faults:
            for action in fault.before_upstream():
                if isinstance(action, Sleep):
                    await self._sleep(action.seconds)
                elif isinstance(action, Respond):
                    return await self._respond(action)
                elif isinstance(action, Cut):
                    self.result.outcome = "cut"
                    self.log.info("action", action="cut", how=action.how, before="headers")
                    await self._cut_connection(action.how)
                    return web.Response(status=500)  # never sent: the socket is gone
        return None

    async def _respond(self, answer: Respond) -> web.StreamResponse:
        headers = CIMultiDict(answer.headers)
        headers.update(self.chaos_headers())
        resp = web.StreamResponse(status=answer.status, headers=headers)
        resp.content_length = len(answer.body)
        self.result.status = answer.status
        self.result.content_type = headers.get("Content-Type")
        self.result.content_encoding = headers.get("Content-Encoding")
        await self._prepare(resp)
        if answer.body:
            self.log_frame(answer.body, None)
            await resp.write(answer.body)
        await resp.write_eof()
        return resp

    async def _forward(self) -> web.StreamResponse:
        request = self.request
        settings = self.settings
        body, length = await self._request_body()
        try:
            upstream = await request.app[UPSTREAM].request(
                request.method,
                self.choice.path,
                self.upstream_headers().items(),
                body,
                content_length=length,
            )
        except UpstreamTimeout:
            raise ProxyError(504, f"upstream timed out on connect: {settings.upstream}") from None
        except UpstreamConnectError as exc:
            raise ProxyError(502, f"upstream unreachable: {_describe(exc)}") from None
        except UpstreamError as exc:
            raise ProxyError(502, f"upstream failed before responding: {_describe(exc)}") from None
        try:
            return await self._stream(upstream)
        finally:
            # On any early exit (client gone, cut, error) this drops the upstream
            # connection at once; a body read to its end is already back in the pool.
            if not upstream.complete:
                upstream.close()

    async def _request_body(self) -> tuple[bytes | AsyncIterable[bytes] | None, int | None]:
        """The client's request body: read whole when small (so a request on a stale
        keep-alive connection can be sent again), else streamed."""
        request = self.request
        if not request.body_exists:
            return None, None
        length = request.content_length
        if length is not None and length <= BUFFERED_REQUEST_BODY:
            return await request.content.read(), None
        return request.content.iter_chunked(2**16), length

    async def _stream(self, upstream: Reply) -> web.StreamResponse:
        headers = self._response_headers(upstream)
        fast = self.run_ is None
        if fast and "Content-Length" in upstream.headers:
            headers["Content-Length"] = upstream.headers["Content-Length"]
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        self.result.status = upstream.status
        self.result.content_type = headers.get("Content-Type")
        writer = await self._prepare(resp)
        pipeline = None
        if self.run_ is not None:
            pipeline = self.run_.begin_body(
                self.fmt, self.choice.path, max_size=self.settings.max_event_size
            )
        transport = self.request.transport
        if writer is None or transport is None:  # the client left during prepare()
            self.result.outcome = "client_gone"
            return resp
        pump = _Pump(self, resp, writer, transport, upstream, pipeline)
        try:
            await pump.run()
        except (aiohttp.ClientError, ConnectionResetError):
            # Only the client's side is written to here (aiohttp's "cannot write to
            # closing transport" is a ClientError); anything else is a bug of ours.
            if not self._client_gone():
                raise
            self.result.outcome = "client_gone"
        except FramingError as exc:
            await pump.upstream_failed(f"upstream broke its framing: {exc}", salvage=False)
        return resp

    def _client_gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def _response_headers(self, upstream: Reply) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in upstream.headers.items():
            if name.lower() not in _RESPONSE_DROP:
                headers.add(name, value)
        if self.run_ is not None:
            encoded = upstream.headers.get("Content-Encoding", "identity").lower() != "identity"
            self.fmt = (
                "raw" if encoded else format_for_content_type(upstream.headers.get("Content-Type"))
            )
            editors = [
                f for f in self.faults if type(f).response_headers is not Fault.response_headers
            ]
            if editors:  # (a plain dict loses repeated headers: only when a fault edits)
                plain: dict[str, str] = dict(headers.items())
                for fault in editors:
                    plain = fault.response_headers(upstream.status, plain)
                headers = CIMultiDict(plain)
        headers.update(self.chaos_headers())
        return headers

    async def _prepare(self, resp: web.StreamResponse) -> AbstractStreamWriter | None:
        writer = await resp.prepare(self.request)
        self._prepared = True
        return writer

    # ------------------------------------------------------------------ effects

    def log_frame(self, data: bytes, send: Send | None) -> None:
        """The frame-log line for one write of ``data`` (``send`` names its events)."""
        now = time.monotonic()
        result = self.result
        t_ms = (now - self.started) * 1000.0
        if self._last_write is None:
            result.ttfb_ms = round(t_ms, 3)
        else:
            gap = (now - self._last_write) * 1000.0
            if gap > result.max_gap_ms:
                result.max_gap_ms = gap
        self._last_write = now
        line: dict[str, Any] = {
            "seq": result.frames,
            "offset": result.bytes,
            "size": len(data),
            "t_ms": round(t_ms, 3),
        }
        if self.run_ is not None and send is not None:
            line["events"] = [e.ordinal for e in send.events]
            line["kinds"] = sorted({k for e in send.events for k in e.kinds})
            line["faults"] = list(send.faults)
        if self.settings.log.content:
            line.update(content_fields(data))
        result.frames += 1
        result.bytes += len(data)
        self.log.info("frame", **line)

    async def _sleep(self, seconds: float) -> None:
        if math.isinf(seconds):
            # Hold the connection open until the client goes away (the handler is
            # cancelled then) — a stall "forever" or a hang.
            await asyncio.Event().wait()
        await asyncio.sleep(seconds)

    async def _cut(self, resp: web.StreamResponse, cut: Cut) -> None:
        self.result.outcome = "cut"
        self.log.info("action", action="cut", how=cut.how, fault=cut.fault, **cut.detail)
        if cut.how == "close":
            await resp.write_eof()
            return
        await self._cut_connection(cut.how)

    async def _cut_connection(self, how: str) -> None:
        await cut_connection(self.request, how)

    # ------------------------------------------------------------------ end

    def _end(self) -> None:
        result = self.result
        run = self.run_
        line: dict[str, Any] = {
            "outcome": result.outcome,
            "status": result.status,
            "bytes": result.bytes,
            "frames": result.frames,
        }
        if result.content_type:
            line["content_type"] = result.content_type
        if result.content_encoding:
            line["content_encoding"] = result.content_encoding
        if run is not None:
            applied, skipped = run.summary()
            line["provider"] = run.provider
            line["format"] = run.format
            if run.pipeline is not None:
                line["events_in"] = run.pipeline.events_in
                line["events_out"] = run.pipeline.events_out
            line["faults_applied"] = applied
            line["faults_skipped"] = skipped
        line["ttfb_ms"] = result.ttfb_ms
        line["max_gap_ms"] = round(result.max_gap_ms, 3)
        line["duration_ms"] = round((time.monotonic() - self.started) * 1000.0, 3)
        if result.error:
            line["error"] = result.error
        self.log.info("response_end", **line)
        self.settings.log.flush()


class _Pump:
    """Streams one upstream body to the client: the upstream connection's body sink.

    Upstream reads arrive as callbacks from the upstream protocol (:meth:`body_data`).
    While nothing asynchronous is pending, a read goes through the pipeline and its
    sends are written to the client's transport right there, synchronously: no task
    wakes up per event, which is most of what a Python proxy spends per event. Whatever
    needs time (a ``Sleep``, a ``Cut``, a client whose buffer is full, the end of the
    body, a fault's deadline that falls due mid-work) is handed, in order, to
    :meth:`run` in the request's own task; reads that arrive meanwhile wait in an inbox
    (the upstream is paused beyond ``INBOX_LIMIT``) and are fed in order once it has
    caught up. Either way the pipeline sees the same reads at the same moments as a
    read loop would, so the writes are the same.
    """

    def __init__(
        self,
        exchange: Exchange,
        resp: web.StreamResponse,
        writer: AbstractStreamWriter,
        transport: asyncio.Transport,
        upstream: Reply,
        pipeline: Pipeline | None,
    ) -> None:
        self.exchange = exchange
        self.resp = resp
        self.writer = writer
        self.transport = transport
        self.upstream = upstream
        self.pipeline = pipeline
        # aiohttp chooses chunked framing at prepare() (HTTP/1.1, no Content-Length) and
        # says so in the head it sent; the body bytes are framed here to match.
        self.chunked = "chunked" in resp.headers.get("Transfer-Encoding", "").lower()
        self._high = transport.get_write_buffer_limits()[1]
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        #: Actions of a read the callback could not finish (from a Sleep or Cut on).
        self._carry: list[Action] = []
        self._inbox: deque[bytes] = deque()
        self._inbox_bytes = 0
        self._paused = False
        self._drain = False
        self._due = False
        self._ended = False
        self._end_error: UpstreamError | None = None
        self._failure: BaseException | None = None
        #: Stop: nothing more is fed (the body ended, failed, was cut, or the client left).
        self._over = False
        #: The response itself has ended (a cut, or the client left): no more writes.
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    # ------------------------------------------------------------------ the task side

    async def run(self) -> None:
        """Deliver the body; returns when the response has ended (or was cut)."""
        self.upstream.start(self)
        try:
            while not self._over:
                if not self._has_work():
                    self._waiter = self._loop.create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
                await self._work()
        finally:
            self._over = True
            if self._timer is not None:
                self._timer.cancel()

    def _has_work(self) -> bool:
        return bool(
            self._failure is not None
            or self._drain
            or self._carry
            or self._inbox
            or self._due
            or self._ended
            or self._over
        )

    async def _work(self) -> None:
        while not self._over:
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure
            if self._drain:
                self._drain = False
                await self.writer.drain()
            elif self._carry:
                actions, self._carry = self._carry, []
                await self._run_actions(actions)
            elif self._inbox:
                data = self._inbox.popleft()
                self._inbox_bytes -= len(data)
                if self._paused and not self._inbox:
                    self._paused = False
                    self.upstream.resume_reading()
                await self._run_actions(self._feed(data))
            elif self._due:
                self._due = False
                if self.pipeline is not None:
                    await self._run_actions(self.pipeline.poll(time.monotonic()))
            elif self._ended:
                await self._finish()
                self._over = True
            else:
                self._arm_timer()
                return

    async def _run_actions(self, actions: list[Action]) -> None:
        """Carry out actions in order; sets ``_over`` when the response has ended."""
        for action in actions:
            if isinstance(action, Send):
                if not self._send(action):
                    return
                if self._congested():
                    await self.writer.drain()
            elif isinstance(action, Sleep):
                await self.exchange._sleep(action.seconds)
            else:
                await self.exchange._cut(self.resp, action)
                self._closed = self._over = True
                return

    async def _finish(self) -> None:
        error = self._end_error
        if isinstance(error, UpstreamProtocolError):
            await self.upstream_failed(f"upstream body broken: {_describe(error)}")
        elif error is not None:
            await self.upstream_failed(f"upstream failed mid-body: {_describe(error)}")
        else:
            if self.pipeline is not None:
                await self._run_actions(self.pipeline.end(time.monotonic()))
            if not self._closed:
                await self.resp.write_eof()

    async def upstream_failed(self, message: str, *, salvage: bool = True) -> None:
        """The upstream broke mid-body: send what did arrive of an unfinished event (as
        passthrough would), then end without a clean completion."""
        self._over = True  # nothing more from the upstream is fed
        result = self.exchange.result
        result.outcome = "upstream_error"
        result.error = message
        if salvage and self.pipeline is not None:
            await self._run_actions(self.pipeline.salvage(time.monotonic()))
        if not self._closed:
            await self.exchange._cut_connection("abort")

    # ------------------------------------------------------------------ the callback side

    def body_data(self, data: bytes) -> None:
        if self._over:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():  # the task is busy: keep the order
            self._inbox.append(data)
            self._inbox_bytes += len(data)
            if not self._paused and self._inbox_bytes > INBOX_LIMIT:
                self._paused = True
                self.upstream.pause_reading()
            self._wake()
            return
        try:
            self._drive(self._feed(data))
        except Exception as exc:  # FramingError, or a bug: the task reports it
            self._failure = exc
            self._wake()

    def body_end(self, error: UpstreamError | None) -> None:
        if self._over:
            return
        self._ended = True
        self._end_error = error
        self._wake()

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if self._over or self.pipeline is None:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._due = True
            self._wake()
            return
        try:
            self._drive(self.pipeline.poll(time.monotonic()))
        except Exception as exc:
            self._failure = exc
            self._wake()

    def _drive(self, actions: list[Action]) -> None:
        """Write the sends now; from the first thing that needs time on, hand over."""
        for i, action in enumerate(actions):
            if not isinstance(action, Send):
                self._carry = actions[i:]
                self._wake()
                return
            if not self._send(action):
                self._wake()
                return
            if self._congested():
                self._drain = True
                self._carry = actions[i + 1 :]
                self._wake()
                return
        self._arm_timer()

    # ------------------------------------------------------------------ helpers

    def _feed(self, data: bytes) -> list[Action]:
        if self.pipeline is None:
            return [Send(data)]
        return self.pipeline.feed(data, time.monotonic())

    def _send(self, send: Send) -> bool:
        """Log and write one frame; False (and the response over) if the client left."""
        data = send.data
        if not data:
            return True
        transport = self.transport
        if transport.is_closing():
            self.exchange.result.outcome = "client_gone"
            self._closed = self._over = True
            return False
        self.exchange.log_frame(data, send)
        if not self.chunked:
            transport.write(data)
        elif len(data) < 4096:
            transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            transport.writelines((b"%x\r\n" % len(data), data, b"\r\n"))
        return True

    def _congested(self) -> bool:
        return self.transport.get_write_buffer_size() > self._high

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _arm_timer(self) -> None:
        pipeline = self.pipeline
        if pipeline is None:
            return
        deadline = pipeline.deadline()
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            delay = max(deadline - time.monotonic(), 0.0)
            self._timer = self._loop.call_later(delay, self._on_timer)


async def cut_connection(request: web.BaseRequest, how: str) -> None:
    """End the connection under a response: ``abort`` closes it without the last chunk
    (a FIN), ``reset`` sends a TCP RST once what was written has left the kernel."""
    transport = request.transport
    if transport is None or transport.is_closing():
        return
    if how == "reset":
        sock = transport.get_extra_info("socket")
        if sock is not None:
            await drain_send_queue(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()


async def drain_send_queue(sock: socket.socket, limit: float = 1.0) -> None:
    """Wait (briefly) until the kernel has sent what we wrote, so an RST after it does
    not discard bytes the frame log says were sent."""
    import fcntl
    import termios

    deadline = time.monotonic() + limit
    buf = bytearray(4)
    while time.monotonic() < deadline:
        try:
            fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, buf)
        except OSError:
            return
        if int.from_bytes(buf, "little") == 0:
            return
        await asyncio.sleep(0.001)


def _describe(exc: BaseException) -> str:
    """One line about ``exc``, safe to show: aiohttp quotes URLs, with their ``key=``."""
    text = str(exc) or type(exc).__name__
    return redact_text(text.splitlines()[0])[:300]


__all__ = [
    "HOP_BY_HOP",
    "ProxySettings",
    "create_proxy_app",
    "error_response",
]
