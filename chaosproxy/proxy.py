"""The I/O shell: an aiohttp server that forwards to the upstream and executes actions.

Everything that decides *what* to send lives in ``chaosproxy.core``; this module only
moves bytes: it reads the upstream with ``readany()`` (each read as it arrives), feeds
the pipeline, and carries out its ``Send``/``Sleep``/``Cut`` actions, awaiting every
write so a slow client pushes back on the upstream. A request without an active
scenario takes a fast path that writes each upstream read as it is and frames nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import secrets
import socket
import struct
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from chaosproxy.core.actions import Action, Cut, Send, Sleep
from chaosproxy.core.faults import Fault
from chaosproxy.core.faults.base import Respond
from chaosproxy.core.frames import Format, format_for_content_type
from chaosproxy.core.framing import DEFAULT_MAX_SIZE, FramingError
from chaosproxy.engine import Run
from chaosproxy.logs import FrameLog, content_fields, redact_path, redact_text
from chaosproxy.scenario import Scenario
from chaosproxy.selection import Choice, ScenarioSet, UnknownScenario

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


@dataclass(slots=True)
class ProxySettings:
    upstream: str
    scenarios: ScenarioSet
    log: FrameLog
    connect_timeout: float = 10.0
    max_event_size: int = DEFAULT_MAX_SIZE


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
SESSION = web.AppKey("session", aiohttp.ClientSession)


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
    app.cleanup_ctx.append(_client_session)
    app.router.add_route("*", "/{tail:.*}", _handle)
    return app


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=settings.connect_timeout, sock_read=None
    )
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    ) as session:
        app[SESSION] = session
        yield


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
        if self.request.content_length is not None:
            headers["Content-Length"] = str(self.request.content_length)
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
            await self._write(resp, Send(answer.body))
        await resp.write_eof()
        return resp

    async def _forward(self) -> web.StreamResponse:
        request = self.request
        settings = self.settings
        session = request.app[SESSION]
        url = settings.upstream.rstrip("/") + self.choice.path
        data: Any = request.content if request.body_exists else None
        try:
            upstream = await session.request(
                request.method,
                url,
                headers=self.upstream_headers(),
                data=data,
                allow_redirects=False,
            )
        except (TimeoutError, aiohttp.ConnectionTimeoutError):
            raise ProxyError(504, f"upstream timed out on connect: {settings.upstream}") from None
        except aiohttp.ClientConnectorError as exc:
            raise ProxyError(502, f"upstream unreachable: {_describe(exc)}") from None
        except aiohttp.ClientError as exc:
            raise ProxyError(502, f"upstream failed before responding: {_describe(exc)}") from None
        try:
            return await self._stream(upstream)
        finally:
            # On any early exit (client gone, cut, error) this closes the upstream
            # connection at once instead of returning it to the pool half-read.
            if not upstream.content.at_eof():
                upstream.close()
            else:
                upstream.release()

    async def _stream(self, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        headers = self._response_headers(upstream)
        fast = self.run_ is None
        if fast and "Content-Length" in upstream.headers:
            headers["Content-Length"] = upstream.headers["Content-Length"]
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        self.result.status = upstream.status
        self.result.content_type = headers.get("Content-Type")
        await self._prepare(resp)
        try:
            if fast:
                await self._pump_raw(resp, upstream)
            else:
                await self._pump_pipeline(resp, upstream)
        except (aiohttp.ClientError, ConnectionResetError) as exc:
            # aiohttp's "cannot write to closing transport" is a ClientError too: look
            # at the client's side before blaming the upstream.
            if self._client_gone():
                self.result.outcome = "client_gone"
            elif isinstance(exc, aiohttp.ClientPayloadError):
                await self._upstream_failed(resp, f"upstream body broken: {_describe(exc)}")
            else:
                await self._upstream_failed(resp, f"upstream failed mid-body: {_describe(exc)}")
        except FramingError as exc:
            await self._upstream_failed(resp, f"upstream broke its framing: {exc}", salvage=False)
        return resp

    def _client_gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def _response_headers(self, upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
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

    async def _prepare(self, resp: web.StreamResponse) -> None:
        await resp.prepare(self.request)
        self._prepared = True

    # ------------------------------------------------------------------ pumps

    async def _pump_raw(self, resp: web.StreamResponse, upstream: aiohttp.ClientResponse) -> None:
        read = upstream.content.readany
        while chunk := await read():
            await self._write(resp, Send(chunk))
        await resp.write_eof()

    async def _pump_pipeline(
        self, resp: web.StreamResponse, upstream: aiohttp.ClientResponse
    ) -> None:
        assert self.run_ is not None
        pipeline = self.run_.begin_body(
            self.fmt, self.choice.path, max_size=self.settings.max_event_size
        )
        content = upstream.content
        clock = time.monotonic
        while True:
            deadline = pipeline.deadline()
            if deadline is None:
                chunk = await content.readany()
            else:
                wait = deadline - clock()
                try:
                    chunk = await asyncio.wait_for(content.readany(), max(wait, 0))
                except TimeoutError:
                    if await self._execute(resp, pipeline.poll(clock())):
                        return
                    continue
            if not chunk:
                break
            if await self._execute(resp, pipeline.feed(chunk, clock())):
                return
        if await self._execute(resp, pipeline.end(clock())):
            return
        await resp.write_eof()

    async def _execute(self, resp: web.StreamResponse, actions: list[Action]) -> bool:
        """Carry out actions in order; True when the response has ended (a Cut)."""
        for action in actions:
            if isinstance(action, Send):
                await self._write(resp, action)
            elif isinstance(action, Sleep):
                await self._sleep(action.seconds)
            else:
                await self._cut(resp, action)
                return True
        return False

    # ------------------------------------------------------------------ effects

    async def _write(self, resp: web.StreamResponse, send: Send) -> None:
        data = send.data
        if not data:
            return
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
        if self.run_ is not None:
            line["events"] = [e.ordinal for e in send.events]
            line["kinds"] = sorted({k for e in send.events for k in e.kinds})
            line["faults"] = list(send.faults)
        if self.settings.log.content:
            line.update(content_fields(data))
        result.frames += 1
        result.bytes += len(data)
        self.log.info("frame", **line)
        await resp.write(data)

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

    async def _upstream_failed(
        self, resp: web.StreamResponse, message: str, *, salvage: bool = True
    ) -> None:
        """The upstream broke mid-body: send what did arrive of an unfinished event (as
        passthrough would), then end without a clean completion."""
        self.result.outcome = "upstream_error"
        self.result.error = message
        pipeline = self.run_.pipeline if self.run_ is not None else None
        if salvage and pipeline is not None:
            cut = await self._execute(resp, pipeline.salvage(time.monotonic()))
            if cut:
                return
        await self._cut_connection("abort")

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
