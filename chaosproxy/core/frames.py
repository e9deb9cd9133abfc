"""Frames: the units a framer cuts an upstream body into."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Format = Literal["sse", "ndjson", "eventstream", "raw"]

_UNPARSED: Any = object()


# Not ``frozen=True``: a frozen dataclass sets every field through
# ``object.__setattr__`` (about 4 us per frame, once per upstream event). Frames are
# immutable by convention (nothing assigns to one; faults build a new frame), and
# ``unsafe_hash`` keeps the hash a frozen dataclass had. ``init=False`` and an
# ``__init__`` of our own: the one ``@dataclass`` generates is Python that mypyc does
# not compile (an interpreted call per frame, 1.4k instructions); this one is compiled.
@dataclass(slots=True, unsafe_hash=True, init=False)
class Frame:
    """One SSE event block, one NDJSON line, one event stream message, or one raw read.

    ``raw`` holds the exact bytes as they arrived, so joining the frames of a body
    gives the body back byte for byte. The other fields are the parsed view.
    Treat a frame as immutable: build a new one instead of assigning to a field.
    """

    raw: bytes
    #: SSE: the data lines joined with "\\n" (None when the block has no data field,
    #: e.g. a keepalive comment). NDJSON: the line without its terminator (None for a
    #: blank line). Event stream: the payload ("" when empty). Raw: None.
    data: str | None = None
    #: SSE ``event:`` field, if any. Event stream: the message's name (its
    #: ``:event-type``, ``:exception-type`` or ``:error-code`` header).
    event: str | None = None
    #: SSE ``id:`` field, if any ("" when the block resets it).
    id: str | None = None
    #: SSE ``retry:`` field, if it was all ASCII digits.
    retry: int | None = None
    #: SSE comment lines (without the leading colon).
    comments: tuple[str, ...] = ()
    #: The line terminator this frame uses (b"\\n", b"\\r\\n" or b"\\r"); b"" if none.
    newline: bytes = b"\n"
    #: False for an unterminated final event that was flushed at end of body.
    complete: bool = True
    _json: Any = field(default=_UNPARSED, compare=False, repr=False)
    #: What the stream's provider profile reads in this event (an ``EventContent``), cached by
    #: :mod:`chaosproxy.core.integrity` so both sides read an event once.
    piece: Any = field(default=None, compare=False, repr=False)

    def __init__(
        self,
        raw: bytes,
        data: str | None = None,
        event: str | None = None,
        id: str | None = None,
        retry: int | None = None,
        comments: tuple[str, ...] = (),
        newline: bytes = b"\n",
        complete: bool = True,
        _json: Any = _UNPARSED,
        piece: Any = None,
    ) -> None:
        # (``_json`` and ``piece`` too: ``dataclasses.replace`` passes them on)
        self.raw = raw
        self.data = data
        self.event = event
        self.id = id
        self.retry = retry
        self.comments = comments
        self.newline = newline
        self.complete = complete
        self._json = _json
        self.piece = piece

    @property
    def is_event(self) -> bool:
        """True when the frame is a logical event (SSE: it has data; NDJSON: a line)."""
        return self.data is not None

    def json(self) -> Any:
        """The data parsed as JSON, or None when it is not JSON. Parsed once."""
        value = self._json
        if value is _UNPARSED:
            value = None
            if self.data:
                try:
                    value = orjson.loads(self.data)
                except orjson.JSONDecodeError:
                    value = None
            self._json = value
        return value

    @property
    def type(self) -> str | None:
        """The SSE ``event:`` name, else the JSON payload's ``type`` field."""
        if self.event:
            return self.event
        payload = self.json()
        if isinstance(payload, dict):
            t = payload.get("type")
            if isinstance(t, str):
                return t
        return None


def format_for_content_type(content_type: str | None) -> Format:
    """The framing a response body needs, from its Content-Type."""
    if not content_type:
        return "raw"
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime == "text/event-stream":
        return "sse"
    if mime in {
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/stream+json",
    }:
        return "ndjson"
    if mime == "application/vnd.amazon.eventstream":
        return "eventstream"
    return "raw"
