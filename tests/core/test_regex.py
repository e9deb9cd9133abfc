"""Regular expressions searched in linear time with Python's meaning
(chaosproxy/core/regex.py): what cannot be (backreferences, lookaround, atomic groups,
possessive repeats, a Unicode ``\\b``, ``$`` before more, huge repeats) refused with the
part and the way out, a plain string searched as one, a backtracking expression on
hostile text at once, and whatever is accepted finding exactly what ``re.search``
finds (hypothesis, on expressions and texts drawn from a small alphabet with non-ASCII
letters). Refused through ``chaosproxy validate`` and live through the proxy:
tests/e2e/test_hostile_regex.py."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaosproxy.core.regex import RegexRefused, compile_search
from tests.support.properties import examples

WITHOUT = "; match takes Python's re syntax without these (docs/scenarios.md, Selectors)"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"(a)\1", r"backreferences (\1, (?P=name)) cannot be searched in linear time" + WITHOUT),
        (
            "(?P<x>a)(?P=x)",
            r"backreferences (\1, (?P=name)) cannot be searched in linear time" + WITHOUT,
        ),
        (
            "(?=stop)",
            "lookahead and lookbehind ((?=...), (?<=...)) cannot be searched in linear time"
            + WITHOUT,
        ),
        (
            "(?<!x)stop",
            "negative lookahead and lookbehind ((?!...), (?<!...)) cannot be searched in "
            "linear time" + WITHOUT,
        ),
        ("(?>a+)b", "atomic groups ((?>...)) cannot be searched in linear time" + WITHOUT),
        (
            "a++b",
            "possessive repeats (*+, ++, ?+, {m,n}+) cannot be searched in linear time" + WITHOUT,
        ),
        ("a{1001}", "repeat counts over 1000 ({1001}) cannot be searched in linear time" + WITHOUT),
        (
            r"\bstop\b",
            r"\b and \B with Python's Unicode word characters cannot be searched in linear "
            "time; add (?a) at the start for ASCII word boundaries",
        ),
        (
            "$x",
            "$ followed by more of the expression cannot be searched in linear time; use \\Z "
            "for the very end, or (?m) for the end of any line",
        ),
        (
            "(unclosed",
            "not a valid regular expression: missing ), unterminated subpattern at position 0",
        ),
        (
            "(?:(?:a{1000}){1000}){1000}",
            "too large to search in linear time (invalid repetition size: {1000})",
        ),
    ],
)
def test_what_cannot_be_searched_in_linear_time_is_refused_saying_why(
    pattern: str, message: str
) -> None:
    with pytest.raises(RegexRefused) as caught:
        compile_search(pattern)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_a_backtracking_expression_on_hostile_text_is_searched_at_once() -> None:
    found = compile_search("(a+)+$")
    began = time.process_time()
    assert found("a" * 30_000 + "!") is False  # Python's re: 2^30000 steps
    assert found("aaa") is True
    assert time.process_time() - began < 1.0  # (microseconds; a bound, not a margin)


def test_a_plain_string_is_searched_as_one_and_case_counts_unless_told() -> None:
    plain = compile_search('"finish_reason":"stop"')
    assert plain('{"finish_reason":"stop"}') is True
    assert plain('{"finish_reason":"STOP"}') is False
    assert compile_search("(?i)stop")("STOP") is True
    assert compile_search(r"(?a)\bdone\b")("all done.") is True
    assert compile_search(r"(?a)\bdone\b")("undone") is False


def test_text_with_a_lone_surrogate_is_searched_too() -> None:
    assert compile_search("x.y")("x\ud800y") is True
    assert compile_search("x[a-z]y")("x\ud800y") is False


def test_the_search_is_compiled_once_per_pattern() -> None:
    assert compile_search("(?i)once") is compile_search("(?i)once")


# ------------------------------------------------------------------ the same meaning

#: Letters whose classes and cases differ between Python's re and RE2's own tables.
ALPHABET = "aAbB0 _\n!éÉß\u017f\u212akK\u0130\u0131\u0663\u00a0\u2028"
ATOMS = [
    *(re.escape(c) for c in ALPHABET),
    ".",
    r"\d",
    r"\D",
    r"\w",
    r"\W",
    r"\s",
    r"\S",
    "[a-z]",
    "[^a]",
    r"[\w!]",
    r"[^\W\d]",
    "[é-\u017f]",
    "^",
    r"\A",
    r"\Z",
]


def regexes() -> st.SearchStrategy[str]:
    atom = st.sampled_from(ATOMS)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map("|".join),
            inner.map(lambda r: f"(?:{r})"),
            st.tuples(inner, st.sampled_from(["*", "+", "?", "*?", "{2}", "{1,3}"])).map(
                lambda t: f"(?:{t[0]}){t[1]}"
            ),
        )

    body = st.recursive(atom, extend, max_leaves=6)
    flags = st.sampled_from(["", "(?i)", "(?s)", "(?m)", "(?a)", "(?ai)", "(?is)"])
    end = st.sampled_from(["", "$"])
    return st.tuples(flags, body, end).map("".join)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=regexes(), texts=st.lists(st.text(alphabet=ALPHABET, max_size=12), max_size=4))
def test_what_is_accepted_finds_what_python_finds(pattern: str, texts: list[str]) -> None:
    found = compile_search(pattern)
    for text in texts:
        assert found(text) == bool(re.search(pattern, text)), (pattern, text)
