"""What a seed may be (chaosproxy/core/seeds.py): ASCII decimal digits from 0 to
2^63-1, leading zeros allowed, refused in one line that names the range and quotes the
text short (never Python's own message about converting thousands of digits)."""

from __future__ import annotations

import pytest

from chaosproxy.core.seeds import MAX_SEED, SEED_RANGE, SeedError, parse_seed_text, shown

RANGE = "must be a decimal integer from 0 to 9223372036854775807, got "


def test_the_range_is_a_signed_64_bit_integer() -> None:
    assert MAX_SEED == 9_223_372_036_854_775_807
    assert SEED_RANGE == "an integer from 0 to 9223372036854775807"


@pytest.mark.parametrize(
    ("text", "seed"),
    [
        ("0", 0),
        ("42", 42),
        ("0007", 7),
        ("000", 0),
        ("9223372036854775807", MAX_SEED),
        ("0" * 5000 + "9223372036854775807", MAX_SEED),  # zeros do not count
    ],
)
def test_a_seed_is_digits_up_to_the_largest(text: str, seed: int) -> None:
    assert parse_seed_text(text) == seed


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("9223372036854775808", "'9223372036854775808'"),
        ("-1", "'-1'"),
        ("+1", "'+1'"),
        (" 1", "' 1'"),
        ("1.0", "'1.0'"),
        ("", "''"),
        ("٣", "'٣'"),  # a decimal digit, not an ASCII one
        ("0x10", "'0x10'"),
        ("9" * 5000, "'999999999999999999999999'… (5000 characters)"),
    ],
)
def test_anything_else_is_refused_naming_the_range(text: str, quoted: str) -> None:
    with pytest.raises(SeedError) as caught:
        parse_seed_text(text)
    assert str(caught.value) == RANGE + quoted
    assert isinstance(caught.value, ValueError)


def test_a_long_text_is_quoted_cut_with_its_length() -> None:
    assert shown("x" * 24) == repr("x" * 24)
    assert shown("x" * 25) == repr("x" * 24) + "… (25 characters)"
    assert shown("a\nb") == "'a\\nb'"
