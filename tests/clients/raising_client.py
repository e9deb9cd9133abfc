"""A `chaosproxy matrix` client with a bug: the careful `httpx-sse` client of
examples/clients/httpx_sse_client.py, except that it raises on the fifth event of any
stream, clean or not, and reports the text it had read before it (on stdout, exit 1).
Whatever the scenario, the verdict on it must not pass a gate for a reason of timing:
on a stream that was clean up to its fifth event it is a ``false_alarm``, whether the
proxy wrote a defect after that event before or after the client's disconnect reached
it (docs/verdicts.md, "Judged up to the moment the client gave up").

    chaosproxy matrix --client "python -m tests.clients.raising_client [LINGER]"

``LINGER`` (seconds, default 0): how long it takes to raise once it has the fifth
event, as a client slowed by a loaded machine does (the proxy writes on meanwhile).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

from httpx_sse import ServerSentEvent

from examples.clients import httpx_sse_client as careful

#: The event it raises on (1-based).
RAISE_AT = 5


class ClientBug(Exception):
    """The bug: raised on the fifth event, whatever it is."""


def stream_text(url: str, parts: list[str], linger: float = 0.0) -> str:
    """The careful client's reading, with the bug hooked in before each event (it
    raises ``linger`` seconds after it has the fifth); the text of the events before
    it goes into ``parts`` as they are read."""
    numbers = itertools.count(1)

    def bug(event: ServerSentEvent) -> None:
        n = next(numbers)
        if n == RAISE_AT:
            time.sleep(linger)
            raise ClientBug(f"a bug on event {n}")
        if event.data != "[DONE]":
            chunk = json.loads(event.data)
            for choice in chunk.get("choices", []) if isinstance(chunk, dict) else []:
                parts.append((choice.get("delta") or {}).get("content") or "")

    return careful.stream_text(url, on_event=bug)


def main() -> int:
    """Prints the answer, or the text read before the error (and the error on stderr)."""
    parts: list[str] = []
    linger = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    try:
        text = stream_text(os.environ["CHAOSPROXY_URL"].rstrip("/"), parts, linger)
        code = 0
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        text, code = "".join(parts), 1
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
