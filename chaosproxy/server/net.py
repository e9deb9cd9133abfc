"""Socket-level helpers shared by the proxy and ``chaosproxy replay``: listening on an
address (and saying which port was bound), and ending a connection the ways a fault
asks for (a FIN without the last chunk, or an RST after what was written has left)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import ipaddress
import logging
import os
import socket
import struct
import sys
import termios
import time

from aiohttp import web

from chaosproxy.server.guard import ClientGuard, GuardedRunner
from chaosproxy.upstream.errors import StartupError as StartupError

#: Connections the kernel may queue before accept(); a burst of thousands must fit.
BACKLOG = 4096
#: On shutdown, streams in flight get this long to finish before they are cancelled
#: (a ``hang`` or ``stall: {forever: true}`` stream never finishes on its own).
SHUTDOWN_GRACE = 2.0


#: Where an app keeps the guard of its clients (see :func:`listen`).
CLIENT_GUARD = web.AppKey("client_guard", ClientGuard)


class _OneLine(logging.Handler):
    """What aiohttp says of a connection it could not serve (a head over its limits, a
    handler that failed), as one line on stderr: its kind, never its text, which quotes
    the client's bytes (an ``Authorization`` header cut at 8 KiB, say)."""

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        kind = f": {type(exc).__name__}" if exc is not None else ""
        with contextlib.suppress(OSError, ValueError):
            print(f"chaosproxy: warning: {record.getMessage()}{kind}", file=sys.stderr)


#: The logger of every server :func:`listen` starts (never aiohttp's own tracebacks).
SERVER_LOG = logging.getLogger("chaosproxy.server.http")
SERVER_LOG.addHandler(_OneLine())
SERVER_LOG.propagate = False


async def listen(
    app: web.Application,
    host: str,
    port: int,
    *,
    what: str = "",
    grace: float = SHUTDOWN_GRACE,
    flag: str = "--listen",
    reuse_port: bool = False,
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0: a free port); the runner and the bound port.
    On cleanup, requests in flight get ``grace`` seconds before they are cancelled.

    A name (``localhost``) is bound on each address it resolves to that this host has:
    in a container without IPv6, ``localhost`` is 127.0.0.1 alone (binding its ``::1``
    too failed the start). A failure is a :class:`StartupError` whose hint names
    ``flag``, the setting that chose the address.

    An app carrying a :class:`~chaosproxy.server.guard.ClientGuard` (under :data:`CLIENT_GUARD`;
    the proxy's does) has its clients guarded: a head-read timeout, a connection limit,
    and one ``rejected`` line for every head it does not forward. ``reuse_port``: with
    ``SO_REUSEPORT``, so that several processes listen on one port (``--workers``)."""
    guard = app.get(CLIENT_GUARD)
    runner: web.AppRunner
    if guard is not None:
        runner = GuardedRunner(
            app,
            guard,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=grace,
            logger=SERVER_LOG,
        )
    else:
        runner = web.AppRunner(
            app,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=grace,
            logger=SERVER_LOG,
        )
    await runner.setup()
    bound = port
    try:
        for address in await local_addresses(host):
            site = web.TCPSite(
                runner, address, bound, backlog=BACKLOG, reuse_port=reuse_port or None
            )
            await site.start()
            if bound == 0:  # the next addresses take the port the first one got
                server = site._server  # the documented way has no bound port
                sockets = getattr(server, "sockets", None)
                assert sockets
                bound = int(sockets[0].getsockname()[1])
    except OSError as exc:
        await runner.cleanup()
        for_what = f" for {what}" if what else ""
        raise StartupError(
            f"cannot listen{for_what} on {hostport(host, port, wildcard=False)}: "
            f"{_bind_failure(exc, flag)}"
        ) from None
    return runner, bound


async def local_addresses(host: str) -> list[str]:
    """The addresses to bind for ``host``: an address (or a wildcard) as it is; a name,
    each address it resolves to that this host has (in resolution order, each once).
    When it resolves to none of them, the name itself, for the bind to say why."""
    if not host:
        return [host]
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [host]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return [host]
    found: list[str] = []
    for family, _, _, _, sockaddr in infos:
        address = str(sockaddr[0])
        if address in found:
            continue
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((address, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:  # not one of this host's addresses
                continue
        found.append(address)
    return found or [host]


def _bind_failure(exc: OSError, flag: str) -> str:
    """Why a bind failed, and what to do about it, in one line."""
    reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{reason}: another process listens there (a chaosproxy still running?); stop "
            f"it, or choose another port with {flag} (port 0 picks a free one)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{reason}: this host has no such address; {flag} 0.0.0.0:PORT listens on all"
    if exc.errno == errno.EACCES:
        return f"{reason}: a port below 1024 needs privileges; choose another with {flag}"
    return reason


def hostport(host: str, port: int, *, wildcard: bool = True) -> str:
    """``host:port`` for a URL (a wildcard address as loopback unless ``wildcard`` is
    False, IPv6 in brackets)."""
    if wildcard and host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


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
