"""A scripted upstream for end-to-end tests: it sends exactly the writes a test asks
for, with the gaps it asks for, and ends the way it asks (EOF, or dying mid-body).

It records every request it received (method, path, headers, body) and whether the
proxy closed the connection, so tests can assert what crossed the proxy both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from aiohttp import web


@dataclass
class Script:
    """What to answer: status, headers, writes (bytes, seconds to wait before it), end."""

    writes: list[tuple[bytes, float]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})
    #: "eof": end the body properly; "die": drop the connection without the last chunk;
    #: "hold": keep the body open until the client goes.
    end: str = "eof"
    content_length: bool = False

    @classmethod
    def events(cls, body: bytes, *, gap: float = 0.0, sep: bytes = b"\n\n", **kw: object) -> Script:
        """One write per event (split after every ``sep``)."""
        parts: list[bytes] = []
        rest = body
        while rest:
            i = rest.find(sep)
            if i < 0:
                parts.append(rest)
                break
            parts.append(rest[: i + len(sep)])
            rest = rest[i + len(sep) :]
        return cls(writes=[(p, gap) for p in parts], **kw)  # type: ignore[arg-type]


@dataclass
class Seen:
    method: str
    path_qs: str
    headers: dict[str, str]
    body: bytes


class ScriptedUpstream:
    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.seen: list[Seen] = []
        #: When each scripted write began (time.monotonic(), the clock of the test's
        #: own clients): what came after it at a client cannot have come before it.
        self.wrote_at: list[float] = []
        self.disconnected = asyncio.Event()
        self.url = ""

    def route(self, path: str, script: Script) -> str:
        self.scripts[path] = script
        return path

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path_qs, dict(request.headers), body))
        script = self.scripts.get(request.path)
        if script is None:
            return web.json_response({"path": request.path_qs, "body": body.decode()})
        resp = web.StreamResponse(status=script.status, headers=script.headers)
        if script.content_length:
            resp.content_length = sum(len(w) for w, _ in script.writes)
        await resp.prepare(request)
        try:
            for data, wait in script.writes:
                if wait:
                    await asyncio.sleep(wait)
                self.wrote_at.append(time.monotonic())
                await resp.write(data)
            if script.end == "die":
                assert request.transport is not None
                request.transport.close()
                return resp
            if script.end == "hold":
                await asyncio.Event().wait()
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnected.set()
            raise
        return resp


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on a free port of 127.0.0.1; yields its base URL."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


#: What :class:`BigUpstream` sends: far more than every buffer between upstream and
#: client (kernel socket buffers on both hops, the proxy's inbox and transport buffer)
#: can hold together.
BIG_MIB = 48
#: Its events: 1 KiB each.
BIG_EVENT = b"data: " + b"x" * 1016 + b"\n\n"


class BigUpstream:
    """Streams :data:`BIG_MIB` MiB of 1 KiB SSE events at ``/big`` as fast as the socket
    takes them: counts what it wrote and says when its last write went out (a client
    that left ends it quietly)."""

    def __init__(self) -> None:
        self.finished = asyncio.Event()
        self.written = 0
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        block = BIG_EVENT * 64
        with contextlib.suppress(ConnectionError):
            for _ in range(BIG_MIB * 16):
                await resp.write(block)
                self.written += len(block)
            await resp.write_eof()
            self.finished.set()
        return resp


@asynccontextmanager
async def big_upstream() -> AsyncIterator[BigUpstream]:
    up = BigUpstream()
    app = web.Application()
    app.router.add_get("/big", up.handle)
    async with serve_app(app) as up.url:
        yield up


class Handler(Protocol):
    """An upstream written as one aiohttp handler, told its own base URL."""

    url: str

    async def handle(self, request: web.Request) -> web.StreamResponse: ...


H = TypeVar("H", bound=Handler)


@asynccontextmanager
async def serve_handler(upstream: H) -> AsyncIterator[H]:
    """Serve ``upstream.handle`` for every method and path (see :func:`serve_app`)."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    async with serve_app(app) as url:
        upstream.url = url
        yield upstream


@asynccontextmanager
async def scripted_upstream() -> AsyncIterator[ScriptedUpstream]:
    async with serve_handler(ScriptedUpstream()) as upstream:
        yield upstream


@asynccontextmanager
async def raw_upstream(answer: bytes) -> AsyncIterator[str]:
    """An upstream that reads each request's head, writes ``answer`` byte for byte (a
    broken head, a body cut short: whatever a test needs) and closes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


async def until(condition: Callable[[], bool], *, limit: float = 5.0) -> None:
    """Wait (bounded) until ``condition()`` holds: for kernel and connection-pool state
    that changes asynchronously and has no event to await."""
    async with asyncio.timeout(limit):
        while not condition():  # noqa: ASYNC110 - no event to await
            await asyncio.sleep(0.005)
