"""Keep-alive HTTP/1.1 connections to one upstream, and the request's way in.

- Idle connections are a LIFO stack (the warmest first; the others age out through
  ``idle_timeout``, one timer each). A connection the server closes while idle is
  dropped from the pool in ``connection_lost``.
- A reused connection that dies before any response byte (the server closed it as we
  wrote: the keep-alive race) is retried once on a fresh connection when the request
  body can be sent again (bytes or none).
- Connections go back only after a clean, fully read, non close-delimited HTTP/1.1 body
  with keep-alive on both sides and the request body fully sent.
- One ``connect_timeout`` covers name resolution (:mod:`.resolver`), TCP (the
  addresses raced, :mod:`.eyeballs`), a forward proxy's tunnel (:mod:`.forward`) and TLS; a
  request's ``head_timeout`` and ``idle_timeout`` are the connection's (:mod:`.connection`).
- ``max_connections`` bounds the connections open (idle, busy or being made) at once. A
  request that finds none idle and no room waits, first come first served, for a
  connection to come back idle or to close; the wait has no deadline of its own (the
  connections it waits for are bounded by their own timeouts) and ends when the request
  is cancelled (its client left) or the pool closes. ``connect_timeout`` and
  ``head_timeout`` start once it has its connection.
- A request cancelled at any point leaves nothing behind: a connect given up after the
  transport was made drops its connection itself (the loop may never report it), and
  :meth:`UpstreamPool.close` waits for its connections to report for a bounded time only.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from chaosproxy.upstream import eyeballs, forward
from chaosproxy.upstream.connection import Connection, Stale
from chaosproxy.upstream.errors import UpstreamConnectError, UpstreamTimeout, one_line
from chaosproxy.upstream.resolver import Resolver
from chaosproxy.upstream.response import UpstreamResponse

__all__ = ["PoolStats", "UpstreamPool"]


@dataclass(frozen=True, slots=True)
class PoolStats:
    opened: int  #: connections opened, ever
    reused: int  #: requests sent on a pooled (reused) connection
    idle: int  #: connections in the pool now
    active: int  #: connections open now, idle or busy
    waiting: int = 0  #: requests waiting for a connection (``max_connections`` reached)


_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE: Final = re.compile(r"[\r\n\x00]")
_BAD_TARGET: Final = re.compile(r"[\x00-\x20\x7f]")
_OWN_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding"})
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
#: How long close() waits for aborted connections to report before it forgets them.
_CLOSE_WAIT: Final = 1.0


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
        max_connections: int | None = None,
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
        self._auth = forward.basic_auth(parts.username, parts.password)
        self._tls: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._tls = ssl_context if ssl_context is not None else ssl.create_default_context()
        self._resolver = Resolver(self._host, self._port)
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._idle_timeout = idle_timeout
        self._max_head_size = max_head_size
        if max_connections is not None and max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._max_connections = max_connections
        #: Connects in flight (a connection is counted in ``_conns`` from connection_made).
        self._connecting = 0
        #: Requests waiting for room, oldest first.
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[Connection, None] = {}  # insertion-ordered: popitem() is LIFO
        self._conns: set[Connection] = set()
        self._opened = 0
        self._reused = 0
        self._closed = False
        self._all_gone: asyncio.Future[None] | None = None

    #: The route (:meth:`_route`), set on first use: read from the environment.
    _route_memo: _Route | None = None

    @property
    def stats(self) -> PoolStats:
        waiting = sum(1 for w in self._waiters if not w.done())
        return PoolStats(self._opened, self._reused, len(self._idle), len(self._conns), waiting)

    async def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None = None,
        *,
        content_length: int | None = None,
        head_timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> UpstreamResponse:
        """Send a request; returns once the final response head is parsed.

        ``head_timeout``: the longest the upstream may take to send its final head,
        from the request (or the last piece of its body) written (then
        :class:`UpstreamHeadTimeout`); ``idle_timeout``: the longest it may send
        nothing mid-body while we read (then the body ends with
        :class:`UpstreamIdleTimeout`). ``None`` or 0: no limit.

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
        conn, reused = await self._acquire(fresh=False)
        limits = (head_timeout, idle_timeout)
        try:
            return await self._exchange(
                conn, head, data, stream, content_length, is_head, req_close, reused, limits
            )
        except Stale:
            conn, _ = await self._acquire(fresh=True)
            return await self._exchange(
                conn, head, data, stream, content_length, is_head, req_close, False, limits
            )

    async def close(self) -> None:
        """Close every connection, idle or in use (their responses end with
        :class:`UpstreamClosed`); returns once all of them are gone, or after
        ``_CLOSE_WAIT`` seconds at most: a connection whose transport never reports
        its end is then forgotten (and its response ended) all the same."""
        self._closed = True
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # it sees the pool closed
        if not self._conns:
            return
        assert self._loop is not None
        if self._all_gone is None or self._all_gone.done():
            self._all_gone = self._loop.create_future()
        gone = self._all_gone
        for conn in list(self._conns):
            conn.kill()
        try:
            async with asyncio.timeout(_CLOSE_WAIT):
                await asyncio.shield(gone)
        except TimeoutError:
            for conn in list(self._conns):
                conn.drop()

    # ------------------------------------------------------------------ internals

    async def _acquire(self, *, fresh: bool) -> tuple[Connection, bool]:
        """A connection for one exchange, and whether it is a reused one: an idle one,
        else a new one if there is room under ``max_connections``, else the first of
        those once one comes back or closes (``fresh``: a new one first, an idle one
        only when there is no room)."""
        loop = self._loop
        assert loop is not None
        front = False
        while True:
            if self._closed:
                raise UpstreamConnectError(f"the pool for upstream {self._where} is closed")
            if not fresh or not self._room():
                conn = self._take_idle()
                if conn is not None:
                    return conn, not fresh
            if self._room():
                self._connecting += 1
                try:
                    return await self._connect(), False
                finally:
                    self._connecting -= 1
                    self._wake()  # a failed connect leaves room
            waiter: asyncio.Future[None] = loop.create_future()
            if front:  # woken but beaten to it: still first in line
                self._waiters.appendleft(waiter)
            else:
                self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # we were woken as we were cancelled: pass it on
                else:
                    waiter.cancel()
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
            front = True

    def _room(self) -> bool:
        limit = self._max_connections
        return limit is None or len(self._conns) + self._connecting < limit

    def _wake(self) -> None:
        """A connection came back idle, or room was made: the first waiter looks."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _exchange(
        self,
        conn: Connection,
        head: bytes,
        data: bytes | None,
        stream: AsyncIterable[bytes] | None,
        length: int | None,
        is_head: bool,
        req_close: bool,
        reused: bool,
        limits: tuple[float | None, float | None],
    ) -> UpstreamResponse:
        fut = conn.begin(
            head,
            data,
            stream,
            length,
            is_head=is_head,
            req_close=req_close,
            reused=reused,
            head_timeout=limits[0],
            idle_timeout=limits[1],
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
        target, proxy_lines = self._proxy_target(path)
        out = [method, " ", target, " HTTP/1.1\r\nHost: ", self._host_header, "\r\n"]
        out.append(proxy_lines)
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

    def _take_idle(self) -> Connection | None:
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

    def _release(self, conn: Connection) -> None:
        if self._closed or len(self._idle) >= self._max_idle or not conn.usable():
            if conn.transport is not None:
                conn.transport.close()
            return
        assert self._loop is not None
        conn.idle_timer = self._loop.call_later(self._idle_timeout, conn.expire)
        self._idle[conn] = None
        if self._waiters:
            self._wake()

    def _forget(self, conn: Connection) -> None:
        self._idle.pop(conn, None)
        self._conns.discard(conn)
        if self._waiters:
            self._wake()
        gone = self._all_gone
        if not self._conns and gone is not None and not gone.done():
            gone.set_result(None)

    def _route(self) -> _Route:
        """How this pool reaches its upstream: directly, or through the forward proxy
        the environment names (:mod:`.forward`), read once, on first use."""
        route = self._route_memo
        if route is None:
            scheme = "https" if self._tls is not None else "http"
            try:
                proxy = forward.proxy_for(scheme, self._host)
            except ValueError as exc:
                raise UpstreamConnectError(str(exc)) from None
            if proxy is None:
                route = _Route(None, self._resolver, self._port)
            else:
                route = _Route(proxy, Resolver(proxy.host, proxy.port), proxy.port)
            self._route_memo = route
        return route

    def connect_directly(self) -> None:
        """Never use a forward proxy, whatever the environment says: for an upstream of
        the proxy's own (the built-in mock on loopback)."""
        self._route_memo = _Route(None, self._resolver, self._port)

    def _proxy_target(self, path: str) -> tuple[str, str]:
        """The request target and extra head lines for ``path``: through a plain-HTTP
        forward proxy, the absolute form and the proxy's credentials."""
        proxy = self._route().proxy
        if proxy is None or self._tls is not None:
            return path, ""
        auth = proxy.authorization
        extra = "" if auth is None else f"Proxy-Authorization: {auth}\r\n"
        return f"http://{self._where}{path}", extra

    async def _connect(self) -> Connection:
        route = self._route()
        where = self._where
        if route.proxy is not None:
            where = f"{where} through forward proxy {route.proxy.where}"
        loop = self._loop
        assert loop is not None
        try:
            async with asyncio.timeout(self._connect_timeout):
                conn = await self._open(route)
        except TimeoutError:
            raise UpstreamTimeout(
                f"connect to upstream {where} timed out after {self._connect_timeout:g} s"
            ) from None
        except ssl.SSLError as exc:
            raise UpstreamConnectError(
                f"TLS with upstream {where} failed: {one_line(exc)}"
            ) from None
        except OSError as exc:
            raise UpstreamConnectError(f"upstream {where} unreachable: {one_line(exc)}") from None
        if self._closed:
            conn.kill()
            raise UpstreamConnectError(f"the pool for upstream {where} is closed")
        return conn

    async def _open(self, route: _Route) -> Connection:
        """Resolve, race the addresses (:mod:`.eyeballs`), tunnel through the forward
        proxy for TLS, then the connection (TLS with the upstream included)."""
        loop = self._loop
        assert loop is not None
        addrs = await route.resolver.resolve(loop)
        # Each attempt gets half the connect timeout when there are others to try, so
        # one that hangs leaves time for the rest (they start 250 ms apart regardless).
        timeout = self._connect_timeout / 2 if len(addrs) > 1 else None
        sock = await eyeballs.connect_first(
            loop, addrs, route.port, attempt_timeout=timeout, failed=route.resolver.forget
        )
        try:
            if route.proxy is not None and self._tls is not None:
                await forward.open_tunnel(loop, sock, self._where, route.proxy)
        except BaseException:
            sock.close()
            raise
        return await self._open_one(sock)

    async def _open_one(self, sock: socket.socket) -> Connection:
        loop = self._loop
        assert loop is not None
        conn = Connection(self, loop)
        try:
            await loop.create_connection(
                lambda: conn,
                sock=sock,
                ssl=self._tls,
                server_hostname=self._host if self._tls is not None else None,
            )
        except BaseException:
            # Cancelled (or timed out, or TLS failed) after connection_made perhaps:
            # the loop tears the transport down, and uvloop never says so. Drop it here.
            if conn.transport is not None:
                conn.drop()
            else:
                sock.close()  # a no-op if the loop's transport closed it already
            raise
        return conn


@dataclass(frozen=True, slots=True)
class _Route:
    """Where a pool's connections go: the upstream, or the forward proxy."""

    proxy: forward.ForwardProxy | None
    resolver: Resolver  #: the addresses to connect to (the upstream's or the proxy's)
    port: int
