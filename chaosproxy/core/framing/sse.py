"""Server-sent events framer (WHATWG HTML §9.2.6), incremental and sans-IO.

A frame is one block of lines *including* the empty line that ends it, so joining
``frame.raw`` over every frame returned by :meth:`SseFramer.feed` and
:meth:`SseFramer.eof` gives back the body byte for byte. The parsed view (``data``,
``event``, ``id``, ``retry``, ``comments``, ``newline``) follows the WHATWG rules:

- Lines end at CRLF, at a lone LF or at a lone CR. A CR that is the last byte seen so
  far may be the first half of a CRLF, so it is held until the next byte (or
  :meth:`~SseFramer.eof`) says which. A CR|LF split across two reads therefore gives the
  same frames as one read, and an event whose blank line is a lone CR is only returned
  once the byte after it arrives (or at eof).
- ``field: value`` drops exactly one U+0020 after the colon; a line without a colon is
  a field with an empty value; a line starting with a colon is a comment, whose text
  after the colon is kept verbatim. Unknown fields are ignored.
- ``data`` is the block's data lines joined with "\\n", or None when the block has no
  ``data`` field at all (a bare ``data`` line counts, as ""). ``event``, ``id`` and
  ``retry`` are the block's own fields, the last one winning; an ``id`` containing NUL
  and a ``retry`` that is not all ASCII digits are ignored.
- ``newline`` is the terminator of the frame's first line (b"" when that line is
  unterminated at eof).
- One UTF-8 BOM at the very start of the body is skipped for parsing but stays in the
  first frame's raw bytes. A BOM anywhere else is ordinary text.
- Empty lines between events (e.g. the extra ones in "\\n\\n\\n") are frames of their
  own, with data None.
- Text is decoded (UTF-8, errors="replace") only when a frame is built, so a character
  split across reads decodes as one character.

At eof the unterminated rest of the body, if any, becomes one frame with
``complete=False``, parsed as far as it goes.

Memory is bounded by ``max_size``: a frame (its lines, terminators and blank line, plus
a leading BOM) longer than ``max_size`` bytes raises :class:`FramingError`, checked as
bytes arrive. The limit is a property of the body, not of the chunking: frames before
the oversized one are returned first (the error is then raised by the next call), so
any split of a body yields the same frames before the same error.

Cost: the buffer is searched for blank lines with ``bytes.find`` (or, once a CR shows
up, a compiled regex) from a saved offset, so each byte is searched a bounded number of
times and a long event fed in tiny reads stays linear. Lines are parsed, in Python,
once per frame; the usual one-``data:``-line event takes a shortcut.

Fast path: a ``bytes`` read whose line endings are all LF, or all CRLF, is cut
straight from the read, with no copy into the buffer: a frame there ends at the first
blank line, and no CR can still turn into a CRLF. Only the frame pending from the
previous read (finished up to the read's first blank line), a leading BOM, a frame
over ``max_size`` and the unterminated tail go through the buffer. A read with mixed
line endings or a lone CR, and any read that is not ``bytes`` (a ``bytearray``, a
``memoryview``), take the general path only. Both give the same frames.
"""

from __future__ import annotations

import contextlib
import re
from typing import Final

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing.base import DEFAULT_MAX_SIZE, BodyRead, FramingError

__all__ = ["SseFramer", "parse_sse_block"]

# (Final: compiled code reads a Final constant directly, any other module global
# through the module's dict, about 140 instructions a read, issue 34.)
_BOM: Final = b"\xef\xbb\xbf"
_CR: Final = 0x0D
_LF: Final = 0x0A
# A line terminator followed by an empty line's terminator. ``\r(?!\n)`` keeps a CRLF
# from being read as two line ends; a CR at the very end of the buffer still matches
# and is then held by the caller until the next byte says whether an LF follows.
_BLANK_LINE = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
_EOL = re.compile(rb"\r\n?|\n")
# A blank-line match is at most 4 bytes; a search that found none can resume this
# far before the end of the buffer.
_RESUME = 3


class SseFramer:
    """Cut a ``text/event-stream`` body into event blocks. One instance per body."""

    __slots__ = ("_at_body_start", "_buf", "_content", "_error", "_scan", "max_size")

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        self.max_size = max_size
        # Bytes of the pending (not yet returned) frame; it starts at index 0 between calls.
        self._buf = bytearray()
        self._content = 0  # where the pending frame's lines start (3 after a leading BOM)
        self._scan = 0  # where the next search for a blank line starts (>= _content)
        self._at_body_start = True  # whether a leading BOM is still to be decided
        self._error: FramingError | None = None

    def feed(self, data: BodyRead) -> list[Frame]:
        """Take the next bytes of the body; return the frames they complete."""
        error = self._error  # (a local: a narrowed self._error would be trusted below)
        if error is not None:
            raise error
        if not data:
            return []
        if type(data) is not bytes:
            return self._feed_buffered(data)
        # The fast path: a read that uses one line ending throughout is cut straight
        # from ``data`` (see _cut_uniform), once the pending frame, if any, is done.
        # (The byte's value, not b"\r": ``bytes in bytes`` first tries the argument as
        # an integer and raises and clears a TypeError, 2k instructions a read.)
        if _CR not in data:
            # (A read that starts "data: " has no BOM to decide at the body's start.)
            if not self._buf:
                # The usual paced read: one "data: ..." line and the blank line (the
                # line's only LF is the one before the last: asked of the value's
                # bytes, which are decoded anyway; ``data.find`` is a method call).
                end = len(data) - 2
                if (
                    end >= 6
                    and data[-1] == _LF
                    and data[end] == _LF
                    and data.startswith(b"data: ")
                    and end + 2 <= self.max_size
                ):
                    line = data[6:end]
                    if _LF not in line:
                        self._at_body_start = False
                        value = line.decode("utf-8", "replace")
                        return [Frame(data, value, None, None, None, (), b"\n", True)]
            nl = b"\n"
        else:
            if not self._buf:
                # The same with CRLF (Gemini): "data: ...\r\n\r\n".
                first = data.find(b"\r")
                if (
                    first == len(data) - 4
                    and data.endswith(b"\r\n\r\n")
                    and data.find(b"\n", 0, first) < 0
                    and data.startswith(b"data: ")
                    and first + 4 <= self.max_size
                ):
                    self._at_body_start = False
                    value = data[6:first].decode("utf-8", "replace")
                    return [Frame(data, value, None, None, None, (), b"\r\n", True)]
            if data.count(b"\r") == data.count(b"\n") == data.count(b"\r\n"):
                nl = b"\r\n"
            else:
                return self._feed_buffered(data)
        frames: list[Frame] = []
        start = 0
        if self._buf or self._at_body_start:
            if not self._buf and data[0] != _BOM[0]:
                self._at_body_start = False  # what _skip_bom decides for this read
            else:
                # Finish the pending frame (or the BOM) the general way, up to the
                # first blank line of this read: the pending frame ends at or before it.
                hit = data.find(nl + nl)
                if hit < 0:
                    return self._feed_buffered(data)
                start = hit + 2 * len(nl)
                frames = self._feed_buffered(data[:start])
                if start == len(data):
                    return frames
                if self._buf or self._error is not None:
                    return self._then_buffered(frames, data[start:])
        stop = _cut_uniform(data, start, nl, self.max_size, frames)
        if stop == len(data):
            return frames
        return self._then_buffered(frames, data[stop:] if stop else data)

    @property
    def buffered(self) -> int:
        """Bytes taken but not yet returned in a frame (an event not ended yet)."""
        return len(self._buf)

    def _then_buffered(self, frames: list[Frame], rest: bytes) -> list[Frame]:
        """``frames``, then what the general path makes of ``rest``; a size error in
        ``rest`` is raised by the next call when ``frames`` is not empty."""
        if self._error is not None:
            return frames  # frames is not empty: _feed_buffered raised otherwise
        try:
            more = self._feed_buffered(rest)
        except FramingError:
            if frames:
                return frames
            raise
        return frames + more if frames else more

    def _feed_buffered(self, data: BodyRead) -> list[Frame]:
        """The general path: append to the buffer and cut what is complete."""
        self._buf += data
        if self._at_body_start and not self._skip_bom(final=False):
            return []
        frames = self._process(final=False)
        if self._error is not None and not frames:
            raise self._error
        return frames

    def eof(self) -> list[Frame]:
        """The body ended: return what is left, the unterminated part as incomplete."""
        self._raise_if_failed()
        if not self._buf and not self._at_body_start:
            return []  # nothing pending (the usual end of a body)
        if self._at_body_start:
            self._skip_bom(final=True)
        frames = self._process(final=True)
        self._raise_if_failed()
        buf = self._buf
        if buf:
            raw = bytes(buf)
            lines = raw[self._content :]
            match = _EOL.search(lines)
            newline = b"" if match is None else match.group()
            frames.append(_frame(raw, lines.splitlines(), newline, complete=False))
            self._buf = bytearray()
            self._content = self._scan = 0
        return frames

    def _skip_bom(self, *, final: bool) -> bool:
        """Skip a leading BOM for parsing; False while the bytes so far cannot tell."""
        buf = self._buf
        if not final and len(buf) < len(_BOM) and _BOM.startswith(buf):
            return False
        self._at_body_start = False
        if buf.startswith(_BOM):
            self._content = self._scan = len(_BOM)
        return True

    def _process(self, *, final: bool) -> list[Frame]:
        """Cut every complete frame off the buffer and return them."""
        buf = self._buf
        end = len(buf)
        max_size = self.max_size
        frames: list[Frame] = []
        start = 0  # first byte of the pending frame (a BOM belongs to it)
        content = self._content  # first byte of its first line
        scan = self._scan
        next_cr = -2  # position of the next CR at or after scan; -1: none; -2: unknown
        while content < end:
            if scan == content:
                # An empty first line: a stray blank line between events, a frame alone.
                first = buf[content]
                if first in (_LF, _CR):
                    stop = content + 1
                    if first == _CR:
                        if stop == end and not final:
                            break  # maybe the CR of a CRLF: wait for the next byte
                        if stop < end and buf[stop] == _LF:
                            stop += 1
                    if stop - start > max_size:
                        self._fail(buf, start, stop)
                        return frames
                    newline = bytes(buf[content:stop])
                    frames.append(_frame(bytes(buf[start:stop]), [], newline, complete=True))
                    start = content = scan = stop
                    continue
            # Find the end of the frame: a line end followed by an empty line.
            if next_cr != -1 and next_cr < scan:
                next_cr = buf.find(b"\r", scan)
            if next_cr == -1:
                hit = buf.find(b"\n\n", scan)  # LF-only from here on: the fast path
                blank = None if hit < 0 else (hit, hit + 2)
            else:
                hit = buf.find(b"\n\n", scan, next_cr)
                if hit >= 0:
                    blank = (hit, hit + 2)
                else:
                    match = _BLANK_LINE.search(buf, scan)
                    blank = None if match is None else match.span()
            if blank is None:
                scan = max(content, end - _RESUME)
                break
            blank_start, stop = blank
            if stop == end and not final and buf[stop - 1] == _CR:
                scan = blank_start  # maybe the CR of a CRLF: wait for the next byte
                break
            if stop - start > max_size:
                self._fail(buf, start, stop)
                return frames
            raw = bytes(buf[start:stop])
            lines = raw[content - start :]
            first_end = lines.find(b"\n")
            if (
                first_end > 0
                and lines[first_end - 1] != _CR
                and lines.find(b"\r", 0, first_end) < 0
            ):
                newline = b"\n"
            else:
                match = _EOL.search(lines)
                newline = b"\n" if match is None else match.group()
            frames.append(_frame(raw, lines.splitlines(), newline, complete=True))
            start = content = scan = stop
        if end - start > max_size:
            self._fail(buf, start, end)
            return frames
        if start:
            del buf[:start]
        self._content = content - start
        self._scan = scan - start
        return frames

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _fail(self, buf: bytearray, start: int, stop: int) -> None:
        """Record the size error and drop the buffer; nothing after it is framed."""
        longest_line = max((len(line) for line in bytes(buf[start:stop]).splitlines()), default=0)
        if longest_line > self.max_size:
            message = f"SSE line longer than max_size ({self.max_size} bytes)"
        else:
            message = f"SSE event longer than max_size ({self.max_size} bytes)"
        self._error = FramingError(message)
        self._buf = bytearray()


def _cut_uniform(data: bytes, start: int, nl: bytes, max_size: int, frames: list[Frame]) -> int:
    """Append the complete frames of ``data[start:]`` to ``frames``; return where the
    rest begins.

    A frame starts at ``start``, past the start of the body, and every line ending in
    ``data`` is ``nl`` (b"\\n", or b"\\r\\n" with no lone CR or LF), so a frame ends at
    the first ``nl + nl`` after a non-empty first line, and no CR can be the first half
    of a CRLF still to come. Gives the same frames as :meth:`SseFramer._process`; a
    frame over ``max_size`` and the unterminated rest are left to it.
    """
    append = frames.append
    find = data.find
    end = len(data)
    width = len(nl)
    two = 2 * width
    blank = nl + nl
    while start < end:
        first = find(nl, start)
        if first < 0:
            break
        if first == start:
            # An empty first line: a stray blank line, a frame of its own.
            if width > max_size:
                break
            stop = start + width
            append(Frame(data[start:stop], None, None, None, None, (), nl, True))
        elif data.startswith(nl, first + width):
            stop = first + two  # one line, then the blank line
            if stop - start > max_size:
                break
            raw = data if stop - start == end else data[start:stop]
            if data.startswith(b"data: ", start):
                value = data[start + 6 : first].decode("utf-8", "replace")
                append(Frame(raw, value, None, None, None, (), nl, True))
            else:
                append(_frame(raw, raw.splitlines(), nl, complete=True))
        else:
            hit = find(blank, first)
            if hit < 0:
                break
            stop = hit + two
            if stop - start > max_size:
                break
            raw = data if stop - start == end else data[start:stop]
            second = first + width
            if (
                hit == find(nl, second)  # two lines, then the blank line
                and data.startswith(b"event: ", start)
                and data.startswith(b"data: ", second)
            ):
                value = data[second + 6 : hit].decode("utf-8", "replace")
                name = data[start + 7 : first].decode("utf-8", "replace")
                append(Frame(raw, value, name, None, None, (), nl, True))
            else:
                append(_frame(raw, raw.splitlines(), nl, complete=True))
        start = stop
    return start


def parse_sse_block(raw: bytes) -> Frame:
    """The frame of one SSE block given whole (bytes a fault built: an injected event, a
    comment, a provider's error event), parsed by the framer's own field rules.

    A leading BOM is skipped for parsing; every line of ``raw`` counts, as if it were one
    block. ``newline`` is the first line's terminator (b"" when there is none), and the
    block is ``complete`` when it ends with its blank line.
    """
    content = raw[len(_BOM) :] if raw.startswith(_BOM) else raw
    lines = content.splitlines()
    match = _EOL.search(content)
    newline = b"" if match is None else match.group()
    # splitlines() gives a last empty line only for a terminated one: the blank line.
    return _frame(raw, lines, newline, complete=len(lines) >= 2 and not lines[-1])


def _frame(raw: bytes, lines: list[bytes], newline: bytes, *, complete: bool) -> Frame:
    """A frame with the fields of its lines (WHATWG field rules), decoded."""
    # Fast paths: the usual event is one "data: ..." line (plus the blank line), or an
    # "event: ..." line and a "data: ..." line (Anthropic, OpenAI Responses).
    count = len(lines)
    if count <= 2 and lines and (count == 1 or not lines[1]):
        line = lines[0]
        if line.startswith(b"data: "):
            data = line[6:].decode("utf-8", "replace")
            return Frame(raw, data, None, None, None, (), newline, complete)
    elif (
        ((count == 3 and not lines[2]) or count == 2)
        and lines[0].startswith(b"event: ")
        and lines[1].startswith(b"data: ")
    ):
        return Frame(
            raw,
            lines[1][6:].decode("utf-8", "replace"),
            lines[0][7:].decode("utf-8", "replace"),
            None,
            None,
            (),
            newline,
            complete,
        )
    data_lines: list[bytes] | None = None
    event: bytes | None = None
    id_: bytes | None = None
    retry: int | None = None
    comments: list[bytes] = []
    for line in lines:
        colon = line.find(b":")
        if colon == 0:
            comments.append(line[1:])
            continue
        if colon < 0:
            if not line:
                continue  # the blank line that ends the block
            name, value = line, b""
        else:
            name = line[:colon]
            value = line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
        if name == b"data":
            if data_lines is None:
                data_lines = [value]
            else:
                data_lines.append(value)
        elif name == b"event":
            event = value
        elif name == b"id":
            if b"\0" not in value:
                id_ = value
        elif name == b"retry" and value.isdigit():  # bytes.isdigit(): ASCII digits only
            # More digits than int() accepts: ignored like any other unusable retry.
            with contextlib.suppress(ValueError):
                retry = int(value)
    return Frame(
        raw=raw,
        data=None if data_lines is None else b"\n".join(data_lines).decode("utf-8", "replace"),
        event=None if event is None else event.decode("utf-8", "replace"),
        id=None if id_ is None else id_.decode("utf-8", "replace"),
        retry=retry,
        comments=tuple(comment.decode("utf-8", "replace") for comment in comments)
        if comments
        else (),
        newline=newline,
        complete=complete,
    )
