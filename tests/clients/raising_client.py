"""A `chaosproxy matrix` client with a bug: the careful `httpx-sse` client of
examples/clients/httpx_sse_client.py, except that it raises on the fifth event of any
stream, clean or not. Whatever the scenario, the verdict on it must not pass a gate
for a reason of timing: on a stream that was clean up to its fifth event it is a
``false_alarm``.

    chaosproxy matrix --client "python -m tests.clients.raising_client"
"""

from __future__ import annotations

import json
import sys

import httpx
from httpx_sse import connect_sse

from examples.clients.httpx_sse_client import main

#: The event it raises on (1-based).
RAISE_AT = 5


class ClientBug(Exception):
    """The bug: raised on the fifth event, whatever it is."""


def stream_text(url: str) -> str:
    body = {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "Plan my week, please."}],
    }
    parts: list[str] = []
    with (
        httpx.Client(timeout=httpx.Timeout(10.0)) as client,
        connect_sse(client, "POST", url + "/v1/chat/completions", json=body) as source,
    ):
        source.response.raise_for_status()
        for n, event in enumerate(source.iter_sse(), start=1):
            if n == RAISE_AT:
                raise ClientBug(f"a bug on event {n}")
            if event.data == "[DONE]":
                return "".join(parts)
            chunk = json.loads(event.data)
            if "error" in chunk:
                raise RuntimeError(f"the provider reported an error: {chunk['error']}")
            for choice in chunk.get("choices", []):
                content = (choice.get("delta") or {}).get("content")
                if content:
                    parts.append(content)
    raise RuntimeError("the stream ended without [DONE]")


if __name__ == "__main__":
    sys.exit(main(stream_text))
