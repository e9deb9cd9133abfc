"""The streaming core end to end: real sockets, a real upstream, real clients."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any

import aiohttp
import pytest

from chaosproxy.control.start import StartupError
from chaosproxy.core.actions import HttpAction
from chaosproxy.core.events import Event
from chaosproxy.core.faults import Fault, FaultConfig, registry
from chaosproxy.core.faults.base import Declaration
from tests.support.ports import busy_port, refused_port
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.raw_http import assert_frames_cover, dechunk, raw_http
from tests.support.repo import fixture_bytes
from tests.support.scripted_upstream import Script, ScriptedUpstream


async def read_all(url: str, **kw: object) -> tuple[aiohttp.ClientResponse, bytes]:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(url, json={"stream": True}, **kw) as resp,  # type: ignore[arg-type]
    ):
        body = await resp.read()
        return resp, body


PASSTHROUGH_CASES = [
    ("openai_chat_text_usage.sse", "text/event-stream", b"\n\n"),
    ("gemini_2_0_flash_text.crlf.sse", "text/event-stream", b"\r\n\r\n"),
    ("ollama_chat_stream.ndjson", "application/x-ndjson", b"\n"),
]


@pytest.mark.parametrize(("fixture", "ctype", "sep"), PASSTHROUGH_CASES)
async def test_passthrough_is_byte_identical(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    fixture: str,
    ctype: str,
    sep: bytes,
) -> None:
    body = fixture_bytes(fixture)
    upstream.route("/v1/stream", Script.events(body, sep=sep, headers={"Content-Type": ctype}))
    proxy = await make_proxy(upstream=upstream.url)
    resp, received = await read_all(proxy.url + "/v1/stream")
    assert resp.status == 200
    assert received == body
    assert resp.headers["Content-Type"] == ctype
    request_id = resp.headers["X-Chaos-Request-Id"]
    assert resp.headers["X-Chaos-Scenario"] == "none"
    assert_frames_cover(log_capture, request_id, received)
    assert log_capture.end(request_id)["outcome"] == "completed"


async def test_raw_socket_client_sees_the_terminating_chunk(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    body = fixture_bytes("anthropic_docs_basic.sse")
    upstream.route("/v1/messages", Script.events(body))
    proxy = await make_proxy(upstream=upstream.url)
    port = int(proxy.url.rsplit(":", 1)[1])
    raw = await raw_http(
        port,
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
        b"Connection: close\r\n\r\n{}",
    )
    head, _, chunked = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in head.lower()
    decoded, terminated = dechunk(chunked)
    assert decoded == body
    assert terminated


async def test_request_is_forwarded_with_body_and_clean_headers(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    upstream.route("/v1/echo", Script(writes=[(b"ok", 0)], headers={"Content-Type": "text/plain"}))
    proxy = await make_proxy(upstream=upstream.url)
    payload = b"x" * 300_000  # bigger than one read: the body is streamed through
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            proxy.url + "/v1/echo?a=1&b=two",
            data=payload,
            headers={
                "Authorization": "Bearer sk-secret",
                "X-Chaos-Seed": "5",
                "X-Custom": "kept",
                "Connection": "keep-alive, X-Hop",
                "X-Hop": "dropped",
                "Accept-Encoding": "gzip",
            },
        ) as resp,
    ):
        assert await resp.read() == b"ok"
        assert resp.headers["X-Chaos-Seed"] == "5"
    seen = upstream.seen[-1]
    assert seen.method == "POST"
    assert seen.path_qs == "/v1/echo?a=1&b=two"
    assert seen.body == payload
    assert seen.headers["Authorization"] == "Bearer sk-secret"  # forwarded, never logged
    assert seen.headers["X-Custom"] == "kept"
    assert seen.headers["Accept-Encoding"] == "identity"
    assert "X-Hop" not in seen.headers
    assert not any(k.lower().startswith("x-chaos-") for k in seen.headers)


async def test_events_arrive_spread_out_in_time(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    body = b"".join(b'data: {"n": %d}\n\n' % i for i in range(6))
    upstream.route("/v1/paced", Script.events(body, gap=0.08))
    proxy = await make_proxy(upstream=upstream.url)
    arrivals: list[float] = []
    received = b""
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/v1/paced") as resp:
        async for chunk in resp.content.iter_any():
            arrivals.append(time.monotonic())
            received += chunk
    assert received == body
    assert len(arrivals) >= 5  # not one burst at the end
    assert arrivals[-1] - arrivals[0] >= 0.3


async def test_mock_tokens_arrive_one_by_one(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(mock_tokens=8, mock_interval=0.05)
    arrivals: list[float] = []
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            proxy.url + "/v1/chat/completions",
            json={
                "model": "gpt-4o",
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ) as resp,
    ):
        async for _ in resp.content.iter_any():
            arrivals.append(time.monotonic())
    assert len(arrivals) >= 8
    assert arrivals[-1] - arrivals[0] >= 0.3


async def test_client_disconnect_closes_upstream(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    upstream.route("/v1/long", Script(writes=[(b"data: 1\n\n", 0)], end="hold"))
    proxy = await make_proxy(upstream=upstream.url)
    async with aiohttp.ClientSession() as s:
        resp = await s.get(proxy.url + "/v1/long")
        request_id = resp.headers["X-Chaos-Request-Id"]
        assert await resp.content.readuntil(b"\n\n") == b"data: 1\n\n"
        resp.close()  # the client goes away mid-stream
    async with asyncio.timeout(5):
        await upstream.disconnected.wait()
    assert (await log_capture.wait_end(request_id))["outcome"] == "client_gone"


async def test_upstream_refusing_connections_gives_502(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    with refused_port() as port:
        proxy = await make_proxy(upstream=f"http://127.0.0.1:{port}")
        async with asyncio.timeout(5):
            resp, body = await read_all(proxy.url + "/v1/chat/completions")
    assert resp.status == 502
    error = (await _json(body))["error"]
    assert error["type"] == "chaosproxy_error"
    # Said once: "upstream 127.0.0.1:PORT unreachable: ...", not "upstream unreachable:
    # upstream ... unreachable".
    assert error["message"].startswith(f"upstream 127.0.0.1:{port} unreachable: ")
    assert error["message"].count("unreachable") == 1
    assert resp.headers["X-Chaos-Proxy-Error"] == error["message"]
    end = log_capture.end(resp.headers["X-Chaos-Request-Id"])
    # The upstream's fault, not the proxy's (docs/observability.md, outcomes).
    assert end["outcome"] == "upstream_error"
    assert end["status"] == 502


async def test_upstream_connect_timeout_gives_504(make_proxy: ProxyFactory) -> None:
    # A listener whose accept queue is full: further connects hang in SYN-SENT.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            f.connect(("127.0.0.1", port))
        fillers.append(f)
    try:
        proxy = await make_proxy(upstream=f"http://127.0.0.1:{port}", connect_timeout=0.3)
        async with asyncio.timeout(5):
            resp, body = await read_all(proxy.url + "/v1/chat/completions")
        assert resp.status == 504
        assert (await _json(body))["error"]["type"] == "chaosproxy_error"
        assert "timed out" in resp.headers["X-Chaos-Proxy-Error"]
    finally:
        for f in fillers:
            f.close()
        listener.close()


async def test_upstream_dying_mid_body_is_not_a_clean_end(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    upstream.route(
        "/v1/dies", Script(writes=[(b"data: 1\n\n", 0), (b"data: 2\n\n", 0.02)], end="die")
    )
    proxy = await make_proxy(upstream=upstream.url)
    port = int(proxy.url.rsplit(":", 1)[1])
    raw = await raw_http(port, b"GET /v1/dies HTTP/1.1\r\nHost: x\r\n\r\n")
    _, _, chunked = raw.partition(b"\r\n\r\n")
    decoded, terminated = dechunk(chunked)
    assert decoded == b"data: 1\n\ndata: 2\n\n"
    assert not terminated
    # an aiohttp client notices the truncation
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/v1/dies") as resp:
        request_id = resp.headers["X-Chaos-Request-Id"]
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    end = await log_capture.wait_end(request_id)
    assert end["outcome"] == "upstream_error"
    assert end["bytes"] == len(b"data: 1\n\ndata: 2\n\n")


async def test_content_length_is_kept_in_passthrough(
    upstream: ScriptedUpstream, make_proxy: ProxyFactory
) -> None:
    upstream.route(
        "/v1/models",
        Script(
            writes=[(b'{"data": []}', 0)],
            headers={"Content-Type": "application/json"},
            content_length=True,
        ),
    )
    proxy = await make_proxy(upstream=upstream.url)
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/v1/models") as resp:
        assert resp.headers["Content-Length"] == "12"
        assert await resp.read() == b'{"data": []}'


async def test_port_in_use_is_a_startup_error(make_proxy: ProxyFactory) -> None:
    with (
        busy_port() as port,
        pytest.raises(StartupError, match=f"cannot listen on 127.0.0.1:{port}"),
    ):
        await make_proxy(listen=("127.0.0.1", port))


async def _json(body: bytes) -> dict[str, Any]:
    import orjson

    value = orjson.loads(body)
    assert isinstance(value, dict)
    return value


class _BugConfig(FaultConfig):
    #: Where the bug is: before the request is forwarded, or at this upstream event.
    at_event: int | None = None


class _BugFault(Fault[_BugConfig], name="bug", stage="event"):
    """A fault with a bug in it (it raises), added to the registry by :func:`bug_fault`:
    how a test puts a bug in the request's path without patching a class of the proxy
    (compiled classes cannot be patched, docs/architecture.md)."""

    declaration = Declaration(needs="framed", keeps_answer=False, explore=None, example="bug")

    def before_upstream(self) -> list[HttpAction]:
        if self.config.at_event is None:
            raise RuntimeError("a bug in a fault")
        return []

    def on_event(self, ev: Event) -> list[Event]:
        if ev.ordinal == self.config.at_event:
            raise RuntimeError("a bug in a fault")
        return [ev]


@pytest.fixture
def bug_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``bug`` fault, in the registry for this test only."""
    monkeypatch.setitem(registry(), _BugFault.name, _BugFault)


@pytest.mark.usefixtures("bug_fault")
async def test_a_bug_before_the_response_is_a_500_with_a_reason(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
) -> None:
    upstream.route("/v1/s", Script.events(b"data: 1\n\n"))
    proxy = await make_proxy(upstream=upstream.url, scenarios={"s": "faults: [{bug: {}}]"})
    resp, body = await read_all(proxy.url + "/v1/s", headers={"X-Chaos-Scenario": "s"})
    assert resp.status == 500
    message = (await _json(body))["error"]["message"]
    assert message == "internal error: RuntimeError: a bug in a fault"
    end = await log_capture.wait_end(resp.headers["X-Chaos-Request-Id"])
    assert (end["outcome"], end["error"]) == ("proxy_error", message)


@pytest.mark.usefixtures("bug_fault")
async def test_a_bug_mid_stream_never_ends_cleanly(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
) -> None:
    upstream.route("/v1/s", Script(writes=[(b"data: 1\n\n", 0), (b"data: 2\n\n", 0.05)]))
    scenario = "faults: [{bug: {at_event: 2}}]"
    proxy = await make_proxy(upstream=upstream.url, scenarios={"s": scenario})
    port = int(proxy.url.rsplit(":", 1)[1])
    raw = await raw_http(port, b"GET /v1/s HTTP/1.1\r\nHost: x\r\nX-Chaos-Scenario: s\r\n\r\n")
    head, _, chunked = raw.partition(b"\r\n\r\n")
    decoded, terminated = dechunk(chunked)
    assert (decoded, terminated) == (b"data: 1\n\n", False)
    request_id = head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()
    end = await log_capture.wait_end(request_id)
    assert end["outcome"] == "proxy_error"
    assert end["bytes"] == len(decoded)


async def test_a_write_to_a_departed_client_is_client_gone_not_upstream_error(
    upstream: ScriptedUpstream,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
) -> None:
    # The client leaves after the first event, before the upstream sends the second:
    # that is the client's doing, not the upstream's, and the event that could not be
    # written is not logged as a frame.
    upstream.route("/v1/s", Script(writes=[(b"data: 1\n\n", 0), (b"data: 2\n\n", 0.3)]))
    proxy = await make_proxy(upstream=upstream.url)
    port = int(proxy.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/s HTTP/1.1\r\nHost: x\r\n\r\n")
    received = b""
    async with asyncio.timeout(5):
        while b"data: 1\n\n" not in received:
            received += await reader.read(65536)
    writer.close()
    request_id = received.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()
    end = await log_capture.wait_end(request_id)
    assert end["outcome"] == "client_gone"
    assert "error" not in end
    assert (end["frames"], end["bytes"]) == (1, len(b"data: 1\n\n"))
