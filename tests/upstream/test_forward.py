"""Forward proxies from the environment (chaosproxy/upstream/forward.py), against real
peers: proxy.py (the PyPI package, a real forward proxy) and small raw asyncio proxies
the tests write (a 407, a tunnel that checks credentials)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from chaosproxy.upstream.forward import bypassed, parse_proxy, proxy_for
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import ScriptedUpstream

PROXY_VARS = (
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _dead_port() -> int:
    """A loopback port nobody listens on (connects are refused at once)."""
    return _free_port()


@dataclass
class ForwardProxyProcess:
    url: str
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def forward_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxyProcess]:
    """proxy.py (``pip install proxy.py``: the test extras and .ci/run install it)."""
    if importlib.util.find_spec("proxy") is None:
        pytest.skip("the forward proxy proxy.py is not installed (pip install proxy.py)")
    log = tmp_path_factory.mktemp("forward") / "proxy.log"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    args = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", str(port)]
    args += ["--num-workers", "1", "--num-acceptors", "1"]
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"proxy.py did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield ForwardProxyProcess(f"http://127.0.0.1:{port}", log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        return resp.status, await resp.text()


async def _wait_for(condition: Any, what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------ TLS upstream


@dataclass
class TlsUpstream:
    port: int
    ca_file: Path
    sni: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


@pytest.fixture
async def tls_upstream(tmp_path: Path) -> AsyncIterator[TlsUpstream]:
    trustme = pytest.importorskip("trustme", reason="trustme is not installed")
    ca = trustme.CA()
    cert = ca.issue_cert("upstream.test", "127.0.0.1")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    up = TlsUpstream(0, ca_file)

    def on_sni(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        up.sni.append(name)

    ctx.sni_callback = on_sni

    async def handle(request: web.Request) -> web.Response:
        up.paths.append(request.path_qs)
        return web.Response(text="secure hello")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    up.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield up
    finally:
        await runner.cleanup()


# ------------------------------------------------------------------ raw proxies


@dataclass
class RawProxy:
    url: str
    heads: list[bytes] = field(default_factory=list)


@contextlib.asynccontextmanager
async def raw_proxy(
    *, answer: bytes | None = None, auth: str | None = None, tunnel_to: int | None = None
) -> AsyncIterator[RawProxy]:
    """A forward proxy written here: reads one request head; answers ``answer`` if
    given; else checks ``Proxy-Authorization`` against ``auth`` (407 when wrong) and,
    for CONNECT, tunnels to 127.0.0.1:``tunnel_to`` whatever the name asked for."""
    seen = RawProxy("")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, OSError):
            writer.close()
            return
        seen.heads.append(head)
        lines = head.decode("latin-1").split("\r\n")
        given = [
            ln.split(":", 1)[1].strip()
            for ln in lines
            if ln.lower().startswith("proxy-authorization:")
        ]
        if answer is None and auth is not None and given != [auth]:
            out = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
        else:
            out = answer or b""
        if out or tunnel_to is None:
            writer.write(
                out or b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
            )
            await writer.drain()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", tunnel_to)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    seen.url = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield seen
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await server.wait_closed()


# ------------------------------------------------------------------ rules (curl's)


@pytest.mark.parametrize(
    ("host", "no_proxy", "expected"),
    [
        ("example.com", "*", True),
        ("example.com", "example.com", True),
        ("api.example.com", "example.com", True),
        ("api.example.com", ".example.com", True),
        ("example.com", ".example.com", True),
        ("badexample.com", "example.com", False),
        ("EXAMPLE.com.", "example.COM", True),
        ("example.com", "other.org, example.com", True),
        ("example.com", "other.org example.com", True),
        ("example.com", "example.com:8080", True),  # ports ignored
        ("10.1.2.3", "10.0.0.0/8", True),
        ("11.1.2.3", "10.0.0.0/8", False),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "127.0.0.1:443", True),
        ("::1", "::1", True),
        ("::1", "[::1]", True),
        ("fd00::5", "fd00::/8", True),
        ("10.1.2.3", "10.1.2.3.example", False),
        ("example.com", "", False),
        ("example.com", "*.example.com", False),  # curl: '*' only alone
    ],
)
def test_no_proxy_rules(host: str, no_proxy: str, expected: bool) -> None:
    assert bypassed(host, no_proxy) is expected


def test_proxy_choice_is_curls() -> None:
    env = {"HTTP_PROXY": "http://cgi:1", "HTTPS_PROXY": "http://sec:2"}
    assert proxy_for("http", "h", env) is None  # upper-case HTTP_PROXY ignored
    sec = proxy_for("https", "h", env)
    assert sec is not None and (sec.host, sec.port) == ("sec", 2)
    env = {"http_proxy": "plain:3", "all_proxy": "http://all:4"}
    plain = proxy_for("http", "h", env)
    assert plain is not None and (plain.host, plain.port) == ("plain", 3)
    every = proxy_for("https", "h", env)
    assert every is not None and (every.host, every.port) == ("all", 4)
    assert proxy_for("https", "h", {"https_proxy": "http://p:1", "NO_PROXY": "h"}) is None
    assert parse_proxy("proxy").port == 1080  # curl's default


def test_proxy_credentials_are_a_header_and_never_shown() -> None:
    proxy = parse_proxy("http://us%40er:s3cr%2Ft@proxy:3128")
    assert proxy.authorization == "Basic " + base64.b64encode(b"us@er:s3cr/t").decode()
    assert "s3cr" not in repr(proxy) and "s3cr" not in proxy.shown
    with pytest.raises(ValueError, match="only http://") as info:
        parse_proxy("socks5://user:hunter2@proxy:1080")
    assert "hunter2" not in str(info.value)


# ------------------------------------------------------------------ live, proxy.py


async def test_http_upstream_goes_through_the_forward_proxy_in_absolute_form(
    forward_proxy: ForwardProxyProcess,
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("http_proxy", forward_proxy.url)
    proxy = await make_proxy(upstream=upstream.url)
    status, body = await _get(proxy.url + "/v1/models?via=forward")
    assert status == 200, body
    assert [s.path_qs for s in upstream.seen] == ["/v1/models?via=forward"]
    await proxy.close()  # proxy.py logs a request when its connection ends
    where = upstream.url.removeprefix("http://")
    await _wait_for(lambda: f"GET {where}/v1/models" in forward_proxy.text(), "proxy.py's log")


async def test_https_upstream_goes_through_a_connect_tunnel(
    forward_proxy: ForwardProxyProcess,
    tls_upstream: TlsUpstream,
    make_proxy: ProxyFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_upstream.ca_file))
    monkeypatch.setenv("HTTPS_PROXY", forward_proxy.url)
    proxy = await make_proxy(upstream=f"https://127.0.0.1:{tls_upstream.port}")
    status, body = await _get(proxy.url + "/v1/models")
    assert (status, body) == (200, "secure hello")
    assert tls_upstream.paths == ["/v1/models"]
    await proxy.close()
    line = f"CONNECT 127.0.0.1:{tls_upstream.port}"
    await _wait_for(lambda: line in forward_proxy.text(), "proxy.py's CONNECT log line")


# ------------------------------------------------------------------ live, raw proxies


async def test_upper_case_http_proxy_is_ignored(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{_dead_port()}")
    proxy = await make_proxy(upstream=upstream.url)
    status, _ = await _get(proxy.url + "/v1/models")
    assert status == 200
    assert len(upstream.seen) == 1


async def test_no_proxy_bypasses_the_forward_proxy(
    upstream: ScriptedUpstream,
    tls_upstream: TlsUpstream,
    make_proxy: ProxyFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead = f"http://127.0.0.1:{_dead_port()}"
    monkeypatch.setenv("http_proxy", dead)
    monkeypatch.setenv("https_proxy", dead)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_upstream.ca_file))
    monkeypatch.setenv("NO_PROXY", "example.org, 127.0.0.0/8")
    plain = await make_proxy(upstream=upstream.url)
    assert (await _get(plain.url + "/v1/models"))[0] == 200
    secure = await make_proxy(upstream=f"https://127.0.0.1:{tls_upstream.port}")
    assert await _get(secure.url + "/v1/models") == (200, "secure hello")
    # and without the bypass, the dead proxy is what fails
    monkeypatch.delenv("NO_PROXY")
    via_dead = await make_proxy(upstream=upstream.url)
    status, body = await _get(via_dead.url + "/v1/models")
    assert status == 502
    assert "through forward proxy 127.0.0.1:" in body


async def test_a_proxy_refusing_the_tunnel_is_a_502_that_says_so(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, log_capture: LogCapture
) -> None:
    answer = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
    async with raw_proxy(answer=answer) as fwd:
        monkeypatch.setenv("https_proxy", f"http://{fwd.url}")
        proxy = await make_proxy(upstream="https://upstream.test:8443")
        status, body = await _get(proxy.url + "/v1/models")
    assert status == 502
    assert "forward proxy refused the tunnel: 407 Proxy Authentication Required" in body
    assert fwd.heads[0].startswith(b"CONNECT upstream.test:8443 HTTP/1.1\r\n")
    end = [x for x in log_capture.lines if x["event"] == "response_end"][-1]
    assert end["status"] == 502


async def test_proxy_credentials_go_in_the_head_and_never_in_the_log(
    tls_upstream: TlsUpstream,
    make_proxy: ProxyFactory,
    monkeypatch: pytest.MonkeyPatch,
    log_capture: LogCapture,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "hunter2-s3cret"
    good = "Basic " + base64.b64encode(f"alice:{secret}".encode()).decode()
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_upstream.ca_file))
    async with raw_proxy(auth=good, tunnel_to=tls_upstream.port) as fwd:
        monkeypatch.setenv("https_proxy", f"http://alice:{secret}@{fwd.url}")
        proxy = await make_proxy(upstream=f"https://upstream.test:{tls_upstream.port}")
        assert await _get(proxy.url + "/v1/models") == (200, "secure hello")
        # TLS with the upstream inside the tunnel: its name, not the proxy's
        assert tls_upstream.sni == ["upstream.test"]
        assert f"Proxy-Authorization: {good}".encode() in fwd.heads[0]

        monkeypatch.setenv("https_proxy", f"http://alice:wrong-{secret}@{fwd.url}")
        refused = await make_proxy(upstream=f"https://upstream.test:{tls_upstream.port}")
        status, body = await _get(refused.url + "/v1/models")
        assert status == 502
        assert "refused the tunnel: 407" in body
        assert secret not in body
        await proxy.close()
        await refused.close()
    out, err = capfd.readouterr()
    everything = out + err + caplog.text + repr(log_capture.lines)
    assert secret not in everything
    assert base64.b64encode(f"alice:{secret}".encode()).decode() not in everything


async def test_http_upstream_through_a_proxy_with_credentials(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = "Basic " + base64.b64encode(b"bob:pw").decode()
    async with raw_proxy(auth=auth) as fwd:
        monkeypatch.setenv("http_proxy", f"bob:pw@{fwd.url}")  # no scheme: http://
        proxy = await make_proxy(upstream="http://upstream.test:8080/base")
        status, body = await _get(proxy.url + "/v1/models?x=1")
    assert (status, body) == (200, "ok")
    head = fwd.heads[0].decode()
    assert head.startswith("GET http://upstream.test:8080/base/v1/models?x=1 HTTP/1.1\r\n")
    assert "\r\nHost: upstream.test:8080\r\n" in head
    assert f"\r\nProxy-Authorization: {auth}\r\n" in head


async def test_the_builtin_mock_is_never_reached_through_a_forward_proxy(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{_dead_port()}")
    proxy = await make_proxy(upstream="mock")
    status, body = await _get(proxy.url + "/v1/models")
    assert status == 200, body


async def test_an_unsupported_proxy_scheme_is_a_502_that_says_so(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("https_proxy", "socks5://user:hunter2@127.0.0.1:1080")
    proxy = await make_proxy(upstream="https://upstream.test")
    status, body = await _get(proxy.url + "/v1/models")
    assert status == 502
    assert "only http:// proxies are supported" in body
    assert "hunter2" not in body
