"""A `chaosproxy matrix` client that resumes, for any SSE provider the mock serves: the
fetch-style client of tests/support/resume_client.py (it reconnects with ``Last-Event-ID`` until
the server answers 204) streaming one answer from the provider named by its argument
(``openai-chat``, ``openai-responses``, ``anthropic``, ``gemini``), each event id
applied once, as docs/reconnection.md asks. It prints the answer's text and exits 0
once it has the provider's terminal event; otherwise (the stream stopped for good
before it, an error event) it says so on stderr and exits 1.

    chaosproxy matrix --client "python -m tests.clients.resume_any anthropic"
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx

from tests.support.resume_client import resume_loop

PROMPT = "Plan my week, please."
MESSAGES = [{"role": "user", "content": PROMPT}]
#: Each provider's path and streamed request.
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-chat": (
        "/v1/chat/completions",
        {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True},
    ),
    "openai-responses": (
        "/v1/responses",
        {"model": "gpt-4o-mini", "input": PROMPT, "stream": True},
    ),
    "anthropic": (
        "/v1/messages",
        {"model": "claude", "max_tokens": 256, "messages": MESSAGES, "stream": True},
    ),
    "gemini": (
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]},
    ),
}


class StreamError(Exception):
    """The answer is not whole, or the provider said it failed."""


def text_and_end(provider: str, data: str) -> tuple[str, bool]:
    """An event's text and whether it is the provider's terminal event."""
    if provider == "openai-chat":
        if data == "[DONE]":
            return "", True
        chunk = json.loads(data)
        if "error" in chunk:
            raise StreamError(f"error event: {chunk['error']}")
        return "".join((c.get("delta") or {}).get("content") or "" for c in chunk["choices"]), False
    event = json.loads(data)
    if provider == "openai-responses":
        kind = event.get("type")
        if kind in ("error", "response.failed"):
            raise StreamError(f"error event: {kind}")
        text = event.get("delta", "") if kind == "response.output_text.delta" else ""
        return text, kind in ("response.completed", "response.incomplete")
    if provider == "anthropic":
        kind = event.get("type")
        if kind == "error":
            raise StreamError(f"error event: {event.get('error')}")
        delta = event.get("delta") or {}
        text = delta.get("text", "") if delta.get("type") == "text_delta" else ""
        return text, kind == "message_stop"
    if "error" in event:
        raise StreamError(f"error event: {event['error']}")
    candidate = (event.get("candidates") or [{}])[0]
    parts = (candidate.get("content") or {}).get("parts") or []
    return "".join(p.get("text", "") for p in parts), bool(candidate.get("finishReason"))


async def answer(provider: str, url: str) -> str:
    path, body = REQUESTS[provider]
    async with httpx.AsyncClient(timeout=20) as client:
        run = await resume_loop(client, url + path, json=body)
    text, ended = "", False
    seen: set[str] = set()
    for connection in run.connections:
        for event_id, data in connection.events:
            if event_id and event_id in seen:
                continue  # applied once
            seen.add(event_id)
            piece, end = text_and_end(provider, data)
            if not ended:
                text += piece
            ended = ended or end
    if not ended:
        raise StreamError(f"the stream stopped for good before its end ({run.statuses})")
    return text


def main() -> int:
    provider = sys.argv[1]
    try:
        text = asyncio.run(answer(provider, os.environ["CHAOSPROXY_URL"].rstrip("/")))
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
