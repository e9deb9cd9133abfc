"""The proxy's guard against hostile clients, at the connection level (docs/operations.md,
Clients, in detail): what aiohttp's server does not bound by itself.

- ``client_timeout``: a connection that has not sent a whole request head within it
  (from the connection's start, or from the end of its previous response) is closed.
  A client that sent part of a head gets ``408`` and a ``rejected`` line; a new
  connection that sent nothing gets a ``rejected`` line (no answer: it asked nothing);
  a keep-alive connection idle after a response is closed silently. A request body
  that makes no progress that long (while the proxy reads) ends its connection too.
- ``max_connections``: client connections beyond it are answered ``503`` at once
  (before anything is read) and closed, with a ``rejected`` line.
- Every request head aiohttp could parse goes through :meth:`ClientGuard.gate` before
  routing: ``CONNECT``, the asterisk form, absolute-form targets naming another host,
  a path hiding a dot-segment behind an encoded slash, an ``Expect`` other than
  ``100-continue`` and an HTTP version other than 1.0/1.1 are answered
  ``400``/``417``/``505`` and logged ``rejected``; nothing of them reaches the proxy's
  handler. (The handler then resolves the path's dot-segments: :func:`normalise_path`.)
- Every head aiohttp cannot parse (a malformed head, a request line or a header over
  the limits) is answered ``400``/``414``/``431`` and logged ``rejected`` instead of
  aiohttp's traceback on the ``aiohttp.server`` logger.

How it plugs into aiohttp, and why there. aiohttp builds one
:class:`~aiohttp.web_protocol.RequestHandler` per connection from the runner's
:class:`~aiohttp.web.Server` (its ``__call__`` is the protocol factory). There is no
public option for a head-read timeout, a connection limit or a hook on the errors it
answers itself, so:

- :class:`GuardedRunner` is an :class:`~aiohttp.web.AppRunner` whose ``_make_server``
  (the abstract method :class:`~aiohttp.web.BaseRunner` subclasses implement, as
  ``AppRunner`` and ``ServerRunner`` do) wraps the app's server in a
  :class:`GuardedServer`. Everything else (startup, cleanup, sites, graceful
  shutdown) stays aiohttp's.
- :class:`GuardedServer` is a :class:`~aiohttp.web.Server` (public, documented as the
  low-level server) whose ``request_handler`` (a public attribute) is the gate, and
  whose protocol factory builds a :class:`GuardedProtocol`.
- :class:`GuardedProtocol` subclasses ``RequestHandler`` and overrides only the
  asyncio ``Protocol`` callbacks (``connection_made``, ``data_received``,
  ``connection_lost``: the asyncio contract, not aiohttp internals) and
  ``handle_error``, the public method aiohttp calls to build the answer to a head it
  could not parse. Overriding it means no traceback is logged for those at all; the
  ``aiohttp.server`` logger still reports real bugs (a 500 from a handler).

Two private reads: the app server's handler arguments (``Server._kwargs``), which the
runner computed and the guarded server must pass on unchanged; and whether aiohttp's
queue of parsed messages ends with a parse error (``RequestHandler._messages``,
``_ErrInfo``) while a request is in flight: aiohttp says so nowhere else when the body
of that request breaks, and would leave the handler waiting for the rest of it.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import ipaddress
import re
import termios
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from aiohttp import HttpVersion10, HttpVersion11, web
from aiohttp.http_exceptions import HttpProcessingError, InvalidURLError, LineTooLong
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo
from yarl import URL

from chaosproxy.observe.logs import describe

#: Writes one ``rejected`` line: (status, reason, peer).
Reject = Callable[[int, str, str], None]

_RequestHandler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

#: The longest a refused (503) connection is kept after its answer, so the client can
#: read it before the close (closing at once could reset it away).
REFUSED_LINGER = 2.0

#: When the head timer falls due while bytes the client sent wait unread in the socket
#: (the loop was behind, not the client), it looks again this much later, once the loop
#: has read them.
UNREAD_RECHECK = 0.05

#: The reason texts of ``rejected`` lines are cut to this length.
MAX_REASON = 200

#: The most of a request head held back to see whether its connection is another
#: worker's (:class:`Handover`); a longer head is never handed over.
MAX_HELD_HEAD = 16384

_LAST_EVENT_ID = re.compile(rb"\nlast-event-id[ \t]*:[ \t]*([^\r\n]*)", re.IGNORECASE)


class Handover(Protocol):
    """Hands a connection to the worker that holds what its request asks for
    (``serve --workers N``, chaosproxy.workers.handover): a reconnect whose
    ``Last-Event-ID`` names a stream another worker keeps."""

    def owner(self, last_event_id: bytes) -> int | None:
        """The other worker that keeps the stream of this id; None: this one (or none)."""
        ...

    def send(self, owner: int, transport: asyncio.BaseTransport, data: bytes) -> bool:
        """Give the connection under ``transport`` and the bytes already read from it to
        worker ``owner``; False when it could not be (then it is served here)."""
        ...


def _canned(status: int, reason: str, text: str) -> bytes:
    body = text.encode() + b"\n"
    return (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


TOO_MANY = _canned(503, "Service Unavailable", "too many connections")
HEAD_TIMEOUT = _canned(408, "Request Timeout", "request head not received in time")


#: The HTTP versions the proxy speaks to clients.
_VERSIONS = (HttpVersion10, HttpVersion11)


class BadTarget(ValueError):
    """A request target the proxy will not forward; the message is the reason."""


# --------------------------------------------------------------------------- paths

_ENCODED_DOTS = ("%2e", "%2E")
#: What some servers take for a path separator inside one segment: an encoded slash or
#: backslash, a backslash, or the start of ``;`` path parameters (``..;/`` is ``../``
#: to Tomcat and some Java servers).
_HIDDEN_SEPARATORS = ("%2f", "%2F", "%5c", "%5C", "\\", ";")


def _plain_dots(segment: str) -> str:
    for encoded in _ENCODED_DOTS:
        segment = segment.replace(encoded, ".")
    return segment


def _hides_dot_segment(plain: str) -> bool:
    for sep in _HIDDEN_SEPARATORS:
        plain = plain.replace(sep, "/")
    return any(part in (".", "..") for part in plain.split("/"))


def normalise_path(path_qs: str) -> str:
    """``path_qs`` (an origin-form target, still percent-encoded) with its ``.`` and
    ``..`` segments resolved as RFC 3986 section 5.2.4 does, so the result never
    leaves ``/``: ``/a/../../x`` → ``/x``. A dot is a dot however it is written
    (``%2e``, ``%2E``, ``.``). Every other byte is kept as it came, encoded slashes
    included (``org%2Fmodel`` is one segment to the upstream, as it was to the client);
    a segment that would hide a dot-segment behind one (``..%2f``, ``%2e%2e%5c``,
    ``..;``) is refused with :class:`BadTarget`. The query is not touched."""
    path, sep, query = path_qs.partition("?")
    if not path.startswith("/"):
        raise BadTarget("the request target is not a path")
    if "." not in path and "%2" not in path:  # nothing to resolve (the common case)
        return path_qs
    segments = path[1:].split("/")
    out: list[str] = []
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        plain = _plain_dots(segment)
        if plain == "." or plain == "..":
            if plain == ".." and out:
                out.pop()
            if i == last:
                out.append("")  # /a/b/.. is /a/, as RFC 3986 says
            continue
        if "." in plain and _hides_dot_segment(plain):
            raise BadTarget("the path hides a dot-segment behind an encoded separator")
        out.append(segment)
    return "/" + "/".join(out) + sep + query


# --------------------------------------------------------------------------- the guard


def unread_bytes(transport: asyncio.BaseTransport) -> int:
    """How many bytes wait unread in the transport's socket (0 when unknown)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        waiting = array.array("i", [0])
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, waiting)
    except (OSError, ValueError):  # closed meanwhile, or not a socket
        return 0
    return waiting[0]


def is_reading(transport: asyncio.BaseTransport) -> bool:
    """Whether ``transport`` reads now. uvloop's transports have every method of
    asyncio's, but are not :class:`asyncio.Transport` instances: ask, do not check."""
    reading = getattr(transport, "is_reading", None)
    return bool(reading()) if callable(reading) else False


def format_peer(peername: Any) -> str:
    """``host:port`` of a peer (``[v6]:port``), or ``?`` when unknown."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = peername[0], peername[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return "?" if not peername else str(peername)


def _is_local_name(host: str, sockname: Any) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(sockname, tuple) and sockname:
        try:
            if address == ipaddress.ip_address(sockname[0]):
                return True
        except ValueError:
            pass
    return address.is_loopback


def classify_head_error(exc: BaseException, max_line_size: int) -> tuple[int, str]:
    """(status, reason) for a head aiohttp could not parse."""
    if isinstance(exc, LineTooLong):
        limit = exc.args[1] if len(exc.args) > 1 else None
        if str(limit) == str(max_line_size):
            return 414, f"request line longer than {limit} bytes"
        return 431, f"a header longer than {limit} bytes"
    text = str(exc) or type(exc).__name__
    if isinstance(exc, HttpProcessingError) and exc.message:
        text = exc.message
    first = text.splitlines()[0].rstrip(":").strip() if text.strip() else type(exc).__name__
    if "Too many headers" in first:
        return 431, "too many headers"
    if isinstance(exc, InvalidURLError) and not first.startswith("Invalid"):
        first = f"invalid request target {first[:80]!r}"  # (the message is the target)
    return 400, f"malformed request head: {describe(ValueError(first))}"[:MAX_REASON]


@dataclass(eq=False)
class ClientGuard:
    """The limits on one listener's clients, and its counters."""

    #: Seconds a connection may take to send a request head (and may stay idle).
    client_timeout: float
    #: Connections served at once; the next ones are answered 503.
    max_connections: int
    #: Writes a ``rejected`` line.
    reject: Reject
    #: The longest request line (aiohttp's ``max_line_size``); longer ones are 414.
    max_line_size: int = 8190
    #: Connections open now (those refused with a 503 are not counted).
    open: int = field(default=0, init=False)
    #: Connections refused so far (503), and heads rejected so far (any status).
    refused: int = field(default=0, init=False)
    rejected: int = field(default=0, init=False)
    #: Connections that closed without sending a request (nothing at all, or empty
    #: lines only): health checks and port probes. Counted, never logged.
    empty: int = field(default=0, init=False)
    #: Hands reconnects to the worker that keeps their stream (None: one process).
    handover: Handover | None = field(default=None, init=False)
    #: Connections handed to another worker, and taken from one, so far.
    handed_over: int = field(default=0, init=False)
    taken_over: int = field(default=0, init=False)

    def _reject(self, status: int, reason: str, peer: str) -> None:
        self.rejected += 1
        self.reject(status, reason[:MAX_REASON], peer)

    def refuse(
        self, transport: asyncio.BaseTransport, peer: str, loop: asyncio.AbstractEventLoop
    ) -> asyncio.TimerHandle:
        """A connection over ``max_connections``: answered 503 and closed (our FIN once
        the client has read it), aborted after a short linger; the timer that aborts it."""
        self.refused += 1
        self._reject(503, f"too many connections (max {self.max_connections})", peer)
        # A stream transport, whichever loop made it (uvloop's is no asyncio.Transport
        # instance, though it has all of its methods: no isinstance here).
        stream = cast(asyncio.Transport, transport)
        stream.write(TOO_MANY)
        if stream.can_write_eof():
            stream.write_eof()  # the client reads the answer, then our FIN
        return loop.call_later(min(self.client_timeout, REFUSED_LINGER), stream.abort)

    def left(self, pending: int, served: int, peer: str) -> None:
        """A connection closed while waiting for a head, having sent ``pending`` bytes of
        one after ``served`` requests."""
        if pending:
            # Bytes of a request that will never reach the handler now (a head cut
            # short, or one parsed but not yet handled): still one line for it.
            self._reject(400, "client left before its request was handled", peer)
        elif not served:
            self.empty += 1  # a probe: connected, asked nothing, left

    def timed_out(self, pending: int, served: int, peer: str) -> bytes:
        """A connection sent no whole head within ``client_timeout``, having sent
        ``pending`` bytes of one after ``served`` requests: its ``rejected`` line, and
        what to write before closing it (b'': nothing). A keep-alive connection idle
        that long is closed without a word."""
        seconds = f"{self.client_timeout:g}s"
        if pending:
            self._reject(408, f"request head incomplete after {seconds} ({pending} bytes)", peer)
            return HEAD_TIMEOUT
        if served == 0:
            self._reject(408, f"no request within {seconds}", peer)
        return b""

    def check(self, request: web.BaseRequest) -> tuple[int, str] | None:
        """Why ``request`` (a parsed head) is not forwarded: (status, reason), or None.
        The target's path itself is normalised later by the handler; this only
        refuses what no normalising can make a path of the upstream's."""
        if request.version not in _VERSIONS:
            # aiohttp parses any 1.x/2.x line alike and would answer in that version:
            # first, so that whatever else is wrong is answered in HTTP/1.1 (gate).
            version = request.version
            return 505, f"HTTP/{version.major}.{version.minor} not supported"
        if request.method == "CONNECT":
            return 400, "CONNECT refused: not a forward proxy"
        target = request.raw_path
        if not target.startswith("/"):
            if target == "*":
                return 400, "asterisk-form target refused"
            url = URL(target, encoded=True)
            sock = request.transport.get_extra_info("sockname") if request.transport else None
            port = sock[1] if isinstance(sock, tuple) and len(sock) >= 2 else None
            if (
                url.scheme != "http"
                or url.host is None
                or url.port != port
                or not _is_local_name(url.host, sock)
            ):
                return 400, "absolute-form target for another host refused: not a forward proxy"
        try:
            normalise_path(request.path_qs)
        except BadTarget as exc:
            return 400, str(exc)
        expect = request.headers.get("Expect")
        if expect is not None and expect.strip().lower() != "100-continue":
            return 417, "unsupported Expect header"
        return None

    def gate(self, handler: _RequestHandler) -> _RequestHandler:
        """``handler`` behind the checks: what every parsed head goes through first."""

        async def gated(request: web.BaseRequest) -> web.StreamResponse:
            protocol = request.protocol
            guarded = protocol if isinstance(protocol, GuardedProtocol) else None
            if guarded is not None:
                guarded.head_received(request)
            try:
                refusal = self.check(request)
                if refusal is not None:
                    status, reason = refusal
                    peer = guarded.peer if guarded is not None else format_peer(request.remote)
                    self._reject(status, reason, peer)
                    resp = web.Response(status=status, text=reason + "\n")
                    resp.force_close()
                    if status == 505 and guarded is not None and guarded.transport:
                        # aiohttp answers in the request's version: say it in HTTP/1.1
                        # ourselves. (It then finds the connection closed: no more.)
                        guarded.transport.write(_canned(505, "HTTP Version Not Supported", reason))
                        guarded.force_close()
                    return resp
                return await handler(request)
            finally:
                if guarded is not None:
                    guarded.request_done()

        return gated


class GuardedServer(web.Server):
    """aiohttp's low-level server with the guard's gate and protocol."""

    def __init__(self, inner: web.Server, guard: ClientGuard, **kwargs: Any) -> None:
        super().__init__(
            guard.gate(inner.request_handler),
            request_factory=inner.request_factory,
            handler_cancellation=inner.handler_cancellation,
            **kwargs,
        )
        self.guard = guard
        self._handler_kwargs = kwargs

    def __call__(self) -> GuardedProtocol:
        return GuardedProtocol(self, loop=self._loop, **self._handler_kwargs)


class GuardedRunner(web.AppRunner):
    """An AppRunner whose server is guarded (see the module's docstring)."""

    def __init__(self, app: web.Application, guard: ClientGuard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.guard = guard

    async def _make_server(self) -> web.Server:
        inner = await super()._make_server()
        # The handler arguments as the runner and the app's handler_args made them.
        kwargs: dict[str, Any] = dict(inner._kwargs)
        self.guard.max_line_size = int(kwargs.get("max_line_size", 8190))
        return GuardedServer(inner, self.guard, **kwargs)


class HeldHead:
    """A request head held back until it is whole (``serve --workers``: the guard holds
    each head to see whether its ``Last-Event-ID`` names another worker's stream).
    Empty lines before the request line are no part of it; a head that grows to
    :data:`MAX_HELD_HEAD` without ending is let go as it is."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: bytes | None = None

    def add(self, data: bytes) -> tuple[bytes, bytes | None] | None:
        """None while the head is not whole (the bytes are kept); else every byte held,
        and the head's ``Last-Event-ID`` (None: it has none, or it never ended)."""
        held = data if self._held is None else self._held + data
        start = len(held) - len(held.lstrip(b"\r\n"))
        end = held.find(b"\r\n\r\n", start)
        if end < 0:
            end = held.find(b"\n\n", start)
        if end < 0 and len(held) < MAX_HELD_HEAD:
            self._held = held
            return None
        self._held = None
        found = _LAST_EVENT_ID.search(held, start, end + 1) if end >= 0 else None
        return held, (found.group(1).strip() if found is not None else None)

    def clear(self) -> None:
        self._held = None


class GuardedProtocol(RequestHandler):
    """One client connection: counted, timed until its head is in, refused when over
    the limit; heads aiohttp cannot parse are answered and logged here."""

    __slots__ = (
        "_body",
        "_counted",
        "_guard",
        "_handed",
        "_held",
        "_pending",
        "_preface",
        "_received",
        "_received_at_check",
        "_refused",
        "_released",
        "_served",
        "_timer",
        "_waiting",
        "_write_listener",
        "peer",
    )

    def __init__(self, manager: GuardedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        #: Told when the transport pauses (False) and resumes (True) writing: the body
        #: pump of the response in flight, which pauses its upstream meanwhile.
        self._write_listener: Callable[[bool], None] | None = None
        self._guard = manager.guard
        self._counted = False
        self._refused = False
        self._timer: asyncio.TimerHandle | None = None
        #: Waiting for a request head (not handling one).
        self._waiting = False
        #: Bytes received since the wait began (part of a head).
        self._pending = 0
        #: Heads received on this connection.
        self._served = 0
        #: The body of the request in flight.
        self._body: StreamReader | None = None
        #: Bytes received on this connection, and at the last look at a body's progress.
        self._received = 0
        self._received_at_check = 0
        self.peer = "?"
        #: A head held back until it is whole, to see whose it is (``handover``).
        self._held = HeldHead()
        #: The head being waited for has gone to aiohttp (nothing more is held).
        self._released = False
        #: Handed to another worker: this end is gone, quietly.
        self._handed = False
        #: Bytes another worker read from this connection before handing it here.
        self._preface = b""

    # -------------------------------------------------------------- flow control

    def set_write_listener(self, listener: Callable[[bool], None] | None) -> None:
        """Tell ``listener`` when the transport pauses and resumes writing (None: stop)."""
        self._write_listener = listener

    def pause_writing(self) -> None:
        super().pause_writing()
        listener = self._write_listener
        if listener is not None:
            listener(False)

    def resume_writing(self) -> None:
        super().resume_writing()
        listener = self._write_listener
        if listener is not None:
            listener(True)

    # -------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        self.peer = format_peer(transport.get_extra_info("peername"))
        if guard.open >= guard.max_connections:
            self._refused = True
            self._timer = guard.refuse(transport, self.peer, self._loop)
            return
        guard.open += 1
        self._counted = True
        super().connection_made(transport)
        self._await_head()
        if self._preface:  # taken from another worker: what it read comes first
            preface, self._preface = self._preface, b""
            guard.taken_over += 1
            self._released = True  # (never handed on again)
            self.data_received(preface)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # read and dropped while the 503 is on its way
        self._received += len(data)
        if self._waiting:
            # Empty lines before a request line are not part of a head (RFC 9112 section
            # 2.2 asks a server to ignore them): a probe that sends one and leaves, or a
            # client's stray CRLF after a body, is no request cut short.
            self._pending += len(data) if self._pending else len(data.lstrip(b"\r\n"))
            if self._guard.handover is not None and not self._released:
                data = self._hold(data)
                if not data:
                    return
        super().data_received(data)
        body = self._body
        if body is not None and not body.is_eof() and self._parse_failed():
            # The body of the request in flight broke (a bad chunk size, say): aiohttp
            # queues the parse error behind the request and leaves its body open, so the
            # handler would wait for the rest for ever. End the connection: the request
            # ends (client_gone) and nothing after the broken body is read.
            self._body = None
            self.force_close()

    def _hold(self, data: bytes) -> bytes:
        """Hold a head back until it is whole; then hand the connection over when its
        ``Last-Event-ID`` names another worker's stream (b''), or release it (the
        bytes held) to aiohttp."""
        whole = self._held.add(data)
        if whole is None:
            return b""
        held, last_event_id = whole
        self._released = True
        handover = self._guard.handover
        if last_event_id is None or handover is None:
            return held
        owner = handover.owner(last_event_id)
        transport = self.transport
        if owner is None or transport is None:
            return held
        if not handover.send(owner, transport, held):
            return held
        # Quietly gone from here: no ``rejected`` line, no head timer.
        self._handed = True
        self._waiting = False
        self._pending = 0
        self._cancel_timer()
        self._guard.handed_over += 1
        transport.abort()  # this process's end only: the connection lives on there
        return b""

    def _parse_failed(self) -> bool:
        # aiohttp keeps a parse error as the last queued message (private, see above).
        queued = self._messages
        return bool(queued) and isinstance(queued[-1][0], _ErrInfo)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timer()
        if self._refused:
            return
        self._held.clear()
        if self._counted:
            self._counted = False
            self._guard.open -= 1
        if self._waiting:
            self._waiting = False
            self._guard.left(self._pending, self._served, self.peer)
        super().connection_lost(exc)

    # -------------------------------------------------------------- the head timer

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _await_head(self) -> None:
        self._waiting = True
        self._pending = 0
        self._released = False
        self._cancel_timer()
        self._timer = self._loop.call_later(self._guard.client_timeout, self._timed_out)

    def head_received(self, request: web.BaseRequest) -> None:
        """A head was parsed and goes to the handler: the head timer stops, the body
        timer starts."""
        self._body = request.content
        self._waiting = False
        self._served += 1
        self._cancel_timer()
        if request.body_exists:
            self._watch_body()

    def _watch_body(self) -> None:
        self._received_at_check = self._received
        self._timer = self._loop.call_later(self._guard.client_timeout, self._body_check)

    def _body_check(self) -> None:
        """A request body that makes no progress for client_timeout, while the proxy is
        reading (not holding the client back for a slow upstream), ends the connection:
        the request in flight ends (client_gone) instead of waiting for ever."""
        self._timer = None
        body = self._body
        transport = self.transport
        if body is None or body.is_eof() or transport is None or transport.is_closing():
            return
        stalled = self._received == self._received_at_check
        if stalled and is_reading(transport):
            self._body = None
            self.force_close()
            return
        self._watch_body()

    def request_done(self) -> None:
        """The handler is done: the connection waits for its next head."""
        self._body = None
        transport = self.transport
        if transport is not None and not transport.is_closing():
            self._await_head()

    def _timed_out(self) -> None:
        self._timer = None
        transport = self.transport
        if not self._waiting or transport is None or transport.is_closing():
            return
        if is_reading(transport) and unread_bytes(transport):
            # The client did send in time; the loop has not read it yet (a busy loop,
            # or one that runs due timers before it polls, as uvloop's does). Judging
            # now would call it idle, or cut its head short, and closing a socket with
            # unread bytes resets the connection: the client would not even read the
            # 408. Look again once the loop has read them.
            self._timer = self._loop.call_later(UNREAD_RECHECK, self._timed_out)
            return
        self._waiting = False  # ended here: connection_lost must not log it again
        answer = self._guard.timed_out(self._pending, self._served, self.peer)
        if answer:
            transport.write(answer)
        self.force_close()

    # -------------------------------------------------------------- aiohttp's errors

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # A head aiohttp could not parse: our answer and one line, no traceback.
        self._waiting = False
        self._cancel_timer()
        code, reason = classify_head_error(exc, self._guard.max_line_size)
        self._guard._reject(code, reason, self.peer)
        resp = web.Response(status=code, text=reason + "\n")
        resp.force_close()
        return resp


__all__ = [
    "BadTarget",
    "ClientGuard",
    "GuardedProtocol",
    "GuardedRunner",
    "GuardedServer",
    "Handover",
    "classify_head_error",
    "format_peer",
    "normalise_path",
]
