"""A JSON value found and replaced in an event's own text (chaosproxy/core/jsonspan.py):
every other byte kept."""

from __future__ import annotations

import pytest

from chaosproxy.core.jsonspan import SpanError, encode_string, replace_at, span


def test_span_finds_a_value_and_keeps_every_other_byte() -> None:
    data = '{"a": [1, {"b":"x\\"y"}], "c" : "é", "a2": null}'
    assert data[slice(*span(data, ("a", 1, "b")))] == '"x\\"y"'
    assert data[slice(*span(data, ("c",)))] == '"é"'
    assert replace_at(data, ("a", 0), "42") == '{"a": [42, {"b":"x\\"y"}], "c" : "é", "a2": null}'
    for path in (("z",), ("a", 2), ("c", "d")):
        with pytest.raises(SpanError):
            span(data, path)
    # An escaping provider's style: a character beyond the BMP as its surrogate pair.
    assert encode_string("é😀", escape_non_ascii=True) == '"\\u00e9\\ud83d\\ude00"'
    assert encode_string('é"\n') == '"é\\"\\n"'
