"""WebSocket messages as a framed stream, and the server's frames, sans-IO.

The proxy relays a WebSocket's server messages through the same fault pipeline as an
HTTP body: each text message is one NDJSON line (:func:`message_line`), so every
event fault (drop, duplicate, reorder, inject, mutate...) and the verdicts apply to
messages as to events; what the pipeline sends is cut back into messages by a
:class:`MessageSplitter`. The frames that carry a message to the client are written
here (:func:`encode_frame`): a server's frames are unmasked (RFC 6455, 5.1), and the
WebSocket faults need frames a message library does not give (a text message split
into continuation frames inside a UTF-8 character, a close with any code).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: Opcodes (RFC 6455, 5.2).
CONTINUATION: Final = 0x0
TEXT: Final = 0x1
BINARY: Final = 0x2
CLOSE: Final = 0x8
PING: Final = 0x9
PONG: Final = 0xA

#: The names the frame log gives the opcodes (the ``frame`` line's ``opcode``).
OPCODE_NAMES: Final[dict[int, str]] = {
    CONTINUATION: "continuation",
    TEXT: "text",
    BINARY: "binary",
    CLOSE: "close",
    PING: "ping",
    PONG: "pong",
}

#: Close codes the proxy sends itself: a normal end, and the upstream gone without one
#: (1006 is never sent on the wire: it is what a client reports for a TCP cut).
NORMAL_CLOSURE: Final = 1000
GOING_AWAY: Final = 1001
INTERNAL_ERROR: Final = 1011
#: A close frame's reason is at most 123 bytes (its payload 125, with the code).
MAX_REASON: Final = 123


@dataclass(frozen=True, slots=True)
class WsFrame:
    """One frame to the client: ``fin`` False for all but a message's last fragment,
    whose first fragment has the message's opcode and the rest ``CONTINUATION``."""

    opcode: int
    payload: bytes
    fin: bool = True
    #: The fault that made it (a fragment, a close), or "".
    fault: str = ""


def encode_frame(frame: WsFrame) -> bytes:
    """The bytes of a server frame (unmasked, no extension bits)."""
    payload = frame.payload
    first = (0x80 if frame.fin else 0x00) | frame.opcode
    size = len(payload)
    if size < 126:
        head = bytes((first, size))
    elif size < 1 << 16:
        head = bytes((first, 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((first, 127)) + size.to_bytes(8, "big")
    return head + payload


def close_payload(code: int, reason: str = "") -> bytes:
    """A close frame's payload: the code, then the reason in UTF-8, cut at a character
    boundary to fit ``MAX_REASON`` bytes."""
    raw = reason.encode()
    if len(raw) > MAX_REASON:
        raw = raw[:MAX_REASON].decode(errors="ignore").encode()
    return code.to_bytes(2, "big") + raw


def message_line(payload: bytes) -> bytes:
    """A text message as one NDJSON line: its bytes and a newline. A JSON message never
    needs a raw line break (JSON escapes them in strings); one between its tokens is
    blank space, read as a space here so that the message stays one event."""
    if 0x0A in payload or 0x0D in payload:
        payload = payload.replace(b"\r", b" ").replace(b"\n", b" ")
    return payload + b"\n"


class MessageSplitter:
    """The pipeline's writes cut back into messages: each complete line is one message
    (a transport fault that regroups bytes, ``rechunk``, changes no message)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The messages completed by ``data``, without their newline."""
        buffer = self._pending + data
        *messages, self._pending = buffer.split(b"\n")
        return messages

    def rest(self) -> bytes:
        """What is left of an unfinished line (a ``cut`` inside an event)."""
        return self._pending


__all__ = [
    "BINARY",
    "CLOSE",
    "CONTINUATION",
    "GOING_AWAY",
    "INTERNAL_ERROR",
    "MAX_REASON",
    "NORMAL_CLOSURE",
    "OPCODE_NAMES",
    "PING",
    "PONG",
    "TEXT",
    "MessageSplitter",
    "WsFrame",
    "close_payload",
    "encode_frame",
    "message_line",
]
