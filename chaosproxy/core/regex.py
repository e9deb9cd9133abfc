"""The ``match`` selector's regular expressions: Python's ``re`` syntax and meaning,
searched in linear time (docs/scenarios.md, Selectors).

A ``match`` runs on upstream text, which a user's prompt can steer: with Python's
backtracking engine, ``(a+)+$`` on 23 characters held every stream for more than a
second. Here an expression is parsed by Python's own parser (so what is accepted means
what Python says), then written out for RE2 (``google-re2``), whose search time is
linear in the text. What RE2 cannot match in linear time is refused, with the reason:
backreferences, lookahead and lookbehind, atomic groups and possessive repeats, a Unicode
``\\b``/``\\B`` (``(?a)`` gives ASCII word boundaries, which RE2 has), a ``$`` with more
pattern after it (without ``(?m)``), repeat counts over 1000.

The meaning is kept exactly: every character class, ``\\d``/``\\w``/``\\s`` and every
case-insensitive letter becomes the explicit set of code points Python's ``re`` matches
(computed with ``re`` itself), so RE2's own Unicode tables and case folding never
decide; anchors and flags (``i``, ``m``, ``s``, ``x``, ``a``) are Python's. Only whether
the expression is found matters (``re.search``), not what it captured.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from functools import cache, lru_cache
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import re2

#: A compiled ``match``: whether the expression is found in a text.
Search = Callable[[str], bool]

#: RE2's largest repeat count.
MAX_REPEAT = 1000
#: Where to read the syntax that is accepted.
SEE = "match takes Python's re syntax without these (docs/scenarios.md, Selectors)"

_SURROGATES = (0xD800, 0xDFFF)
_NEVER = r"[^\x00-\x{10FFFF}]"
_CATEGORIES = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}


class RegexRefused(ValueError):
    """The expression is not valid, or cannot be searched in linear time (the message
    says which part, and why)."""


@lru_cache(maxsize=512)
def compile_search(pattern: str) -> Search:
    """The search function of ``pattern`` (cached: a scenario's selectors compile it
    once per request). Raises :class:`RegexRefused`."""
    try:
        re.compile(pattern)
        parsed = sre_parse.parse(pattern)
    except re.error as exc:
        raise RegexRefused(f"not a valid regular expression: {exc}") from None
    flags: int = parsed.state.flags
    items = list(parsed)
    if not flags & sre.SRE_FLAG_IGNORECASE and all(op == sre.LITERAL for op, _ in items):
        needle = "".join(chr(c) for _, c in items)
        return lambda text: needle in text  # a plain string: linear as well
    try:
        translated = _Writer().sequence(items, flags, tail=True)
    finally:
        _all_text.cache_clear()  # 4.4 MB, needed while classes are written out
    options = re2.Options()
    options.log_errors = False
    options.never_capture = True
    try:
        compiled = re2.compile(translated, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise RegexRefused(f"too large to search in linear time ({reason})") from None
    search = compiled.search

    def found(text: str) -> bool:
        try:
            return search(text) is not None
        except UnicodeEncodeError:  # a lone surrogate: never in framed (decoded) data
            return search(text.encode("utf-8", "replace").decode()) is not None

    return found


class _Writer:
    """Python's parse tree of an expression, written in RE2's syntax."""

    def sequence(self, items: list[tuple[Any, Any]], flags: int, *, tail: bool) -> str:
        last = len(items) - 1
        return "".join(
            self.item(op, av, flags, tail=tail and i == last) for i, (op, av) in enumerate(items)
        )

    def item(self, op: Any, av: Any, flags: int, *, tail: bool) -> str:
        if op == sre.LITERAL:
            if flags & sre.SRE_FLAG_IGNORECASE:
                return _charset(_source_of_literal(av), _class_flags(flags))
            return _char(av)
        if op == sre.NOT_LITERAL:
            return _charset("[^" + _escape(av) + "]", _class_flags(flags))
        if op == sre.IN:
            return _charset(_source_of_class(av), _class_flags(flags))
        if op == sre.ANY:
            return r"(?s:.)" if flags & sre.SRE_FLAG_DOTALL else r"(?-s:.)"
        if op == sre.BRANCH:
            return "(?:" + "|".join(self.sequence(list(b), flags, tail=tail) for b in av[1]) + ")"
        if op == sre.SUBPATTERN:
            _group, add, remove, inner = av
            return "(?:" + self.sequence(list(inner), (flags | add) & ~remove, tail=tail) + ")"
        if op == sre.MAX_REPEAT or op == sre.MIN_REPEAT:
            low, high, inner = av
            unbounded = high == sre.MAXREPEAT
            if low > MAX_REPEAT or (not unbounded and high > MAX_REPEAT):
                raise RegexRefused(
                    f"repeat counts over {MAX_REPEAT} ({{{max(low, 0 if unbounded else high)}}}) "
                    f"cannot be searched in linear time; {SEE}"
                )
            body = "(?:" + self.sequence(list(inner), flags, tail=tail and high == 1) + ")"
            if unbounded:
                count = {0: "*", 1: "+"}.get(low, f"{{{low},}}")
            elif (low, high) == (0, 1):
                count = "?"
            else:
                count = f"{{{low}}}" if low == high else f"{{{low},{high}}}"
            return body + count + ("?" if op == sre.MIN_REPEAT else "")
        if op == sre.AT:
            return self.at(av, flags, tail=tail)
        raise RegexRefused(_refusal(op))

    def at(self, code: Any, flags: int, *, tail: bool) -> str:
        multiline = flags & sre.SRE_FLAG_MULTILINE
        if code == sre.AT_BEGINNING:
            return "(?m:^)" if multiline else r"\A"
        if code == sre.AT_BEGINNING_STRING:
            return r"\A"
        if code == sre.AT_END_STRING:
            return r"\z"
        if code == sre.AT_END:
            if multiline:
                return "(?m:$)"
            if tail:  # Python's $: the end, or before a newline that ends the text
                return r"(?:\n?\z)"
            raise RegexRefused(
                "$ followed by more of the expression cannot be searched in linear time; "
                r"use \Z for the very end, or (?m) for the end of any line"
            )
        if code == sre.AT_BOUNDARY or code == sre.AT_NON_BOUNDARY:
            if flags & sre.SRE_FLAG_ASCII:
                return r"\b" if code == sre.AT_BOUNDARY else r"\B"
            raise RegexRefused(
                r"\b and \B with Python's Unicode word characters cannot be searched in "
                r"linear time; add (?a) at the start for ASCII word boundaries"
            )
        raise RegexRefused(_refusal(code))  # pragma: no cover - the parser makes no other


def _refusal(op: Any) -> str:
    what = {
        sre.GROUPREF: r"backreferences (\1, (?P=name))",
        sre.GROUPREF_EXISTS: "conditional groups ((?(1)...|...))",
        sre.ASSERT: "lookahead and lookbehind ((?=...), (?<=...))",
        sre.ASSERT_NOT: "negative lookahead and lookbehind ((?!...), (?<!...))",
        sre.ATOMIC_GROUP: "atomic groups ((?>...))",
        sre.POSSESSIVE_REPEAT: "possessive repeats (*+, ++, ?+, {m,n}+)",
    }.get(op, f"{op}")
    return f"{what} cannot be searched in linear time; {SEE}"


def _class_flags(flags: int) -> str:
    """The inline flags that change which characters a class or letter matches."""
    return ("i" if flags & sre.SRE_FLAG_IGNORECASE else "") + (
        "a" if flags & sre.SRE_FLAG_ASCII else ""
    )


def _escape(code: int) -> str:
    return re.escape(chr(code))


def _source_of_literal(code: int) -> str:
    return "[" + _escape(code) + "]"


def _source_of_class(items: list[tuple[Any, Any]]) -> str:
    parts = []
    for op, av in items:
        if op == sre.NEGATE:
            parts.append("^")
        elif op == sre.LITERAL:
            parts.append(_escape(av))
        elif op == sre.RANGE:
            parts.append(_escape(av[0]) + "-" + _escape(av[1]))
        elif op == sre.CATEGORY:
            parts.append(_CATEGORIES[av])
        else:  # pragma: no cover - the parser puts nothing else in a class
            raise RegexRefused(f"{op} in a character class is not supported")
    return "[" + "".join(parts) + "]"


def _char(code: int) -> str:
    if _SURROGATES[0] <= code <= _SURROGATES[1]:
        return _NEVER  # never in decoded text
    if chr(code).isascii() and chr(code).isalnum():
        return chr(code)
    return rf"\x{{{code:X}}}"


@cache
def _charset(source: str, flags: str) -> str:
    """An RE2 class of exactly the code points Python's ``re`` matches with ``source``
    (one class, or one letter's case) under ``flags``."""
    ranges = [
        (m.start(), m.end() - 1)
        for m in re.finditer(f"(?{flags}:{source})+" if flags else f"{source}+", _all_text())
    ]
    if not ranges:
        return _NEVER
    spans = []
    for start, end in ranges:
        low, high = _code(start), _code(end)
        if low < _SURROGATES[0] < high:  # a run across the gap: two ranges
            spans.append(_span(low, _SURROGATES[0] - 1))
            low = _SURROGATES[1] + 1
        spans.append(_span(low, high))
    return "[" + "".join(spans) + "]"


def _span(low: int, high: int) -> str:
    return rf"\x{{{low:X}}}" if low == high else rf"\x{{{low:X}}}-\x{{{high:X}}}"


def _code(index: int) -> int:
    """The code point at ``index`` of :func:`_all_text` (which skips the surrogates)."""
    return index if index < _SURROGATES[0] else index + (_SURROGATES[1] - _SURROGATES[0] + 1)


@lru_cache(maxsize=1)
def _all_text() -> str:
    """Every code point but the surrogates, in order (4.4 MB: made for one compile)."""
    codes = array("I", range(_SURROGATES[0]))
    codes.extend(range(_SURROGATES[1] + 1, 0x110000))
    return codes.tobytes().decode("utf-32-le" if array("I", [1]).tobytes()[0] else "utf-32-be")


__all__ = ["RegexRefused", "Search", "compile_search"]
