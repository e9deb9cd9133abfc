"""A WebSocket through the proxy: the client's upgrade accepted, the proxy's own
WebSocket to the upstream, and the messages relayed both ways.

The upstream's text messages go through the request's :class:`Session` as a framed
stream (one NDJSON line each, ``core/framing/websocket.py``), so the event and
transport faults, integrity and the verdicts apply to them as to an HTTP body's events;
what the pipeline sends is cut back into messages, each handed to the WebSocket faults
(``core/faults/_websocket.py``: fragments, a close) and written as frames, one
``frame`` line per write. Binary messages and the client's messages are relayed as
they come. The frames to the client are written here (unmasked server frames, any FIN
and opcode); aiohttp does the handshake and reads the client's frames; the upstream
is reached with aiohttp's WebSocket client, with the upstream TLS settings.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from aiohttp.http_writer import StreamWriter

from chaosproxy.core.actions import Cut, Respond, Send, Sleep
from chaosproxy.core.faults._websocket import Pong, WebSocketFault, WsClose, WsMessage, WsOut
from chaosproxy.core.framing.websocket import (
    BINARY,
    NORMAL_CLOSURE,
    OPCODE_NAMES,
    PONG,
    TEXT,
    MessageSplitter,
    WsFrame,
    encode_frame,
    message_line,
)
from chaosproxy.core.records import CutHow
from chaosproxy.core.session import forwarded_request_headers
from chaosproxy.observe.logs import content_fields, describe, redact_url
from chaosproxy.scenario.fixtures import SCENARIO_HEADER as MOCK_SCENARIO_HEADER
from chaosproxy.server.exchange import Exchange, answer, cancelled, connection_lost
from chaosproxy.server.net import cut_connection
from chaosproxy.upstream.tls import tls_context

if TYPE_CHECKING:
    from chaosproxy.core.actions import Action

#: The head the session frames a WebSocket's server messages under: one event a line.
WS_HEAD = [("Content-Type", "application/x-ndjson")]
#: The largest message a client may send (relayed as it is, never framed): a realtime
#: client's audio (``input_audio_buffer.append``) is large; a message over it ends the
#: connection (1009). The upstream's are bounded by ``--max-event-size``.
CLIENT_MESSAGE_LIMIT = 16 * 1024 * 1024
#: The scenario formats a WebSocket may be relayed under.
WS_FORMATS = frozenset({"auto", "ndjson"})


def is_upgrade(request: web.BaseRequest) -> bool:
    """A WebSocket opening handshake (RFC 6455, 4.1): a GET asking to upgrade."""
    upgrade = request.headers.get("Upgrade", "")
    return request.method == "GET" and upgrade.strip().lower() == "websocket"


def upstream_ws_url(base: str, path: str) -> str:
    """The upstream's WebSocket URL: ``base`` (http → ws, https → wss) with ``path``."""
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    return base.rstrip("/") + path


class WebSocketExchange:
    """One WebSocket through the proxy, logged as an exchange is: an :class:`Exchange`
    (its request line, holds, cuts, refusals, last words and end) that this relays
    instead of forwarding a body. It holds one rather than subclassing it: Exchange is
    compiled, and an interpreted class may not subclass a compiled one
    (tests/test_compiled.py)."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.request, self.state, self.session = ex.request, ex.state, ex.session
        self.choice, self.target, self.log = ex.choice, ex.target, ex.log

    async def run(self, refusal: str | None = None, status: int = 400) -> web.StreamResponse:
        session = self.session
        scenario = self.choice.scenario
        if refusal is None and scenario is not None and scenario.format not in WS_FORMATS:
            refusal = (
                f"scenario {scenario.name!r} says format: {scenario.format}; a WebSocket's "
                "messages are framed one event a message (format: auto or ndjson)"
            )
        try:
            if refusal is not None:
                self.ex._log_request()
                return answer(session.refuse(status, refusal, self.state.clock()))
            for action in session.start(self.state.clock()):
                self.ex._log_request()
                if isinstance(action, Sleep):
                    await self.ex.sleep(action.seconds, action.fault)
                    if session.ended:
                        return web.Response(status=500)  # never sent: aborted
                elif isinstance(action, Cut):
                    await self.ex.cut(action)
                    return web.Response(status=500)  # never sent: cut
                elif isinstance(action, Respond):  # (a held or cut request body: none)
                    return await self.ex._respond(action)
            self.ex._log_request()
            return await self._relay()
        except asyncio.CancelledError:
            cancelled(self.ex)
            raise
        except ConnectionError as exc:
            return await connection_lost(self.ex, exc)
        except Exception as exc:
            return await self.ex._bug(exc)
        finally:
            self.ex._end()

    async def _relay(self) -> web.StreamResponse:
        session = self.session
        config = self.state.config
        target = self.target
        base = target.url if target is not None else self.state.upstream_url
        url = upstream_ws_url(base, session.path)
        headers = [
            (k, v)
            for k, v in forwarded_request_headers(
                self.request.headers.items(), trusted=self.state.scenarios.trust_client
            )
            if not k.lower().startswith("sec-websocket-") and k.lower() != "accept-encoding"
        ]
        chosen = self.choice.scenario
        if chosen is not None and chosen.mock and target is not None and target.direct:
            headers.append((MOCK_SCENARIO_HEADER, chosen.name))  # its mock: fixtures first
        offered = self.request.headers.get("Sec-WebSocket-Protocol", "")
        protocols = tuple(p.strip() for p in offered.split(",") if p.strip())
        ssl = tls_context(config) if url.startswith("wss://") else None
        client = aiohttp.ClientSession(auto_decompress=False)
        try:
            try:
                upstream = await client.ws_connect(
                    url,
                    headers=headers,
                    protocols=protocols,
                    ssl=ssl if ssl is not None else True,
                    timeout=aiohttp.ClientWSTimeout(ws_close=config.connect_timeout),
                    max_msg_size=config.max_event_size,
                    autoclose=True,
                    autoping=True,
                    compress=0,
                )
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                where = redact_url(base)
                status = exc.status if isinstance(exc, aiohttp.WSServerHandshakeError) else 0
                why = f"upstream refused the WebSocket ({status})" if status else describe(exc)
                message = f"upstream WebSocket failed: {why}: {where}"
                return answer(session.unavailable(502, message, "unreachable"))
            try:
                return await self._both_ways(upstream)
            finally:
                await upstream.close()
        finally:
            await client.close()

    async def _both_ways(self, upstream: aiohttp.ClientWebSocketResponse) -> web.StreamResponse:
        session = self.session
        head = session.response_head(101, None, WS_HEAD)
        ws = web.WebSocketResponse(
            autoping=False,
            autoclose=False,
            compress=False,
            max_msg_size=CLIENT_MESSAGE_LIMIT,
            protocols=(upstream.protocol,) if upstream.protocol else (),
        )
        for name, value in head.headers:
            if name.lower().startswith("x-chaos-"):
                ws.headers[name] = value
        await ws.prepare(self.request)
        self.ex._resp = ws
        relay = _Relay(self, ws, upstream)
        down = asyncio.ensure_future(relay.downstream())
        up = asyncio.ensure_future(relay.upstream())
        try:
            await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (down, up, *relay.pongs):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        for task in (down, up):
            exc = task.exception()
            if exc is not None:
                raise exc
        if not session.ended:
            session.client_gone()
        return ws

    def log_message(self, send: Send, frames: list[WsFrame], now: float) -> None:
        """The ``frame`` line of one write: its events, its bytes (the messages' payloads),
        its opcode and, when fragmented, its frames."""
        payload = b"".join(f.payload for f in frames)
        faults = tuple(dict.fromkeys((*send.faults, *(f.fault for f in frames if f.fault))))
        line = self.session.wrote(Send(payload, send.events, send.ends, faults), now)
        if frames:
            line["opcode"] = OPCODE_NAMES[frames[0].opcode]
            if len(frames) > 1:
                line["fragments"] = len(frames)
        if self.ex._content:
            content = content_fields(payload)
            line["data"], line["raw"] = content["data"], content["raw"]
        self.log.frame(line)


class _Relay:
    """The two directions of one WebSocket: the upstream's messages through the session
    to the client, the client's to the upstream."""

    def __init__(
        self,
        exchange: WebSocketExchange,
        ws: web.WebSocketResponse,
        upstream: aiohttp.ClientWebSocketResponse,
    ) -> None:
        self.exchange = exchange
        self.session = exchange.session
        self.ws = ws
        self.up = upstream
        self.splitter = MessageSplitter()
        self.sent = 0
        self.faults = [f for f in self.session.faults if isinstance(f, WebSocketFault)]
        for fault in self.faults:
            fault.relayed = True
        self.pongs: set[asyncio.Task[None]] = set()

    @property
    def clock(self) -> float:
        return self.exchange.state.clock()

    def _write(self, frame: WsFrame) -> None:
        transport = self.exchange.request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client left")
        transport.write(encode_frame(frame))

    async def _drain(self) -> None:
        """Wait while the client's socket buffer is full: a client that stops reading
        stops the relay reading the upstream (whose own buffer then fills)."""
        protocol = self.exchange.request.protocol
        if protocol.writing_paused:
            await StreamWriter(protocol, asyncio.get_running_loop()).drain()

    async def downstream(self) -> None:
        """The upstream's messages to the client, until either side ends."""
        session = self.session
        reason = ""
        failure: aiohttp.WebSocketError | None = None
        while True:
            msg = await self.up.receive()
            if msg.type is aiohttp.WSMsgType.TEXT:
                line = message_line(msg.data.encode())
                if await self._carry(session.feed(line, self.clock)):
                    return
            elif msg.type is aiohttp.WSMsgType.BINARY:
                frame = WsFrame(BINARY, msg.data)
                self._write(frame)
                self.exchange.log_message(Send(msg.data), [frame], self.clock)
                await self._drain()
            elif msg.type is aiohttp.WSMsgType.CLOSE:  # (answered by the proxy's client)
                reason = msg.extra or ""
                break
            else:  # its connection broke, or it broke the protocol (a message too big)
                if isinstance(msg.data, aiohttp.WebSocketError):
                    failure = msg.data
                break
        if session.ended:  # (the client left, or a fault ended it, meanwhile)
            return
        code = self.up.close_code
        if failure is not None:  # the relay cannot go on: the client is told so
            message = f"upstream WebSocket failed: {describe(failure)}"
            session.upstream_failed(message, self.clock, reason="upstream error")
            await self.ws.close(code=failure.code, message=b"upstream failed")
            return
        if code is None or code == 1006 or self.up.exception() is not None:
            session.upstream_failed(
                "upstream WebSocket ended without a close frame", self.clock, reason="upstream cut"
            )
            await cut_connection(self.exchange.request, "abort")
            return
        if await self._carry(session.body_end(self.clock)):
            return
        session.finish()  # (before the close: it wakes the client's reader)
        await self.ws.close(code=code, message=reason.encode())

    async def _carry(self, actions: list[Action]) -> bool:
        """Carry out the session's actions; True once the connection has ended."""
        for action in actions:
            if isinstance(action, Send):
                if await self._send(action):
                    return True
            elif isinstance(action, Sleep):
                await self.exchange.ex.sleep(action.seconds, action.fault)
                if self.session.ended:
                    return True
            else:
                await self._cut(action)
                return True
        return False

    async def _send(self, send: Send) -> bool:
        """One write of the pipeline: its complete messages, each through the WebSocket
        faults, as frames; True when a fault closed the connection."""
        frames: list[WsFrame] = []
        close: WsClose | None = None
        kinds = frozenset(k for ev in send.events for k in ev.kinds)
        for payload in self.splitter.feed(send.data):
            self.sent += 1
            out: list[WsOut] = [WsFrame(TEXT, payload)]
            for fault in self.faults:
                message = WsMessage(
                    tuple(o for o in out if isinstance(o, WsFrame)), self.sent, kinds
                )
                out = fault.on_message(message)
                close = next((o for o in out if isinstance(o, WsClose)), None)
                if close is not None:
                    break
            frames.extend(o for o in out if isinstance(o, WsFrame))
            if close is not None:
                break
        for frame in frames:
            self._write(frame)
        self.exchange.log_message(send, frames, self.clock)
        await self._drain()
        if close is None:
            return False
        await self._close(close)
        return True

    async def _close(self, close: WsClose) -> None:
        how: CutHow = "close" if close.code == NORMAL_CLOSURE else "abort"
        detail = {"code": close.code, "reason": close.reason}
        fields = self.session.cut(Cut(how, fault=close.fault, detail=detail))
        self.exchange.log.info("action", **fields)
        await self.ws.close(code=close.code, message=close.reason.encode())

    async def _cut(self, cut: Cut) -> None:
        """A ``cut``: ``close`` is a close frame (1000); ``abort`` and ``reset`` end the
        TCP connection with none (the client sees 1006)."""
        self.exchange.log.info("action", **self.session.cut(cut))
        if cut.how == "close":
            await self.ws.close(code=NORMAL_CLOSURE)
        else:
            await cut_connection(self.exchange.request, cut.how)

    async def upstream(self) -> None:
        """The client's messages to the upstream, and its pings answered."""
        ws = self.ws
        while True:
            msg = await ws.receive()
            kind = msg.type
            if kind is aiohttp.WSMsgType.TEXT:
                await self.up.send_str(msg.data)
            elif kind is aiohttp.WSMsgType.BINARY:
                await self.up.send_bytes(msg.data)
            elif kind is aiohttp.WSMsgType.PING:
                self._pong(msg.data)
            elif kind is aiohttp.WSMsgType.CLOSE:
                await self._client_closed(msg.data, msg.extra or "")
                return
            elif kind is aiohttp.WSMsgType.PONG:
                continue
            elif kind is aiohttp.WSMsgType.CLOSING:  # the proxy's own close, under way
                return
            else:  # CLOSED, ERROR, CLOSING: the client's connection is gone
                if not self.session.ended:
                    self.session.client_gone()
                return

    def _pong(self, payload: bytes) -> None:
        pong: Pong | None = Pong(0.0)
        for fault in self.faults:
            if pong is None:
                break
            pong = fault.on_ping(pong)
        if pong is None:
            return
        if pong.delay <= 0:
            self._write(WsFrame(PONG, payload))
            return
        task = asyncio.ensure_future(self._late_pong(pong.delay, payload))
        self.pongs.add(task)
        task.add_done_callback(self.pongs.discard)

    async def _late_pong(self, delay: float, payload: bytes) -> None:
        await asyncio.sleep(delay)
        with contextlib.suppress(ConnectionError):
            self._write(WsFrame(PONG, payload))

    async def _client_closed(self, code: int, reason: str) -> None:
        """The client closed: the answer so far is what it got (what the faults still
        hold is never sent), the close echoed, the upstream closed with its code."""
        session = self.session
        if not session.ended:
            session.body_end(self.clock)
            session.finish()
        with contextlib.suppress(ConnectionError):
            await self.ws.close(code=code or NORMAL_CLOSURE)
        await self.up.close(code=code or NORMAL_CLOSURE, message=reason.encode())


__all__ = ["WS_HEAD", "WebSocketExchange", "is_upgrade", "upstream_ws_url"]
