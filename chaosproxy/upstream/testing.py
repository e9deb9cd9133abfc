"""A scripted upstream for tests, as httpx's ``MockTransport``: the real client (pool,
connection, llhttp, response) over in-memory sockets. A handler gets each :class:`Request`
and returns (or awaits) an :class:`Answer`: a head, then a chunked body of reads (bytes)
and pauses (seconds), then an ``end``: ``eof`` (the connection is kept), ``close`` or
``reset`` (it goes), ``hold`` (nothing more). What it raises, the request raises."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.client import responses
from typing import Any, Literal, NamedTuple

import httptools
from multidict import CIMultiDict

from chaosproxy.upstream.connection import Connection
from chaosproxy.upstream.errors import UpstreamError
from chaosproxy.upstream.pool import UpstreamPool


class Request(NamedTuple):  # as it reached the upstream: the pool's head, the body whole
    method: str
    target: str
    headers: CIMultiDict[str]
    body: bytes


@dataclass(frozen=True)
class Answer:
    status: int = 200
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    body: Sequence[bytes | float] = ()
    end: Literal["eof", "close", "reset", "hold"] = "eof"


class MockUpstream(UpstreamPool):
    def __init__(self, handler: Callable[[Request], Answer | Awaitable[Answer]], **kw: Any) -> None:
        super().__init__("http://mock.invalid", **kw)
        self.handler, self.requests = handler, list[Request]()  # every request, in order
        self.connect_directly()

    async def _open(self, route: Any) -> Connection:
        return _Socket(self).conn


class _Socket(asyncio.Transport):  # llhttp reads the requests; each answer read by read
    def __init__(self, upstream: MockUpstream) -> None:
        super().__init__()
        self.upstream, self.closing, self.task = upstream, False, asyncio.Future[None]()
        self.url, self.body, self.headers = bytearray(), bytearray(), CIMultiDict[str]()
        self.on_url, self.on_body = self.url.extend, self.body.extend  # llhttp's callbacks, then
        self.on_header = lambda name, value: self.headers.add(name.decode(), value.decode())
        self.parser = httptools.HttpRequestParser(self)
        self.conn = Connection(upstream, asyncio.get_running_loop())
        self.conn.connection_made(self)

    def on_message_complete(self) -> None:
        method, target = self.parser.get_method().decode(), self.url.decode()
        request = Request(method, target, self.headers, bytes(self.body))
        self.url[:], self.body[:], self.headers = b"", b"", CIMultiDict()
        self.upstream.requests.append(request)
        self.task = asyncio.get_running_loop().create_task(self.answer(request))

    async def answer(self, request: Request) -> None:
        try:
            answer = self.upstream.handler(request)
            answer = answer if isinstance(answer, Answer) else await answer
            if b"" in answer.body:  # (an empty chunk is the last one)
                raise ValueError("an answer's read cannot be empty")
        except Exception as exc:  # (as an UpstreamError if it was not one)
            self.conn._fail(exc if isinstance(exc, UpstreamError) else UpstreamError(repr(exc)))
            return
        fields = "".join(f"{k}: {v}\r\n" for k, v in CIMultiDict(answer.headers).items())
        head = f"HTTP/1.1 {answer.status} {responses.get(answer.status, '')}\r\n{fields}"
        self.conn.data_received(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        for item in [*answer.body, b""] if answer.end == "eof" else answer.body:  # b"": the end
            await asyncio.sleep(0 if isinstance(item, bytes) else item)  # a callback per read
            if isinstance(item, bytes):
                self.conn.data_received(b"%x\r\n%s\r\n" % (len(item), item))
        if answer.end in ("close", "reset"):  # (connection_lost comes from a callback of its own)
            self.abort(ConnectionResetError("reset by the mock") if answer.end == "reset" else None)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.parser.feed_data(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None: ...  # never paused: the response holds what comes
    def resume_reading(self) -> None: ...

    def abort(self, exc: Exception | None = None) -> None:  # (connection_lost is idempotent)
        self.closing = True
        self.task.cancel()
        asyncio.get_running_loop().call_soon(self.conn.connection_lost, exc)

    close = abort  # (the far end cannot tell them apart)
