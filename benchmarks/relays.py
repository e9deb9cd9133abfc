"""Two reference relays in Python for ``benchmarks/instructions.py``: what a stream costs
at the floor of Python + uvloop, measured the same way as chaosproxy.

    python benchmarks/relays.py minimal --listen PORT --upstream HOST:PORT
    python benchmarks/relays.py sse --listen PORT --upstream HOST:PORT --log FILE

- ``minimal``: one upstream connection per client connection; bytes go both ways as
  they come, one ``write`` per read, nothing parsed (flow control honoured both ways).
- ``sse``: the same relay, and it also reads the response as chaosproxy's framed path
  does: the head, the chunked body de-chunked, the body split into SSE events on the
  blank line, and one JSON line per event (orjson) written to ``FILE`` through a
  buffered file: the Python floor of the shape "frame every event and log it".

Both listen on 127.0.0.1 only, print ``listening on http://127.0.0.1:PORT`` on stderr
once they accept connections, and stop on SIGTERM or SIGINT (the log flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from typing import BinaryIO, cast

import orjson

#: Reading a client's or an upstream's bytes pauses when the other side's write buffer
#: is above this, and resumes when it drains (asyncio's default low-water mark).
HIGH_WATER = 64 * 1024


class Side(asyncio.Protocol):
    """One connection of a relayed pair; what it reads goes to its peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
        self.pending: list[bytes] = []  # read before the peer connected
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.pending.append(data)
        else:
            peer.transport.write(data)

    def eof_received(self) -> bool | None:
        peer = self.peer
        if peer is not None and peer.transport is not None and peer.transport.can_write_eof():
            peer.transport.write_eof()
            return True  # keep our side open for what the peer still sends
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def pair(self, peer: Side) -> None:
        """Connects the two sides and passes on what this one read before."""
        self.peer = peer
        peer.peer = self
        if self.pending and peer.transport is not None:
            peer.transport.writelines(self.pending)
            self.pending.clear()


class SseUpstream(Side):
    """The upstream side of the ``sse`` relay: relays its bytes as they come, and
    splits the body into events, one JSON line each in the log."""

    def __init__(self, log: BinaryIO, stream: int) -> None:
        super().__init__()
        self.log = log
        self.stream = stream
        self.head: bytes | None = b""  # None once the head is read
        self.chunked = False
        self.left = 0  # payload bytes left in the current chunk
        self.skip = 0  # the CRLF after a chunk's payload, still to skip
        self.size_line = b""  # an incomplete chunk-size line
        self.ended = False  # the last chunk was read
        self.rest = b""  # body bytes after the last complete event
        self.seq = 0

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.head is not None:
            head = self.head + data
            end = head.find(b"\r\n\r\n")
            if end < 0:
                self.head = head
                return
            self.head = None
            self.chunked = b"chunked" in head[:end].lower()
            data = head[end + 4 :]
        self.body(self.dechunk(data) if self.chunked else data)

    def dechunk(self, data: bytes) -> bytes:
        if self.ended:
            return b""
        buf = self.size_line + data if self.size_line else data
        self.size_line = b""
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n:
            if self.left:
                stop = min(n, pos + self.left)
                out.append(buf[pos:stop])
                self.left -= stop - pos
                pos = stop
                if not self.left:
                    self.skip = 2
            elif self.skip:
                step = min(self.skip, n - pos)
                pos += step
                self.skip -= step
            else:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    self.size_line = buf[pos:]
                    break
                size = int(buf[pos:nl].split(b";", 1)[0], 16)
                pos = nl + 2
                if not size:  # the last chunk: what follows is its trailer
                    self.ended = True
                    break
                self.left = size
        return b"".join(out)

    def body(self, body: bytes) -> None:
        if not body:
            return
        text = self.rest + body if self.rest else body
        events = text.split(b"\n\n")
        self.rest = events.pop()
        write = self.log.write
        for event in events:
            self.seq += 1
            write(
                orjson.dumps(
                    {
                        "event": "frame",
                        "stream": self.stream,
                        "seq": self.seq,
                        "bytes": len(event) + 2,
                        "ts": time.time_ns(),
                    }
                )
                + b"\n"
            )


class Relay:
    """Accepts clients; connects each to the upstream with a side of its own."""

    def __init__(self, upstream: tuple[str, int], log: BinaryIO | None) -> None:
        self.upstream = upstream
        self.log = log
        self.streams = 0

    def client(self) -> Side:
        side = Side()
        asyncio.get_running_loop().create_task(self.connect(side))
        return side

    async def connect(self, client: Side) -> None:
        loop = asyncio.get_running_loop()
        self.streams += 1
        log, stream = self.log, self.streams

        def make() -> Side:
            return Side() if log is None else SseUpstream(log, stream)

        try:
            _, upstream = await loop.create_connection(make, *self.upstream)
        except OSError:
            if client.transport is not None:
                client.transport.close()
            return
        if client.closed:
            assert upstream.transport is not None
            upstream.transport.close()
            return
        client.pair(upstream)


async def serve(port: int, upstream: tuple[str, int], log: BinaryIO | None) -> None:
    loop = asyncio.get_running_loop()
    relay = Relay(upstream, log)
    server = await loop.create_server(relay.client, "127.0.0.1", port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"relay listening on http://127.0.0.1:{bound}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def parse_upstream(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("minimal", "sse"))
    parser.add_argument("--listen", type=int, default=0, metavar="PORT")
    parser.add_argument("--upstream", type=parse_upstream, required=True, metavar="HOST:PORT")
    parser.add_argument("--log", default=None, metavar="FILE", help="sse: the events' log")
    args = parser.parse_args(argv)
    if args.kind == "sse" and not args.log:
        parser.error("sse needs --log FILE")
    import uvloop

    if args.kind == "minimal":
        uvloop.run(serve(args.listen, args.upstream, None))
        return 0
    with open(args.log, "ab") as log:  # flushed and closed once the loop has stopped
        uvloop.run(serve(args.listen, args.upstream, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
