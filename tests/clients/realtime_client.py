"""A `chaosproxy matrix` client of OpenAI's Realtime API, over the proxy's WebSocket
relay: the ``websockets`` library or the ``openai`` SDK's realtime client (the first
argument), as tests/support/realtime_clients.py drives them: one user message, then
``response.create``, the text deltas assembled until ``response.done``. Prints the text
on stdout and exits 0; exits 1 with the error on stderr when the client raised (a close
frame other than 1000, a TCP cut) or read no ``response.done`` within 2 s.

    chaosproxy matrix --client "python -m tests.clients.realtime_client openai" \\
        --scenarios realtime-close-1011-mid-response
"""

from __future__ import annotations

import asyncio
import os
import sys

from tests.support.realtime_clients import CLIENTS

#: How long it waits for the response to end.
WAIT = 2.0


def main() -> int:
    client = CLIENTS[sys.argv[1]]
    url = os.environ["CHAOSPROXY_URL"].rstrip("/").replace("http://", "ws://")
    seen = asyncio.run(client(url, None, WAIT))
    if seen.raised is not None or not seen.done:
        why = seen.raised or "the stream ended before response.done"
        code = f" (close code {seen.code})" if seen.code is not None else ""
        print(f"{why}{code}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(seen.text.encode("utf-8"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
