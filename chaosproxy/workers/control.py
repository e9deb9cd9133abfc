"""The control channel between ``serve --workers N``'s supervisor and one worker: a Unix
stream socket carrying length-prefixed JSON messages (a 4-byte big-endian length, then
that many bytes of one JSON object).

The supervisor asks, the worker answers: every request is ``{"id": N, "op": NAME, ...}``
and its answer ``{"id": N, "ok": true, "result": ...}`` or ``{"id": N, "ok": false,
"error": TEXT}``. A worker handles its requests one at a time, in the order they came,
so two admin changes reach every worker in the order the admin made them. The worker
speaks first once, unasked: ``{"id": 0, "op": "ready", ...}`` (or ``"failed"`` with the
one-line reason start-up stopped on). It also tells, unasked, what its supervisor must
know should it die: ``{"id": -1, "op": NAME, ...}``, a *note* (``flights``: the
requests it began and ended; :mod:`chaosproxy.workers.worker`).

The framing is sans-IO (:class:`Decoder`: bytes in, messages out; :func:`encode`); the
two asyncio ends are :class:`Channel` (the supervisor's) and :func:`serve_requests` (the
worker's).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

#: The largest message either end accepts (a ``GET /requests`` answer of a busy worker
#: is the largest: summaries of its whole history).
MAX_MESSAGE = 256 * 1024 * 1024

_LENGTH = struct.Struct(">I")

ControlMessage = dict[str, Any]


class ControlError(Exception):
    """The other end broke the protocol, went away, or answered with an error."""


def encode(message: ControlMessage) -> bytes:
    """One message as it travels: its length, then its JSON."""
    body = orjson.dumps(message)
    if len(body) > MAX_MESSAGE:
        raise ControlError(f"a control message of {len(body)} bytes is over the limit")
    return _LENGTH.pack(len(body)) + body


class Decoder:
    """Feed bytes as they arrive; get the whole messages they complete."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[ControlMessage]:
        self._buffer += data
        out: list[ControlMessage] = []
        buffer = self._buffer
        while len(buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer)
            if length > MAX_MESSAGE:
                raise ControlError(f"a control message of {length} bytes is over the limit")
            end = _LENGTH.size + length
            if len(buffer) < end:
                break
            try:
                message = orjson.loads(bytes(buffer[_LENGTH.size : end]))
            except orjson.JSONDecodeError as exc:
                raise ControlError(f"a control message is not JSON: {exc}") from None
            del buffer[:end]
            if not isinstance(message, dict):
                raise ControlError("a control message is not a JSON object")
            out.append(message)
        return out

    @property
    def buffered(self) -> int:
        return len(self._buffer)


async def _read_messages(reader: asyncio.StreamReader, decoder: Decoder) -> list[ControlMessage]:
    """The next messages (at least one); [] at the end of the stream."""
    while True:
        data = await reader.read(1 << 16)
        if not data:
            return []
        messages = decoder.feed(data)
        if messages:
            return messages


class Channel:
    """The supervisor's end of one worker's channel: :meth:`ask` sends a request and
    waits for its answer; answers may come in any order (matched by id)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._next = 1
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._task: asyncio.Task[None] | None = None
        #: The worker's first message (``ready`` or ``failed``), once it came.
        self.hello: asyncio.Future[ControlMessage] | None = None
        self.closed = False
        #: Called with each note the worker sends unasked (``id`` -1).
        self.on_note: Callable[[ControlMessage], None] | None = None
        #: Done once everything the worker sent has been read (it went away).
        self.ended: asyncio.Future[None] | None = None

    async def open(self) -> None:
        self.hello = asyncio.get_running_loop().create_future()
        self.ended = asyncio.get_running_loop().create_future()
        self._reader, self._writer = await asyncio.open_unix_connection(sock=self._sock)
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._reader is not None and self.hello is not None
        decoder = Decoder()
        try:
            while True:
                messages = await _read_messages(self._reader, decoder)
                if not messages:
                    break
                for message in messages:
                    self._answer(message)
        except (ControlError, OSError) as exc:
            self._fail(f"the control channel broke: {exc}")
        finally:
            self._fail("the worker went away")
            if self.ended is not None and not self.ended.done():
                self.ended.set_result(None)

    def _answer(self, message: ControlMessage) -> None:
        assert self.hello is not None
        number = message.get("id")
        if number == -1:
            if self.on_note is not None:
                self.on_note(message)
            return
        if number == 0:
            if not self.hello.done():
                self.hello.set_result(message)
            return
        future = self._waiting.pop(message.get("id", -1), None)
        if future is None or future.done():
            return
        if message.get("ok"):
            future.set_result(message.get("result"))
        else:
            future.set_exception(ControlError(str(message.get("error", "failed"))))

    def _fail(self, why: str) -> None:
        self.closed = True
        if self.hello is not None and not self.hello.done():
            self.hello.set_result({"id": 0, "op": "failed", "reason": why})
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ControlError(why))
        self._waiting.clear()

    def send(self, op: str, **fields: Any) -> asyncio.Future[Any]:
        """Send one request now (in call order); the future of its answer."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.closed or self._writer is None:
            future.set_exception(ControlError("the worker went away"))
            return future
        number = self._next
        self._next += 1
        self._waiting[number] = future
        try:
            self._writer.write(encode({"id": number, "op": op, **fields}))
        except (OSError, ControlError) as exc:
            self._waiting.pop(number, None)
            future.set_exception(ControlError(str(exc)))
        return future

    async def ask(self, op: str, *, within: float = 10.0, **fields: Any) -> Any:
        """Send a request and wait for its answer (ControlError, TimeoutError)."""
        async with asyncio.timeout(within):
            return await self.send(op, **fields)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


#: How a worker answers one request: its result (any JSON value), or an exception whose
#: text is the error.
ControlHandler = Callable[[str, ControlMessage], Awaitable[Any]]


class WorkerEnd:
    """The worker's end: says hello, then answers each request in turn."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_unix_connection(sock=self._sock)

    def hello(self, op: str, **fields: Any) -> None:
        assert self._writer is not None
        self._writer.write(encode({"id": 0, "op": op, **fields}))

    def note(self, op: str, **fields: Any) -> None:
        """Tell the supervisor something unasked (written now, between whole answers)."""
        if self._writer is not None and not self._writer.is_closing():
            with contextlib.suppress(OSError, ControlError):
                self._writer.write(encode({"id": -1, "op": op, **fields}))

    async def serve(self, handler: ControlHandler) -> None:
        """Answer requests until the supervisor goes away (then return)."""
        assert self._reader is not None and self._writer is not None
        decoder = Decoder()
        while True:
            try:
                messages = await _read_messages(self._reader, decoder)
            except (ControlError, OSError):
                return
            if not messages:
                return
            for message in messages:
                number = message.get("id")
                try:
                    result = await handler(str(message.get("op")), message)
                    answer: ControlMessage = {"id": number, "ok": True, "result": result}
                except Exception as exc:  # the error goes back as text
                    answer = {"id": number, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
                try:
                    self._writer.write(encode(answer))
                    await self._writer.drain()
                except (OSError, ControlError):
                    return

    async def flush(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(OSError):
                await self._writer.drain()


__all__ = ["MAX_MESSAGE", "Channel", "ControlError", "Decoder", "WorkerEnd", "encode"]
