"""HTTP on a plain socket: a request sent as bytes, a chunked body decoded, and the
frame log checked against the bytes the client got."""

from __future__ import annotations

import asyncio

from tests.support.proxies import LogCapture


async def raw_http(port: int, request: bytes, *, limit: float = 5.0) -> bytes:
    """Send one request on a plain socket and read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = b""
    try:
        async with asyncio.timeout(limit):
            while chunk := await reader.read(65536):
                data += chunk
    except ConnectionResetError:
        pass
    writer.close()
    return data


def dechunk(body: bytes) -> tuple[bytes, bool]:
    """Decode a chunked body; True when it ended with the terminating zero chunk."""
    out = bytearray()
    pos = 0
    while pos < len(body):
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            break
        size = int(body[pos:eol].split(b";")[0], 16)
        if size == 0:
            return bytes(out), True
        out += body[eol + 2 : eol + 2 + size]
        pos = eol + 4 + size
    return bytes(out), False


def assert_frames_cover(log: LogCapture, request_id: str, received: bytes) -> None:
    """The frame log's sizes and offsets rebuild exactly the bytes the client got."""
    frames = log.frames(request_id)
    offset = 0
    for seq, frame in enumerate(frames):
        assert frame["seq"] == seq
        assert frame["offset"] == offset
        offset += frame["size"]
    assert offset == len(received)
    assert log.end(request_id)["bytes"] == len(received)
