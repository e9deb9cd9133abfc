"""What a test of an in-process proxy (the ``make_proxy`` and ``log_capture`` fixtures)
types its arguments with."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from chaosproxy.control.start import RunningProxy
from chaosproxy.server.proxy import STATE
from chaosproxy.upstream import UpstreamPool


class LogCapture:
    """Every frame-log line the proxy writes, parsed."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self._ended: dict[str, asyncio.Event] = {}

    def __call__(self, line: bytes) -> None:
        parsed = orjson.loads(line)
        self.lines.append(parsed)
        if parsed["event"] == "response_end":
            self._event(parsed["request_id"]).set()

    def _event(self, request_id: str) -> asyncio.Event:
        return self._ended.setdefault(request_id, asyncio.Event())

    async def wait_end(self, request_id: str) -> dict[str, Any]:
        """The request's response_end line, once the proxy has written it."""
        async with asyncio.timeout(5):
            await self._event(request_id).wait()
        return self.end(request_id)

    def for_request(self, request_id: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("request_id") == request_id]

    def frames(self, request_id: str) -> list[dict[str, Any]]:
        return [line for line in self.for_request(request_id) if line["event"] == "frame"]

    def end(self, request_id: str) -> dict[str, Any]:
        ends = [x for x in self.for_request(request_id) if x["event"] == "response_end"]
        assert len(ends) == 1, self.for_request(request_id)
        return ends[0]


ProxyFactory = Callable[..., Awaitable[RunningProxy]]


def upstream_pool(proxy: RunningProxy) -> UpstreamPool:
    pools = [
        r.app[STATE].upstream
        for r in proxy.runners
        if isinstance(r, web.AppRunner) and STATE in r.app
    ]
    assert len(pools) == 1
    assert isinstance(pools[0], UpstreamPool)
    return pools[0]
