"""A `chaosproxy matrix` client: `httpx-sse` reading an OpenAI Chat stream, written as
a careful application would: it raises on an HTTP error, on a provider error event and
on a stream that ends without its ``[DONE]``, and stops reading at ``[DONE]``.

Prints the assembled text on stdout and exits 0, or prints the error on stderr and
exits 1.

    chaosproxy matrix --client "python examples/clients/httpx_sse_client.py"
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import httpx
from httpx_sse import ServerSentEvent, connect_sse

#: Per read, not for the whole answer: a slow stream is fine, a silent one is not.
TIMEOUT = httpx.Timeout(10.0)


class StreamError(Exception):
    """The stream said something went wrong, or ended before it said it was done."""


def stream_text(url: str, on_event: Callable[[ServerSentEvent], object] | None = None) -> str:
    """The answer's text, streamed from the proxy at ``url``. ``on_event``, when given,
    sees each event before it is read (a variant of this client can hook in there)."""
    body = {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "Plan my week, please."}],
    }
    parts: list[str] = []
    with (
        httpx.Client(timeout=TIMEOUT) as client,
        connect_sse(client, "POST", url + "/v1/chat/completions", json=body) as source,
    ):
        source.response.raise_for_status()
        for event in source.iter_sse():
            if on_event is not None:
                on_event(event)
            if event.data == "[DONE]":
                return "".join(parts)
            chunk = json.loads(event.data)
            if "error" in chunk:
                raise StreamError(f"the provider reported an error: {chunk['error']}")
            for choice in chunk.get("choices", []):
                content = (choice.get("delta") or {}).get("content")
                if content:
                    parts.append(content)
    raise StreamError("the stream ended without [DONE]")


def main(answer: Callable[[str], str] = stream_text) -> int:
    """Prints ``answer`` from the proxy at ``$CHAOSPROXY_URL`` (the matrix sets it), or
    the exception it raised; returns the exit status."""
    try:
        text = answer(os.environ["CHAOSPROXY_URL"].rstrip("/"))
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
