"""Listening (chaosproxy/server/net.py, ``listen``): a name binds the addresses it resolves
to that the host has (``localhost`` in a container without IPv6 is 127.0.0.1 alone), and
what stops a bind is one line that says what to change; and an address as a URL writes
it (``hostport``)."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from chaosproxy.server.net import StartupError, _bind_failure, hostport, listen, local_addresses
from tests.support.cli import one_line_error, run_cli
from tests.support.ports import busy_port

#: An address no host has (TEST-NET-1, RFC 5737): binding it fails EADDRNOTAVAIL.
ABSENT = "192.0.2.1"


def resolving(names: dict[str, list[tuple[int, str]]]) -> Any:
    """A getaddrinfo for the running loop that knows ``names`` (family, address)."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo

    async def getaddrinfo(host: str, port: Any, **kw: Any) -> list[Any]:
        if host in names:
            return [(f, socket.SOCK_STREAM, 6, "", (a, 0)) for f, a in names[host]]
        return await real(host, port, **kw)

    return getaddrinfo


@pytest.fixture
async def names(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[dict[str, list[tuple[int, str]]]]:
    table: dict[str, list[tuple[int, str]]] = {}
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolving(table))
    yield table


async def test_a_name_binds_only_the_addresses_this_host_has(
    names: dict[str, list[tuple[int, str]]],
) -> None:
    # As /etc/hosts says in a container without IPv6, but with an address it lacks.
    names["sidecar.test"] = [(socket.AF_INET, ABSENT), (socket.AF_INET, "127.0.0.1")]
    assert await local_addresses("sidecar.test") == ["127.0.0.1"]
    runner, port = await listen(web.Application(), "sidecar.test", 0)
    try:
        assert [a[:2] for a in runner.addresses] == [("127.0.0.1", port)]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
    finally:
        await runner.cleanup()


async def test_every_address_it_has_shares_the_port(
    names: dict[str, list[tuple[int, str]]],
) -> None:
    names["both.test"] = [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "127.0.0.2")]
    runner, port = await listen(web.Application(), "both.test", 0)
    try:
        assert sorted(a[:2] for a in runner.addresses) == [("127.0.0.1", port), ("127.0.0.2", port)]
    finally:
        await runner.cleanup()


async def test_an_address_or_a_wildcard_is_bound_as_given(
    names: dict[str, list[tuple[int, str]]],
) -> None:
    for host in ("127.0.0.1", "0.0.0.0", "::", ABSENT):
        assert await local_addresses(host) == [host]
    names["nowhere.test"] = [(socket.AF_INET, ABSENT)]
    assert await local_addresses("nowhere.test") == ["nowhere.test"]  # the bind says why


async def test_an_address_this_host_lacks_is_one_reason(
    names: dict[str, list[tuple[int, str]]],
) -> None:
    names["nowhere.test"] = [(socket.AF_INET, ABSENT)]
    for host in (ABSENT, "nowhere.test"):
        with pytest.raises(StartupError) as caught:
            await listen(web.Application(), host, 8080)
        assert str(caught.value) == (
            f"cannot listen on {host}:8080: cannot assign requested address: this host has "
            "no such address; --listen 0.0.0.0:PORT listens on all"
        )


@pytest.mark.slow
def test_a_busy_port_names_the_flag_that_chose_it() -> None:
    with busy_port() as port:
        proxy = one_line_error(run_cli("serve", "--listen", f"127.0.0.1:{port}", "--admin", "off"))
        admin = one_line_error(
            run_cli("serve", "--listen", "127.0.0.1:0", "--admin", f"127.0.0.1:{port}")
        )
    assert proxy == (
        f"chaosproxy: error: cannot listen on 127.0.0.1:{port}: address already in use: "
        "another process listens there (a chaosproxy still running?); stop it, or choose "
        "another port with --listen (port 0 picks a free one)"
    )
    assert admin.startswith(
        f"chaosproxy: error: cannot listen for the admin API on 127.0.0.1:{port}"
    )
    assert admin.endswith("choose another port with --admin (port 0 picks a free one)")


async def test_a_head_it_cannot_read_is_one_line_without_the_clients_bytes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A head over aiohttp's limits (the mock's, the admin's): aiohttp would print a
    traceback quoting the header (an API key cut at 8 KiB); the server says one line,
    its kind only."""
    app = web.Application()
    runner, port = await listen(app, "127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        secret = "sk-" + "s3cr3t" * 2000
        writer.write(
            f"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n\r\n".encode()
        )
        await writer.drain()
        async with asyncio.timeout(5):
            answer = await reader.read()
        writer.close()
    finally:
        await runner.cleanup()
    assert answer.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 "))
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "chaosproxy: warning: Error handling request from 127.0.0.1: LineTooLong"
    ]
    assert "s3cr3t" not in err


def test_an_address_as_a_url_writes_it() -> None:
    assert hostport("0.0.0.0", 8478) == "127.0.0.1:8478"  # a wildcard: reached on loopback
    assert hostport("", 8478) == "127.0.0.1:8478"
    assert hostport("0.0.0.0", 8478, wildcard=False) == "0.0.0.0:8478"
    assert hostport("::1", 80) == "[::1]:80"
    assert hostport("::", 80, wildcard=False) == "[::]:80"
    assert hostport("proxy.test", 443) == "proxy.test:443"


def test_why_a_bind_failed_says_what_to_change() -> None:
    assert _bind_failure(OSError(errno.EACCES, "denied"), "--listen") == (
        "permission denied: a port below 1024 needs privileges; choose another with --listen"
    )
    assert _bind_failure(OSError(errno.EADDRNOTAVAIL, "x"), "--admin") == (
        "cannot assign requested address: this host has no such address; "
        "--admin 0.0.0.0:PORT listens on all"
    )
    assert _bind_failure(OSError(errno.EINVAL, "x"), "--listen") == "invalid argument"
    assert _bind_failure(OSError("no errno"), "--listen") == "no errno"
