"""Where a text may be cut into deltas, by the rules of ``resegment``'s ``at:`` modes.

Every function returns the pieces of its text, in order, whose concatenation is the text
again (``"".join(pieces) == text``): a piece is a run of whole code points, so each is a
valid JSON string in any language and a Python client that concatenates them gets the
text back exactly. Grapheme clusters and words are Unicode's (UAX #29, extended grapheme
clusters and default word boundaries), as the ``regex`` module finds them.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

_GRAPHEME = regex.compile(r"\X")
_WORD_BOUNDARY = regex.compile(r"(?V1w)\b")


def split_at(text: str, cuts: Iterable[int]) -> list[str]:
    """``text`` cut at each offset of ``cuts`` (ignored outside ``1 … len - 1``)."""
    pieces: list[str] = []
    start = 0
    for cut in sorted(set(cuts)):
        if 0 < cut < len(text) and cut > start:
            pieces.append(text[start:cut])
            start = cut
    pieces.append(text[start:])
    return pieces


def graphemes(text: str) -> list[str]:
    """The extended grapheme clusters of ``text``."""
    found: list[str] = _GRAPHEME.findall(text)
    return found


def inside_graphemes(text: str) -> list[str]:
    """A cut inside every grapheme cluster of more than one code point, right after its
    first one: an emoji and its skin tone, the joiners of a family, a letter and its
    combining accent, the two regional indicators of a flag, CR and LF."""
    return split_at(text, (m.start() + 1 for m in _GRAPHEME.finditer(text) if len(m[0]) > 1))


def codepoints(text: str) -> list[str]:
    """One piece per code point."""
    return list(text)


def utf8_bytes(text: str) -> list[str]:
    """One piece per byte of ``text``'s UTF-8 encoding, each carrying what that byte
    completes: a character of ``k`` bytes comes after ``k - 1`` empty pieces, as a
    provider whose tokens end inside characters sends them (it cannot put part of a
    character in a JSON string, so it holds the bytes back until the character is whole)."""
    pieces: list[str] = []
    for char in text:
        pieces.extend([""] * (len(char.encode("utf-8", "surrogatepass")) - 1))
        pieces.append(char)
    return pieces or [""]


def words(text: str) -> list[str]:
    """A cut at every word boundary: each word, each run of spaces and each punctuation
    mark a piece of its own (a CJK ideograph is a word)."""
    return split_at(text, (m.start() for m in _WORD_BOUNDARY.finditer(text)))


def every(text: str, n: int) -> list[str]:
    """Pieces of ``n`` code points from the start (the last may be shorter)."""
    return [text[i : i + n] for i in range(0, len(text), n)] or [""]


def parts(text: str, n: int) -> list[int]:
    """The ``n - 1`` offsets that cut ``text`` into ``n`` runs of grapheme clusters as
    even as they can be (the longer runs first); fewer when it has fewer clusters."""
    clusters = graphemes(text)
    n = min(n, len(clusters))
    offsets: list[int] = []
    at = 0
    taken = 0
    for i in range(1, n):
        upto = (len(clusters) * i + n - 1) // n
        at += sum(len(c) for c in clusters[taken:upto])
        taken = upto
        offsets.append(at)
    return offsets


__all__ = [
    "codepoints",
    "every",
    "graphemes",
    "inside_graphemes",
    "parts",
    "split_at",
    "utf8_bytes",
    "words",
]
