"""A reconnect that lands on the wrong worker (``serve --workers N``).

Each worker keeps the resume history of the streams it served, and each stream's token
names its worker (``w1_<random>``: ``ResumeManager.token_prefix``). A connection whose
request carries a ``Last-Event-ID`` of another worker's stream is handed to that worker
before anything of the request is parsed: its socket is passed over a Unix datagram
socket (``SCM_RIGHTS``) together with the bytes already read from it (the head), and the
other worker serves it as if it had accepted it, those bytes first
(:class:`~chaosproxy.server.guard.GuardedProtocol`). Tenancy is unchanged: the worker that
keeps the stream looks the id up under the request's own credentials, so a forged or
foreign id is ``missing`` there as it would be anywhere.

Every worker has one inbox (a ``SOCK_SEQPACKET`` pair: one message is one connection,
never split or merged) and the sending end of every other worker's inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Callable, Sequence

from chaosproxy.server.guard import MAX_HELD_HEAD, GuardedProtocol

#: A stream token made by worker N starts ``wN_``.
_OWNER = re.compile(rb"w(\d{1,4})_")

#: The largest message an inbox reads: a held head and a little more.
MAX_PASSED = MAX_HELD_HEAD + 4096


def token_prefix(worker: int) -> str:
    """What the stream tokens of ``worker`` start with."""
    return f"w{worker}_"


class WorkerHandover:
    """This worker's :class:`~chaosproxy.server.guard.Handover`: which worker keeps an id's
    stream, and passing a connection to it."""

    def __init__(self, worker: int, outboxes: Sequence[socket.socket | None]) -> None:
        self.worker = worker
        #: The sending end of each worker's inbox (None for this worker's own).
        self.outboxes = list(outboxes)
        for box in self.outboxes:
            if box is not None:
                box.setblocking(False)

    def owner(self, last_event_id: bytes) -> int | None:
        found = _OWNER.match(last_event_id)
        if found is None:
            return None
        owner = int(found.group(1))
        if owner == self.worker or not 0 <= owner < len(self.outboxes):
            return None
        return owner

    def send(self, owner: int, transport: asyncio.BaseTransport, data: bytes) -> bool:
        box = self.outboxes[owner]
        sock = transport.get_extra_info("socket")
        if box is None or sock is None or len(data) > MAX_PASSED:
            return False
        reading = cast_reading(transport)
        if reading is not None:
            reading.pause_reading()  # what comes next stays in the socket, for the other
        try:
            socket.send_fds(box, [data], [sock.fileno()])
        except OSError:  # its inbox is full, or it is gone: served here after all
            if reading is not None:
                reading.resume_reading()
            return False
        return True


def cast_reading(transport: asyncio.BaseTransport) -> asyncio.ReadTransport | None:
    """The transport, when it can pause reading (uvloop's are no asyncio instances)."""
    if callable(getattr(transport, "pause_reading", None)):
        return transport  # type: ignore[return-value]
    return None


class Inbox:
    """Takes the connections other workers hand to this one, and serves them with
    ``factory`` (the proxy server's protocol factory)."""

    def __init__(
        self, sock: socket.socket, factory: Callable[[], GuardedProtocol] | None = None
    ) -> None:
        self.sock = sock
        self.factory = factory
        self.taken = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.sock.setblocking(False)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._readable)

    def stop(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.sock.fileno())
            self._loop = None

    def _readable(self) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, MAX_PASSED, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.stop()
                return
            if not data and not fds:
                self.stop()  # every sender is gone
                return
            for fd in fds:
                self._adopt(fd, data)

    def _adopt(self, fd: int, data: bytes) -> None:
        conn = socket.socket(fileno=fd)
        if self.factory is None or self._loop is None:
            conn.close()
            return
        conn.setblocking(False)
        protocol = self.factory()
        protocol._preface = data  # fed in connection_made, before anything is read
        self.taken += 1
        task = self._loop.create_task(self._connect(conn, protocol))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket, protocol: GuardedProtocol) -> None:
        assert self._loop is not None
        try:
            await self._loop.connect_accepted_socket(lambda: protocol, conn)
        except OSError:
            conn.close()


def inbox_pair() -> tuple[socket.socket, socket.socket]:
    """(the inbox a worker reads, the end others send to)."""
    inbox, sender = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    return inbox, sender


__all__ = ["Inbox", "WorkerHandover", "inbox_pair", "token_prefix"]
