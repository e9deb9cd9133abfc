"""TLS towards the upstream (DESIGN section 9, Upstreams): a real TLS server made here
with a ``trustme`` CA, reached through the live proxy by a real client (httpx).

- without ``--upstream-ca`` the system store does not know the CA: 502, and the reason
  says the certificate failed verification; with it, the request goes through;
- ``--upstream-insecure`` goes through too, and says so (warning);
- a server that requires a client certificate: 502 without one, fine with one;
- SNI is the host name of the upstream URL (the server's ``sni_callback`` sees it);
- bad TLS settings are a one-line start-up error: exit 2 from the CLI, a
  :class:`StartupError` from ``ChaosProxy`` / ``start_proxy``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from aiohttp import web

from chaosproxy.control.api import EMBEDDED, ChaosProxy
from chaosproxy.server.net import StartupError
from chaosproxy.upstream.factory import pool_for
from chaosproxy.upstream.tls import check_upstream_tls, tls_context, upstream_warnings
from tests.support.cli import run_cli
from tests.support.proxies import LogCapture, ProxyFactory


@dataclass
class TlsUpstream:
    url: str  #: https://localhost:PORT
    ca_file: str  #: the CA that signed the server's certificate (PEM)
    sni: list[str | None] = field(default_factory=list)  #: what each handshake's SNI said
    peers: list[object] = field(default_factory=list)  #: the client certificate per request


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def client_pair(ca: trustme.CA, tmp_path: Path) -> tuple[str, str]:
    """A client certificate the CA signed, and its key: two PEM files."""
    cert = ca.issue_cert("client.chaosproxy.test")
    cert_file, key_file = tmp_path / "client.pem", tmp_path / "client.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    return str(cert_file), str(key_file)


async def _hello(request: web.Request) -> web.Response:
    peer = request.transport.get_extra_info("peercert") if request.transport else None
    request.app[PEERS].append(peer)
    return web.json_response({"path": request.path, "client_cert": peer is not None})


PEERS = web.AppKey("peers", list)


async def _start(
    ca: trustme.CA, ca_file: str, *, require_client_cert: bool
) -> AsyncIterator[TlsUpstream]:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server_ctx)
    if require_client_cert:
        server_ctx.verify_mode = ssl.CERT_REQUIRED
        ca.configure_trust(server_ctx)
    seen: list[str | None] = []

    def on_sni(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        seen.append(name)

    server_ctx.sni_callback = on_sni
    app = web.Application()
    peers: list[object] = []
    app[PEERS] = peers
    app.router.add_get("/{tail:.*}", _hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield TlsUpstream(f"https://localhost:{port}", ca_file, seen, peers)
    finally:
        await runner.cleanup()


@pytest.fixture
async def tls_upstream(ca: trustme.CA, ca_file: str) -> AsyncIterator[TlsUpstream]:
    async for up in _start(ca, ca_file, require_client_cert=False):
        yield up


@pytest.fixture
async def mtls_upstream(ca: trustme.CA, ca_file: str) -> AsyncIterator[TlsUpstream]:
    async for up in _start(ca, ca_file, require_client_cert=True):
        yield up


async def _get(proxy_url: str, path: str = "/v1/models") -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.get(proxy_url + path)


# ------------------------------------------------------------------ verification


async def test_unknown_ca_is_502_saying_certificate_verification(
    make_proxy: ProxyFactory, tls_upstream: TlsUpstream
) -> None:
    proxy = await make_proxy(upstream=tls_upstream.url)
    resp = await _get(proxy.url)
    assert resp.status_code == 502
    message = resp.json()["error"]["message"]
    assert "certificate verify failed" in message, message
    assert "\n" not in message


async def test_upstream_ca_verifies_and_sends_sni(
    make_proxy: ProxyFactory, tls_upstream: TlsUpstream
) -> None:
    proxy = await make_proxy(upstream=tls_upstream.url, upstream_ca=tls_upstream.ca_file)
    resp = await _get(proxy.url, "/v1/models?x=1")
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"path": "/v1/models", "client_cert": False}
    assert tls_upstream.sni == ["localhost"]  # the URL's host name, not an address
    assert proxy.warnings == []


async def test_upstream_ca_replaces_the_system_store(
    make_proxy: ProxyFactory, tls_upstream: TlsUpstream, tmp_path: Path
) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    proxy = await make_proxy(upstream=tls_upstream.url, upstream_ca=str(other))
    resp = await _get(proxy.url)
    assert resp.status_code == 502
    assert "certificate verify failed" in resp.json()["error"]["message"]


async def test_host_name_is_checked_against_the_certificate(
    make_proxy: ProxyFactory, ca: trustme.CA, tmp_path: Path
) -> None:
    # A certificate for another name, signed by the trusted CA: still refused.
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("elsewhere.example").configure_cert(server_ctx)
    app = web.Application()
    app.router.add_get("/{tail:.*}", _hello)
    app[PEERS] = []
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    try:
        ca_path = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_path))
        port = runner.addresses[0][1]
        proxy = await make_proxy(upstream=f"https://localhost:{port}", upstream_ca=str(ca_path))
        resp = await _get(proxy.url)
        assert resp.status_code == 502
        assert "certificate verify failed" in resp.json()["error"]["message"]
    finally:
        await runner.cleanup()


async def test_insecure_skips_verification_and_warns(
    make_proxy: ProxyFactory, tls_upstream: TlsUpstream
) -> None:
    proxy = await make_proxy(upstream=tls_upstream.url, upstream_insecure=True)
    resp = await _get(proxy.url)
    assert resp.status_code == 200, resp.text
    assert tls_upstream.sni == ["localhost"]
    (warning,) = upstream_warnings(proxy.config)
    assert "--upstream-insecure" in warning and "NOT verified" in warning


async def test_insecure_warning_in_health_and_running_proxy(
    make_proxy: ProxyFactory, tls_upstream: TlsUpstream
) -> None:
    proxy = await make_proxy(
        upstream=tls_upstream.url, upstream_insecure=True, admin=("127.0.0.1", 0)
    )
    assert any("--upstream-insecure" in w for w in proxy.warnings)
    assert proxy.admin_url is not None
    async with httpx.AsyncClient(timeout=10) as client:
        health = (await client.get(proxy.admin_url + "/health")).json()
    assert any("--upstream-insecure" in w for w in health["warnings"])


# ------------------------------------------------------------------ client certificate


async def test_client_certificate_required(
    make_proxy: ProxyFactory,
    mtls_upstream: TlsUpstream,
    client_pair: tuple[str, str],
    log_capture: LogCapture,
) -> None:
    without = await make_proxy(upstream=mtls_upstream.url, upstream_ca=mtls_upstream.ca_file)
    resp = await _get(without.url)
    assert resp.status_code == 502
    end = await log_capture.wait_end(resp.headers["X-Chaos-Request-Id"])
    # TLS 1.3: refused after the handshake (closed early); TLS 1.2: in it (unreachable).
    assert (end["outcome"], end["reason"]) in {
        ("upstream_error", "closed early"),
        ("upstream_error", "unreachable"),
    }
    assert resp.json()["error"]["type"] == "chaosproxy_error", resp.text
    cert, key = client_pair
    proxy = await make_proxy(
        upstream=mtls_upstream.url,
        upstream_ca=mtls_upstream.ca_file,
        upstream_cert=cert,
        upstream_key=key,
    )
    resp = await _get(proxy.url)
    assert resp.status_code == 200, resp.text
    assert resp.json()["client_cert"] is True
    assert "localhost" in mtls_upstream.sni


async def test_client_certificate_and_key_in_one_file(
    make_proxy: ProxyFactory, mtls_upstream: TlsUpstream, ca: trustme.CA, tmp_path: Path
) -> None:
    both = tmp_path / "both.pem"
    ca.issue_cert("client.chaosproxy.test").private_key_and_cert_chain_pem.write_to_path(str(both))
    proxy = await make_proxy(
        upstream=mtls_upstream.url, upstream_ca=mtls_upstream.ca_file, upstream_cert=str(both)
    )
    resp = await _get(proxy.url)
    assert resp.status_code == 200, resp.text


# ------------------------------------------------------------------ start-up errors


def _bad_settings(tmp_path: Path, client_pair: tuple[str, str]) -> list[tuple[dict[str, str], str]]:
    cert, key = client_pair
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    missing = str(tmp_path / "missing.pem")
    return [
        ({"upstream_ca": missing}, "cannot read --upstream-ca"),
        ({"upstream_ca": str(tmp_path)}, "--upstream-ca"),
        ({"upstream_ca": str(garbage)}, "cannot load --upstream-ca"),
        ({"upstream_key": key}, "--upstream-key needs --upstream-cert"),
        ({"upstream_cert": cert}, "cannot load --upstream-cert"),  # the key is elsewhere
        ({"upstream_cert": missing, "upstream_key": key}, "cannot read --upstream-cert"),
        ({"upstream_cert": cert, "upstream_key": missing}, "cannot read --upstream-key"),
        ({"upstream_cert": str(garbage), "upstream_key": key}, "cannot load --upstream-cert"),
        ({"upstream_cert": key, "upstream_key": cert}, "cannot load --upstream-cert"),
    ]


def test_bad_settings_are_one_line_startup_errors(
    tmp_path: Path, client_pair: tuple[str, str]
) -> None:
    for settings, reason in _bad_settings(tmp_path, client_pair):
        with pytest.raises(StartupError) as info:
            tls_context(EMBEDDED.replace(**settings))
        message = str(info.value)
        assert reason in message, (settings, message)
        assert "\n" not in message


async def test_bad_settings_raise_from_start_proxy_even_for_http(
    make_proxy: ProxyFactory, tmp_path: Path
) -> None:
    with pytest.raises(StartupError, match="cannot read --upstream-ca"):
        await make_proxy(upstream_ca=str(tmp_path / "missing.pem"))  # the mock: http


def test_a_context_is_built_only_for_https_or_to_check_files(
    monkeypatch: pytest.MonkeyPatch, ca_file: str
) -> None:
    """Loading the system store costs some 20 ms of CPU: an http upstream without TLS
    files never pays it (every ``ChaosProxy`` in front of the mock did)."""
    built: list[str] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append("context")
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    pool_for("http://127.0.0.1:9/v1", EMBEDDED)
    check_upstream_tls(EMBEDDED)
    assert built == []
    pool_for("https://localhost:9/v1", EMBEDDED)  # (its use: the tests above)
    assert built == ["context"]
    with_files = EMBEDDED.replace(upstream_ca=ca_file, upstream_insecure=True)
    pool_for("http://127.0.0.1:9/v1", with_files)
    check_upstream_tls(with_files)
    assert built == ["context"] * 3  # built to check the file, both times


async def test_bad_settings_raise_from_chaos_proxy(tmp_path: Path) -> None:
    proxy = ChaosProxy(
        upstream="https://localhost:1", upstream_key=str(tmp_path / "k.pem"), admin=None
    )
    with pytest.raises(StartupError, match="--upstream-key needs --upstream-cert"):
        async with proxy:
            pass


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (lambda d: ["--upstream-ca", str(d / "missing.pem")], "cannot read --upstream-ca"),
        (lambda d: ["--upstream-key", str(d / "k.pem")], "--upstream-key needs --upstream-cert"),
    ],
)
def test_cli_bad_settings_exit_2_with_one_line(
    tmp_path: Path, flags: Callable[[Path], list[str]], reason: str
) -> None:
    result = run_cli(
        "serve", "--listen", "127.0.0.1:0", "--upstream", "https://localhost:1", *flags(tmp_path)
    )
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert reason in lines[0]
    assert lines[0].startswith("chaosproxy: ")
