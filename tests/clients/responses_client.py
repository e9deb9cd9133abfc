"""A `chaosproxy matrix` / `explore` client for the tests: an OpenAI Responses stream read
with httpx, read by read, through its own incremental SSE parser, in one of three ways
(the first argument):

- ``careful``: right about everything the stream can tell: raises on an HTTP error, an
  error event, a payload that is not JSON, a ``sequence_number`` that is not the next
  one (a gap, a repeat, one going back), text that is not what ``output_text.done``
  says, and a stream that ends, or stays silent for 2 s, before ``response.completed``;
  stops at the first ``response.completed``;
- ``merged-reads``: the same, with a bug: when one read completes two text deltas, the
  second one's text is lost;
- ``second-terminal``: the same, with a bug: it reads on after ``response.completed``
  until the body ends (or is silent for 2 s), and a second ``response.completed``
  makes it flush its last delta again.

The mock is asked for a short answer, paced (``X-Mock-Tokens``, ``X-Mock-Interval-Ms``:
6 tokens, 30 ms apart, unless ``RESPONSES_TOKENS`` / ``RESPONSES_INTERVAL_MS`` say
otherwise), so the runs are quick and two events seldom share a read by chance. Prints
the text on stdout and exits 0, or the error on stderr and exits 1.

    chaosproxy explore --client "python -m tests.clients.responses_client merged-reads"
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

import httpx

from examples.clients.httpx_sse_client import main as print_answer

MODES = ("careful", "merged-reads", "second-terminal")
#: How long a read may wait before the stream counts as stopped.
READ_TIMEOUT = 2.0


class StreamError(Exception):
    """What the careful client noticed."""


class SseParser:
    """Incremental SSE (WHATWG): bytes in, ``(event, data)`` of each event completed."""

    def __init__(self) -> None:
        self._buffer = b""
        self._started = False
        self._event = ""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        self._buffer += chunk
        if not self._started and len(self._buffer) >= 3:
            self._buffer = self._buffer.removeprefix(b"\xef\xbb\xbf")
            self._started = True
        done: list[tuple[str, bytes]] = []
        while True:
            line, ending = self._next_line()
            if ending is None:
                return done
            if not line:
                if self._data:
                    done.append((self._event, b"\n".join(self._data)))
                self._event, self._data = "", []
            elif not line.startswith(b":"):
                name, _, value = line.partition(b":")
                value = value.removeprefix(b" ")
                if name == b"data":
                    self._data.append(value)
                elif name == b"event":
                    self._event = value.decode("utf-8", "strict")

    def _next_line(self) -> tuple[bytes, bytes | None]:
        buffer = self._buffer
        for i, byte in enumerate(buffer):
            if byte == 0x0A:
                self._buffer = buffer[i + 1 :]
                return buffer[:i], b"\n"
            if byte == 0x0D:
                if i + 1 == len(buffer):
                    return b"", None  # a CR at the end: its LF may follow
                skip = 2 if buffer[i + 1] == 0x0A else 1
                self._buffer = buffer[i + skip :]
                return buffer[:i], b"\r"
        return b"", None


def reads(url: str) -> Iterator[bytes]:
    """The response body, one read at a time (decompressed)."""
    body = {"model": "gpt-4o-mini", "stream": True, "input": "Plan my week, please."}
    headers = {
        "X-Mock-Tokens": os.environ.get("RESPONSES_TOKENS", "6"),
        "X-Mock-Interval-Ms": os.environ.get("RESPONSES_INTERVAL_MS", "30"),
    }
    timeout = httpx.Timeout(10.0, read=READ_TIMEOUT)
    with httpx.stream(
        "POST", url + "/v1/responses", json=body, headers=headers, timeout=timeout
    ) as response:
        if response.status_code != 200:
            raise StreamError(f"HTTP {response.status_code}")
        yield from response.iter_bytes()


def answer(url: str, mode: str) -> str:
    parser = SseParser()
    parts: list[str] = []
    expected = 0
    finished = False
    try:
        for chunk in reads(url):
            deltas = 0
            for _, data in parser.feed(chunk):
                payload = json.loads(data.decode("utf-8", "strict"))
                kind = payload.get("type")
                if finished:  # second-terminal only: reading on after the end
                    if kind == "response.completed" and parts:
                        parts.append(parts[-1])  # the bug: the last delta flushed again
                    continue
                if kind in ("error", "response.failed"):
                    raise StreamError(f"the provider reported an error: {payload}")
                if payload.get("sequence_number") != expected:
                    raise StreamError(
                        f"event {payload.get('sequence_number')}, expected {expected}"
                    )
                expected += 1
                if kind == "response.output_text.delta":
                    deltas += 1
                    if not (mode == "merged-reads" and deltas == 2):  # the bug
                        parts.append(payload["delta"])
                elif kind == "response.output_text.done" and mode != "merged-reads":
                    if payload["text"] != "".join(parts):
                        raise StreamError("the deltas do not make the text of output_text.done")
                elif kind == "response.completed":
                    if mode != "second-terminal":
                        return "".join(parts)
                    finished = True
    except httpx.ReadTimeout:
        if not finished:
            raise
    if finished:
        return "".join(parts)
    raise StreamError("the stream ended before response.completed")


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "careful"
    if mode not in MODES:
        print(f"unknown mode {mode}: {', '.join(MODES)}", file=sys.stderr)
        return 2
    return print_answer(lambda url: answer(url, mode))


if __name__ == "__main__":
    sys.exit(main())
