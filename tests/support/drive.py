"""A framed body driven through a :class:`Session` without a socket, as the proxy
would drive it (:func:`drive`): the core's integrity and contract checks read the
session afterwards."""

from __future__ import annotations

import json
import math
from typing import Any

from chaosproxy.core.actions import Cut, Send, Sleep
from chaosproxy.core.recent import RecentStreams
from chaosproxy.core.session import Session
from chaosproxy.scenario import parse_scenario
from tests.support.captures import (
    OPENAI_CHAT,
    Capture,
)

SEED = 424242
CONTENT_TYPE = {"sse": "text/event-stream", "ndjson": "application/x-ndjson"}
TOOL_ONLY = OPENAI_CHAT[1]  # the chat tool-call capture: tool fragments, no text


def drive(
    capture_or_body: Capture | bytes,
    faults: list[dict[str, Any]],
    *,
    provider: str | None = None,
    fmt: str = "sse",
    chunk: int = 0,
    end: str = "finish",
    seed: int = SEED,
    envelope: dict[str, str] | None = None,
    streams: RecentStreams | None = None,
    request_id: str = "r-1",
) -> Session:
    """Run ``faults`` over a body as the proxy would: every Send is accounted with
    ``wrote``, a Sleep advances a virtual clock, a Cut ends the response. ``end``:
    ``finish`` (the body ends), or how else the request ends after the whole body was
    fed (``client_gone``, ``shutdown``, ``upstream_failed``)."""
    if isinstance(capture_or_body, Capture):
        body, provider, fmt = capture_or_body.body, capture_or_body.provider, capture_or_body.fmt
    else:
        body = capture_or_body
    text = f"faults: {json.dumps(faults)}\n"
    if envelope is not None:
        text += f"envelope: {json.dumps(envelope)}\n"
    session = Session(
        request_id,
        scenario=parse_scenario(text, "<t>", default_name="t"),
        seed=seed,
        path="/",
        provider=provider,
        streams=streams,
    )
    now = 0.0

    def carry_out(actions: list[Any]) -> bool:
        nonlocal now
        for action in actions:
            if isinstance(action, Send):
                session.wrote(action, now)
            elif isinstance(action, Sleep):
                if math.isinf(action.seconds):
                    session.client_gone()
                    return True
                now += action.seconds
            elif isinstance(action, Cut):
                session.cut(action)
                return True
        return False

    assert session.start(now) == []
    session.response_head(200, "OK", [("Content-Type", CONTENT_TYPE[fmt])])
    size = chunk or len(body)
    for start in range(0, len(body), size):
        if carry_out(session.feed(body[start : start + size], now)):
            return session
        deadline = session.deadline()
        while deadline is not None and deadline <= now:
            if carry_out(session.poll(now)):
                return session
            deadline = session.deadline()
    if end == "upstream_failed":
        for send in session.upstream_failed("broke", now):
            session.wrote(send, now)
        return session
    if end == "client_gone":
        session.client_gone()
    elif end == "shutdown":
        session.shutdown()
    elif not carry_out(session.body_end(now)):
        session.finish()
    return session
