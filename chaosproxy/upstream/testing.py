"""A scripted upstream for tests, in the spirit of httpx's ``MockTransport``: no sockets,
no server, and every timing and failure chosen by the test.

``MockUpstream(handler)`` satisfies :class:`~chaosproxy.upstream.interface.Upstream`;
the handler gets each :class:`Request` (body read whole) and returns an :class:`Answer`
(status, headers, body pieces with delays, how the body ends) or raises an
:class:`~chaosproxy.upstream.UpstreamError` to fail the request before any response::

    def handler(request: Request) -> Answer:
        if request.target == "/down":
            raise UpstreamTimeout("connect to upstream mock:80 timed out after 10 s")
        return Answer(
            headers={"Content-Type": "text/event-stream"},
            body=[b"data: 1\\n\\n", Piece(b"data: 2\\n\\n", delay=0.05)],
            end=UpstreamClosed("upstream mock:80 reset the connection", body_bytes=18),
        )

    proxy = await start_proxy(config, upstream_factory=lambda: MockUpstream(handler))

Once the reply is started, each piece (its ``delay`` after the previous one) and then
the end are delivered from their own event-loop callbacks, one ``body_data`` per piece,
like reads from a socket. ``head_timeout`` bounds an awaitable handler
(:class:`~chaosproxy.upstream.UpstreamHeadTimeout`); ``idle_timeout`` ends the body
with :class:`~chaosproxy.upstream.UpstreamIdleTimeout` when the next piece (or the end,
or a ``"hold"``) is due later than that while the reply is not paused. Pausing holds
the piece that falls due (and stops the timeline) until ``resume_reading``; a closed
reply delivers nothing more. Unlike the pool, nothing arrives before ``start``, and the
double neither rewrites the request's headers (Host, framing) nor checks the answer's
against its body.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Literal

from multidict import CIMultiDict

from chaosproxy.upstream.errors import (
    UpstreamClosed,
    UpstreamConnectError,
    UpstreamError,
    UpstreamHeadTimeout,
    UpstreamIdleTimeout,
)
from chaosproxy.upstream.response import BodySink

__all__ = ["Answer", "Handler", "MockReply", "MockUpstream", "Piece", "Request"]


@dataclass(frozen=True, slots=True)
class Request:
    """A request as the proxy asked for it (headers as given; the body read whole)."""

    method: str
    target: str
    headers: CIMultiDict[str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Piece:
    """One ``body_data`` call, ``delay`` seconds after the previous piece (or start)."""

    data: bytes
    delay: float = 0.0

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("a body piece cannot be empty (a sink never gets b'')")
        if self.delay < 0:
            raise ValueError("a delay cannot be negative")


@dataclass(frozen=True)
class Answer:
    """A scripted response.

    ``end``: ``None`` ends the body cleanly, an :class:`UpstreamError` ends it with that
    error (a ``body_end(error)``: a protocol error, a closed connection, ...), and
    ``"hold"`` never ends it (until the reply or the upstream is closed). The end comes
    ``end_delay`` seconds after the last piece. ``reason`` defaults to the status's
    standard phrase.
    """

    status: int = 200
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    body: Sequence[bytes | Piece] = ()
    end: UpstreamError | Literal["hold"] | None = None
    end_delay: float = 0.0
    reason: str | None = None

    def __post_init__(self) -> None:
        self.pieces()  # (checks them)
        if self.end_delay < 0:
            raise ValueError("a delay cannot be negative")

    def pieces(self) -> tuple[Piece, ...]:
        return tuple(p if isinstance(p, Piece) else Piece(p) for p in self.body)


#: Gets each request; returns (or awaits) its answer, or raises an UpstreamError.
Handler = Callable[[Request], Answer | Awaitable[Answer]]


class MockUpstream:
    """An :class:`~chaosproxy.upstream.interface.Upstream` that answers from ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        #: Every request asked for, in order (also those the handler failed).
        self.requests: list[Request] = []
        self.closed = False
        self._open: set[MockReply] = set()

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
    ) -> MockReply:
        if self.closed:
            raise UpstreamConnectError("the mock upstream is closed")
        data = await _read_body(body, content_length)
        request = Request(method, target, CIMultiDict(headers), data)
        self.requests.append(request)
        answer = self.handler(request)
        if inspect.isawaitable(answer):
            try:
                async with asyncio.timeout(_limit(head_timeout)):
                    answer = await answer
            except TimeoutError:
                raise UpstreamHeadTimeout(
                    f"the mock upstream sent no response head within {head_timeout:g} s"
                ) from None
        reply = MockReply(answer, self, asyncio.get_running_loop(), _limit(idle_timeout))
        self._open.add(reply)
        return reply

    async def close(self) -> None:
        """Replies still streaming end with :class:`UpstreamClosed`, as the pool's do."""
        self.closed = True
        for reply in list(self._open):
            n = reply.body_bytes
            reply._end(
                UpstreamClosed(f"the mock upstream was closed after {n} body bytes", body_bytes=n)
            )


class MockReply:
    """A :class:`~chaosproxy.upstream.interface.Reply` playing an :class:`Answer`."""

    def __init__(
        self,
        answer: Answer,
        upstream: MockUpstream,
        loop: asyncio.AbstractEventLoop,
        idle_timeout: float | None = None,
    ) -> None:
        self.answer = answer
        self._idle_timeout = idle_timeout
        self.status = answer.status
        self.reason = answer.reason if answer.reason is not None else _phrase(answer.status)
        self.headers: CIMultiDict[str] = CIMultiDict(answer.headers)
        self._upstream = upstream
        self._loop = loop
        self._pieces = answer.pieces()
        self._sink: BodySink | None = None
        self._timer: asyncio.Handle | None = None
        self._next = 0  # the next piece; len(pieces): the end
        self._paused = False
        self._held: bytes | None = None  # a piece that fell due while paused
        self._received = 0
        self._ended = False
        self._error: UpstreamError | None = None
        self._end_delivered = False

    @property
    def complete(self) -> bool:
        """The body ended cleanly (its delivery may wait for resume_reading)."""
        return self._ended and self._error is None

    @property
    def body_bytes(self) -> int:
        """Body bytes that have fallen due so far (delivered or held)."""
        return self._received

    def start(self, sink: BodySink) -> None:
        if self._sink is not None:
            raise RuntimeError("MockReply.start() called twice")
        self._sink = sink
        if self._ended:  # closed before the start: say so now, as the pool's reply does
            self._flush()
        else:
            self._arm()

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if self._sink is None:
            return
        if self._held is not None or (self._ended and not self._end_delivered):
            self._loop.call_soon(self._flush)
        else:
            self._arm()

    def close(self) -> None:
        """Same contract as :meth:`UpstreamResponse.close`."""
        self._cancel_timer()
        self._held = None  # (a held piece stops the timeline: the body had not ended)
        if not self._ended:
            n = self._received
            self._ended = True
            self._error = UpstreamClosed(
                f"response from the mock upstream closed by the caller after {n} body bytes",
                body_bytes=n,
            )
        self._upstream._open.discard(self)
        sink = self._sink
        if sink is not None and not self._end_delivered:
            self._end_delivered = True
            sink.body_end(self._error)

    def __repr__(self) -> str:
        return f"<MockReply {self.status} {self.reason!r}>"

    # ------------------------------------------------------------------ the timeline

    def _arm(self) -> None:
        """Schedule the next piece, or the end, unless one is already on its way."""
        if self._timer is not None or self._ended:
            return
        pieces = self._pieces
        if self._next < len(pieces):
            delay = pieces[self._next].delay
        elif self.answer.end == "hold":
            delay = math.inf
        else:
            delay = self.answer.end_delay
        idle = self._idle_timeout
        if idle is not None and delay > idle:
            self._timer = self._loop.call_later(idle, self._idle_out)
            return
        if math.isinf(delay):
            return
        if delay > 0:
            self._timer = self._loop.call_later(delay, self._step)
        else:
            self._timer = self._loop.call_soon(self._step)

    def _step(self) -> None:
        self._timer = None
        if self._ended:
            return
        pieces = self._pieces
        if self._next < len(pieces):
            data = pieces[self._next].data
            self._next += 1
            self._received += len(data)
            if self._paused:
                self._held = data
                return
            sink = self._sink
            assert sink is not None  # (the timeline starts with start())
            sink.body_data(data)
            if not self._stopped():  # the sink may have paused or closed us
                self._arm()
            return
        end = self.answer.end
        self._end(end if isinstance(end, UpstreamError) else None)

    def _idle_out(self) -> None:
        self._timer = None
        if self._ended or self._paused:
            return  # (paused: the timeline starts again at resume_reading)
        n = self._received
        self._end(
            UpstreamIdleTimeout(
                f"the mock upstream sent nothing for {self._idle_timeout:g} s mid-body, "
                f"after {n} body bytes",
                body_bytes=n,
            )
        )

    def _end(self, error: UpstreamError | None) -> None:
        if self._ended:
            return
        self._cancel_timer()
        self._ended = True
        self._error = error
        self._upstream._open.discard(self)
        sink = self._sink
        if sink is not None and not self._paused and self._held is None:
            self._end_delivered = True
            sink.body_end(error)

    def _flush(self) -> None:
        sink = self._sink
        if sink is None or self._paused or self._end_delivered:
            return
        held = self._held
        if held is not None:
            self._held = None
            sink.body_data(held)
            if self._stopped():  # the sink paused or closed us
                return
        if self._ended:
            self._end_delivered = True
            sink.body_end(self._error)
        else:
            self._arm()

    def _stopped(self) -> bool:
        return self._paused or self._end_delivered

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def _read_body(body: bytes | AsyncIterable[bytes] | None, length: int | None) -> bytes:
    """The request body whole, checked as the pool checks it."""
    if body is None:
        if length:
            raise ValueError("content_length given without a body")
        return b""
    if isinstance(body, bytes | bytearray | memoryview):
        data = bytes(body)
    else:
        data = b"".join([chunk async for chunk in body])
    if length is not None and length != len(data):
        raise ValueError(f"request body was {len(data)} bytes, content_length={length}")
    return data


def _limit(seconds: float | None) -> float | None:
    return None if seconds is None or seconds <= 0 or math.isinf(seconds) else seconds


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


if TYPE_CHECKING:  # the double satisfies the interface it stands in for
    from chaosproxy.upstream.interface import Upstream

    def _upstream(upstream: MockUpstream) -> Upstream:
        return upstream
