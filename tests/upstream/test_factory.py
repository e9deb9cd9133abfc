"""The upstream client built from the settings (chaosproxy/upstream/factory.py): a pool
to the URL with the settings' connection bound, TLS files checked at start whatever
the URL's scheme, and an https pool that trusts the given CA only. TLS at work through
the proxy is test_tls.py's."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme

from chaosproxy.control.api import EMBEDDED
from chaosproxy.upstream import UpstreamConnectError
from chaosproxy.upstream.errors import StartupError
from chaosproxy.upstream.factory import pool_for
from tests.support.scripted_upstream import until


class Held:
    """Answers each request once ``go`` is set."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.url = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                await self.go.wait()
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def held() -> AsyncIterator[Held]:
    h = Held()
    server = await asyncio.start_server(h.serve, "127.0.0.1", 0)
    h.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield h
    server.close()


async def test_the_pool_keeps_the_settings_bound_on_connections(held: Held) -> None:
    pool = pool_for(held.url, EMBEDDED.replace(upstream_max_connections=1))
    first = asyncio.ensure_future(pool.request("GET", "/a", []))
    second = asyncio.ensure_future(pool.request("GET", "/b", []))
    try:
        await until(lambda: pool.stats.waiting == 1)
        assert pool.stats.active == 1
        held.go.set()
        assert [(await first).status, (await second).status] == [204, 204]
    finally:
        for task in (first, second):
            task.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
        await pool.close()


def test_a_tls_file_that_cannot_load_is_refused_for_an_http_upstream_too(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "ca.pem"
    with pytest.raises(StartupError, match="--upstream-ca") as caught:
        pool_for("http://127.0.0.1:9", EMBEDDED.replace(upstream_ca=str(missing)))
    assert "\n" not in str(caught.value)


async def test_an_https_pool_does_not_trust_what_its_store_does_not_know() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_context)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    with ca.cert_pem.tempfile() as ca_file:
        trusting = pool_for(url, EMBEDDED.replace(upstream_ca=ca_file))
        doubting = pool_for(url, EMBEDDED)
        try:
            assert (await trusting.request("GET", "/", [])).status == 204
            with pytest.raises(UpstreamConnectError, match="certificate"):
                await doubting.request("GET", "/", [])
        finally:
            await trusting.close()
            await doubting.close()
            server.close()
