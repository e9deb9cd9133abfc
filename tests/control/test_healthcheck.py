"""The container's health check (``python -m chaosproxy.healthcheck``), the start-up
warning when it could not pass, and the connections it leaves behind with the admin off
(counted, never logged)."""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from chaosproxy.control import healthcheck
from chaosproxy.control.healthcheck import Unhealthy
from chaosproxy.control.process import _health_check_warning
from chaosproxy.server.config import ConfigError, parse_admin
from tests.support.cli import serve_until_started, sigterm
from tests.support.ports import refused_port
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.repo import REPO

ADDRESSES = ["127.0.0.1:8478", "0.0.0.0:8478", "[::]:8478", "[::1]:9", "localhost:0", ":8080"]


@pytest.mark.parametrize("value", [*ADDRESSES, "off"])
def test_it_reads_addresses_as_serve_does(value: str) -> None:
    """The check cannot import chaosproxy.server.config (too slow to run every 2 s): its own
    reading must agree."""
    assert healthcheck.parse(value) == parse_admin(value)


@pytest.mark.parametrize("value", ["nonsense", "host:", "host:http"])
def test_a_bad_address_is_unhealthy_as_serve_refuses_it(value: str) -> None:
    with pytest.raises(ConfigError):
        parse_admin(value)
    with pytest.raises(Unhealthy, match="expected HOST:PORT"):
        healthcheck.parse(value)


def test_a_wildcard_is_asked_on_the_loopback_of_its_family() -> None:
    assert healthcheck.target("0.0.0.0", 8478) == ("127.0.0.1", 8478)
    assert healthcheck.target("::", 8478) == ("::1", 8478)
    assert healthcheck.target("localhost", 8478) == ("localhost", 8478)
    assert healthcheck.target("10.1.2.3", 8478) == ("10.1.2.3", 8478)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m chaosproxy.healthcheck`` as the image's HEALTHCHECK runs it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSPROXY_")}
    return subprocess.run(
        [sys.executable, "-m", "chaosproxy.healthcheck"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        check=False,
    )


def test_the_documented_name_is_the_module_it_moved_to() -> None:
    """``chaosproxy.healthcheck`` (the image's HEALTHCHECK, users' compose files) is
    ``chaosproxy.control.healthcheck`` itself, not a second copy; other names of the
    package are not invented."""
    # (a name the package's import hook makes, chaosproxy.MOVED: no file for mypy)
    import chaosproxy.healthcheck as documented  # type: ignore[import-not-found]

    assert documented is healthcheck
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("chaosproxy.no_such_module")


async def test_healthy_when_the_admin_answers_on_loopback_or_a_wildcard(
    make_proxy: ProxyFactory,
) -> None:
    proxy = await make_proxy(admin=("0.0.0.0", 0), admin_token="t")
    assert proxy.admin_url is not None
    port = proxy.admin_url.rpartition(":")[2]
    for admin in (f"127.0.0.1:{port}", f"0.0.0.0:{port}", f"localhost:{port}"):
        done = await asyncio.to_thread(run_check, {"CHAOSPROXY_ADMIN": admin})
        assert (done.returncode, done.stderr) == (0, ""), admin
        assert done.stdout.startswith("healthy: http://")


async def test_unhealthy_in_one_line_when_nothing_answers() -> None:
    with refused_port() as port:
        done = await asyncio.to_thread(run_check, {"CHAOSPROXY_ADMIN": f"127.0.0.1:{port}"})
    assert done.returncode == 1
    assert done.stderr == f"unhealthy: 127.0.0.1:{port}: Connection refused\n"


async def test_unhealthy_when_the_admin_answers_otherwise() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        done = await asyncio.to_thread(run_check, {"CHAOSPROXY_ADMIN": f"127.0.0.1:{port}"})
    assert done.returncode == 1
    assert "answered 'HTTP/1.1 503 Service Unavailable'" in done.stderr


async def test_with_the_admin_off_the_proxy_port_is_asked_and_counted_not_logged(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy()
    env = {"CHAOSPROXY_ADMIN": "off", "CHAOSPROXY_LISTEN": proxy.url.removeprefix("http://")}
    for _ in range(2):
        done = await asyncio.to_thread(run_check, env)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"healthy: tcp://{env['CHAOSPROXY_LISTEN']}\n"

    def counted() -> float:
        for line in proxy.metrics.render().decode().splitlines():
            if line.startswith("chaosproxy_empty_connections_total "):
                return float(line.split()[1])
        raise AssertionError("no chaosproxy_empty_connections_total")

    async with asyncio.timeout(5):
        while counted() < 2:  # noqa: ASYNC110 - the closes are seen when the loop gets to them
            await asyncio.sleep(0.01)
    assert counted() == 2
    assert log_capture.lines == []  # not a request, not rejected


async def test_connections_that_asked_something_are_not_empty(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy()
    host, _, port = proxy.url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    async with asyncio.timeout(5):
        await reader.read()  # the whole answer, then the close
    writer.close()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /v1/mo")  # part of a head, then gone: a rejected line
    await writer.drain()
    writer.close()
    async with asyncio.timeout(5):
        while not any(line["event"] == "rejected" for line in log_capture.lines):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    assert "chaosproxy_empty_connections_total 0.0" in proxy.metrics.render().decode()


async def test_a_probe_of_empty_lines_is_counted_not_rejected(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    """A load balancer's probe sends a bare CRLF and leaves: no request (RFC 9112 asks a
    server to ignore empty lines before one), so no rejected line; it is counted."""
    proxy = await make_proxy()
    host, _, port = proxy.url.removeprefix("http://").rpartition(":")
    for probe in (b"\r\n", b"\r\n\r\n", b""):
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(probe)
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    text = ""
    async with asyncio.timeout(5):
        while "chaosproxy_empty_connections_total 3.0" not in text:
            await asyncio.sleep(0.01)
            text = proxy.metrics.render().decode()
    assert log_capture.lines == []


# --------------------------------------------------------------- the start-up warning


def running(admin: tuple[str, int] | None, listen: tuple[str, int], url: str) -> Any:
    """What _health_check_warning reads of a config and a running proxy."""
    config = SimpleNamespace(admin=admin, listen=listen)
    proxy = SimpleNamespace(admin_url=url if admin else None, url=url)
    return config, proxy


async def test_no_warning_when_the_check_would_pass(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=("0.0.0.0", 0), admin_token="t")
    assert proxy.admin_url is not None
    config, stub = running(("0.0.0.0", 0), ("127.0.0.1", 0), proxy.admin_url)
    assert await asyncio.to_thread(_health_check_warning, config, stub) is None
    config, stub = running(None, ("127.0.0.1", 0), proxy.url)  # the admin off: the port
    assert await asyncio.to_thread(_health_check_warning, config, stub) is None


def test_a_warning_names_what_cannot_be_reached_and_the_way_out() -> None:
    port = free_port()
    config, stub = running(("::", port), ("0.0.0.0", 8080), f"http://[::1]:{port}")
    warning = _health_check_warning(config, stub)
    assert warning is not None
    assert warning.startswith(
        f"the admin API listens on [::]:{port}, but the container's health check cannot "
        f"reach it there ([::1]:{port}: "
    )
    assert warning.endswith(f"; [::] listens on IPv6 only: 0.0.0.0:{port} takes IPv4")
    # With the admin off, the address the check would dial must be one of this host's.
    config, stub = running(None, ("192.0.2.1", port), f"http://192.0.2.1:{port}")
    assert _health_check_warning(config, stub) == (
        f"the proxy listens on 192.0.2.1:{port}, but the container's health check cannot "
        f"reach it there (192.0.2.1:{port}: not an address of this host)"
    )


def test_the_start_up_check_never_connects_to_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the admin off, a connection of its own would be a client of the proxy:
    counted, and a place taken under --max-connections just as the clients arrive."""

    def connect(*args: object, **kw: object) -> socket.socket:
        raise AssertionError("the start-up check connected to the proxy")

    monkeypatch.setattr(healthcheck, "_connect", connect)
    for host in ("127.0.0.1", "0.0.0.0", "localhost"):
        config, stub = running(None, (host, 8080), f"http://{host}:8080")
        assert _health_check_warning(config, stub) is None


async def test_the_notice_asks_only_for_what_is_missing() -> None:
    proc, lines = await serve_until_started(
        "--listen", "0.0.0.0:0", "--admin", "127.0.0.1:0", "--admin-token", "t0k", "--log", "-"
    )
    try:
        notices = [x for x in lines[1:] if x.startswith("chaosproxy: notice: ")]
        assert len(notices) == 1 and notices[0].endswith(
            "to publish it, set CHAOSPROXY_ADMIN=0.0.0.0:0"
        )
        assert not [x for x in lines if "warning" in x]  # its health check would pass
    finally:
        await sigterm(proc)
