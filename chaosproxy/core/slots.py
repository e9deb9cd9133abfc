"""Where each provider keeps the content of an event, for the faults that rewrite it
(``resegment``, ``snapshot``, ``split_tool_args``, ``interleave_tool_calls``): the JSON
path of a text delta's string and of a tool-call fragment's, the channel or call each
belongs to, the role of an event in a tool call (it opens, fills or closes one), the
stream's sequence numbers, and how to make new events of the same shape. Each provider
declares its own (``slots`` of its profile: a
:class:`~chaosproxy.core.providers.base.ProviderSlots`, whose base and :class:`Slot` are
there); this module reads them from the registry and makes the new events.

Only what a provider's format can carry is offered: Gemini and Ollama send every tool
call whole, so they have no tool fragments (:attr:`ProviderSlots.fragments` is False);
``generic`` knows no content at all (no ``slots``). An event is rewritten
only when it is plain: a text delta with exactly one text string (a chunk with several
choices, candidates or parts is left as it came), a tool fragment of exactly one call.

Every new event is the template event with its string (and sequence number) replaced
in place (:mod:`chaosproxy.core.jsonspan`): its other bytes are the upstream's.
"""

from __future__ import annotations

from typing import Any

import orjson

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import parse_block
from chaosproxy.core.framing.encode import field_name, replace_data, split_bom, split_lines
from chaosproxy.core.jsonspan import (
    Path,
    SpanError,
    encode_string,
    escapes_non_ascii,
    replace_many,
    span,
)
from chaosproxy.core.providers import declared
from chaosproxy.core.providers.base import CallRole, ProviderSlots, Slot


def _get(payload: Any, path: Path) -> Any:
    node = payload
    for step in path:
        if isinstance(step, str):
            if not isinstance(node, dict) or step not in node:
                return None
            node = node[step]
        else:
            if not isinstance(node, list) or not 0 <= step < len(node):
                return None
            node = node[step]
    return node


def fragments_problem(provider: str) -> str | None:
    """Why ``provider``'s tool calls have no argument fragments to cut or interleave,
    or None when they have."""
    slots = slots_for(provider)
    if slots is None:
        return f"a {provider} stream's tool calls are unknown: there are no argument fragments"
    if not slots.fragments:
        return f"{provider} sends each tool call whole: there are no argument fragments"
    return None


def text_problem(provider: str) -> str | None:
    """Why ``provider``'s text cannot be rewritten, or None when it can."""
    if slots_for(provider) is not None:
        return None
    return f"a {provider} stream's text is unknown: there are no text deltas to rewrite"


def slots_for(provider: str) -> ProviderSlots | None:
    """The content slots ``provider`` declares (None for ``generic`` and unknown ones)."""
    try:
        return declared(provider).slots
    except KeyError:
        return None


# --------------------------------------------------------------------------- new events


def string_style(frame: Frame, slot: Slot) -> bool | None:
    """Whether the event writes characters beyond ASCII escaped in its string (None:
    the string has none to tell by)."""
    data = frame.data or ""
    try:
        start, end = span(data, slot.path)
    except SpanError:
        return None
    return escapes_non_ascii(data[start:end])


def rebuild(
    frame: Frame,
    fmt: Format,
    edits: list[tuple[Path, str]],
    *,
    payload: Any = None,
    keep_id: bool = True,
) -> Frame:
    """A new event: ``frame`` with the JSON values at the edits' paths replaced (each
    a JSON text), from its own data, or from ``payload`` (a changed copy of its parsed
    data, written compactly) when given. ``keep_id=False`` leaves out its SSE ``id:``
    lines (a piece of an event that is not its last: a client that resumes from the
    id must have had all of it)."""
    data = (frame.data or "") if payload is None else orjson.dumps(payload).decode()
    new = replace_many(data, edits) if edits else data
    out = replace_data(frame, fmt, new.encode("utf-8"))
    if not keep_id and out.id is not None and fmt == "sse":
        out = _without_id(out, fmt)
    return out


def _without_id(frame: Frame, fmt: Format) -> Frame:
    bom, body = split_bom(frame.raw)
    kept = [c + t for c, t in split_lines(body) if field_name(c) != b"id"]
    return parse_block(bom + b"".join(kept), fmt)


def string_json(value: str, escaped: bool | None) -> str:
    """``value`` as a JSON string in the stream's style (raw unless it escapes)."""
    return encode_string(value, escape_non_ascii=bool(escaped))


def number_at(frame: Frame, path: Path) -> int | None:
    """The integer at ``path`` in the event's JSON, else None."""
    value = _get(frame.json(), path)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = [
    "CallRole",
    "ProviderSlots",
    "Slot",
    "fragments_problem",
    "number_at",
    "rebuild",
    "slots_for",
    "string_json",
    "string_style",
    "text_problem",
]
