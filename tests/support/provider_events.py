"""Shared by the provider tests (tests/core/test_providers.py and
tests/core/providers/test_<provider>.py): the events of a capture or a body, framed by
the real framers; made-up events; the built-in mock's answer to one request."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import make_framer
from chaosproxy.core.providers import get_profile
from chaosproxy.mock import create_mock_app
from tests.support.repo import FIXTURES, fixture_bytes

S, D, T, U, P, E = "start", "delta", "tool_delta", "usage", "ping", "error"
TERM, OT = "terminal", "other"
DT = frozenset({D, TERM})
ST = frozenset({S, T})

#: A kind, or a set of kinds, as the tables write them.
Kinds = str | frozenset[str]


def as_set(k: Kinds) -> frozenset[str]:
    return frozenset({k}) if isinstance(k, str) else k


def frame_body(body: bytes, fmt: Format) -> list[Frame]:
    """The events of a body (frames with data), framed by the real framer."""
    framer = make_framer(fmt, 1 << 20)
    frames = framer.feed(body) + framer.eof()
    assert b"".join(f.raw for f in frames) == body
    return [f for f in frames if f.is_event]


def load(name: str) -> list[Frame]:
    """The events of the capture ``name`` (tests/fixtures/providers/)."""
    fmt: Format = "ndjson" if name.endswith(".ndjson") else "sse"
    return frame_body(fixture_bytes(name), fmt)


def captures(prefix: str) -> set[str]:
    """The names of the captures whose name starts with ``prefix``."""
    return {
        p.name
        for p in FIXTURES.iterdir()
        if p.name.startswith(prefix) and p.suffix in {".sse", ".ndjson", ".txt"}
    }


def kinds_of(provider: str, frames: list[Frame]) -> list[frozenset[str]]:
    profile = get_profile(provider)
    return [profile.classify(f) for f in frames]


def sse(data: str | None, event: str | None = None) -> Frame:
    raw = (f"event: {event}\n" if event else "") + (f"data: {data}\n" if data is not None else "")
    return Frame((raw + "\n").encode(), data, event)


def js(payload: Any, event: str | None = None) -> Frame:
    return sse(orjson.dumps(payload).decode(), event)


async def mock_answer(
    method: str, path: str, body: Any = None, tokens: int = 3
) -> tuple[int, str, bytes]:
    """The built-in mock's answer (status, Content-Type, body) to one request over a
    real socket: ``body`` sent as JSON unless None."""
    server = TestServer(create_mock_app(tokens=tokens, interval=0))
    await server.start_server()
    try:
        async with ClientSession() as session:
            data = None if body is None else orjson.dumps(body)
            headers = {"Content-Type": "application/json"} if data is not None else {}
            async with session.request(
                method, server.make_url(path), data=data, headers=headers
            ) as response:
                return response.status, response.content_type, await response.read()
    finally:
        await server.close()
