"""The body pump: one upstream body to one client, with flow control both ways, driven
by callbacks.

Upstream reads arrive as callbacks from the upstream connection (:meth:`BodyPump.
body_data`); each goes through the session and its sends are written to the client's
transport right there, synchronously (the sends of one read together, in one system
call, when no fault shapes the writes). No task wakes up per event, nor per pause:

- a fault's hold (a ``Sleep``: ``delay``, ``stall``, ``throttle``) is a ``call_at``
  timer that resumes the pump, bounded by the hold timeout (the exchange keeps the
  count: ``hold_begin``/``hold_end``);
- a client whose buffer is full pauses the upstream (``pause_reading``) until its
  transport says it can take more (``resume_writing``, which the proxy's connection
  protocol passes on: ``set_write_listener``);
- reads that arrive while the pump waits are kept, in order, in an inbox (the upstream
  is paused beyond ``INBOX_LIMIT``) and fed as soon as it goes on.

Only what must be awaited goes through the request's own task (:meth:`BodyPump.run`):
a fault's cut, the end of the body (its last chunk), an upstream failure, a hold that
reached the hold timeout, an error. Either way the session sees the same reads at the
same moments as a read loop would, so the writes are the same.

The pump decides nothing about the request: it asks the :class:`~chaosproxy.core.
session.Session`, and reaches the exchange it works for only through :class:`PumpHost`.
The response is over when the session has ended.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

from aiohttp.abc import AbstractStreamWriter

from chaosproxy.core.actions import Action, Cut, Send, Sleep
from chaosproxy.core.framing import FramingError
from chaosproxy.core.session import Session
from chaosproxy.observe.logs import describe
from chaosproxy.upstream import Reply, UpstreamError, UpstreamProtocolError

#: Upstream body bytes held while the client's side catches up, before the upstream
#: connection is paused (as aiohttp's own stream reader does).
INBOX_LIMIT = 2**16


#: ``time.monotonic``, called once per upstream read (a ``Final``: no lookup of the
#: module's attribute per call).
_monotonic: Final = time.monotonic

#: The head of a chunk of each size below 4096 bytes, made on first use.
_CHUNK_HEADS: Final[dict[int, bytes]] = {}


def _chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked body: a lookup and two joins, not bytes
    formatting (about 950 instructions a write, issue 34)."""
    size = len(data)
    head = _CHUNK_HEADS.get(size)
    if head is None:
        head = b"%x\r\n" % size
        if size < 4096:
            _CHUNK_HEADS[size] = head
    return head + data + b"\r\n"


class PumpHost(Protocol):
    """What the pump needs of the exchange it works for."""

    @property
    def session(self) -> Session: ...

    def log_frame(self, send: Send, now: float) -> None:
        """Account for (and log) one write about to go to the client."""

    def log_frames(self, sends: list[Send], now: float) -> None:
        """Account for (and log) writes about to go to the client, together."""

    def hold_begin(self, seconds: float, fault: str) -> tuple[float, bool]:
        """A fault's hold of ``seconds`` (``math.inf``: for ever) begins: how long to
        hold, and whether the hold timeout ends it then."""

    def hold_end(self) -> None:
        """The hold ended (its time passed, or the response ended meanwhile)."""

    async def hold_expired(self, fault: str) -> None:
        """The hold reached the hold timeout: end the response (never cleanly)."""

    async def cut(self, cut: Cut) -> None:
        """Carry out a fault's cut (the session is told first)."""

    async def abort(self) -> None:
        """Close the client's connection without ending the body cleanly."""

    async def write_eof(self) -> None:
        """End the body cleanly (the final chunk)."""


class _Clean:
    """The upstream body ended without an error."""


CLEAN = _Clean()


class _EndOfBody:
    """In the pump's queue of actions: the faults' last actions are done; end the body."""


_EOF = _EndOfBody()

#: What the task must await: ("cut", Cut), ("eof", None), ("failed", UpstreamError),
#: ("expired", fault name), ("drain", None), ("failure", exception).
_Work = tuple[str, object]


class WriteListener(Protocol):
    """What a client connection's protocol offers to be told of its transport's flow
    control (the proxy's: :class:`chaosproxy.server.guard.GuardedProtocol`)."""

    @property
    def writing_paused(self) -> bool: ...

    def set_write_listener(self, listener: Callable[[bool], None] | None) -> None: ...


class BodyPump:
    """Streams one upstream body to the client: the upstream connection's body sink."""

    def __init__(
        self,
        host: PumpHost,
        transport: asyncio.Transport,
        writer: AbstractStreamWriter,
        upstream: Reply,
        *,
        chunked: bool,
    ) -> None:
        self.host = host
        self.session = host.session
        self.transport = transport
        self.writer = writer
        self.upstream = upstream
        #: Whether the head sent says ``Transfer-Encoding: chunked`` (aiohttp chooses
        #: at prepare()); the body bytes are framed here to match.
        self.chunked = chunked
        self._high = transport.get_write_buffer_limits()[1]
        #: Whether the sends of one upstream read may leave together (one
        #: ``writelines``): when no fault shapes the writes themselves (their sizes,
        #: their times), each keeping its own chunk and frame line.
        self._batch = self.session.batchable
        #: Whether a fault may want a wake-up without new input (a coalesce window).
        self._timed = not self._batch
        self._loop = asyncio.get_running_loop()
        #: The client connection's protocol, when it tells of its flow control (else a
        #: full buffer is drained by the task).
        protocol = getattr(transport, "get_protocol", lambda: None)()
        self._flow: WriteListener | None = (
            protocol if hasattr(protocol, "set_write_listener") else None
        )
        #: Actions still to carry out, in order (those of a read the pump could not
        #: finish when it had to wait).
        self._carry: deque[Action | _EndOfBody] = deque()
        self._inbox: deque[bytes] = deque()
        self._inbox_bytes = 0
        #: Why the upstream is paused: the inbox is full, the client's buffer is.
        self._paused_for: set[str] = set()
        #: The client's buffer is full: nothing is written until it drains.
        self._blocked = False
        #: A fault's hold: its timer (None: none, or one for ever), and whether the
        #: hold timeout ends it.
        self._hold: asyncio.TimerHandle | None = None
        self._holding = False
        self._hold_expires = False
        self._hold_fault = ""
        #: A fault's deadline fell due while the pump waited.
        self._due = False
        #: How the upstream body ended: None while it flows (and once handled).
        self._end: UpstreamError | _Clean | None = None
        #: What the task must await next (None: nothing), and the future it waits on.
        self._work: _Work | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._stepping = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    # ------------------------------------------------------------------ the task side

    async def run(self) -> None:
        """Deliver the body; returns when the response has ended (the session says so).
        Only what must be awaited happens here."""
        if self._flow is not None:
            self._flow.set_write_listener(self._writable)
        self.upstream.start(self)
        session = self.session
        try:
            while not session.ended:
                work = self._work
                if work is None:
                    self._waiter = self._loop.create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
                    continue
                try:
                    await self._await(work)
                finally:
                    self._work = None
                if not session.ended:
                    self._step()
        finally:
            if self._flow is not None:
                self._flow.set_write_listener(None)
            for handle in (self._timer, self._hold):
                if handle is not None:
                    handle.cancel()
            if self._holding:
                self._holding = False
                self.host.hold_end()

    async def _await(self, work: _Work) -> None:
        what, arg = work
        if what == "cut":
            assert isinstance(arg, Cut)
            await self.host.cut(arg)
        elif what == "eof":
            await self.host.write_eof()
            if self.session.ended:
                return
            if self.transport.is_closing():
                # The client left while the end was written: a write into the
                # connection it had closed failed, and asyncio swallowed the error and
                # closed the transport. It did not get the end.
                self.session.client_gone()
            else:
                self.session.finish()
        elif what == "failed":
            assert isinstance(arg, UpstreamError)
            if isinstance(arg, UpstreamProtocolError):
                await self.upstream_failed(f"upstream body broken: {describe(arg)}", arg.reason)
            else:
                await self.upstream_failed(f"upstream failed mid-body: {describe(arg)}", arg.reason)
        elif what == "expired":
            await self.host.hold_expired(str(arg))
        elif what == "drain":
            await self.writer.drain()
            self._unblock()
        else:  # "failure": a FramingError, or a bug, from the callback side
            assert isinstance(arg, BaseException)
            raise arg

    async def upstream_failed(self, message: str, reason: str, *, salvage: bool = True) -> None:
        """The upstream broke mid-body: send what did arrive of an unfinished event (as
        passthrough would), then end without a clean completion. ``reason``: in a few
        words, for the log."""
        if self.session.ended:
            return
        try:
            sends = self.session.upstream_failed(
                message, time.monotonic(), reason=reason, salvage=salvage
            )
        except FramingError:  # what is held breaks the framing too: nothing to salvage
            sends = []
        if sends:
            self._send(sends)
        await self.host.abort()

    def _hand_over(self, work: _Work) -> None:
        """Something to await: the task does it, then the pump goes on."""
        self._work = work
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------------ the callback side

    def body_data(self, data: bytes) -> None:
        session = self.session
        if session.ended:
            return
        if self._waiting() or self._carry or self._inbox:  # keep the order
            self._inbox.append(data)
            self._inbox_bytes += len(data)
            if self._inbox_bytes > INBOX_LIMIT:
                self._pause("inbox")
            return
        now = _monotonic()
        try:
            actions = session.feed(data, now)
        except Exception as exc:  # FramingError, or a bug: the task reports it
            self._hand_over(("failure", exc))
            return
        if self._batch and actions and all(type(a) is Send for a in actions):
            # The usual read: sends only, written together, nothing to wait for (at
            # the read's time: the writes follow it in this callback, a clock read less).
            if self._send(actions, now) and self._congested():  # type: ignore[arg-type]
                self._block()
            return
        self._carry.extend(actions)
        self._step()

    def body_end(self, error: UpstreamError | None) -> None:
        if self.session.ended:
            return
        self._end = CLEAN if error is None else error
        self._step()

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if self.session.ended:
            return
        self._due = True
        self._step()

    def _hold_done(self) -> None:
        self._hold = None
        self._holding = False
        self.host.hold_end()
        if self.session.ended:
            return
        if self._hold_expires:
            self._hand_over(("expired", self._hold_fault))
            return
        self._step()

    def _writable(self, writable: bool) -> None:
        """The client's transport paused or resumed writing (its protocol says so)."""
        if writable and self._blocked and not self.session.ended:
            self._unblock()
            self._step()

    # ------------------------------------------------------------------ stepping

    def _waiting(self) -> bool:
        """Whether the pump waits: for the client's buffer, a hold, or the task."""
        return self._blocked or self._holding or self._work is not None

    def _step(self) -> None:
        """Carry out, in order, everything that can be done now: queued actions, then
        the inbox's reads, a deadline that fell due, the end of the body; stop at what
        needs time (a hold, a full client buffer, something to await)."""
        if self._stepping:
            return
        self._stepping = True
        session = self.session
        try:
            while not session.ended and not self._waiting():
                if self._carry:
                    self._carry_out()
                elif self._inbox:
                    data = self._inbox.popleft()
                    self._inbox_bytes -= len(data)
                    if not self._inbox:
                        self._unpause("inbox")
                    self._carry.extend(session.feed(data, time.monotonic()))
                elif self._due:
                    self._due = False
                    self._carry.extend(session.poll(time.monotonic()))
                elif self._end is not None:
                    end, self._end = self._end, None
                    if isinstance(end, UpstreamError):
                        self._hand_over(("failed", end))
                    else:
                        self._carry.extend(session.body_end(time.monotonic()))
                        self._carry.append(_EOF)
                else:
                    if self._timed:
                        self._arm_timer()
                    return
        except Exception as exc:  # FramingError, or a bug: the task reports it
            self._carry.clear()
            self._hand_over(("failure", exc))
        finally:
            self._stepping = False

    def _carry_out(self) -> None:
        """Carry out the next queued actions, up to what needs time."""
        carry = self._carry
        first = carry.popleft()
        if isinstance(first, Send):
            sends = [first]
            if self._batch:
                while carry:
                    nxt = carry[0]
                    if not isinstance(nxt, Send):
                        break
                    sends.append(nxt)
                    carry.popleft()
            if self._send(sends) and self._congested():
                self._block()
            return
        if isinstance(first, Sleep):
            self._begin_hold(first)
        elif isinstance(first, Cut):
            carry.clear()  # nothing after a cut happens
            self._hand_over(("cut", first))
        else:  # the end of the body: its last chunk
            self._hand_over(("eof", None))

    def _begin_hold(self, sleep: Sleep) -> None:
        wait, expires = self.host.hold_begin(sleep.seconds, sleep.fault)
        self._holding = True
        self._hold_expires = expires
        self._hold_fault = sleep.fault
        if not math.isinf(wait):
            self._hold = self._loop.call_at(self._loop.time() + wait, self._hold_done)
        # (a hold for ever with no limit: nothing more happens until the client leaves)

    # ------------------------------------------------------------------ flow control

    def _block(self) -> None:
        """The client's buffer is full: write nothing more, and read nothing more from
        the upstream, until it drains."""
        flow = self._flow
        if flow is not None and not flow.writing_paused:
            return  # (over the limit, but the transport has not paused: it drains)
        self._blocked = True
        self._pause("client")
        if flow is None:
            self._hand_over(("drain", None))

    def _unblock(self) -> None:
        self._blocked = False
        self._unpause("client")

    def _pause(self, reason: str) -> None:
        if not self._paused_for:
            self.upstream.pause_reading()
        self._paused_for.add(reason)

    def _unpause(self, reason: str) -> None:
        if reason in self._paused_for:
            self._paused_for.discard(reason)
            if not self._paused_for:
                self.upstream.resume_reading()

    # ------------------------------------------------------------------ helpers

    def _send(self, sends: list[Send], now: float = -1.0) -> bool:
        """Account for, log and write these sends, together (each its own chunk and
        frame line, one write to the socket), at ``now`` (-1: read the clock): the one
        place a write to the client goes through. False if the client has left (the
        session is told)."""
        transport = self.transport
        if transport.is_closing():
            self.session.client_gone()
            self._wake()
            return False
        if len(sends) == 1:
            send = sends[0]
            data = send.data
            if not data:
                return True
            self.host.log_frame(send, time.monotonic() if now < 0.0 else now)
            if not self.chunked:
                transport.write(data)
            elif len(data) < 4096:
                transport.write(_chunk(data))
            else:
                transport.writelines((b"%x\r\n" % len(data), data, b"\r\n"))
            return True
        sends = [s for s in sends if s.data]
        if not sends:
            return True
        self.host.log_frames(sends, time.monotonic() if now < 0.0 else now)
        if self.chunked:
            transport.writelines([_chunk(s.data) for s in sends])
        else:
            transport.writelines([s.data for s in sends])
        return True

    def _congested(self) -> bool:
        return self.transport.get_write_buffer_size() > self._high

    def _arm_timer(self) -> None:
        deadline = self.session.deadline()
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            delay = max(deadline - time.monotonic(), 0.0)
            self._timer = self._loop.call_later(delay, self._on_timer)
