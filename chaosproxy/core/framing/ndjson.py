"""Newline-delimited JSON framer, incremental and sans-IO.

A frame is one line including its terminator: ``raw`` keeps the "\\n" or "\\r\\n",
``newline`` is that terminator and ``data`` is the line without it, decoded as UTF-8
(errors="replace") when the line completes. A line of only whitespace is a frame with
data None. A lone CR is not a line break here (JSON text never needs one); it stays in
``data``. No BOM handling: NDJSON has none.

At eof an unterminated last line becomes a frame with ``complete=False`` and newline b"".

A frame longer than ``max_size`` bytes (terminator included) raises
:class:`FramingError`, checked as bytes arrive. Lines before it are returned first and
the error is raised by the next call, so any split of a body yields the same frames
before the same error.

Fast path: the complete lines of a ``bytes`` read are cut straight from it, with no
copy into the buffer; only the line pending from the previous read (finished at the
read's first LF), a line over ``max_size`` and the unterminated tail go through the
buffer. A read that is not ``bytes`` (a ``bytearray``, a ``memoryview``) takes the
general path only. Both give the same frames.
"""

from __future__ import annotations

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing.base import DEFAULT_MAX_SIZE, BodyRead, FramingError

__all__ = ["NdjsonFramer", "parse_line"]


class NdjsonFramer:
    """Cut an NDJSON body into lines. One instance per body."""

    __slots__ = ("_buf", "_error", "_scan", "max_size")

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        self.max_size = max_size
        self._buf = bytearray()  # the pending, unterminated line
        self._scan = 0  # bytes of _buf already known to hold no "\n"
        self._error: FramingError | None = None

    def feed(self, data: BodyRead) -> list[Frame]:
        """Take the next bytes of the body; return the lines they complete."""
        error = self._error  # (a local: a narrowed self._error would be trusted below)
        if error is not None:
            raise error
        if not data:
            return []
        if type(data) is not bytes:
            return self._feed_buffered(data)
        if not self._buf and data.find(b"\n") == len(data) - 1 and len(data) <= self.max_size:
            return [_line_frame(data, complete=True)]  # one whole line: the usual paced read
        frames: list[Frame] = []
        start = 0
        if self._buf:
            # Finish the pending line the general way; the rest is cut from ``data``.
            start = data.find(b"\n") + 1
            if not start:
                return self._feed_buffered(data)
            frames = self._feed_buffered(data[:start])  # exactly one line
            if start == len(data) or self._error is not None:
                return frames
        # Cut the complete lines straight from ``data`` (no copy into the buffer); the
        # unterminated rest, or a line over max_size, goes to the general path.
        append = frames.append
        find = data.find
        end = len(data)
        max_size = self.max_size
        while (newline_at := find(b"\n", start)) >= 0:
            stop = newline_at + 1
            if stop - start > max_size:
                break
            # _line_frame, inlined.
            if newline_at > start and data[newline_at - 1] == _CR:
                line_end = newline_at - 1
                newline = b"\r\n"
            else:
                line_end = newline_at
                newline = b"\n"
            if line_end > start and data[start] not in _ASCII_SPACE:
                value: str | None = data[start:line_end].decode("utf-8", "replace")
            else:
                line = data[start:line_end]
                value = line.decode("utf-8", "replace") if line.strip() else None
            raw = data if stop - start == end else data[start:stop]
            append(Frame(raw, value, None, None, None, (), newline, True))
            start = stop
        if start == end:
            return frames
        try:
            more = self._feed_buffered(data[start:] if start else data)
        except FramingError:
            if frames:
                return frames  # the error is raised by the next call
            raise
        return frames + more if frames else more

    def _feed_buffered(self, data: BodyRead) -> list[Frame]:
        """The general path: append to the buffer and cut the complete lines."""
        buf = self._buf
        buf += data
        max_size = self.max_size
        frames: list[Frame] = []
        start = 0
        find = buf.find
        while (newline_at := find(b"\n", self._scan)) >= 0:
            end = newline_at + 1
            if end - start > max_size:
                self._fail()
                break
            frames.append(_line_frame(bytes(buf[start:end]), complete=True))
            start = self._scan = end
        else:
            if len(buf) - start > max_size:
                self._fail()
            else:
                self._scan = len(buf)
                del buf[:start]
                self._scan -= start
        if self._error is not None and not frames:
            raise self._error
        return frames

    def eof(self) -> list[Frame]:
        """The body ended: return the unterminated last line, if any, as incomplete."""
        self._raise_if_failed()
        if not self._buf:
            return []
        frame = _line_frame(bytes(self._buf), complete=False)
        self._buf = bytearray()
        self._scan = 0
        return [frame]

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _fail(self) -> None:
        self._error = FramingError(f"NDJSON line longer than max_size ({self.max_size} bytes)")
        self._buf = bytearray()
        self._scan = 0


_CR = 0x0D
#: What ``bytes.strip()`` strips (and ``bytes.isspace()`` tests): ASCII whitespace.
_ASCII_SPACE = frozenset(b" \t\n\r\x0b\x0c")


def parse_line(raw: bytes) -> Frame:
    """The frame of one NDJSON line given whole (bytes a fault built), parsed as the
    framer does: complete when it ends with its terminator."""
    return _line_frame(raw, complete=raw.endswith(b"\n"))


def _line_frame(raw: bytes, *, complete: bool) -> Frame:
    end = len(raw)
    if raw.endswith(b"\n"):
        if end > 1 and raw[-2] == _CR:
            line_end = end - 2
            newline = b"\r\n"
        else:
            line_end = end - 1
            newline = b"\n"
    else:
        line_end = end
        newline = b""
    # A line of only whitespace has no data; a line whose first byte is not
    # whitespace needs no strip() (a copy of the line) to tell.
    if line_end and raw[0] not in _ASCII_SPACE:
        data: str | None = raw[:line_end].decode("utf-8", "replace")
    else:
        line = raw[:line_end]
        data = line.decode("utf-8", "replace") if line.strip() else None
    return Frame(raw, data, None, None, None, (), newline, complete)
