"""Socket-level helpers shared by the proxy and ``chaosproxy replay``: listening on an
address (and saying which port was bound), and ending a connection the ways a fault
asks for (a FIN without the last chunk, or an RST after what was written has left)."""

from __future__ import annotations

import asyncio
import fcntl
import socket
import struct
import termios
import time

from aiohttp import web

from chaosproxy.guard import ClientGuard, GuardedRunner

#: Connections the kernel may queue before accept(); a burst of thousands must fit.
BACKLOG = 4096
#: On shutdown, streams in flight get this long to finish before they are cancelled
#: (a ``hang`` or ``stall: {forever: true}`` stream never finishes on its own).
SHUTDOWN_GRACE = 2.0


#: Where an app keeps the guard of its clients (see :func:`listen`).
CLIENT_GUARD = web.AppKey("client_guard", ClientGuard)


class StartupError(Exception):
    """Start-up cannot go on; the message is the one-line reason."""


async def listen(
    app: web.Application,
    host: str,
    port: int,
    *,
    what: str = "",
    grace: float = SHUTDOWN_GRACE,
    reuse_port: bool = False,
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0: a free port); the runner and the bound port.
    On cleanup, requests in flight get ``grace`` seconds before they are cancelled.

    An app carrying a :class:`~chaosproxy.guard.ClientGuard` (under :data:`CLIENT_GUARD`;
    the proxy's does) has its clients guarded: a head-read timeout, a connection limit,
    and one ``rejected`` line for every head it does not forward. ``reuse_port``: with
    ``SO_REUSEPORT``, so that several processes listen on one port (``--workers``)."""
    guard = app.get(CLIENT_GUARD)
    runner: web.AppRunner
    if guard is not None:
        runner = GuardedRunner(
            app, guard, handler_cancellation=True, access_log=None, shutdown_timeout=grace
        )
    else:
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=grace
        )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=BACKLOG, reuse_port=reuse_port or None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        reason = exc.strerror or str(exc)
        for_what = f" for {what}" if what else ""
        raise StartupError(f"cannot listen{for_what} on {host}:{port}: {reason}") from None
    server = site._server  # the documented way has no bound port: an asyncio/uvloop Server
    sockets = getattr(server, "sockets", None)
    assert sockets
    return runner, int(sockets[0].getsockname()[1])


def hostport(host: str, port: int) -> str:
    """``host:port`` for a URL (a wildcard address as loopback, IPv6 in brackets)."""
    if host in ("0.0.0.0", ""):
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
