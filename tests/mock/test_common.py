"""What the mock's providers share (chaosproxy/mock/common.py), its pure helpers: ids
derived from the request (the same request, the same id), tokens grouped per event and
cut to a limit, example tool arguments from a JSON schema, function tools read from
every provider's ``tools``, the strings of a JSON value, a request's fields checked,
and the JSON and SSE each provider writes. Each provider's rendering is in
test_fixtures.py and test_transcript.py beside this one."""

from __future__ import annotations

import string

import pytest

from chaosproxy.mock.common import (
    MockRequestError,
    ToolSpec,
    compact,
    derive_id,
    example_arguments,
    google_json,
    group,
    int_field,
    limit_tokens,
    required_list,
    sse,
    strings_in,
    tools_from,
)

DIGEST = bytes(range(32))


def test_an_id_is_derived_from_the_request_and_its_label() -> None:
    one = derive_id(DIGEST, "chatcmpl", 24)
    assert one == derive_id(DIGEST, "chatcmpl", 24)  # the same request: the same id
    assert len(one) == 24 and set(one) <= set(string.ascii_letters + string.digits)
    assert one != derive_id(DIGEST, "msg", 24)
    assert one != derive_id(bytes(32), "chatcmpl", 24)
    assert derive_id(DIGEST, "chatcmpl", 8) == one[:8]  # a shorter one is its start
    assert set(derive_id(DIGEST, "x", 64, "01")) == {"0", "1"}


def test_tokens_are_grouped_per_event_and_cut_to_a_limit() -> None:
    tokens = ["a", "b", "c", "d", "e"]
    assert group(tokens, 2) == ["ab", "cd", "e"]
    assert group(tokens, 1) == tokens
    assert group(tokens, 0) == tokens
    assert group([], 3) == []
    assert limit_tokens(tokens, 3) == (["a", "b", "c"], True)
    assert limit_tokens(tokens, 5) == (tokens, False)
    assert limit_tokens(tokens, None) == (tokens, False)


def test_example_arguments_follow_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "deep": {"properties": {"x": {"type": "number"}, "y": {"type": "INTEGER"}}},
            "city": {"type": "string"},
            "unit": {"enum": ["c", "f"]},
            "tags": {"type": "array", "items": {"type": "STRING"}},
            "ok": {"type": ["null", "boolean"]},
            "nothing": {"type": "null"},
        },
    }
    arguments = example_arguments(schema, DIGEST)
    assert list(arguments) == ["deep", "city", "unit", "tags", "ok", "nothing"]
    assert list(arguments["deep"]) == ["x", "y"]
    assert isinstance(arguments["deep"]["x"], float) and 1 <= arguments["deep"]["y"] <= 9
    assert isinstance(arguments["city"], str) and arguments["city"]
    assert arguments["unit"] in ("c", "f")
    assert len(arguments["tags"]) == 1 and isinstance(arguments["tags"][0], str)
    assert isinstance(arguments["ok"], bool)
    assert arguments["nothing"] is None
    assert example_arguments(schema, DIGEST) == arguments  # chosen by the digest
    assert example_arguments({"type": "string"}, DIGEST) == {}  # not an object: none


def test_function_tools_are_read_from_every_providers_shape() -> None:
    assert tools_from(
        [
            {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
            {"type": "function", "name": "b", "parameters": {"p": 1}},
            {"name": "c", "input_schema": {"q": 1}},
            {"functionDeclarations": [{"name": "d", "parametersJsonSchema": {"r": 1}}]},
            {"type": "web_search"},
        ]
    ) == [
        ToolSpec("a", {"type": "object"}),
        ToolSpec("b", {"p": 1}),
        ToolSpec("c", {"q": 1}),
        ToolSpec("d", {"r": 1}),
    ]
    assert tools_from(None) == []


def test_the_strings_of_a_json_value_depth_first() -> None:
    value = {"a": "x", "skip": "no", "b": [1, "y", {"c": "z", "skip": ["no"]}], "d": None}
    assert strings_in(value, frozenset({"skip"})) == ["x", "y", "z"]
    assert strings_in(value) == ["x", "no", "y", "z", "no"]
    assert strings_in(3) == []


def test_a_requests_fields_are_checked() -> None:
    assert required_list({"messages": []}, "messages", "messages is required") == []
    for payload in ({}, {"messages": "hi"}, {"messages": {"role": "user"}}):
        with pytest.raises(MockRequestError, match=r"^messages is required$"):
            required_list(payload, "messages", "messages is required")
    fields = {"max_tokens": -1, "n": True, "max_completion_tokens": 5, "other": 7}
    assert int_field(fields, "max_tokens", "n", "max_completion_tokens", "other") == 5
    assert int_field(fields, "max_tokens", "n") is None
    assert int_field({"n": 0}, "n") == 0


def test_each_providers_json_and_sse() -> None:
    value = {"text": "café", "n": [1, 2]}
    assert compact(value) == '{"text":"café","n":[1,2]}'.encode()
    assert google_json(value) == '{"text": "café","n": [1,2]}'.encode()
    assert sse(b"{}") == b"data: {}\n\n"
    assert sse(b"{}", event="ping", newline=b"\r\n") == b"event: ping\r\ndata: {}\r\n\r\n"
