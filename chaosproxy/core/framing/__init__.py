"""Incremental framers: bytes in, frames out, exactly as h11 turns bytes into events.

Every framer has the same two-call surface::

    frames = framer.feed(chunk)   # zero or more complete frames
    frames = framer.eof()         # whatever is left, as unterminated frames

Joining ``frame.raw`` of everything returned gives back the input byte for byte,
whatever the chunking. A line or event longer than ``max_size`` raises
:class:`FramingError`, so a hostile upstream cannot make the proxy buffer without bound.
"""

from __future__ import annotations

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing.base import DEFAULT_MAX_SIZE, BodyRead, Framer, FramingError


def make_framer(fmt: Format, max_size: int = DEFAULT_MAX_SIZE) -> Framer:
    """A new framer for one body."""
    from chaosproxy.core.framing.eventstream import EventStreamFramer
    from chaosproxy.core.framing.ndjson import NdjsonFramer
    from chaosproxy.core.framing.raw import RawFramer
    from chaosproxy.core.framing.sse import SseFramer

    if fmt == "sse":
        return SseFramer(max_size)
    if fmt == "ndjson":
        return NdjsonFramer(max_size)
    if fmt == "eventstream":
        return EventStreamFramer(max_size)
    return RawFramer()


def parse_block(raw: bytes, fmt: Format) -> Frame:
    """The parsed view of bytes made outside a body (an injected event, a comment), by
    the framer of ``fmt``'s own rules: SSE reads every line of ``raw`` as one block; an
    event stream, one message; NDJSON (and raw) reads it as one line, the data without
    its final terminator."""
    if fmt == "sse":
        from chaosproxy.core.framing.sse import parse_sse_block

        return parse_sse_block(raw)
    if fmt == "eventstream":
        from chaosproxy.core.framing.eventstream import parse_message

        return parse_message(raw)
    from chaosproxy.core.framing.ndjson import parse_line

    return parse_line(raw)


__all__ = ["DEFAULT_MAX_SIZE", "BodyRead", "Framer", "FramingError", "make_framer", "parse_block"]
