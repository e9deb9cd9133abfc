"""AWS event stream framer (``application/vnd.amazon.eventstream``), incremental and
sans-IO, and its encoder.

The body of Bedrock's ``ConverseStream`` and ``InvokeModelWithResponseStream`` (and of
every AWS streaming API) is a sequence of binary messages::

    total length   u32 BE   the whole message, these 4 bytes and the final CRC included
    headers length u32 BE
    prelude CRC    u32 BE   CRC32 of the 8 bytes above
    headers                 name length u8, name (UTF-8), type u8, typed value; repeated
    payload                 total length - headers length - 16 bytes
    message CRC    u32 BE   CRC32 of everything before it

A frame is one whole message: ``raw`` its exact bytes, ``data`` its payload decoded as
UTF-8 (errors="replace"; ``""`` for an empty payload, so every message is an event),
``event`` the name that says what it is: the ``:event-type`` header of an event (e.g.
``contentBlockDelta``), the ``:exception-type`` of an exception (e.g.
``throttlingException``), the ``:error-code`` of an error. ``newline`` is ``b""``. The
headers themselves are read back from ``raw`` by :func:`message_headers`.

Both CRCs are checked, the prelude's as soon as its 12 bytes are in (before its lengths
are believed), the message's when the message is whole. A CRC that does not match, a
length no message can have (under the 16 bytes of overhead, headers longer than the
message), a message longer than ``max_size``, a header that runs past the headers or
has an unknown type, a name or string that is not UTF-8, and a header given twice are a
:class:`FramingError` saying which message and why. As in the NDJSON framer, the
messages before the bad one are returned first and the error is raised by the next
call, so any split of a body yields the same frames before the same error.

At eof a partial message is one frame with ``complete=False`` and no data (its bytes
can be passed on, never read).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Final

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing.base import DEFAULT_MAX_SIZE, BodyRead, FramingError

__all__ = [
    "CONTENT_TYPE",
    "EventStreamFramer",
    "Header",
    "HeaderValue",
    "encode_message",
    "event_message",
    "exception_message",
    "message_headers",
    "message_payload",
    "parse_message",
    "with_payload",
]

#: The Content-Type of an event stream body.
CONTENT_TYPE: Final = "application/vnd.amazon.eventstream"

PRELUDE_LENGTH: Final = 12
#: The prelude and the message CRC: the bytes of a message that are neither headers nor
#: payload.
OVERHEAD: Final = 16

#: A header's value, by its type: 0/1 bool, 2/3/4/5 int (byte, short, int, long), 6
#: bytes, 7 str, 8 int (a timestamp, ms since the epoch), 9 bytes (a UUID, 16 bytes).
HeaderValue = bool | int | bytes | str
#: One header as it is on the wire: its name, its type and its value.
Header = tuple[str, int, HeaderValue]

_BOOL_TRUE: Final = 0
_BOOL_FALSE: Final = 1
_BYTE: Final = 2
_SHORT: Final = 3
_INT: Final = 4
_LONG: Final = 5
_BYTES: Final = 6
_STRING: Final = 7
_TIMESTAMP: Final = 8
_UUID: Final = 9

_U32: Final = struct.Struct("!I")
_PRELUDE: Final = struct.Struct("!III")
#: Fixed-size integer types: their struct format.
_FIXED: Final[dict[int, struct.Struct]] = {
    _BYTE: struct.Struct("!b"),
    _SHORT: struct.Struct("!h"),
    _INT: struct.Struct("!i"),
    _LONG: struct.Struct("!q"),
    _TIMESTAMP: struct.Struct("!q"),
}
#: The header that names a message, by its ``:message-type``.
_NAME_HEADER: Final[dict[str, str]] = {
    "event": ":event-type",
    "exception": ":exception-type",
    "error": ":error-code",
}


def _crc(data: bytes | bytearray | memoryview, start: int = 0) -> int:
    return zlib.crc32(data, start) & 0xFFFFFFFF


class EventStreamFramer:
    """Cut an event stream body into messages. One instance per body."""

    __slots__ = ("_buf", "_count", "_error", "_need", "max_size")

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE) -> None:
        if max_size < OVERHEAD:
            raise ValueError(f"max_size must be >= {OVERHEAD}, got {max_size}")
        self.max_size = max_size
        self._buf = bytearray()  # the pending, partial message
        self._need = 0  # the pending message's total length once its prelude is read
        self._count = 0  # messages cut so far (for the errors' "message N")
        self._error: FramingError | None = None

    def feed(self, data: BodyRead) -> list[Frame]:
        """Take the next bytes of the body; return the messages they complete."""
        error = self._error  # (a local: a narrowed self._error would be trusted below)
        if error is not None:
            raise error
        if not data:
            return []
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        start = 0
        end = len(buf)
        while end - start >= PRELUDE_LENGTH:
            need = self._need
            if not need:
                try:
                    need = self._check_prelude(buf, start)
                except FramingError as exc:
                    self._fail(exc)
                    break
                self._need = need
            if end - start < need:
                break
            message = bytes(buf[start : start + need])
            try:
                frame = _message_frame(message, self._count + 1)
            except FramingError as exc:
                self._fail(exc)
                break
            frames.append(frame)
            self._count += 1
            self._need = 0
            start += need
        if self._error is not None:
            if not frames:
                raise self._error
            return frames
        if start:
            del buf[:start]
        return frames

    def eof(self) -> list[Frame]:
        """The body ended: a partial message, if any, is one incomplete frame."""
        error = self._error
        if error is not None:
            raise error
        if not self._buf:
            return []
        frame = Frame(bytes(self._buf), None, None, None, None, (), b"", False)
        self._buf = bytearray()
        self._need = 0
        return [frame]

    def _check_prelude(self, buf: bytearray, start: int) -> int:
        """The total length of the message whose prelude starts at ``start``, checked."""
        total, headers, crc = _PRELUDE.unpack_from(buf, start)
        which = self._count + 1
        computed = _crc(memoryview(buf)[start : start + 8])
        if crc != computed:
            raise FramingError(
                f"event stream message {which}: prelude CRC mismatch "
                f"(prelude says {crc:#010x}, its bytes give {computed:#010x})"
            )
        _check_lengths(total, headers, which)
        if total > self.max_size:
            raise FramingError(
                f"event stream message {which} of {total} bytes is longer than "
                f"max_size ({self.max_size} bytes)"
            )
        return int(total)

    def _fail(self, error: FramingError) -> None:
        self._error = error
        self._buf = bytearray()
        self._need = 0


def _check_lengths(total: int, headers: int, which: int) -> None:
    if total < OVERHEAD:
        raise FramingError(
            f"event stream message {which}: total length {total} is under the "
            f"{OVERHEAD} bytes of prelude and CRCs"
        )
    if headers > total - OVERHEAD:
        raise FramingError(
            f"event stream message {which}: headers length {headers} does not fit "
            f"in a message of {total} bytes"
        )


def _message_frame(message: bytes, which: int) -> Frame:
    """The frame of one whole message (its length already agrees with its prelude)."""
    total, headers_length, _prelude_crc = _PRELUDE.unpack_from(message, 0)
    payload_end = total - 4
    (crc,) = _U32.unpack_from(message, payload_end)
    computed = _crc(memoryview(message)[:payload_end])
    if crc != computed:
        raise FramingError(
            f"event stream message {which}: message CRC mismatch "
            f"(message says {crc:#010x}, its bytes give {computed:#010x})"
        )
    headers_end = PRELUDE_LENGTH + headers_length
    headers = _decode_headers(message, PRELUDE_LENGTH, headers_end, which)
    kind = headers.get(":message-type", "event")
    name = headers.get(_NAME_HEADER.get(kind, ":event-type")) if isinstance(kind, str) else None
    data = message[headers_end:payload_end].decode("utf-8", "replace")
    return Frame(message, data, name if isinstance(name, str) else None, None, None, (), b"", True)


def _decode_headers(raw: bytes, start: int, end: int, which: int) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    for name, _, value in _iter_headers(raw, start, end, which):
        if name in headers:
            raise FramingError(f"event stream message {which}: header {name!r} given twice")
        headers[name] = value
    return headers


def _iter_headers(raw: bytes, start: int, end: int, which: int) -> Iterable[Header]:
    pos = start
    while pos < end:
        name_length = raw[pos]
        pos += 1
        name_end = pos + name_length
        if name_end + 1 > end:
            raise FramingError(f"event stream message {which}: a header runs past the headers")
        name = _utf8(raw[pos:name_end], which, "header name")
        type_ = raw[name_end]
        pos = name_end + 1
        value: HeaderValue
        if type_ in (_BOOL_TRUE, _BOOL_FALSE):
            value = type_ == _BOOL_TRUE
        elif type_ in _FIXED:
            fmt = _FIXED[type_]
            if pos + fmt.size > end:
                raise FramingError(
                    f"event stream message {which}: header {name!r} runs past the headers"
                )
            value = int(fmt.unpack_from(raw, pos)[0])
            pos += fmt.size
        elif type_ in (_BYTES, _STRING):
            if pos + 2 > end:
                raise FramingError(
                    f"event stream message {which}: header {name!r} runs past the headers"
                )
            length = raw[pos] << 8 | raw[pos + 1]
            pos += 2
            if pos + length > end:
                raise FramingError(
                    f"event stream message {which}: header {name!r} runs past the headers"
                )
            chunk = raw[pos : pos + length]
            value = _utf8(chunk, which, f"header {name!r}") if type_ == _STRING else chunk
            pos += length
        elif type_ == _UUID:
            if pos + 16 > end:
                raise FramingError(
                    f"event stream message {which}: header {name!r} runs past the headers"
                )
            value = raw[pos : pos + 16]
            pos += 16
        else:
            raise FramingError(
                f"event stream message {which}: header {name!r} has unknown type {type_}"
            )
        yield name, type_, value


def _utf8(chunk: bytes, which: int, what: str) -> str:
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError:
        raise FramingError(f"event stream message {which}: {what} is not UTF-8") from None


# --------------------------------------------------------------------------- reading one


def message_headers(raw: bytes) -> dict[str, HeaderValue]:
    """The headers of one whole message (a frame's ``raw``), by name; ``{}`` for bytes
    that are not a whole message (an incomplete frame at eof)."""
    if len(raw) < OVERHEAD:
        return {}
    total, headers_length, _ = _PRELUDE.unpack_from(raw, 0)
    if total != len(raw) or headers_length > total - OVERHEAD:
        return {}
    try:
        return _decode_headers(raw, PRELUDE_LENGTH, PRELUDE_LENGTH + headers_length, 1)
    except FramingError:
        return {}


def message_payload(raw: bytes) -> bytes:
    """The payload of one whole message (a frame's ``raw``), exact bytes; ``b""`` for
    bytes that are not a whole message."""
    if len(raw) < OVERHEAD:
        return b""
    total, headers_length, _ = _PRELUDE.unpack_from(raw, 0)
    if total != len(raw) or headers_length > total - OVERHEAD:
        return b""
    return raw[PRELUDE_LENGTH + headers_length : total - 4]


def parse_message(raw: bytes) -> Frame:
    """The frame of one message given whole (bytes a fault built), parsed as the framer
    does; bytes that are not one sound message are an incomplete frame with no data."""
    if len(raw) >= OVERHEAD:
        total, headers_length, crc = _PRELUDE.unpack_from(raw, 0)
        if total == len(raw) and headers_length <= total - OVERHEAD and crc == _crc(raw[:8]):
            try:
                return _message_frame(raw, 1)
            except FramingError:
                pass
    return Frame(raw, None, None, None, None, (), b"", False)


# --------------------------------------------------------------------------- encoding


def encode_header(name: str, type_: int, value: HeaderValue) -> bytes:
    """One header's bytes: its name, its type and its value as that type."""
    name_bytes = name.encode("utf-8")
    if not 0 < len(name_bytes) < 256:
        raise ValueError(f"a header name is 1-255 bytes, got {len(name_bytes)}")
    head = bytes((len(name_bytes),)) + name_bytes + bytes((type_,))
    if type_ in (_BOOL_TRUE, _BOOL_FALSE):
        return head
    if type_ in _FIXED:
        if isinstance(value, bytes | str):
            raise ValueError(f"header {name!r}: type {type_} takes an integer")
        return head + _FIXED[type_].pack(int(value))
    if type_ in (_BYTES, _STRING):
        chunk = value.encode("utf-8") if isinstance(value, str) else value
        if not isinstance(chunk, bytes) or len(chunk) > 0xFFFF:
            raise ValueError(f"header {name!r}: type {type_} takes at most 65535 bytes")
        return head + struct.pack("!H", len(chunk)) + chunk
    if type_ == _UUID:
        if not isinstance(value, bytes) or len(value) != 16:
            raise ValueError(f"header {name!r}: a UUID is 16 bytes")
        return head + value
    raise ValueError(f"header {name!r}: unknown type {type_}")


def encode_message(headers: Iterable[Header] | Mapping[str, str], payload: bytes) -> bytes:
    """One whole message: its prelude, ``headers`` (a mapping of names to strings, or
    typed headers in order), ``payload`` and both CRCs."""
    items: Iterable[Header] = (
        [(name, _STRING, value) for name, value in headers.items()]
        if isinstance(headers, Mapping)
        else headers
    )
    header_bytes = b"".join(encode_header(name, type_, value) for name, type_, value in items)
    total = OVERHEAD + len(header_bytes) + len(payload)
    prelude = struct.pack("!II", total, len(header_bytes))
    prelude += _U32.pack(_crc(prelude))
    body = prelude + header_bytes + payload
    return body + _U32.pack(_crc(body))


def with_payload(raw: bytes, payload: bytes) -> bytes:
    """The whole message ``raw`` with ``payload`` instead of its own: its header bytes
    kept as they are, both lengths and both CRCs made right for the new payload."""
    _, headers_length, _ = _PRELUDE.unpack_from(raw, 0)
    header_bytes = raw[PRELUDE_LENGTH : PRELUDE_LENGTH + headers_length]
    total = OVERHEAD + headers_length + len(payload)
    prelude = struct.pack("!II", total, headers_length)
    prelude += _U32.pack(_crc(prelude))
    body = prelude + header_bytes + payload
    return body + _U32.pack(_crc(body))


def event_message(event_type: str, payload: bytes, content_type: str = "application/json") -> bytes:
    """An ``event`` message named ``event_type``, as AWS sends them (its headers in
    AWS's order: event type, content type, message type)."""
    return encode_message(
        {":event-type": event_type, ":content-type": content_type, ":message-type": "event"},
        payload,
    )


def exception_message(
    exception_type: str, payload: bytes, content_type: str = "application/json"
) -> bytes:
    """An ``exception`` message (``throttlingException``, ...), as AWS sends them."""
    return encode_message(
        {
            ":exception-type": exception_type,
            ":content-type": content_type,
            ":message-type": "exception",
        },
        payload,
    )
