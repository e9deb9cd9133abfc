"""A response whose head has arrived, and the sink its body goes to.

The body is pushed, not pulled: each socket read is handed to the caller's
:class:`BodySink` in one synchronous ``body_data`` call from the connection's
``data_received``, so no future or task wakes up per read. Bytes are held only where the
caller is not ready: before :meth:`UpstreamResponse.start` (the socket is paused past
64 KiB) or while it has paused reading; they are then delivered joined, in one call.
Delivery after ``resume_reading`` is scheduled with ``call_soon``, never re-entrant.

The underscore methods are the connection's side (:mod:`.connection`), not the caller's.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

from multidict import CIMultiDict

from chaosproxy.upstream.errors import UpstreamClosed, UpstreamError

__all__ = ["BodySink", "Source", "UpstreamResponse"]


class Source(Protocol):
    """What a response asks of the connection it came on
    (:class:`~chaosproxy.upstream.connection.Connection`), which imports this module."""

    loop: asyncio.AbstractEventLoop

    def abandon(self) -> None: ...

    def set_reading(self, on: bool) -> None: ...


class BodySink(Protocol):
    """Where a response body goes; called synchronously from the connection's callbacks."""

    def body_data(self, data: bytes) -> None: ...

    def body_end(self, error: UpstreamError | None) -> None: ...


#: Body bytes held before start() (or while paused) before the socket is paused.
_PENDING_LIMIT: Final = 65536


class UpstreamResponse:
    """A response whose head has arrived; the body is delivered to a sink by :meth:`start`."""

    def __init__(
        self,
        conn: Source,
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
        self._conn: Source | None = conn
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
