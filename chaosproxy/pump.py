"""The body pump: one upstream body to one client, with flow control both ways.

Upstream reads arrive as callbacks from the upstream connection (:meth:`BodyPump.
body_data`). While nothing asynchronous is pending, a read goes through the session
and its sends are written to the client's transport right there, synchronously: no
task wakes up per event, which is most of what a Python proxy spends per event.
Whatever needs time (a ``Sleep``, a ``Cut``, a client whose buffer is full, the end of
the body, a fault's deadline that falls due mid-work) is handed, in order, to
:meth:`BodyPump.run` in the request's own task; reads that arrive meanwhile wait in an
inbox (the upstream is paused beyond ``INBOX_LIMIT``) and are fed in order once it has
caught up. Either way the session sees the same reads at the same moments as a read
loop would, so the writes are the same.

The pump decides nothing about the request: it asks the :class:`~chaosproxy.core.
session.Session`, and reaches the exchange it works for only through :class:`PumpHost`.
The response is over when the session has ended.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Protocol

from aiohttp.abc import AbstractStreamWriter

from chaosproxy.core.actions import Action, Cut, Send, Sleep
from chaosproxy.core.framing import FramingError
from chaosproxy.core.session import Session
from chaosproxy.logs import describe
from chaosproxy.upstream import Reply, UpstreamError, UpstreamProtocolError

#: Upstream body bytes held while the client's side catches up, before the upstream
#: connection is paused (as aiohttp's own stream reader does).
INBOX_LIMIT = 2**16


class PumpHost(Protocol):
    """What the pump needs of the exchange it works for."""

    @property
    def session(self) -> Session: ...

    def log_frame(self, send: Send, now: float) -> None:
        """Account for (and log) one write about to go to the client."""

    def log_frames(self, sends: list[Send], now: float) -> None:
        """Account for (and log) writes about to go to the client, together."""

    async def sleep(self, seconds: float, fault: str = "") -> None:
        """A fault's hold (``math.inf``: for ever), bounded by the hold timeout; the
        response has ended when that ran out."""

    async def cut(self, cut: Cut) -> None:
        """Carry out a fault's cut (the session is told first)."""

    async def abort(self) -> None:
        """Close the client's connection without ending the body cleanly."""

    async def write_eof(self) -> None:
        """End the body cleanly (the final chunk)."""


class _Clean:
    """The upstream body ended without an error."""


CLEAN = _Clean()


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
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        #: Actions of a read the callback could not finish (from a Sleep or Cut on).
        self._carry: list[Action] = []
        self._inbox: deque[bytes] = deque()
        self._inbox_bytes = 0
        self._paused = False
        #: The client's buffer is full: drain before anything else.
        self._drain = False
        #: A fault's deadline fell due while the task was busy.
        self._due = False
        #: How the upstream body ended: None while it flows.
        self._end: UpstreamError | _Clean | None = None
        #: An exception from the callback side, raised in the task.
        self._failure: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    # ------------------------------------------------------------------ the task side

    async def run(self) -> None:
        """Deliver the body; returns when the response has ended (the session says so)."""
        self.upstream.start(self)
        try:
            while not self.session.ended:
                if not self._has_work():
                    self._waiter = self._loop.create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
                await self._work()
        finally:
            if self._timer is not None:
                self._timer.cancel()

    def _has_work(self) -> bool:
        return bool(
            self._failure is not None
            or self._drain
            or self._carry
            or self._inbox
            or self._due
            or self._end is not None
            or self.session.ended
        )

    async def _work(self) -> None:
        session = self.session
        while not session.ended:
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure
            if self._drain:
                self._drain = False
                await self.writer.drain()
            elif self._carry:
                actions, self._carry = self._carry, []
                await self._run_actions(actions)
            elif self._inbox:
                data = self._inbox.popleft()
                self._inbox_bytes -= len(data)
                if self._paused and not self._inbox:
                    self._paused = False
                    self.upstream.resume_reading()
                await self._run_actions(session.feed(data, time.monotonic()))
            elif self._due:
                self._due = False
                await self._run_actions(session.poll(time.monotonic()))
            elif self._end is not None:
                await self._finish(self._end)
            else:
                self._arm_timer()
                return

    async def _run_actions(self, actions: list[Action]) -> None:
        """Carry out actions in order, until the response ends."""
        batch: list[Send] = []
        for action in actions:
            if isinstance(action, Send):
                if self._batch:
                    batch.append(action)
                    continue
                if not self._send([action]):
                    return
                if self._congested():
                    await self.writer.drain()
                continue
            if batch:
                if not self._send(batch):
                    return
                batch = []
                if self._congested():
                    await self.writer.drain()
            if isinstance(action, Sleep):
                await self.host.sleep(action.seconds, action.fault)
                if self.session.ended:  # held too long: the response was aborted
                    return
            else:
                await self.host.cut(action)
                return
        if batch and self._send(batch) and self._congested():
            await self.writer.drain()

    async def _finish(self, end: UpstreamError | _Clean) -> None:
        if isinstance(end, UpstreamProtocolError):
            await self.upstream_failed(f"upstream body broken: {describe(end)}", end.reason)
        elif isinstance(end, UpstreamError):
            await self.upstream_failed(f"upstream failed mid-body: {describe(end)}", end.reason)
        else:
            await self._run_actions(self.session.body_end(time.monotonic()))
            if not self.session.ended:
                await self.host.write_eof()
                if self.transport.is_closing():
                    # The client left while the end was written: a write into the
                    # connection it had closed failed, and asyncio swallowed the
                    # error and closed the transport. It did not get the end.
                    self.session.client_gone()
                else:
                    self.session.finish()

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

    # ------------------------------------------------------------------ the callback side

    def body_data(self, data: bytes) -> None:
        if self.session.ended:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():  # the task is busy: keep the order
            self._inbox.append(data)
            self._inbox_bytes += len(data)
            if not self._paused and self._inbox_bytes > INBOX_LIMIT:
                self._paused = True
                self.upstream.pause_reading()
            self._wake()
            return
        try:
            self._drive(self.session.feed(data, time.monotonic()))
        except Exception as exc:  # FramingError, or a bug: the task reports it
            self._failure = exc
            self._wake()

    def body_end(self, error: UpstreamError | None) -> None:
        if self.session.ended:
            return
        self._end = CLEAN if error is None else error
        self._wake()

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if self.session.ended:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._due = True
            self._wake()
            return
        try:
            self._drive(self.session.poll(time.monotonic()))
        except Exception as exc:
            self._failure = exc
            self._wake()

    def _drive(self, actions: list[Action]) -> None:
        """Write the sends now (those of one read together, when they may be); from the
        first thing that needs time on, hand over."""
        if self._batch:
            n = len(actions)
            i = 0
            while i < n and isinstance(actions[i], Send):
                i += 1
            if i:
                sends = actions if i == n else actions[:i]
                if not self._send(sends):  # type: ignore[arg-type]
                    self._wake()
                    return
                if self._congested():
                    self._drain = True
                    self._carry = actions[i:]
                    self._wake()
                    return
            if i < n:
                self._carry = actions[i:]
                self._wake()
                return
            self._arm_timer()
            return
        for i, action in enumerate(actions):
            if not isinstance(action, Send):
                self._carry = actions[i:]
                self._wake()
                return
            if not self._send([action]):
                self._wake()
                return
            if self._congested():
                self._drain = True
                self._carry = actions[i + 1 :]
                self._wake()
                return
        self._arm_timer()

    # ------------------------------------------------------------------ helpers

    def _send(self, sends: list[Send]) -> bool:
        """Account for, log and write these sends, together (each its own chunk and
        frame line, one write to the socket): the one place a write to the client goes
        through. False if the client has left (the session is told)."""
        transport = self.transport
        if transport.is_closing():
            self.session.client_gone()
            return False
        if len(sends) == 1:
            send = sends[0]
            data = send.data
            if not data:
                return True
            self.host.log_frame(send, time.monotonic())
            if not self.chunked:
                transport.write(data)
            elif len(data) < 4096:
                transport.write(b"%x\r\n%b\r\n" % (len(data), data))
            else:
                transport.writelines((b"%x\r\n" % len(data), data, b"\r\n"))
            return True
        sends = [s for s in sends if s.data]
        if not sends:
            return True
        self.host.log_frames(sends, time.monotonic())
        if self.chunked:
            transport.writelines([b"%x\r\n%b\r\n" % (len(s.data), s.data) for s in sends])
        else:
            transport.writelines([s.data for s in sends])
        return True

    def _congested(self) -> bool:
        return self.transport.get_write_buffer_size() > self._high

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

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
