"""A small OpenAI Chat stream of six known events served by a scripted upstream,
and the client side of one request through a live proxy (:class:`Live`, :func:`fetch`):
the end-to-end fault tests' fixture and measures."""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDictProxy

from chaosproxy.control.start import RunningProxy
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.raw_http import assert_frames_cover
from tests.support.scripted_upstream import Script, ScriptedUpstream

PATH = "/v1/chat/completions"


def chunk(delta: dict[str, Any], *, finish: str | None = None) -> bytes:
    payload = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


#: An OpenAI chat stream: ordinals 1 start, 2-4 delta (3 has an id line and a
#: multi-byte character), 5 usage, 6 terminal.
E1 = chunk({"role": "assistant", "content": ""})
E2 = chunk({"content": "Hel"})
E3 = b"id: 7\n" + chunk({"content": "lo w\u00f6rld"})
E4 = chunk({"content": "!"}, finish="stop")
E5 = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"total_tokens":5}}'
E5 += b"\n\n"
E6 = b"data: [DONE]\n\n"
EVENTS = [E1, E2, E3, E4, E5, E6]
BODY = b"".join(EVENTS)
SSE = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def without(*ordinals: int) -> bytes:
    return b"".join(e for i, e in enumerate(EVENTS, 1) if i not in ordinals)


@dataclass
class Reply:
    """What one client saw."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    request_id: str
    sent_at: float
    headers_at: float
    #: (monotonic time, bytes) per read, as the client got them.
    arrivals: list[tuple[float, bytes]] = field(default_factory=list)
    #: The exception that ended the read, if any (a timeout, a payload error).
    error: BaseException | None = None

    def time_until(self, size: int) -> float:
        """When the client had received at least ``size`` body bytes."""
        total = 0
        for t, data in self.arrivals:
            total += len(data)
            if total >= size:
                return t
        raise AssertionError(f"only {total} bytes arrived, wanted {size}")


async def fetch(
    proxy: RunningProxy,
    path: str = PATH,
    *,
    headers: dict[str, str] | None = None,
    read_timeout: float | None = None,
    method: str = "POST",
) -> Reply:
    """One request through the proxy, read to the end (or until the read fails)."""
    timeout = aiohttp.ClientTimeout(total=10, sock_read=read_timeout)
    async with aiohttp.ClientSession(auto_decompress=False, timeout=timeout) as session:
        sent = time.monotonic()
        kw: dict[str, Any] = {"json": {"stream": True}} if method == "POST" else {}
        async with session.request(method, proxy.url + path, headers=headers, **kw) as resp:
            reply = Reply(
                resp.status,
                resp.headers,
                b"",
                resp.headers.get("X-Chaos-Request-Id", ""),
                sent,
                time.monotonic(),
            )
            try:
                async for data in resp.content.iter_any():
                    reply.arrivals.append((time.monotonic(), data))
                    reply.body += data
            except (TimeoutError, aiohttp.ClientError) as exc:
                reply.error = exc
    return reply


async def wait_end(log: LogCapture, request_id: str, limit: float = 5.0) -> dict[str, Any]:
    """The request's response_end line, once the proxy has written it."""
    async with asyncio.timeout(limit):
        # The capture is a list filled by a log callback: poll it (no fixed wait).
        while not any(  # noqa: ASYNC110
            x["event"] == "response_end" for x in log.for_request(request_id)
        ):
            await asyncio.sleep(0.005)
    return log.end(request_id)


def writes(log: LogCapture, request_id: str) -> list[bytes]:
    """The bytes of every write, from the frame log (the proxy runs with content)."""
    return [base64.b64decode(f["raw"]) for f in log.frames(request_id)]


class Live:
    """A scripted upstream and a proxy running one scenario called ``s`` by default."""

    def __init__(self, upstream: ScriptedUpstream, make_proxy: ProxyFactory, log: LogCapture):
        self.upstream = upstream
        self.make_proxy = make_proxy
        self.log = log

    async def start(
        self,
        scenario: str,
        *,
        events: list[bytes] = EVENTS,
        gap: float = 0.0,
        gaps: list[float] | None = None,
        headers: dict[str, str] = SSE,
        end: str = "eof",
        path: str = PATH,
    ) -> RunningProxy:
        timing = gaps if gaps is not None else [gap] * len(events)
        self.upstream.route(
            path.split("?")[0],
            Script(writes=list(zip(events, timing, strict=True)), headers=headers, end=end),
        )
        return await self.make_proxy(
            upstream=self.upstream.url, scenarios={"s": scenario}, default="s", content=True
        )

    async def run(self, scenario: str, **kw: Any) -> tuple[Reply, dict[str, Any]]:
        """Start, fetch once, wait for the end line; check the frame-size invariant."""
        read_timeout = kw.pop("read_timeout", None)
        proxy = await self.start(scenario, **kw)
        reply = await fetch(proxy, kw.get("path", PATH), read_timeout=read_timeout)
        end = await wait_end(self.log, reply.request_id)
        assert_frames_cover(self.log, reply.request_id, reply.body)
        assert b"".join(writes(self.log, reply.request_id)) == reply.body
        return reply, end


def upto(n: int) -> bytes:
    """The first ``n`` events."""
    return b"".join(EVENTS[:n])
