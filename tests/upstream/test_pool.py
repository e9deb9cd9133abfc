"""The upstream pool (chaosproxy/upstream/pool.py): the request head it writes (the
base URL's path and host, its own framing headers, credentials from the URL), which
connections it keeps, and ``--upstream-max-connections`` (DESIGN section 9, Upstreams):
at most N connections to an upstream; requests beyond wait for one and do not fail.
Reads, timeouts and hostile upstreams through the pool are test_connection.py's.

The upstream here is a raw asyncio HTTP/1.1 server that counts its open connections
(keep-alive, a streamed chunked body per request), so the bound is checked where it
matters: on the server's side.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from chaosproxy.upstream import UpstreamConnectError, UpstreamPool
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import until


class CountingServer:
    """Streams ``events`` SSE events per request, ``gap`` seconds apart; keeps the
    connection alive; counts the connections open now and at most."""

    def __init__(self, events: int = 5, gap: float = 0.02) -> None:
        self.events = events
        self.gap = gap
        self.open = 0
        self.peak = 0
        self.accepted = 0
        self.requests = 0
        #: Cleared: the responses wait before their first event.
        self.go = asyncio.Event()
        self.go.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    async def __aenter__(self) -> CountingServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if b"content-length: 0" not in head.lower() and head.startswith(b"POST"):
                    return  # these tests only send bodiless requests
                self.requests += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                await self.go.wait()
                for i in range(self.events):
                    event = b"data: %d\n\n" % i
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()
                    await asyncio.sleep(self.gap)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the test ends: not an error of the handler's
        finally:
            self._tasks.discard(task)
            self.open -= 1
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    async with CountingServer() as s:
        yield s


async def _stream(client: httpx.AsyncClient, url: str) -> list[str]:
    async with client.stream("GET", url + "/v1/chat/completions") as resp:
        assert resp.status_code == 200
        return [line async for line in resp.aiter_lines() if line]


async def test_streams_beyond_the_limit_wait_and_all_complete(
    make_proxy: ProxyFactory, server: CountingServer
) -> None:
    limit, extra = 3, 5
    proxy = await make_proxy(upstream=server.url, upstream_max_connections=limit)
    limits = httpx.Limits(max_connections=limit + extra)
    async with httpx.AsyncClient(timeout=20, limits=limits) as client:
        async with asyncio.timeout(20):
            results = await asyncio.gather(
                *(_stream(client, proxy.url) for _ in range(limit + extra))
            )
    expected = [f"data: {i}" for i in range(server.events)]
    assert results == [expected] * (limit + extra)  # none failed, none was cut
    assert server.requests == limit + extra
    assert server.peak == limit  # the limit was reached, never passed
    assert server.accepted == limit  # the waiting ones reused the connections


@pytest.fixture
async def pool(server: CountingServer) -> AsyncIterator[UpstreamPool]:
    p = UpstreamPool(server.url, max_connections=1)
    try:
        yield p
    finally:
        await p.close()


async def _read(pool: UpstreamPool) -> bytes:
    resp = await pool.request("GET", "/", [])
    chunks: list[bytes] = []
    done = asyncio.get_running_loop().create_future()

    class Sink:
        def body_data(self, data: bytes) -> None:
            chunks.append(data)

        def body_end(self, error: object) -> None:
            if not done.done():
                done.set_result(error)

    resp.start(Sink())
    assert await done is None
    return b"".join(chunks)


async def test_a_waiting_request_can_be_cancelled(
    pool: UpstreamPool, server: CountingServer
) -> None:
    server.go.clear()  # the first response holds its connection
    first = asyncio.create_task(_read(pool))
    await until(lambda: server.requests == 1)
    second = asyncio.create_task(pool.request("GET", "/", []))
    await until(lambda: pool.stats.waiting == 1)
    second.cancel()  # its client left: the wait ends, nothing is left queued
    with pytest.raises(asyncio.CancelledError):
        await second
    assert pool.stats.waiting == 0
    third = asyncio.create_task(_read(pool))
    await until(lambda: pool.stats.waiting == 1)
    server.go.set()
    async with asyncio.timeout(5):
        assert (await first).count(b"data:") == server.events
        assert (await third).count(b"data:") == server.events
    assert server.accepted == 1


async def test_closing_the_pool_ends_the_waits(pool: UpstreamPool, server: CountingServer) -> None:
    server.go.clear()
    first = asyncio.create_task(pool.request("GET", "/", []))
    await until(lambda: server.requests == 1)
    second = asyncio.create_task(pool.request("GET", "/", []))
    await until(lambda: pool.stats.waiting == 1)
    await pool.close()
    with pytest.raises(UpstreamConnectError, match="closed"):
        async with asyncio.timeout(5):
            await second
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)


async def test_a_failed_connect_leaves_room() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = UpstreamPool(f"http://127.0.0.1:{port}", max_connections=1)
    try:
        async with asyncio.timeout(5):
            for _ in range(3):
                with pytest.raises(UpstreamConnectError, match="unreachable"):
                    await p.request("GET", "/", [])
        assert p.stats.waiting == 0
    finally:
        await p.close()


def test_max_connections_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        UpstreamPool("http://127.0.0.1:1", max_connections=0)


async def test_a_client_leaving_while_its_request_waits(
    make_proxy: ProxyFactory, server: CountingServer, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(upstream=server.url, upstream_max_connections=1)
    server.go.clear()  # the first stream holds the only connection
    async with httpx.AsyncClient(timeout=20) as client:
        first = asyncio.create_task(_stream(client, proxy.url))
        await until(lambda: server.requests == 1)
        host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await until(lambda: sum(1 for x in log_capture.lines if x["event"] == "request") == 2)
        await asyncio.sleep(0.05)  # it is waiting for the connection
        writer.close()  # and its client leaves
        await until(lambda: any(x["event"] == "response_end" for x in log_capture.lines))
        (end,) = [x for x in log_capture.lines if x["event"] == "response_end"]
        assert end["outcome"] == "client_gone"
        server.go.set()
        async with asyncio.timeout(10):
            assert len(await first) == server.events
        # The line is empty again: the next request gets the connection at once.
        async with asyncio.timeout(10):
            assert len(await _stream(client, proxy.url)) == server.events
    assert server.accepted == 1


# --------------------------------------------------------------------- the head it writes


class _Sink:
    def __init__(self) -> None:
        self.body = b""
        self.ended = asyncio.get_running_loop().create_future()

    def body_data(self, data: bytes) -> None:
        self.body += data

    def body_end(self, error: object) -> None:
        self.ended.set_result(error)


class HeadServer:
    """Answers every request ``ok`` with a Content-Length (and ``Connection: close``
    when the request asked for it), keeping each request head's bytes, per connection."""

    def __init__(self) -> None:
        self.heads: list[tuple[int, bytes]] = []
        self.accepted = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> HeadServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:  # (the pool's idle connections)
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        number = self.accepted
        self._writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)\r\ncontent-length: (\d+)", head)
                if length:
                    await reader.readexactly(int(length.group(1)))
                self.heads.append((number, head))
                close = b"connection: close" in head.lower()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                    + (b"Connection: close\r\n" if close else b"")
                    + b"\r\nok"
                )
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _ask(
    pool: UpstreamPool,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes | None = None,
) -> bytes:
    resp = await pool.request(method, target, headers, body)
    sink = _Sink()
    resp.start(sink)
    assert await sink.ended is None
    return sink.body


async def test_the_head_is_the_base_urls_path_and_host_with_the_pools_own_framing() -> None:
    async with HeadServer() as server:
        port = server.url.rsplit(":", 1)[1]
        pool = UpstreamPool(f"http://user:s3cret@127.0.0.1:{port}/base/")
        try:
            assert (
                await _ask(
                    pool,
                    "POST",
                    "/v1/x?q=1",
                    [
                        ("Host", "evil"),
                        ("Content-Length", "99"),
                        ("Transfer-Encoding", "gzip"),
                        ("X-A", "1"),
                    ],
                )
                == b"ok"
            )
            await _ask(pool, "GET", "/v1/models", [("authorization", "Bearer mine")])
            await _ask(pool, "PUT", "/put", [], b"abc")
        finally:
            await pool.close()
    basic = "Basic " + base64.b64encode(b"user:s3cret").decode()
    assert server.heads == [
        (
            1,
            f"POST /base/v1/x?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-A: 1\r\n"
            f"Authorization: {basic}\r\nContent-Length: 0\r\n\r\n".encode(),
        ),
        # the caller's own credentials win; a GET without a body has no framing
        (
            1,
            f"GET /base/v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "authorization: Bearer mine\r\n\r\n".encode(),
        ),
        (
            1,
            f"PUT /base/put HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: {basic}\r\nContent-Length: 3\r\n\r\n".encode(),
        ),
    ]


async def test_a_connection_asked_closed_is_not_kept() -> None:
    async with HeadServer() as server:
        pool = UpstreamPool(server.url)
        try:
            await _ask(pool, "GET", "/a", [])
            await _ask(pool, "GET", "/b", [("Connection", "keep-alive, close")])
            await until(lambda: pool.stats.active == 0)
            await _ask(pool, "GET", "/c", [])
            stats = pool.stats
        finally:
            await pool.close()
    assert [(n, head.split(b" ")[1]) for n, head in server.heads] == [
        (1, b"/a"),
        (1, b"/b"),
        (2, b"/c"),
    ]
    assert (stats.opened, stats.reused, stats.idle, stats.active, stats.waiting) == (2, 1, 1, 1, 0)
