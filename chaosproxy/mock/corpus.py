"""The mock's fixed answer corpus and a small GPT-2-style pre-tokenizer.

Every answer carries multi-byte UTF-8 early on (an accented word or an emoji among its
4th to 8th tokens, some Japanese within 40), so that faults which split bytes
(``rechunk: {boundaries: hostile}``, ``cut: {position: mid_utf8, seek: true}``) always
have a character to split, even on short streams (``--mock-tokens 8``) and past a
provider's opening events (tests/e2e/test_library_providers.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from itertools import islice

ANSWERS: tuple[str, ...] = (
    "Great question! The café on the corner ☕ opens at seven, and the barista greets "
    "everyone with a cheerful こんにちは. Their croissants are flaky, buttery and best "
    "enjoyed warm, ideally with a window seat and nowhere to be.",
    "Here's a short summary 📝: a streaming response arrives token by token 🚀, so a client "
    "can render text as soon as it lands. In Japanese this is called ストリーミング. It "
    "feels naïve until a proxy splits a character in half.",
    "The résumé you shared reads well ✨. I would lead with your most recent role, keep "
    "each bullet under two lines, and close with a short skills section. 頑張って! You are "
    "closer than you think.",
    "Tokyo in spring is lovely 🌸: the cherry blossoms, or 桜, line the rivers for about a "
    "week. Pack a light jacket, comfortable shoes, and an appetite for crème brûlée from "
    "the convenience store.",
    "To brew a better cup of coffee ☕, start with freshly ground beans and water just off "
    "the boil. The Japanese pour-over method, ハンドドリップ, rewards patience. Voilà: a "
    "smoother, sweeter cup.",
    "Certainly! Here is a haïku about autumn 🍁: crisp leaves drift and fall, the old pond "
    "holds the moon's face, quiet, 静か. I hope it brings a little calm to your day. À "
    "bientôt!",
    "In short, the answer is 42 🤖. Douglas Adams chose it as a joke, and fans have "
    "celebrated it ever since; in Japanese it is read よんじゅうに. Not bad for a naïve "
    "little number.",
    "Here is a simple plan 📅 for the week: Monday for errands, Tuesday for deep work, and "
    "Wednesday for a long walk. On Friday, treat yourself to a café crème and some 抹茶 ice "
    "cream.",
    "Sure! Plants turn sunlight 🌞 into sugar by photosynthesis, releasing oxygen as a "
    "happy side effect. The Japanese word for it is 光合成, which literally means light "
    "combining. Quite the naïve-sounding miracle.",
    "Of course. A good README 📘 answers three questions: what is this, how do I run it, and "
    "where do I ask for help? Keep it short, like a well-made お弁当, and put the first "
    "command near the top. Déjà vu is fine here.",
    "Absolutely! Sourdough 🍞 needs only flour, water and salt, plus a lively starter and "
    "some patience. Bakers in Japan call the crumb 気泡, the little bubbles. Bon appétit "
    "when it comes out of the oven.",
    "Good thinking ⛰️. Before a long hike, check the forecast, tell someone your route, and "
    "pack more water than you expect to need. In Japan, trail signs read 登山道. Señor "
    "Caution is a fine hiking partner.",
)

#: Where the text of a new answer starts after the previous one runs out.
ANSWER_SEPARATOR = "\n\n"

# The GPT-2 pre-tokenizer pattern, with Python's closest equivalents of \p{L} and \p{N}:
# contractions, an optional space followed by letters, digits or punctuation, then spaces.
_PIECES = re.compile(
    r"'(?:s|t|re|ve|m|ll|d)(?![^\W\d_])"
    r"| ?[^\W\d_]+"
    r"| ?\d+"
    r"| ?(?:[^\s\w]|_)+"  # punctuation, the underscore included (it is \w, not a letter)
    r"|\s+(?!\S)"
    r"|\s+"
)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")
#: Letter runs longer than this are cut into word pieces, as a BPE vocabulary would.
_LONG_WORD = 7


def tokenize(text: str) -> list[str]:
    """Split ``text`` into word pieces with leading spaces, like a real tokenizer.

    ``"".join(tokenize(text)) == text`` always holds.
    """
    tokens: list[str] = []
    for piece in _PIECES.findall(text):
        tokens.extend(_split_piece(piece))
    return tokens


def _split_piece(piece: str) -> list[str]:
    word = piece.lstrip(" ")
    if _CJK.search(word):
        # Japanese is spelled out one or two characters per token.
        lead = piece[: len(piece) - len(word)]
        parts = [word[i : i + 2] for i in range(0, len(word), 2)]
        return [lead + parts[0], *parts[1:]]
    if word.isalpha() and len(word) > _LONG_WORD:
        cut = len(piece) - len(word) + (len(word) + 1) // 2
        return [piece[:cut], piece[cut:]]
    return [piece]


def answer_tokens(start: int) -> Iterator[str]:
    """Tokens of the answers from ``start`` (mod the corpus size) on, endlessly."""
    index = start % len(ANSWERS)
    first = True
    while True:
        if not first:
            yield ANSWER_SEPARATOR
        yield from tokenize(ANSWERS[index])
        first = False
        index = (index + 1) % len(ANSWERS)


def take_tokens(start: int, count: int) -> list[str]:
    """The first ``count`` tokens of the corpus read from answer ``start``."""
    return list(islice(answer_tokens(start), count))


def count_tokens(texts: Sequence[str]) -> int:
    """How many tokens the mock counts for ``texts`` (used for prompt usage)."""
    return sum(len(tokenize(text)) for text in texts)
