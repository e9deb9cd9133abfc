"""One upstream connection: an asyncio protocol that writes a request and parses the
response with httptools (llhttp), handing each read's body to the response's sink.

- **No task per read.** A socket read is parsed inside ``data_received`` and the decoded
  body bytes of that read go to the sink in one synchronous call (the pieces llhttp
  reports for one read are joined). A future and a task wake-up happen once per request
  (the response head), never per body read; aiohttp's client resolves a future per read.
- **One exchange at a time** (no pipelining), with a fresh llhttp parser per exchange.
  llhttp decodes ``Content-Length`` and chunked bodies (trailers are dropped) and skips
  interim ``1xx`` responses' bodies; two things it cannot be told through httptools are
  handled here: the end of a close-delimited body (llhttp is never told EOF, so
  ``connection_lost`` ends it) and a ``HEAD`` request (the parser is stopped from its
  head-complete callback, since llhttp would wait for the announced ``Content-Length``).
- **Timeouts without a per-read timer.** One timer per exchange: first the head timeout
  (the clock restarts whenever a piece of the request body goes out, and stops while
  the client's own body is awaited), then the idle timeout, which only counts while we
  read: a read records a timestamp, the timer re-arms itself from it, and a connection
  we paused (the caller is busy or its client is slow) is never idle.
- **An answer on accept is an answer.** An upstream may send its response head before
  it has read the request (HTTP allows it). Bytes that arrive on a new connection
  before its first request is written are kept (reading paused after the first read),
  and parsed as that request's response once it is written; such a connection is not
  pooled again. On a pooled connection, bytes nobody asked for still end it (a
  server's goodbye: its request is sent again on a fresh connection, as for any stale
  one).
- **An early answer survives a failed write.** The upstream may answer, and close,
  before it has read the whole request body; the write that then fails makes the
  transport drop its reader. What the upstream had sent is still in the kernel, so
  ``connection_lost`` reads it (plain TCP only) before it decides how the exchange ended.
- TCP_NODELAY on every socket. A connection hands itself back to its pool (:mod:`.pool`)
  when the exchange left it reusable. Connection, pool and response are one unit split
  for reading: they use each other's underscore attributes, nobody else does.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import ssl
from collections.abc import AsyncIterable
from typing import Final, Protocol, cast

import httptools
from multidict import CIMultiDict

from chaosproxy.upstream.errors import (
    UpstreamClosed,
    UpstreamError,
    UpstreamHeadTimeout,
    UpstreamIdleTimeout,
    UpstreamProtocolError,
    one_line,
)
from chaosproxy.upstream.response import UpstreamResponse

__all__ = ["Connection", "Owner", "Stale"]


class Owner(Protocol):
    """What a connection uses of the pool it belongs to
    (:class:`~chaosproxy.upstream.pool.UpstreamPool`, which imports this module): its
    bookkeeping, shared with its connections."""

    _where: str
    _tls: ssl.SSLContext | None
    _max_head_size: int
    _idle: dict[Connection, None]
    _conns: set[Connection]
    _opened: int
    _closed: bool

    def _release(self, conn: Connection) -> None: ...

    def _forget(self, conn: Connection) -> None: ...


_INLINE_BODY: Final = 16384  # a bytes body up to this size goes out in the head's write
_VERSIONS: Final = {"1.1": (1, 1), "1.0": (1, 0)}
#: What connection_lost reads from a failed connection's socket, at most, per call.
_SALVAGE_READ: Final = 262144
_SALVAGE_READS: Final = 64


def _limit(seconds: float | None) -> float | None:
    """A timeout as given (None, 0 or infinite: none)."""
    if seconds is None or seconds <= 0 or math.isinf(seconds):
        return None
    return seconds


class _Stop(Exception):
    """Raised in a parser callback to stop llhttp (a HEAD head, bytes after the message)."""


class Stale(Exception):
    """A reused connection died before any response byte: send again on a fresh one."""


class Connection(asyncio.Protocol):
    """One upstream connection; also the httptools callback object for its exchange."""

    def __init__(self, pool: Owner, loop: asyncio.AbstractEventLoop) -> None:
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
        #: An exchange has begun on this connection (its first request was written).
        self._began = False
        #: What a new connection received before its first request was written (an
        #: answer on accept): fed to that request's parser once it is written.
        self._early: list[bytes] = []
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
        self._lost = False
        # Timeouts of the exchange in flight: one timer, for the head then the body.
        self._head_timeout: float | None = None
        self._idle_timeout: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: When the head clock (re)started: the request or its last body piece went out.
        self._sent_at = 0.0
        #: The request body's task waits for the caller's next piece (the head clock stops).
        self._awaiting_caller = False
        #: When the last read arrived (or reading resumed): the idle clock.
        self._read_at = 0.0

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
        head_timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> asyncio.Future[UpstreamResponse]:
        fut: asyncio.Future[UpstreamResponse] = self.loop.create_future()
        self._head = fut
        if not self.usable():  # it died between the connect (or the pool) and now
            fut.set_exception(
                Stale()
                if reused and stream is None
                else UpstreamClosed(
                    f"upstream {self.pool._where} closed the connection before the response head"
                )
            )
            return fut
        self._began = True
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
        self._head_timeout = _limit(head_timeout)
        self._idle_timeout = _limit(idle_timeout)
        self._awaiting_caller = False
        self._sent_at = self.loop.time()
        if self._head_timeout is not None:
            self._timer = self.loop.call_later(self._head_timeout, self._on_timer)
        if stream is not None:
            self._body_sent = False
            self._body_task = self.loop.create_task(self._send_body(stream, length))
        else:
            self._body_sent = True
        if self._early:
            self._answered_early()
        return fut

    def _answered_early(self) -> None:
        """The upstream sent bytes before this (first) request was written: they are
        its answer. Parse them now, then read on; never pool this connection again (a
        server that answers before it reads may answer the next request early too)."""
        data = b"".join(self._early)
        self._early.clear()
        self._dirty = True
        transport = self.transport
        if transport is not None and not self._read_paused:
            transport.resume_reading()
        self.data_received(data)

    def _reset(self) -> None:
        """Forget the exchange (the connection itself is left as it is)."""
        self._parser = None
        self._head = None
        self._resp = None
        self._pieces.clear()
        self._head_chunks = None
        timer = self._timer
        if timer is not None:
            self._timer = None
            timer.cancel()
        task = self._body_task
        if task is not None:
            self._body_task = None
            if not task.done():
                task.cancel()

    def drop(self) -> None:
        """The connect was given up (cancelled, timed out) after ``connection_made``:
        the event loop may tear the transport down without ever calling
        ``connection_lost`` (uvloop does, when the connect's waiter is cancelled after
        it was woken), so the connection says it is gone itself. Idempotent."""
        transport = self.transport
        if transport is not None and not self._lost:
            with contextlib.suppress(Exception):
                transport.abort()
        self._gone(ConnectionAbortedError("the connection was dropped"))

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
            self._read_at = self.loop.time()  # silence counts again from now
            transport.resume_reading()
        else:
            transport.pause_reading()

    def _on_timer(self) -> None:
        """The head or idle deadline may have come: fail the exchange, or re-arm."""
        self._timer = None
        if self._parser is None or self._lost:
            return
        now = self.loop.time()
        where = self.pool._where
        resp = self._resp
        if resp is None:
            limit = self._head_timeout
            if limit is None:
                return
            due = now + limit if self._awaiting_caller else self._sent_at + limit
            if now < due:
                self._timer = self.loop.call_at(due, self._on_timer)
                return
            self._fail(
                UpstreamHeadTimeout(f"upstream {where} sent no response head within {limit:g} s")
            )
            return
        limit = self._idle_timeout
        if limit is None:
            return
        due = now + limit if self._read_paused else self._read_at + limit
        if now < due:
            self._timer = self.loop.call_at(due, self._on_timer)
            return
        n = resp._received
        amount = f"{n} body bytes" if resp._length is None else f"{n} of {resp._length} body bytes"
        self._fail(
            UpstreamIdleTimeout(
                f"upstream {where} sent nothing for {limit:g} s mid-body, after {amount}",
                body_bytes=n,
            )
        )

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
        pieces = aiter(body)
        try:
            while True:
                self._awaiting_caller = True
                try:
                    chunk = await anext(pieces, None)
                finally:
                    self._awaiting_caller = False
                    self._sent_at = self.loop.time()
                if chunk is None:  # (not a break in the finally's try: mypyc has none)
                    break
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
                self._sent_at = self.loop.time()
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
        if parser is None:
            transport = self.transport
            if not self._began and transport is not None:
                # An answer on accept: kept for the first request, which is being
                # written (no more is read until then).
                self._early.append(data)
                transport.pause_reading()
                return
            # Nobody asked: a pooled connection (a server's goodbye), or bytes after a
            # HEAD head. The connection cannot be trusted.
            self.kill()
            return
        self._bytes_in += len(data)
        self._read_at = self.loop.time()
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
        if exc is not None and self._parser is not None and not self._lost:
            self._salvage()
        self._gone(exc)

    def _salvage(self) -> None:
        """The transport failed (typically a write of the request body into a
        connection the upstream has closed after answering): read what the upstream
        sent before, still in the kernel, so that a complete answer is delivered."""
        transport = self.transport
        if transport is None or self.pool._tls is not None:
            return  # TLS records cannot be read past the TLS layer
        sock = transport.get_extra_info("socket")
        try:
            fd = -1 if sock is None else sock.fileno()
        except (OSError, AttributeError):
            return
        if fd < 0:
            return
        for _ in range(_SALVAGE_READS):
            try:
                data = os.read(fd, _SALVAGE_READ)
            except OSError:  # nothing more (EAGAIN), or the reset itself
                return
            if not data:
                return
            self.data_received(data)
            if self._parser is None:  # the exchange ended (or failed) on these bytes
                return

    def _gone(self, exc: Exception | None) -> None:
        """The connection is gone: tell whoever waits, once."""
        if self._lost:
            return
        self._lost = True
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
                head.set_exception(Stale())
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
        timer = self._timer  # the head is in: the idle clock starts
        if timer is not None:
            self._timer = None
            timer.cancel()
        if self._idle_timeout is not None:
            self._read_at = self.loop.time()
            self._timer = self.loop.call_later(self._idle_timeout, self._on_timer)
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
            self._error = UpstreamProtocolError(f"upstream {where} broke HTTP/1.1: {one_line(exc)}")

    def _too_large(self) -> UpstreamProtocolError:
        return UpstreamProtocolError(
            f"upstream {self.pool._where} sent a response head larger than "
            f"{self.pool._max_head_size} bytes"
        )
