"""Calls to a running proxy's admin API."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from chaosproxy.control.start import RunningProxy

ADMIN = ("127.0.0.1", 0)


async def call(
    proxy: RunningProxy, method: str, path: str, *, token: str | None = None, **kw: Any
) -> tuple[int, Any, aiohttp.ClientResponse]:
    """One admin call; the parsed JSON body (or the text for /metrics)."""
    assert proxy.admin_url is not None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = kw.get("data")
    if data is not None:  # as a program sends it: the admin takes JSON and YAML only
        json_body = (data.encode() if isinstance(data, str) else data).lstrip()[:1] in b"{["
        headers["Content-Type"] = "application/json" if json_body else "application/yaml"
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, proxy.admin_url + path, headers=headers, **kw) as resp,
    ):
        body = await resp.read()
        if resp.content_type == "application/json":
            return resp.status, orjson.loads(body), resp
        return resp.status, body.decode(), resp
