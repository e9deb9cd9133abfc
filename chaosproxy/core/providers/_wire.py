"""Shared helpers for the provider profiles: kind sets and event encoders.

Kept apart from the profiles so each profile file stays a small table of rules.
"""

from __future__ import annotations

from chaosproxy.core.frames import Format, Frame

# Interned kind sets: classification runs per event, so return shared frozensets.
OTHER = frozenset({"other"})
START = frozenset({"start"})
DELTA = frozenset({"delta"})
TOOL_DELTA = frozenset({"tool_delta"})
USAGE = frozenset({"usage"})
PING = frozenset({"ping"})
ERROR = frozenset({"error"})
TERMINAL = frozenset({"terminal"})
ERROR_TERMINAL = frozenset({"error", "terminal"})

DONE_MARKER = "[DONE]"


def is_done_marker(frame: Frame) -> bool:
    """True for the universal SSE sentinel ``data: [DONE]`` (surrounding blanks allowed)."""
    data = frame.data
    if data is None:
        return False
    return data == DONE_MARKER or data.strip() == DONE_MARKER


def encode_event(
    fmt: Format,
    newline: bytes,
    body: bytes,
    *,
    event: str | None = None,
    native: Format = "sse",
) -> bytes:
    """One event carrying ``body`` as its data, framed for ``fmt``.

    ``sse`` gives an SSE block (``event:`` line when given, one ``data:`` line, blank
    line); ``ndjson`` gives ``body`` and one line terminator; ``raw`` (no framing known)
    uses the provider's ``native`` format. ``newline`` is the stream's own line
    terminator (b"" is read as b"\\n").
    """
    nl = newline or b"\n"
    if fmt == "raw":
        fmt = native
    if fmt == "ndjson":
        return body + nl
    head = b"event: " + event.encode() + nl if event else b""
    return head + b"data: " + body + nl + nl
