"""The mock's answer corpus and its pre-tokenizer (chaosproxy/mock/corpus.py): word
pieces with leading spaces as a GPT-2-style tokenizer cuts them (long words halved,
Japanese one or two characters a token), any text given back whole, every answer with
multi-byte characters early, and the answers read on from any start, one after another.
What the mock streams of them is test_app.py's."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy.mock.corpus import (
    ANSWER_SEPARATOR,
    ANSWERS,
    count_tokens,
    take_tokens,
    tokenize,
)
from tests.support.properties import examples


def test_text_is_cut_as_a_tokenizer_cuts_it() -> None:
    assert tokenize("Hello, world! It's 2026: こんにちは extraordinary_case  ok") == [
        "Hello",
        ",",
        " world",
        "!",
        " It",
        "'s",
        " 2026",
        ":",
        " こん",
        "にち",
        "は",
        " extraor",
        "dinary",
        "_",
        "case",
        " ",
        " ok",
    ]
    assert tokenize("") == []


def test_corpus_tokens_are_word_pieces_with_multibyte_early() -> None:
    for answer in ANSWERS:
        tokens = tokenize(answer)
        assert "".join(tokens) == answer
        assert all(not token.endswith(" ") for token in tokens)  # spaces lead, never trail
        assert sum(token.startswith(" ") for token in tokens) > len(tokens) // 2
        head = "".join(tokens[:16])
        assert len(head.encode()) > len(head), answer  # some character takes several bytes
        head = "".join(tokens[:40])
        assert any("\u3040" <= ch <= "\u9fff" for ch in head), answer  # some Japanese


@given(st.text())
@settings(max_examples=examples(300))
def test_tokens_give_any_text_back(text: str) -> None:
    # A fixture's text is streamed as these tokens: nothing of it may be lost (the
    # underscore, \w but no letter, once was).
    assert "".join(tokenize(text)) == text
    assert tokenize("snake_case") == ["snake", "_", "case"]


def test_the_answers_are_read_on_from_any_start_one_after_another() -> None:
    last = len(ANSWERS) - 1
    tokens = take_tokens(last, 200)
    cut = tokens.index(ANSWER_SEPARATOR)
    assert tokens[:cut] == tokenize(ANSWERS[last])
    assert tokens[cut + 1 : cut + 3] == tokenize(ANSWERS[0])[:2]  # then the first again
    assert take_tokens(last + len(ANSWERS), 5) == tokens[:5]  # (start mod the corpus)
    assert take_tokens(0, 0) == []


def test_tokens_are_counted_over_every_text() -> None:
    assert count_tokens(["a b", "c"]) == 3
    assert count_tokens([]) == 0
    assert count_tokens([ANSWERS[0]]) == len(tokenize(ANSWERS[0]))
