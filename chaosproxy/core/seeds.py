"""What a seed may be, wherever one is given: ``--seed`` (and ``CHAOSPROXY_SEED``,
``simulate --seed``, ``matrix --seed``), ``X-Chaos-Seed``, a scenario's ``seed:``.

One range for all of them, and one way to read a seed's text: digits only, checked by
length before Python converts them (Python refuses, with its own message, to convert
more than 4300 digits; a seed of thousands of digits must get our answer instead).
"""

from __future__ import annotations

#: Largest accepted seed (fits a signed 64-bit integer, so every JSON encoder takes it).
MAX_SEED = 2**63 - 1
#: The allowed range, as every message about a seed says it.
SEED_RANGE = f"an integer from 0 to {MAX_SEED}"
#: The same for a seed given as text (a flag, a variable, a header): digits only.
SEED_TEXT = f"a decimal integer from 0 to {MAX_SEED}"

_DIGITS = len(str(MAX_SEED))
#: How much of a refused value a message shows.
_SHOWN = 24


class SeedError(ValueError):
    """A seed's text is not a seed; the message is one line and says the range."""


def parse_seed_text(text: str) -> int:
    """The seed written as ``text``: ASCII decimal digits (leading zeros allowed), at most
    :data:`MAX_SEED`. Raises :class:`SeedError` naming the range, never Python's own
    conversion message."""
    digits = text.lstrip("0")
    if not (text.isascii() and text.isdigit()) or len(digits) > _DIGITS:
        raise SeedError(f"must be {SEED_TEXT}, got {shown(text)}")
    value = int(digits or "0")
    if value > MAX_SEED:
        raise SeedError(f"must be {SEED_TEXT}, got {shown(text)}")
    return value


def shown(text: str) -> str:
    """``text`` as a message may quote it: short, with its length when cut."""
    if len(text) <= _SHOWN:
        return repr(text)
    return f"{text[:_SHOWN]!r}… ({len(text)} characters)"


__all__ = ["MAX_SEED", "SEED_RANGE", "SEED_TEXT", "SeedError", "parse_seed_text", "shown"]
