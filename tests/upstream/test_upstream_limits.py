"""``--upstream-max-connections`` (DESIGN section 9, Upstreams): at most N connections
to an upstream; requests beyond wait for one and do not fail.

The upstream here is a raw asyncio HTTP/1.1 server that counts its open connections
(keep-alive, a streamed chunked body per request), so the bound is checked where it
matters: on the server's side.
"""

from __future__ import annotations

import asyncio
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
