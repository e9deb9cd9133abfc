"""A `chaosproxy matrix` client with a bug: the careful `httpx-sse` client of
examples/clients/httpx_sse_client.py, except that it raises on the fifth event of any
stream, clean or not. Whatever the scenario, the verdict on it must not pass a gate
for a reason of timing: on a stream that was clean up to its fifth event it is a
``false_alarm``.

    chaosproxy matrix --client "python -m tests.clients.raising_client"
"""

from __future__ import annotations

import itertools
import sys

from httpx_sse import ServerSentEvent

from examples.clients import httpx_sse_client as careful

#: The event it raises on (1-based).
RAISE_AT = 5


class ClientBug(Exception):
    """The bug: raised on the fifth event, whatever it is."""


def stream_text(url: str) -> str:
    """The careful client's reading, with the bug hooked in before each event."""
    numbers = itertools.count(1)

    def bug(event: ServerSentEvent) -> None:
        n = next(numbers)
        if n == RAISE_AT:
            raise ClientBug(f"a bug on event {n}")

    return careful.stream_text(url, on_event=bug)


if __name__ == "__main__":
    sys.exit(careful.main(stream_text))
