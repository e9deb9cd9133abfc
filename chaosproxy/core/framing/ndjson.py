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
"""

from __future__ import annotations

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import DEFAULT_MAX_SIZE, FramingError

__all__ = ["NdjsonFramer"]


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

    def feed(self, data: bytes) -> list[Frame]:
        """Take the next bytes of the body; return the lines they complete."""
        self._raise_if_failed()
        if not data:
            return []
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


def _line_frame(raw: bytes, *, complete: bool) -> Frame:
    if raw.endswith(b"\r\n"):
        newline = b"\r\n"
    elif raw.endswith(b"\n"):
        newline = b"\n"
    else:
        newline = b""
    line = raw[: len(raw) - len(newline)]
    data = line.decode("utf-8", "replace") if line.strip() else None
    return Frame(raw=raw, data=data, newline=newline, complete=complete)
