"""Where text may be cut (chaosproxy/core/segment.py), as the content faults use it: each
mode's cut points, exact, and the text given back whole."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy.core import segment
from tests.support.properties import examples


def test_each_at_mode_cuts_where_it_says() -> None:
    assert segment.inside_graphemes("a👍🏽b") == ["a👍", "🏽b"]
    assert segment.inside_graphemes("e\u0301!") == ["e", "\u0301!"]
    assert segment.inside_graphemes("👩‍👧") == ["👩", "\u200d👧"]
    assert segment.inside_graphemes("🇫🇷\r\n") == ["🇫", "🇷\r", "\n"]
    assert segment.inside_graphemes("plain 😀") == ["plain 😀"]  # one code point each
    assert segment.codepoints("é😀") == ["é", "😀"]
    # a delta per UTF-8 byte, each carrying what that byte completes
    assert segment.utf8_bytes("aé日😀") == ["a", "", "é", "", "", "日", "", "", "", "😀"]
    assert segment.words("Don't stop, 日本!") == ["Don't", " ", "stop", ",", " ", "日", "本", "!"]
    assert segment.every("abcdefg", 3) == ["abc", "def", "g"]
    assert segment.parts("forbidden", 3) == [3, 6]  # "for|bid|den"
    assert segment.parts("a👍🏽b", 3) == [1, 3]  # clusters are never cut
    assert segment.split_at("abc", [0, 3, 5, 1]) == ["a", "bc"]


@given(st.text())
@settings(max_examples=examples(200))
def test_every_mode_gives_the_text_back(text: str) -> None:
    for pieces in (
        segment.inside_graphemes(text),
        segment.codepoints(text) or [""],
        segment.utf8_bytes(text.encode("utf-8", "replace").decode()),
        segment.words(text),
        segment.every(text, 2),
    ):
        assert "".join(pieces) in (text, text.encode("utf-8", "replace").decode())
