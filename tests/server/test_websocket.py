"""The WebSocket relay (chaosproxy/server/websocket.py) against scripted upstreams on
real sockets: messages both ways (text and binary, byte for byte), the upstream's close
code passed on, an upstream that refuses the upgrade or cuts its TCP connection with no
close frame, a refused scenario, the client's pings answered, late or never (``pong``),
and the upstream URL the relay dials."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import websockets
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from chaosproxy.server.websocket import upstream_ws_url
from tests.support.proxies import LogCapture, ProxyFactory


async def _echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        if msg.type is WSMsgType.TEXT:
            await ws.send_str(msg.data)
        elif msg.type is WSMsgType.BINARY:
            await ws.send_bytes(msg.data)
    return ws


async def _cut(request: web.Request) -> web.WebSocketResponse:
    """Two events, then the TCP connection ends with no close frame."""
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str('{"type":"response.created"}')
    await ws.send_str('{"type":"response.output_text.delta","delta":"Hi"}')
    assert request.transport is not None
    request.transport.close()
    return ws


async def _close_4000(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str('{"type":"session.created"}')
    await ws.close(code=4000, message=b"policy: bye")
    return ws


async def _big(request: web.Request) -> web.WebSocketResponse:
    """A message within 1 KiB, then one over it."""
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str("x" * 600)
    await ws.send_str("y" * 2000)
    await ws.receive()  # (until the proxy leaves)
    return ws


async def _refuse(request: web.Request) -> web.Response:
    return web.Response(status=403, text="no")


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/v1/echo", _echo)
    app.router.add_get("/v1/cut", _cut)
    app.router.add_get("/v1/close", _close_4000)
    app.router.add_get("/v1/refuse", _refuse)
    app.router.add_get("/v1/big", _big)
    server = TestServer(app)
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}"
    await server.close()


def _ws(url: str, path: str) -> str:
    return url.replace("http://", "ws://") + path


async def _end(log_capture: LogCapture) -> dict[str, Any]:
    request = [line for line in log_capture.lines if line["event"] == "request"][-1]
    return await log_capture.wait_end(request["request_id"])


async def test_messages_both_ways_byte_for_byte_each_a_frame_line(
    make_proxy: ProxyFactory, log_capture: LogCapture, upstream: str
) -> None:
    proxy = await make_proxy(upstream=upstream)
    async with websockets.connect(_ws(proxy.url, "/v1/echo")) as ws:
        await ws.send('{"type":"x","text":"é"}')
        assert await ws.recv() == '{"type":"x","text":"é"}'
        await ws.send(b"\x00\xff\x10")
        assert await ws.recv() == b"\x00\xff\x10"
    end = await _end(log_capture)
    assert (end["status"], end["outcome"]) == (101, "completed")
    frames = log_capture.frames(end["request_id"])
    assert [(f["opcode"], f["size"]) for f in frames] == [("text", 24), ("binary", 3)]


async def test_the_upstreams_close_code_and_reason_reach_the_client(
    make_proxy: ProxyFactory, log_capture: LogCapture, upstream: str
) -> None:
    proxy = await make_proxy(upstream=upstream, scenarios={"clean": "faults: []\n"})
    headers = {"X-Chaos-Scenario": "clean"}
    async with websockets.connect(_ws(proxy.url, "/v1/close"), additional_headers=headers) as ws:
        assert await ws.recv() == '{"type":"session.created"}'
        with pytest.raises(websockets.ConnectionClosedError) as raised:
            await ws.recv()
    assert raised.value.rcvd is not None
    assert (raised.value.rcvd.code, raised.value.rcvd.reason) == (4000, "policy: bye")
    end = await _end(log_capture)
    assert end["outcome"] == "completed"


async def test_an_upstream_cut_with_no_close_frame_is_passed_on_as_one(
    make_proxy: ProxyFactory, log_capture: LogCapture, upstream: str
) -> None:
    proxy = await make_proxy(upstream=upstream, scenarios={"clean": "faults: []\n"})
    headers = {"X-Chaos-Scenario": "clean"}
    got: list[str | bytes] = []
    async with websockets.connect(_ws(proxy.url, "/v1/cut"), additional_headers=headers) as ws:
        with pytest.raises(websockets.ConnectionClosedError) as raised:
            while True:
                got.append(await ws.recv())
    assert raised.value.rcvd is None  # no close frame: the client's 1006
    assert got == [
        '{"type":"response.created"}',
        '{"type":"response.output_text.delta","delta":"Hi"}',
    ]
    end = await _end(log_capture)
    assert (end["outcome"], end["integrity"]) == ("upstream_error", "broken")
    assert end["error"] == "upstream WebSocket ended without a close frame"


async def test_an_upstream_that_refuses_the_upgrade_is_a_502_before_any_upgrade(
    make_proxy: ProxyFactory, log_capture: LogCapture, upstream: str
) -> None:
    proxy = await make_proxy(upstream=upstream)
    with pytest.raises(websockets.InvalidStatus) as raised:
        async with websockets.connect(_ws(proxy.url, "/v1/refuse")):
            pass
    response = raised.value.response
    assert response.status_code == 502
    assert b"upstream refused the WebSocket (403)" in response.body
    end = await _end(log_capture)
    assert (end["status"], end["outcome"]) == (502, "upstream_error")


async def test_an_unknown_scenario_is_refused_before_the_upgrade(
    make_proxy: ProxyFactory, upstream: str
) -> None:
    proxy = await make_proxy(upstream=upstream)
    headers = {"X-Chaos-Scenario": "no-such"}
    with pytest.raises(websockets.InvalidStatus) as raised:
        async with websockets.connect(_ws(proxy.url, "/v1/echo"), additional_headers=headers):
            pass
    assert raised.value.response.status_code == 400
    assert b"no-such" in raised.value.response.body


async def test_pings_are_answered_and_pong_drop_leaves_them_unanswered(
    make_proxy: ProxyFactory, log_capture: LogCapture, upstream: str
) -> None:
    proxy = await make_proxy(
        upstream=upstream, scenarios={"no-pong": "faults:\n  - pong: {drop: true, after: 1}\n"}
    )
    headers = {"X-Chaos-Scenario": "no-pong"}
    async with websockets.connect(_ws(proxy.url, "/v1/echo"), additional_headers=headers) as ws:
        await (await ws.ping(b"one"))  # the first is answered
        unanswered = asyncio.ensure_future(await ws.ping(b"two"))
        # A pong is written as the ping is read, before the message after it is relayed:
        # once its echo is back, a pong that was coming has come.
        await ws.send("after")
        assert await ws.recv() == "after"
        assert not unanswered.done()
        unanswered.cancel()
    end = await _end(log_capture)
    assert end["faults_applied"] == {"pong": 1}


async def test_pong_delay_answers_late(make_proxy: ProxyFactory, upstream: str) -> None:
    proxy = await make_proxy(
        upstream=upstream, scenarios={"late": "faults:\n  - pong: {delay: 300ms}\n"}
    )
    headers = {"X-Chaos-Scenario": "late"}
    async with websockets.connect(_ws(proxy.url, "/v1/echo"), additional_headers=headers) as ws:
        began = time.monotonic()
        waiter = asyncio.ensure_future(await ws.ping(b"late"))
        await ws.send("after")
        assert await ws.recv() == "after"
        assert not waiter.done()
        await asyncio.wait_for(waiter, 5)
        assert time.monotonic() - began >= 0.3


@pytest.mark.parametrize(
    ("base", "path", "url"),
    [
        ("http://up:8080", "/v1/realtime?model=m", "ws://up:8080/v1/realtime?model=m"),
        ("https://api.openai.com/", "/v1/realtime", "wss://api.openai.com/v1/realtime"),
        ("https://gw/openai", "/v1/realtime", "wss://gw/openai/v1/realtime"),
    ],
)
def test_the_upstream_url(base: str, path: str, url: str) -> None:
    assert upstream_ws_url(base, path) == url


@pytest.fixture
async def wss_upstream(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """An echo WebSocket over TLS, its certificate for 127.0.0.1 from a fresh CA: its
    ``https://`` URL and the CA's file."""
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    app = web.Application()
    app.router.add_get("/v1/echo", _echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = runner.addresses[0][1]
    yield f"https://127.0.0.1:{port}", str(ca_file)
    await runner.cleanup()


async def test_an_https_upstream_is_dialled_as_wss_with_the_upstream_ca(
    make_proxy: ProxyFactory, log_capture: LogCapture, wss_upstream: tuple[str, str]
) -> None:
    url, ca_file = wss_upstream
    proxy = await make_proxy(upstream=url, upstream_ca=ca_file)
    async with websockets.connect(_ws(proxy.url, "/v1/echo")) as ws:
        await ws.send("over tls")
        assert await ws.recv() == "over tls"
    assert (await _end(log_capture))["outcome"] == "completed"


async def test_an_unknown_ca_is_a_502_naming_the_certificate(
    make_proxy: ProxyFactory, log_capture: LogCapture, wss_upstream: tuple[str, str]
) -> None:
    url, _ = wss_upstream
    proxy = await make_proxy(upstream=url)
    with pytest.raises(websockets.InvalidStatus) as raised:
        async with websockets.connect(_ws(proxy.url, "/v1/echo")):
            pass
    assert raised.value.response.status_code == 502
    assert b"certificate" in raised.value.response.body.lower()


async def test_a_scenario_framing_sse_is_refused_for_a_websocket_before_the_upgrade(
    make_proxy: ProxyFactory, upstream: str
) -> None:
    proxy = await make_proxy(upstream=upstream, scenarios={"sse": "format: sse\nfaults: []\n"})
    headers = {"X-Chaos-Scenario": "sse"}
    with pytest.raises(websockets.InvalidStatus) as raised:
        async with websockets.connect(_ws(proxy.url, "/v1/echo"), additional_headers=headers):
            pass
    assert raised.value.response.status_code == 400
    assert b"says format: sse" in raised.value.response.body


async def test_an_upstream_message_over_the_event_size_limit_ends_it_as_an_upstream_failure(
    make_proxy: ProxyFactory, log_capture: LogCapture, upstream: str
) -> None:
    proxy = await make_proxy(upstream=upstream, max_event_size=1024)
    async with websockets.connect(_ws(proxy.url, "/v1/big"), max_size=None) as ws:
        assert await ws.recv() == "x" * 600
        with pytest.raises(websockets.ConnectionClosedError) as raised:
            await ws.recv()
    assert raised.value.rcvd is not None  # the relay cannot go on, and says why
    assert (raised.value.rcvd.code, raised.value.rcvd.reason) == (1009, "upstream failed")
    end = await _end(log_capture)
    assert end["outcome"] == "upstream_error"
    assert "1024" in end["error"]


async def test_a_client_message_is_not_bounded_by_the_event_size(
    make_proxy: ProxyFactory, upstream: str
) -> None:
    proxy = await make_proxy(upstream=upstream, max_event_size=1024)
    async with websockets.connect(_ws(proxy.url, "/v1/echo"), max_size=None) as ws:
        await ws.send(b"a" * 100_000)  # (an audio chunk, say): relayed; its echo is not
        with pytest.raises(websockets.ConnectionClosedError) as raised:
            await ws.recv()
    assert raised.value.rcvd is not None and raised.value.rcvd.code == 1009


async def test_a_client_breaking_the_protocol_ends_its_websocket_and_the_upstreams(
    make_proxy: ProxyFactory, log_capture: LogCapture, upstream: str
) -> None:
    """A hostile client: a frame with a reserved opcode (0x3; RFC 6455, 5.2). The proxy
    answers with a close (1002, protocol error) and ends it."""
    proxy = await make_proxy(upstream=upstream)
    host, port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /v1/echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    try:
        writer.write(b"\x83\x80\x00\x00\x00\x00")  # masked, empty, opcode 3
        rest = await asyncio.wait_for(reader.read(), 5)  # until the proxy closes
    finally:
        writer.close()
    assert rest[:4] == b"\x88\x02\x03\xea"  # a close frame: 1002
    end = await _end(log_capture)
    assert end["outcome"] == "client_gone"
