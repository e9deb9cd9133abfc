"""chaosproxy's HTTP/1.1 client for the upstream: a keep-alive pool of raw asyncio
protocols that parse responses with httptools (llhttp) and hand the body to a sink.

Design
------
- **No task per read.** A socket read is parsed inside the protocol's ``data_received``
  and the decoded body bytes of that read go to the caller's :class:`BodySink` in one
  synchronous ``body_data`` call (the pieces llhttp reports for one read are joined).
  A future and a task wake-up happen once per request (the response head), never per
  body read. This is the point of the module; aiohttp's client resolves a
  ``StreamReader`` future per read.
- **One exchange per connection at a time** (no pipelining), with a fresh llhttp parser
  per exchange. llhttp decodes ``Content-Length`` and chunked bodies (trailers are
  dropped) and skips interim ``1xx`` responses' bodies; two things it cannot be told
  through httptools are handled here: the end of a close-delimited body (llhttp is
  never told EOF, so ``connection_lost`` ends it) and a ``HEAD`` request (the parser is
  stopped from its head-complete callback, since llhttp would wait for the announced
  ``Content-Length``).
- **Buffering only where the caller is not ready:** body bytes that arrive before
  :meth:`UpstreamResponse.start` or while the caller has paused reading are kept and
  delivered, joined, in one call (the socket is paused past 64 KiB before ``start``).
  Delivery after ``resume_reading`` is scheduled with ``call_soon``, never re-entrant.
- **Pool:** idle connections are a LIFO stack (the warmest first; the others age out
  through ``idle_timeout``, one timer each). A connection the server closes while idle
  is dropped from the pool in ``connection_lost``. A reused connection that dies before
  any response byte (the server closed it as we wrote: the keep-alive race) is retried
  once on a fresh connection when the request body can be sent again (bytes or none).
  Connections go back only after a clean, fully read, non close-delimited HTTP/1.1 body
  with keep-alive on both sides and the request body fully sent.
- **Connect:** TCP_NODELAY on every socket; one ``connect_timeout`` for name
  resolution, TCP and TLS together; resolved addresses cached for five minutes and one
  lookup shared by a burst of connects (like aiohttp's ``ttl_dns_cache``).
- **Errors** are one line and name the upstream as ``host:port`` only: never the
  request target, its query string or credentials.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import re
import socket
import ssl
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol, cast
from urllib.parse import unquote, urlsplit

import httptools
from multidict import CIMultiDict

__all__ = [
    "BodySink",
    "PoolStats",
    "UpstreamClosed",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamProtocolError",
    "UpstreamResponse",
    "UpstreamTimeout",
]


class UpstreamError(Exception):
    """Anything that went wrong talking to the upstream; ``str()`` is one safe line."""


class UpstreamConnectError(UpstreamError):
    """Could not connect, or the TLS handshake failed (the proxy answers 502)."""


class UpstreamTimeout(UpstreamConnectError):
    """The connect (resolution, TCP and TLS) timed out (the proxy answers 504)."""


class UpstreamProtocolError(UpstreamError):
    """The upstream broke HTTP/1.1: a bad status line or chunk size, a head too large."""


class UpstreamClosed(UpstreamError):
    """The connection closed or was reset before the head or mid-body.

    ``body_bytes`` is how many body bytes had arrived (``None`` before the head)."""

    def __init__(self, message: str, *, body_bytes: int | None = None) -> None:
        super().__init__(message)
        self.body_bytes = body_bytes


class BodySink(Protocol):
    """Where a response body goes; called synchronously from the connection's callbacks."""

    def body_data(self, data: bytes) -> None: ...

    def body_end(self, error: UpstreamError | None) -> None: ...


@dataclass(frozen=True, slots=True)
class PoolStats:
    opened: int  #: connections opened, ever
    reused: int  #: requests sent on a pooled (reused) connection
    idle: int  #: connections in the pool now
    active: int  #: connections open now, idle or busy


#: Body bytes held before start() (or while paused) before the socket is paused.
_PENDING_LIMIT: Final = 65536
_DNS_TTL: Final = 300.0
_INLINE_BODY: Final = 16384  # a bytes body up to this size goes out in the head's write
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE: Final = re.compile(r"[\r\n\x00]")
_BAD_TARGET: Final = re.compile(r"[\x00-\x20\x7f]")
_OWN_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding"})
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
_VERSIONS: Final = {"1.1": (1, 1), "1.0": (1, 0)}


class _Stop(Exception):
    """Raised in a parser callback to stop llhttp (a HEAD head, bytes after the message)."""


class _Stale(Exception):
    """A reused connection died before any response byte: send again on a fresh one."""


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return (text.splitlines() or [type(exc).__name__])[0][:200]


class UpstreamResponse:
    """A response whose head has arrived; the body is delivered to a sink by :meth:`start`."""

    def __init__(
        self,
        conn: _Connection,
        status: int,
        reason: str,
        version: tuple[int, int],
        headers: CIMultiDict[str],
        length: int | None,
        where: str,
    ) -> None:
        self.status = status
        self.reason = reason
        self.version = version
        self.headers = headers
        self._conn: _Connection | None = conn
        self._loop = conn.loop
        self._length = length
        self._where = where
        self._sink: BodySink | None = None
        self._paused = False
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._received = 0
        self._ended = False
        self._error: UpstreamError | None = None
        self._end_delivered = False

    # ------------------------------------------------------------------ public

    @property
    def complete(self) -> bool:
        """The whole body arrived cleanly (its delivery may wait for start/resume)."""
        return self._ended and self._error is None

    @property
    def body_bytes(self) -> int:
        """Body bytes received so far (decoded: without chunk framing)."""
        return self._received

    def start(self, sink: BodySink) -> None:
        """Deliver the body to ``sink``: what already arrived at once (one call), then
        each later read as one ``body_data``, then ``body_end`` exactly once."""
        if self._sink is not None:
            raise RuntimeError("UpstreamResponse.start() called twice")
        self._sink = sink
        self._flush()
        self._update_reading()

    def pause_reading(self) -> None:
        """No ``body_data`` until :meth:`resume_reading`; the upstream socket is paused."""
        if not self._paused:
            self._paused = True
            self._update_reading()

    def resume_reading(self) -> None:
        """Resume; bytes held meanwhile are delivered from the loop (``call_soon``)."""
        if not self._paused:
            return
        self._paused = False
        if self._sink is not None and (self._pending or (self._ended and not self._end_delivered)):
            self._loop.call_soon(self._flush)
        self._update_reading()

    def close(self) -> None:
        """Abort: the connection is dropped, never pooled. Undelivered bytes are
        discarded; a started sink that has not had ``body_end`` gets it now (with
        :class:`UpstreamClosed` unless the body had ended cleanly and was all
        delivered). Idempotent, and a no-op for the connection after a clean end."""
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.abandon()
        lost = bool(self._pending)
        self._pending.clear()
        self._pending_size = 0
        if not self._ended or (lost and self._error is None):
            self._ended = True
            self._error = UpstreamClosed(
                f"response from upstream {self._where} closed by the caller after "
                f"{self._received} body bytes",
                body_bytes=self._received,
            )
        sink = self._sink
        if sink is not None and not self._end_delivered:
            self._end_delivered = True
            sink.body_end(self._error)

    def __repr__(self) -> str:
        return f"<UpstreamResponse {self.status} {self.reason!r} from {self._where}>"

    # ------------------------------------------------------------------ connection side

    def _body(self, data: bytes) -> None:
        self._received += len(data)
        sink = self._sink
        if sink is not None and not self._paused and not self._pending:
            sink.body_data(data)
            return
        self._pending.append(data)
        self._pending_size += len(data)
        if sink is None and self._pending_size > _PENDING_LIMIT:
            self._update_reading()

    def _end(self, error: UpstreamError | None) -> None:
        self._conn = None
        if self._ended:
            return
        self._ended = True
        self._error = error
        if self._sink is not None and not self._paused and not self._pending:
            self._end_delivered = True
            self._sink.body_end(error)

    def _cut(self, what: str) -> UpstreamClosed:
        n = self._received
        if self._length is not None:
            amount = f"{n} of {self._length} body bytes"
        else:
            amount = f"{n} body bytes"
        return UpstreamClosed(f"{what} after {amount}", body_bytes=n)

    def _flush(self) -> None:
        sink = self._sink
        if sink is None or self._paused or self._end_delivered:
            return
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending.clear()
            self._pending_size = 0
            sink.body_data(data)
            if self._held():  # the sink paused or closed us
                return
            self._update_reading()
        if self._ended:
            self._end_delivered = True
            sink.body_end(self._error)

    def _held(self) -> bool:
        return self._paused or self._end_delivered

    def _update_reading(self) -> None:
        conn = self._conn
        if conn is not None:
            conn.set_reading(
                not (self._paused or (self._sink is None and self._pending_size > _PENDING_LIMIT))
            )


class _Connection(asyncio.Protocol):
    """One upstream connection; also the httptools callback object for its exchange."""

    def __init__(self, pool: UpstreamPool, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.alive = False
        self.idle_timer: asyncio.TimerHandle | None = None
        self._read_paused = False
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        # The exchange in flight.
        self._parser: httptools.HttpResponseParser | None = None
        self._head: asyncio.Future[UpstreamResponse] | None = None
        self._resp: UpstreamResponse | None = None
        self._pieces: list[bytes] = []
        #: llhttp's on_body: the pieces of one read, joined after feed_data.
        self.on_body = self._pieces.append
        self._reused = False
        self._retryable = False
        self._is_head = False
        self._req_close = False
        self._head_chunks: list[bytes] | None = None  # HEAD requests: the head's reads
        self._bytes_in = 0
        self._head_size = 0
        self._heads = 0
        self._reason = b""
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._keep_alive = False
        self._until_eof = False
        self._done = False
        self._dirty = False
        self._error: UpstreamError | None = None
        self._body_task: asyncio.Task[None] | None = None
        self._body_sent = True

    # ------------------------------------------------------------------ exchange

    def usable(self) -> bool:
        return self.alive and self.transport is not None and not self.transport.is_closing()

    def begin(
        self,
        head: bytes,
        body: bytes | None,
        stream: AsyncIterable[bytes] | None,
        length: int | None,
        *,
        is_head: bool,
        req_close: bool,
        reused: bool,
    ) -> asyncio.Future[UpstreamResponse]:
        fut: asyncio.Future[UpstreamResponse] = self.loop.create_future()
        self._head = fut
        if not self.usable():  # it died between the connect (or the pool) and now
            fut.set_exception(
                _Stale()
                if reused and stream is None
                else UpstreamClosed(
                    f"upstream {self.pool._where} closed the connection before the response head"
                )
            )
            return fut
        self._parser = httptools.HttpResponseParser(self)
        self._reused = reused
        self._retryable = stream is None
        self._is_head = is_head
        self._req_close = req_close
        self._head_chunks = [] if is_head else None
        self._bytes_in = self._head_size = self._heads = 0
        self._done = self._dirty = False
        self._error = None
        transport = self.transport
        assert transport is not None
        if body:
            if len(body) <= _INLINE_BODY:
                transport.write(head + body)
            else:
                transport.writelines((head, body))
        else:
            transport.write(head)
        if stream is not None:
            self._body_sent = False
            self._body_task = self.loop.create_task(self._send_body(stream, length))
        else:
            self._body_sent = True
        return fut

    def _reset(self) -> None:
        """Forget the exchange (the connection itself is left as it is)."""
        self._parser = None
        self._head = None
        self._resp = None
        self._pieces.clear()
        self._head_chunks = None
        task = self._body_task
        if task is not None:
            self._body_task = None
            if not task.done():
                task.cancel()

    def abandon(self) -> None:
        """The caller gave up on the exchange: drop the connection, notify nobody."""
        self._reset()
        self.kill()

    def kill(self) -> None:
        """Abort the transport; ``connection_lost`` tells whoever is still waiting."""
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        transport = self.transport
        if transport is not None and self.alive:
            transport.abort()  # also ends a graceful close() still flushing

    def expire(self) -> None:
        self.idle_timer = None
        self.pool._idle.pop(self, None)
        if self.transport is not None:
            self.transport.close()

    def set_reading(self, on: bool) -> None:
        transport = self.transport
        if transport is None or on != self._read_paused or not self.alive:
            return
        self._read_paused = not on
        if on:
            transport.resume_reading()
        else:
            transport.pause_reading()

    def _finish(self) -> None:
        """The final message ended cleanly: pool or close, then tell the response."""
        resp = self._resp
        assert resp is not None
        reusable = (
            self._keep_alive
            and not self._dirty
            and self._body_sent
            and not self._req_close
            and not self._until_eof
        )
        self._reset()
        self.set_reading(True)
        if reusable:
            self.pool._release(self)
        elif self.transport is not None:
            self.transport.close()
        resp._end(None)

    def _fail(self, error: UpstreamError) -> None:
        head, resp = self._head, self._resp
        self._reset()
        self.kill()
        if resp is not None:
            resp._end(error)
        elif head is not None and not head.done():
            head.set_exception(error)

    async def _send_body(self, body: AsyncIterable[bytes], length: int | None) -> None:
        sent = 0
        try:
            async for chunk in body:
                if not chunk:
                    continue
                transport = self.transport
                if transport is None or transport.is_closing():
                    return
                sent += len(chunk)
                if length is None:
                    transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
                else:
                    if sent > length:
                        raise ValueError(f"request body longer than content_length={length}")
                    transport.write(chunk)
                if self._write_paused:
                    waiter = self._drain_waiter = self.loop.create_future()
                    await waiter
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            if length is None:
                transport.write(b"0\r\n\r\n")
            elif sent != length:
                raise ValueError(f"request body was {sent} bytes, content_length={length}")
            self._body_sent = True
        except Exception as exc:  # the caller's iterable failed (or lied about its length)
            self._body_task = None  # it is us: nothing to cancel
            head, resp = self._head, self._resp
            self._reset()
            self.kill()
            if resp is not None:
                resp._end(
                    UpstreamClosed(
                        f"sending the request body to {self.pool._where} failed "
                        f"({type(exc).__name__}) after {resp._received} response body bytes",
                        body_bytes=resp._received,
                    )
                )
            elif head is not None and not head.done():
                head.set_exception(exc)

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.alive = True
        pool = self.pool
        pool._opened += 1
        pool._conns.add(self)
        if pool._closed:
            self.transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:  # nobody asked: an idle connection, or bytes after a HEAD head
            self.kill()
            return
        self._bytes_in += len(data)
        head_chunks = self._head_chunks
        if head_chunks is not None:
            head_chunks.append(data)
        try:
            parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._parse_failed(exc)
        resp = self._resp
        if resp is None:  # still in the head
            error = self._error
            if error is None and self._bytes_in > self.pool._max_head_size:
                error = self._too_large()
            if error is not None:
                self._fail(error)
            return
        if head_chunks is not None and self._done:
            # HEAD: the parser stopped at the end of the head; anything after it in these
            # reads is not ours, and the connection cannot be trusted again.
            seen = b"".join(head_chunks)
            if not seen.endswith(b"\r\n\r\n") or seen.count(b"\r\n\r\n") != self._heads:
                self._dirty = True
        pieces = self._pieces
        if pieces:
            chunk = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            resp._body(chunk)
            if self._resp is not resp:  # the sink closed the response
                return
        if self._done:
            self._finish()
        elif self._error is not None:
            self._fail(self._error)

    def eof_received(self) -> bool | None:
        return None  # close; connection_lost decides what the EOF meant

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self.pool._forget(self)
        head, resp = self._head, self._resp
        until_eof = self._until_eof
        self._reset()
        where = self.pool._where
        how = "closed" if exc is None else "reset"
        if resp is not None:
            if until_eof and exc is None:
                resp._end(None)
            elif self.pool._closed:
                resp._end(resp._cut(f"the pool for upstream {where} was closed"))
            else:
                resp._end(resp._cut(f"upstream {where} {how} the connection"))
        elif head is not None and not head.done():
            if self._reused and self._retryable and self._bytes_in == 0:
                head.set_exception(_Stale())
            else:
                head.set_exception(
                    UpstreamClosed(
                        f"upstream {where} {how} the connection before the response head"
                    )
                )

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiter = self._drain_waiter
        if waiter is not None:
            self._drain_waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ llhttp callbacks

    def on_message_begin(self) -> None:
        if self._resp is not None:  # a second message after the final one
            self._dirty = True
            raise _Stop
        self._reason = b""
        self._headers = CIMultiDict()

    def on_status(self, status: bytes) -> None:
        self._reason += status  # llhttp may report it in pieces across reads
        self._head_size += len(status) + 15

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._resp is not None:
            return  # a trailer
        self._head_size += len(name) + len(value) + 4
        if self._head_size > self.pool._max_head_size:
            self._error = self._too_large()
            raise _Stop
        self._headers.add(
            name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape")
        )

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        self._heads += 1
        status = parser.get_status_code()
        if status < 200:
            return  # interim; a 101 makes feed_data raise HttpParserUpgrade next
        headers = self._headers
        version = _VERSIONS.get(parser.get_http_version())
        if version is None:
            major, _, minor = parser.get_http_version().partition(".")
            version = (int(major), int(minor or 0))
        length: int | None = None
        until_eof = False
        if not (self._is_head or status == 204 or status == 304):
            codings = ",".join(headers.getall("Transfer-Encoding", ()))
            if codings:
                until_eof = codings.rsplit(",", 1)[-1].strip().lower() != "chunked"
            elif "Content-Length" in headers:
                length = int(headers["Content-Length"])  # llhttp has validated it
            else:
                until_eof = True
        self._until_eof = until_eof
        self._keep_alive = version == (1, 1) and parser.should_keep_alive()
        resp = UpstreamResponse(
            self,
            status,
            self._reason.decode("utf-8", "surrogateescape"),
            version,
            headers,
            length,
            self.pool._where,
        )
        self._resp = resp
        head = self._head
        if head is not None and not head.done():
            head.set_result(resp)
        if self._is_head:
            self._done = True
            raise _Stop  # llhttp would wait for the Content-Length a HEAD answer announces

    def on_message_complete(self) -> None:
        if self._resp is not None:
            self._done = True
        # else an interim 1xx ended; the final response follows

    def _parse_failed(self, exc: Exception) -> None:
        if isinstance(exc, httptools.HttpParserCallbackError) and isinstance(
            exc.__context__, _Stop
        ):
            return  # we stopped it; the flags say why
        if self._done:
            self._dirty = True  # garbage after a complete message: just not reusable
            return
        if isinstance(exc, httptools.HttpParserCallbackError):
            raise exc  # a bug of ours in a callback: let the transport report it
        where = self.pool._where
        if isinstance(exc, httptools.HttpParserUpgrade):
            self._error = UpstreamProtocolError(f"upstream {where} switched protocols unasked")
        else:
            self._error = UpstreamProtocolError(
                f"upstream {where} broke HTTP/1.1: {_one_line(exc)}"
            )

    def _too_large(self) -> UpstreamProtocolError:
        return UpstreamProtocolError(
            f"upstream {self.pool._where} sent a response head larger than "
            f"{self.pool._max_head_size} bytes"
        )


class UpstreamPool:
    """Keep-alive HTTP/1.1 connections to one upstream (``base_url``)."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 256,
        idle_timeout: float = 60.0,
        max_head_size: int = 65536,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the upstream must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError("the upstream URL cannot have a query or a fragment")
        self._host = parts.hostname
        default_port = 443 if parts.scheme == "https" else 80
        self._port = parts.port or default_port
        bracketed = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = bracketed if self._port == default_port else f"{bracketed}:{self._port}"
        self._where = f"{bracketed}:{self._port}"
        self._prefix = parts.path.rstrip("/")
        self._auth: str | None = None
        if parts.username is not None:
            user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            try:
                raw = user_pass.encode("latin-1")
            except UnicodeEncodeError:
                raw = user_pass.encode("utf-8")
            self._auth = "Basic " + base64.b64encode(raw).decode("ascii")
        self._tls: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._tls = ssl_context if ssl_context is not None else ssl.create_default_context()
        self._static_addrs: list[tuple[int, str]] | None = None
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(self._host)
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            self._static_addrs = [(family, self._host)]
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._idle_timeout = idle_timeout
        self._max_head_size = max_head_size
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[_Connection, None] = {}  # insertion-ordered: popitem() is LIFO
        self._conns: set[_Connection] = set()
        self._dns: tuple[float, list[tuple[int, str]]] | None = None
        self._dns_task: asyncio.Task[list[tuple[int, str]]] | None = None
        self._opened = 0
        self._reused = 0
        self._closed = False
        self._all_gone: asyncio.Future[None] | None = None

    @property
    def stats(self) -> PoolStats:
        return PoolStats(self._opened, self._reused, len(self._idle), len(self._conns))

    async def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None = None,
        *,
        content_length: int | None = None,
    ) -> UpstreamResponse:
        """Send a request; returns once the final response head is parsed.

        ``target`` (path and query) is appended to the base URL's path. Host,
        Content-Length and Transfer-Encoding are the pool's: the caller's are dropped.
        A bytes body is sent with Content-Length; an async iterable is streamed with
        ``content_length`` if given, else chunked (an iterable that fails makes this
        raise its exception). Raises :class:`UpstreamError` subclasses, and ValueError
        for a malformed method, target or header (a caller's bug).
        """
        if self._closed:
            raise UpstreamConnectError(f"the pool for upstream {self._where} is closed")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        data: bytes | None = None
        stream: AsyncIterable[bytes] | None = None
        if body is None:
            if content_length:
                raise ValueError("content_length given without a body")
            framing = "Content-Length: 0\r\n" if method.upper() in _BODY_METHODS else ""
        elif isinstance(body, bytes | bytearray | memoryview):
            data = bytes(body)
            if content_length is not None and content_length != len(data):
                raise ValueError("content_length does not match the body")
            framing = f"Content-Length: {len(data)}\r\n"
        else:
            stream = body
            if content_length is not None:
                framing = f"Content-Length: {content_length}\r\n"
            else:
                framing = "Transfer-Encoding: chunked\r\n"
        head, req_close = self._encode_head(method, target, headers, framing)
        is_head = method.upper() == "HEAD"
        conn = self._take_idle()
        reused = conn is not None
        if conn is None:
            conn = await self._connect()
        try:
            return await self._exchange(
                conn, head, data, stream, content_length, is_head, req_close, reused
            )
        except _Stale:
            conn = await self._connect()
            return await self._exchange(
                conn, head, data, stream, content_length, is_head, req_close, False
            )

    async def close(self) -> None:
        """Close every connection, idle or in use (their responses end with
        :class:`UpstreamClosed`); returns once all of them are gone."""
        self._closed = True
        self._idle.clear()
        if not self._conns:
            return
        assert self._loop is not None
        if self._all_gone is None or self._all_gone.done():
            self._all_gone = self._loop.create_future()
        gone = self._all_gone
        for conn in list(self._conns):
            conn.kill()
        await asyncio.shield(gone)

    # ------------------------------------------------------------------ internals

    async def _exchange(
        self,
        conn: _Connection,
        head: bytes,
        data: bytes | None,
        stream: AsyncIterable[bytes] | None,
        length: int | None,
        is_head: bool,
        req_close: bool,
        reused: bool,
    ) -> UpstreamResponse:
        fut = conn.begin(
            head, data, stream, length, is_head=is_head, req_close=req_close, reused=reused
        )
        try:
            return await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                fut.result().close()  # the head arrived as we were cancelled
            else:
                conn.abandon()
            raise

    def _encode_head(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], framing: str
    ) -> tuple[bytes, bool]:
        if not _TOKEN.fullmatch(method):
            raise ValueError("invalid request method")
        path = self._prefix + target
        if not path.startswith("/"):
            path = "/" + path
        if _BAD_TARGET.search(path):
            raise ValueError("the request target contains whitespace or control characters")
        out = [method, " ", path, " HTTP/1.1\r\nHost: ", self._host_header, "\r\n"]
        close = False
        has_auth = False
        for name, value in headers:
            lower = name.lower()
            if lower in _OWN_HEADERS:
                continue
            if not _TOKEN.fullmatch(name) or _BAD_VALUE.search(value):
                raise ValueError(f"invalid request header {name[:40]!r}")
            if lower == "connection":
                close = close or any(t.strip().lower() == "close" for t in value.split(","))
            elif lower == "authorization":
                has_auth = True
            out += (name, ": ", value, "\r\n")
        if self._auth is not None and not has_auth:
            out += ("Authorization: ", self._auth, "\r\n")
        out += (framing, "\r\n")
        return "".join(out).encode("utf-8", "surrogateescape"), close

    def _take_idle(self) -> _Connection | None:
        idle = self._idle
        while idle:
            conn, _ = idle.popitem()
            if conn.idle_timer is not None:
                conn.idle_timer.cancel()
                conn.idle_timer = None
            if conn.usable():
                self._reused += 1
                return conn
            conn.kill()
        return None

    def _release(self, conn: _Connection) -> None:
        if self._closed or len(self._idle) >= self._max_idle or not conn.usable():
            if conn.transport is not None:
                conn.transport.close()
            return
        assert self._loop is not None
        conn.idle_timer = self._loop.call_later(self._idle_timeout, conn.expire)
        self._idle[conn] = None

    def _forget(self, conn: _Connection) -> None:
        self._idle.pop(conn, None)
        self._conns.discard(conn)
        gone = self._all_gone
        if not self._conns and gone is not None and not gone.done():
            gone.set_result(None)

    async def _connect(self) -> _Connection:
        where = self._where
        try:
            async with asyncio.timeout(self._connect_timeout):
                addrs = await self._resolve()
                conn = await self._open(addrs)
        except TimeoutError:
            raise UpstreamTimeout(
                f"connect to upstream {where} timed out after {self._connect_timeout:g} s"
            ) from None
        except ssl.SSLError as exc:
            raise UpstreamConnectError(
                f"TLS with upstream {where} failed: {_one_line(exc)}"
            ) from None
        except OSError as exc:
            raise UpstreamConnectError(f"upstream {where} unreachable: {_one_line(exc)}") from None
        if self._closed:
            conn.kill()
            raise UpstreamConnectError(f"the pool for upstream {where} is closed")
        return conn

    async def _open(self, addrs: list[tuple[int, str]]) -> _Connection:
        error: OSError | None = None
        for family, addr in addrs:
            try:
                return await self._open_one(family, addr)
            except ssl.SSLError:
                raise  # another address of the same name will not fix a TLS failure
            except OSError as exc:
                error = exc
        raise error if error is not None else OSError("no address to connect to")

    async def _open_one(self, family: int, addr: str) -> _Connection:
        loop = self._loop
        assert loop is not None
        conn = _Connection(self, loop)
        await loop.create_connection(
            lambda: conn,
            addr,
            self._port,
            family=family,
            ssl=self._tls,
            server_hostname=self._host if self._tls is not None else None,
        )
        return conn

    async def _resolve(self) -> list[tuple[int, str]]:
        if self._static_addrs is not None:
            return self._static_addrs
        loop = self._loop
        assert loop is not None
        cached = self._dns
        if cached is not None and cached[0] > loop.time():
            return cached[1]
        task = self._dns_task
        if task is None:
            task = self._dns_task = loop.create_task(self._lookup())
            task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _lookup(self) -> list[tuple[int, str]]:
        loop = self._loop
        assert loop is not None
        try:
            infos = await loop.getaddrinfo(
                self._host, self._port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        finally:
            self._dns_task = None
        addrs: list[tuple[int, str]] = []
        for family, _, _, _, sockaddr in infos:
            addr = (int(family), str(sockaddr[0]))
            if addr not in addrs:
                addrs.append(addr)
        self._dns = (loop.time() + _DNS_TTL, addrs)
        return addrs


def _retrieve(task: asyncio.Task[list[tuple[int, str]]]) -> None:
    """Mark a shared lookup's failure as seen (its waiters may all have been cancelled)."""
    if not task.cancelled():
        task.exception()


Upstream = UpstreamPool  # TEMP until the upstream package lands
