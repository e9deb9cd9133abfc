"""Shared by the fault tests that were tests/core/test_faults_splice.py, now one file per
fault in tests/core/faults/: their streams, configs and runners."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson

from chaosproxy.core.actions import Send
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.splice import SpliceConfig
from chaosproxy.core.frames import Format
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile
from chaosproxy.core.recent import RecentStreams, StreamRecord
from chaosproxy.core.records import FrameFields
from chaosproxy.core.session import Session
from chaosproxy.core.tenancy import ANONYMOUS

Spec = tuple[str, FaultConfig]


def chat(delta: dict[str, Any], *, cid: str = "a", nl: bytes = b"\n") -> bytes:
    payload = {"id": cid, "object": "chat.completion.chunk", "choices": [{"delta": delta}]}
    return b"data: " + orjson.dumps(payload) + nl + nl


def chat_stream(cid: str, texts: Sequence[str], nl: bytes = b"\n") -> list[bytes]:
    """An OpenAI chat stream: a role chunk, one delta per text, ``[DONE]``."""
    start = chat({"role": "assistant"}, cid=cid, nl=nl)
    deltas = [chat({"content": t}, cid=cid, nl=nl) for t in texts]
    return [start, *deltas, b"data: [DONE]" + nl + nl]


#: Source A: ordinals 1 start, 2-5 deltas, 6 terminal.
A = chat_stream("a", ["A1", "A2", "A3", "A4"])

#: The stream the splice runs on: 1 start, 2-3 deltas, 4 terminal.
B = chat_stream("b", ["B1", "B2"])


def splice(**values: Any) -> SpliceConfig:
    return SpliceConfig.model_validate(values)


def record(
    streams: RecentStreams,
    request_id: str,
    body: Sequence[bytes],
    *,
    fmt: Format = "sse",
    provider: str = "openai-chat",
    close: bool = True,
    tenant: str = ANONYMOUS,
) -> StreamRecord:
    """Run a source body through a pipeline that records it (as a session does)."""
    rec = streams.open(request_id, fmt, tenant)
    assert rec is not None
    profile = get_profile(provider)
    pipeline = Pipeline([], fmt, profile, record=rec.record)
    for chunk in body:
        pipeline.feed(chunk, 0.0)
    pipeline.end(0.0)
    if close:
        streams.close(rec)
    return rec


class _Scenario:
    def __init__(self, faults: Sequence[Spec], name: str = "s") -> None:
        self.name = name
        self.provider = "auto"
        self.format = "auto"
        self.faults = list(faults)
        self.envelope = None


def session_run(
    streams: RecentStreams,
    rid: str,
    body: bytes,
    faults: Sequence[Spec],
    *,
    seed: int = 7,
    tenant: str = ANONYMOUS,
) -> tuple[Session, list[FrameFields]]:
    s = Session(
        rid,
        scenario=_Scenario(faults),
        seed=seed,
        path="/v1/chat/completions",
        streams=streams,
        tenant=tenant,
    )
    s.start(0.0)
    s.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    actions = s.feed(body, 0.0) + s.body_end(0.0)
    lines = [s.wrote(a, 0.0) for a in actions if isinstance(a, Send)]
    s.finish()
    return s, lines


CHAT = "/v1/chat/completions"

CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

#: The live proxies below serve one client, which sends no credentials: its requests are
#: one user, as in the matrix (by default each would be apart: tests/e2e/
#: test_hostile_tenancy.py).
ONE_USER = {"anonymous_requests": "shared"}


async def post(
    url: str, headers: dict[str, str], body: dict[str, Any] = CHAT_BODY
) -> tuple[str, bytes]:
    async with (
        aiohttp.ClientSession() as client,
        client.post(url + CHAT, json=body, headers=headers) as resp,
    ):
        assert resp.status == 200
        return resp.headers["X-Chaos-Request-Id"], await resp.read()


__all__ = [
    "CHAT",
    "CHAT_BODY",
    "ONE_USER",
    "A",
    "B",
    "Spec",
    "_Scenario",
    "chat",
    "chat_stream",
    "post",
    "record",
    "session_run",
    "splice",
]
