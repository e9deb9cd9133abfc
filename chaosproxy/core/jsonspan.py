"""Surgery on JSON text: find the exact characters of one value, and put another in
their place, leaving every other character as it was (its spacing, its key order, how
it escaped its other strings).

The content faults (``resegment``, ``split_tool_args``, ``snapshot``, …) change one
string of an event (its text, its arguments fragment) and sometimes one number (a
``sequence_number``); writing the event back from a parsed object would respace it and
re-escape every other string, so a rewritten capture would differ from the original in
bytes nobody meant to change.

A *path* is a tuple of object keys and array indexes, as :func:`span` follows it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

Path = tuple[str | int, ...]

_WS = " \t\n\r"
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_STRING_END = re.compile(r'["\\]')
#: A \u escape of a character beyond ASCII (what an escaping encoder writes for it).
_ESCAPED_NON_ASCII = re.compile(
    r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})"
)


class SpanError(ValueError):
    """The text is not JSON, or the path leads nowhere in it."""


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    """``text[i]`` is an opening quote: the index just after the closing one."""
    j = i + 1
    while True:
        m = _STRING_END.search(text, j)
        if m is None:
            raise SpanError("unterminated string")
        if m.group() == '"':
            return m.end()
        j = m.end() + 1  # a backslash and the character it escapes


def _value_end(text: str, i: int) -> int:
    """The index just after the JSON value that starts at ``i`` (no leading blanks)."""
    if i >= len(text):
        raise SpanError("a value is missing")
    c = text[i]
    if c == '"':
        return _string_end(text, i)
    if c in "{[":
        close = "}" if c == "{" else "]"
        j = _skip_ws(text, i + 1)
        if j < len(text) and text[j] == close:
            return j + 1
        while True:
            if c == "{":
                if j >= len(text) or text[j] != '"':
                    raise SpanError("an object key is missing")
                j = _skip_ws(text, _string_end(text, j))
                if j >= len(text) or text[j] != ":":
                    raise SpanError("a colon is missing")
                j = _skip_ws(text, j + 1)
            j = _skip_ws(text, _value_end(text, j))
            if j < len(text) and text[j] == ",":
                j = _skip_ws(text, j + 1)
                continue
            if j < len(text) and text[j] == close:
                return j + 1
            raise SpanError(f"expected ',' or {close!r}")
    m = _NUMBER.match(text, i)
    if m:
        return m.end()
    for word in ("true", "false", "null"):
        if text.startswith(word, i):
            return i + len(word)
    raise SpanError(f"unexpected {c!r}")


def span(text: str, path: Path) -> tuple[int, int]:
    """``(start, end)`` of the value at ``path`` in the JSON ``text``; SpanError when
    the text is not JSON along the way or the path leads nowhere. Duplicate keys: the
    last one (as a JSON parser reads it)."""
    i = _skip_ws(text, 0)
    for step in path:
        if i >= len(text):
            raise SpanError("the text ends early")
        c = text[i]
        if isinstance(step, str):
            if c != "{":
                raise SpanError(f"{step!r}: not an object")
            found: int | None = None
            j = _skip_ws(text, i + 1)
            if j < len(text) and text[j] == "}":
                raise SpanError(f"no key {step!r}")
            while True:
                if j >= len(text) or text[j] != '"':
                    raise SpanError("an object key is missing")
                key_end = _string_end(text, j)
                key = json.loads(text[j:key_end])
                j = _skip_ws(text, key_end)
                if j >= len(text) or text[j] != ":":
                    raise SpanError("a colon is missing")
                j = _skip_ws(text, j + 1)
                if key == step:
                    found = j
                j = _skip_ws(text, _value_end(text, j))
                if j < len(text) and text[j] == ",":
                    j = _skip_ws(text, j + 1)
                    continue
                if j < len(text) and text[j] == "}":
                    break
                raise SpanError("expected ',' or '}'")
            if found is None:
                raise SpanError(f"no key {step!r}")
            i = found
        else:
            if c != "[":
                raise SpanError(f"[{step}]: not an array")
            j = _skip_ws(text, i + 1)
            index = 0
            if j < len(text) and text[j] == "]":
                raise SpanError(f"[{step}]: out of range")
            while index < step:
                j = _skip_ws(text, _value_end(text, j))
                if j < len(text) and text[j] == ",":
                    j = _skip_ws(text, j + 1)
                    index += 1
                    continue
                raise SpanError(f"[{step}]: out of range")
            i = j
    return i, _value_end(text, i)


def replace_at(text: str, path: Path, value: str) -> str:
    """``text`` with the value at ``path`` replaced by ``value`` (JSON text)."""
    start, end = span(text, path)
    return text[:start] + value + text[end:]


def replace_many(text: str, edits: Sequence[tuple[Path, str]]) -> str:
    """``text`` with each path's value replaced (the paths must not overlap)."""
    spans = sorted(((*span(text, path), value) for path, value in edits), reverse=True)
    for start, end, value in spans:
        text = text[:start] + value + text[end:]
    return text


def escapes_non_ascii(token: str) -> bool | None:
    """How the JSON string ``token`` (quotes included) writes characters beyond ASCII:
    True escaped (``\\u00e9``, what ``json.dumps`` does by default), False raw (UTF-8 on
    the wire, what the captured providers do), None when it has none to tell by."""
    if any(ord(c) > 0x7F for c in token):
        return False
    if _ESCAPED_NON_ASCII.search(token):
        return True
    return None


def encode_string(value: str, *, escape_non_ascii: bool = False) -> str:
    """``value`` as a JSON string: quotes, backslashes and control characters escaped,
    the rest raw, or (``escape_non_ascii``) every character beyond ASCII as ``\\uXXXX``,
    those beyond the BMP as a surrogate pair (``\\ud83d\\ude00``), as an escaping
    encoder writes them: the two halves always together."""
    return json.dumps(value, ensure_ascii=escape_non_ascii)


__all__ = [
    "Path",
    "SpanError",
    "encode_string",
    "escapes_non_ascii",
    "replace_at",
    "replace_many",
    "span",
]
