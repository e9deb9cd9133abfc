"""Happy Eyeballs (chaosproxy/upstream/eyeballs.py), against real loopback peers: an
IPv6 upstream, and a name whose first address hangs (a loopback listener with a full
accept queue) or refuses. The resolver's own cache is test_resolver.py's."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from aiohttp import web

from chaosproxy.upstream.eyeballs import connect_first, interleave
from chaosproxy.upstream.resolver import Resolver
from tests.support.proxies import ProxyFactory

V4, V6 = int(socket.AF_INET), int(socket.AF_INET6)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@contextlib.contextmanager
def hanging_listener(host: str, port: int = 0) -> Iterator[int]:
    """A listener on ``host`` whose accept queue is full: connects to it hang in
    SYN-SENT without leaving the machine."""
    listener = socket.socket()
    listener.bind((host, port))
    listener.listen(0)
    bound: int = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            f.connect((host, bound))
        fillers.append(f)
    try:
        yield bound
    finally:
        for f in fillers:
            f.close()
        listener.close()


@contextlib.asynccontextmanager
async def hello_server(host: str) -> AsyncIterator[int]:
    async def handle(request: web.Request) -> web.Response:
        return web.Response(text=f"hello from {request.transport.get_extra_info('sockname')[0]}")  # type: ignore[union-attr]

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        return resp.status, await resp.text()


def test_interleave_alternates_families_first_family_first() -> None:
    addrs = [(V6, "a"), (V6, "b"), (V6, "c"), (V4, "1"), (V4, "2")]
    assert interleave(addrs) == [(V6, "a"), (V4, "1"), (V6, "b"), (V4, "2"), (V6, "c")]
    assert interleave([(V4, "1"), (V6, "a")]) == [(V4, "1"), (V6, "a")]
    assert interleave([]) == []


async def test_a_refused_address_starts_the_next_at_once() -> None:
    loop = asyncio.get_running_loop()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        failed: list[int] = []
        started = time.monotonic()
        # 127.0.0.3:port: nobody listens there, refused at once; the delay is long.
        sock = await connect_first(
            loop, [(V4, "127.0.0.3"), (V4, "127.0.0.1")], port, delay=30, failed=failed.append
        )
        with sock:
            assert sock.getpeername() == ("127.0.0.1", port)
        assert time.monotonic() - started < 5
        assert failed == [V4]


async def test_a_hanging_address_does_not_starve_the_next() -> None:
    loop = asyncio.get_running_loop()
    async with hello_server("127.0.0.1") as port:
        with hanging_listener("127.0.0.2", port):
            started = time.monotonic()
            sock = await connect_first(
                loop, [(V4, "127.0.0.2"), (V4, "127.0.0.1")], port, delay=0.05
            )
            with sock:
                assert sock.getpeername() == ("127.0.0.1", port)
            assert time.monotonic() - started < 2


async def test_every_address_failing_says_so() -> None:
    loop = asyncio.get_running_loop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OSError, match="all 2 addresses failed"):
        await connect_first(loop, [(V4, "127.0.0.1"), (V4, "127.0.0.3")], port)
    with hanging_listener("127.0.0.1") as hung, pytest.raises(OSError, match="timed out after"):
        await connect_first(loop, [(V4, "127.0.0.1")], hung, attempt_timeout=0.2)


async def test_ipv6_loopback_upstream(make_proxy: ProxyFactory) -> None:
    if not _ipv6_loopback():
        pytest.skip("IPv6 loopback (::1) is not available here")
    async with hello_server("::1") as port:
        proxy = await make_proxy(upstream=f"http://[::1]:{port}")
        assert await _get(proxy.url + "/v1/models") == (200, "hello from ::1")


async def test_a_name_whose_first_address_hangs_still_connects_in_time(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def lookup(self: Resolver, loop: asyncio.AbstractEventLoop) -> list[tuple[int, str]]:
        # The hanging address first, as a blackholed IPv6 would come first.
        return [(V4, "127.0.0.2"), (V4, "127.0.0.1")]

    monkeypatch.setattr(Resolver, "_lookup", lookup)
    async with hello_server("127.0.0.1") as port:
        with hanging_listener("127.0.0.2", port):
            proxy = await make_proxy(upstream=f"http://upstream.test:{port}", connect_timeout=5)
            started = time.monotonic()
            assert await _get(proxy.url + "/v1/models") == (200, "hello from 127.0.0.1")
            assert time.monotonic() - started < 2.5  # well within the connect timeout
