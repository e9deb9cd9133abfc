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

_SHARED = {s: s for s in (OTHER, START, DELTA, TOOL_DELTA, USAGE, PING, ERROR, TERMINAL)}


def mask_table(*names: str) -> tuple[frozenset[str], ...]:
    """Every combination of ``names`` as a kind set, indexed by bit mask (bit ``i`` is
    ``names[i]``); the empty one is ``OTHER``, single kinds are the shared sets above.

    Lets a profile collect kinds as bits and return a shared frozenset per event.
    """
    table = []
    for mask in range(1 << len(names)):
        kinds = frozenset(n for i, n in enumerate(names) if mask >> i & 1) or OTHER
        table.append(_SHARED.get(kinds, kinds))
    return tuple(table)


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
