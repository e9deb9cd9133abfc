"""A fast, paced SSE upstream for the benchmark (raw asyncio + uvloop, no framework).

Run as ``python benchmarks/upstream.py [--port N]``: it listens on 127.0.0.1 only and
prints ``PORT <n>`` on stdout once it accepts connections.

``GET /stream?n=N&rate=R&size=S&offset=MS`` answers ``text/event-stream`` (chunked) with
N events of about S bytes each, one socket write per event (one HTTP chunk each)::

    data: {"t": <time.time_ns() at the write>, "i": <0..N-1>, "pad": "xxx…"}

``rate=0`` sends as fast as the socket takes them (honouring back-pressure); otherwise
event i is written at ``arrival + offset + i/rate`` on an absolute schedule (no drift).
HTTP/1.1 keep-alive is supported (a proxy pools its upstream connections), and so is
``Connection: close``. Anything else is answered 404.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import sys
import time
from typing import cast
from urllib.parse import parse_qsl

HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n"
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
#: The bytes of an event around its pad (``%d`` twice, then the pad, then the end).
EVENT_PREFIX = b'data: {"t": '
_OVERHEAD = len(b'data: {"t": 1700000000000000000, "i": 0, "pad": ""}\n\n')
MAX_HEAD = 65536
WRITE_HIGH_WATER = 256 * 1024


def event_bytes(i: int, pad: bytes) -> bytes:
    """One SSE event with the current wall-clock time in nanoseconds, chunk-framed."""
    ev = b'data: {"t": %d, "i": %d, "pad": "%b"}\n\n' % (time.time_ns(), i, pad)
    return b"%x\r\n%b\r\n" % (len(ev), ev)


class Stream:
    """One response being sent on a connection."""

    __slots__ = ("conn", "handle", "i", "n", "pad", "rate", "start")

    def __init__(self, conn: Connection, n: int, rate: float, size: int, offset: float) -> None:
        self.conn = conn
        self.n = n
        self.rate = rate
        self.pad = b"x" * max(0, size - _OVERHEAD - len(str(n)))
        self.i = 0
        self.start = conn.loop.time() + offset
        self.handle: asyncio.TimerHandle | asyncio.Handle | None = None

    def begin(self) -> None:
        if self.rate <= 0:
            self.pump()
        else:
            self.handle = self.conn.loop.call_at(self.start, self.tick)

    def pump(self) -> None:
        """Saturating mode: write until the transport asks us to pause or we are done."""
        self.handle = None
        conn = self.conn
        write = conn.transport.write
        pad = self.pad
        n = self.n
        i = self.i
        while i < n and not conn.paused:
            write(event_bytes(i, pad))
            i += 1
        self.i = i
        if i >= n:
            conn.finish()

    def tick(self) -> None:
        """Paced mode: write event i, schedule event i+1 on the absolute timetable."""
        conn = self.conn
        conn.transport.write(event_bytes(self.i, self.pad))
        self.i += 1
        if self.i >= self.n:
            self.handle = None
            conn.finish()
            return
        self.handle = conn.loop.call_at(self.start + self.i / self.rate, self.tick)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.buf = b""
        self.paused = False
        self.stream: Stream | None = None
        self.close_after = False
        self.transport: asyncio.Transport = None  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: cast, don't check.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.stream is None:
            self._next_request()

    def _next_request(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                self.transport.close()
            return
        head = self.buf[:end].decode("latin-1")
        self.buf = self.buf[end + 4 :]  # GET requests only: no body to skip
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        self.close_after = headers.get("connection") == "close" or parts[-1] == "HTTP/1.0"
        path, _, query = parts[1].partition("?") if len(parts) == 3 else ("", "", "")
        if path.rstrip("/").rsplit("/", 1)[-1] != "stream":
            self.transport.write(NOT_FOUND + b"\r\n")
            self._done()
            return
        q = dict(parse_qsl(query))
        try:
            n = int(q.get("n", "100"))
            rate = float(q.get("rate", "0"))
            size = int(q.get("size", "1024"))
            offset = float(q.get("offset", "0")) / 1000.0
        except ValueError:
            self.transport.write(NOT_FOUND + b"\r\n")
            self._done()
            return
        extra = b"Connection: close\r\n" if self.close_after else b""
        self.transport.write(HEAD + extra + b"\r\n")
        self.stream = Stream(self, n, rate, size, offset)
        self.stream.begin()

    def finish(self) -> None:
        self.transport.write(b"0\r\n\r\n")
        self.stream = None
        self._done()

    def _done(self) -> None:
        if self.close_after:
            self.transport.close()
        elif self.buf:
            self._next_request()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        stream = self.stream
        if stream is not None and stream.rate <= 0 and stream.handle is None:
            stream.handle = self.loop.call_soon(stream.pump)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.stream.cancel()
            self.stream = None


async def serve(port: int, *, watch_stdin: bool = False) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Connection, "127.0.0.1", port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"PORT {bound}\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if watch_stdin:
        # Stop by ourselves too when the parent is gone (our stdin pipe closes with it).
        loop.add_reader(sys.stdin.fileno(), stop.set)
    await stop.wait()
    server.close()


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--watch-stdin", action="store_true", help="exit when stdin closes (the parent died)"
    )
    args = parser.parse_args()
    raise_fd_limit()
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(serve(args.port, watch_stdin=args.watch_stdin))
    else:
        uvloop.run(serve(args.port, watch_stdin=args.watch_stdin))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
