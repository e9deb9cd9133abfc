"""Building and re-encoding the bytes of SSE, NDJSON and event stream events (used by the
event faults).

The inverse of the framers: parsing stays in them (:func:`chaosproxy.core.framing.
parse_block` gives the parsed view of bytes built here). Every helper keeps what it does
not change: rewriting an event's data keeps its other lines (``event:``, ``id:``,
``retry:``, comments) in place, its line terminators, and a final event without its
blank line stays without it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing.eventstream import message_payload, with_payload

#: One line and its terminator (CRLF, CR or LF; empty for an unterminated last line).
_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|)")
_NEWLINES = re.compile(r"\r\n|\r|\n")

BOM = b"\xef\xbb\xbf"


def split_lines(raw: bytes) -> list[tuple[bytes, bytes]]:
    """``raw`` as (content, terminator) pairs; joining them gives ``raw`` back."""
    lines: list[tuple[bytes, bytes]] = []
    pos = 0
    end = len(raw)
    while pos < end:
        m = _LINE.match(raw, pos)
        assert m is not None  # the pattern matches the empty string
        lines.append((m.group(1), m.group(2)))
        pos = m.end()
    return lines


def field_name(line: bytes) -> bytes:
    """The SSE field a line sets (``b""`` for a comment or a blank line)."""
    if not line or line.startswith(b":"):
        return b""
    return line.split(b":", 1)[0]


def newline_of(frame: Frame) -> bytes:
    """The terminator to use for new lines next to ``frame`` (LF when it has none)."""
    return frame.newline or b"\n"


def ndjson_terminator(raw: bytes) -> bytes:
    """The line terminator an NDJSON frame ends with (``b""`` when unterminated; a lone
    CR is not a line break in NDJSON)."""
    if raw.endswith(b"\r\n"):
        return b"\r\n"
    if raw.endswith(b"\n"):
        return b"\n"
    return b""


def split_bom(raw: bytes) -> tuple[bytes, bytes]:
    """A leading UTF-8 BOM (the SSE framer keeps it in the first frame) and the rest."""
    if raw.startswith(BOM):
        return BOM, raw[len(BOM) :]
    return b"", raw


def data_bytes(frame: Frame, fmt: Format) -> bytes:
    """The exact bytes of an event's data (``frame.data`` is decoded with replacement
    characters, so it may differ from the wire for invalid UTF-8); an event stream
    message's payload."""
    if fmt == "eventstream":
        return message_payload(frame.raw)
    if fmt != "sse":
        return frame.raw[: len(frame.raw) - len(ndjson_terminator(frame.raw))]
    parts = []
    for content, _ in split_lines(split_bom(frame.raw)[1]):
        if field_name(content) == b"data":
            value = content[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts)


def _data_line(prefix: bytes, part: bytes, terminator: bytes) -> bytes:
    # "data:" + a value starting with a space would lose that space to the parser.
    sep = b" " if part and (prefix.endswith(b" ") or part.startswith(b" ")) else b""
    return b"data:" + sep + part + terminator


def replace_data(frame: Frame, fmt: Format, data: bytes) -> Frame:
    """``frame`` with its data replaced by ``data`` (bytes, which may be invalid UTF-8).

    SSE: all data lines go; the new value takes the place of the last one, split into
    one ``data:`` line per ``\\n``, keeping the original ``data:``/``data: `` spacing and
    terminators. NDJSON: the line is replaced, its terminator kept. Event stream: the
    payload is replaced, the headers kept, both lengths and CRCs made right.
    """
    text = data.decode("utf-8", "replace")
    if fmt == "eventstream":
        if not frame.complete:
            return frame
        return _like(frame, with_payload(frame.raw, data), text)
    if fmt != "sse":
        raw = data + ndjson_terminator(frame.raw)
        return _like(frame, raw, text)
    bom, body = split_bom(frame.raw)
    lines = split_lines(body)
    data_at = [i for i, (content, _) in enumerate(lines) if field_name(content) == b"data"]
    if not data_at:
        return frame
    last = data_at[-1]
    prefix = lines[data_at[0]][0][:6]  # b"data: " or b"data:x"
    nl = lines[data_at[0]][1] or newline_of(frame)
    parts = data.split(b"\n")
    new_lines = [
        _data_line(prefix, part, nl if i < len(parts) - 1 else lines[last][1])
        for i, part in enumerate(parts)
    ]
    out: list[bytes] = [bom]
    for i, (content, term) in enumerate(lines):
        if i == last:
            out.extend(new_lines)
        elif i not in data_at:
            out.append(content + term)
    return _like(frame, b"".join(out), text)


def prepend_lines(
    frame: Frame, lines: list[bytes], *, id: str | None = None, retry: int | None = None
) -> Frame:
    """``frame`` with SSE field lines (without terminators) added at its start; ``id``
    and ``retry`` update the parsed view when those lines set them."""
    nl = newline_of(frame)
    bom, body = split_bom(frame.raw)
    raw = bom + b"".join(line + nl for line in lines) + body
    return replace(
        frame,
        raw=raw,
        id=frame.id if id is None else id,
        retry=frame.retry if retry is None else retry,
    )


def _like(frame: Frame, raw: bytes, data: str | None) -> Frame:
    """A frame with new bytes and data, and the other parsed fields of ``frame``."""
    return Frame(
        raw=raw,
        data=data,
        event=frame.event,
        id=frame.id,
        retry=frame.retry,
        comments=frame.comments,
        newline=frame.newline,
        complete=frame.complete,
    )


def with_raw(frame: Frame, raw: bytes, *, newline: bytes | None = None) -> Frame:
    """``frame`` with other bytes but the same meaning (a BOM, other line endings)."""
    return replace(frame, raw=raw, newline=frame.newline if newline is None else newline)


# --------------------------------------------------------------------------- new events


def sse_event_bytes(
    data: str, *, event: str | None = None, id: str | None = None, newline: bytes = b"\n"
) -> bytes:
    """One complete SSE event: ``event:``, ``id:``, then one ``data:`` line per line."""
    lines: list[str] = []
    if event is not None:
        lines.append(f"event: {_one_line(event)}")
    if id is not None:
        lines.append(f"id: {_one_line(id)}")
    lines.extend(f"data: {part}" for part in _NEWLINES.split(data))
    nl = newline.decode("ascii")
    return ("".join(line + nl for line in lines) + nl).encode("utf-8")


def _one_line(value: str) -> str:
    return _NEWLINES.sub(" ", value)


def comment_bytes(text: str, newline: bytes = b"\n") -> bytes:
    """An SSE comment block (one ``:`` line per line of ``text``) and its blank line."""
    nl = newline.decode("ascii")
    lines = [f": {part}" if part else ":" for part in _NEWLINES.split(text)]
    return ("".join(line + nl for line in lines) + nl).encode("utf-8")
