"""Mock fixtures as a scenario or a file gives them (chaosproxy/scenario/fixtures.py):
which part of a ``match`` a request fails first (path without its query, model, last
user message, regex, tools offered, a tool's result last, header globs over every
value), tool arguments as a mapping or JSON text of one, an error either a status or
mid-stream, a fixture that answers something, a file of at least one, and the view
that reads back the same. The mock answering with them is tests/mock/'s."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from multidict import CIMultiDict
from pydantic import ValidationError

from chaosproxy.core.llm_request import read_request
from chaosproxy.scenario.fixtures import (
    Fixture,
    FixtureError,
    FixtureFile,
    FixtureMatch,
    FixtureToolCall,
)

CHAT = "/v1/chat/completions"


def body(*messages: tuple[str, str], tools: tuple[str, ...] = (), model: str = "gpt-4o") -> Any:
    return {
        "model": model,
        "messages": [{"role": role, "content": text} for role, text in messages],
        "tools": [{"type": "function", "function": {"name": n}} for n in tools],
    }


def mismatch(
    match: dict[str, Any], request: Any, path: str = CHAT, headers: Any = None
) -> str | None:
    return FixtureMatch.model_validate(match).mismatch(
        path, read_request(path, request), headers or {}
    )


ASK = body(("system", "be brief"), ("user", "What is the weather in Paris?"))


@pytest.mark.parametrize(
    ("match", "failed"),
    [
        ({}, None),
        ({"path": "/v1/*"}, None),
        ({"path": "/v1/chat"}, "path"),
        ({"model": "gpt-4*"}, None),
        ({"model": "claude-*"}, "model"),
        ({"message": "weather"}, None),
        ({"message": "be brief"}, "message"),  # the last user message only
        ({"message_regex": r"weather in \w+\?$"}, None),
        ({"message_regex": "^weather"}, "message_regex"),
        ({"tools": False}, None),
        ({"tools": True}, "tools"),
        ({"tools": "get_weather"}, "tools"),
        ({"tool_result": False}, None),
        ({"tool_result": True}, "tool_result"),
        ({"headers": {"X-Team": "b*"}}, "headers"),  # absent: no match
        # the first part that fails is named
        ({"path": "/nope", "model": "nope", "message": "nope"}, "path"),
        ({"model": "gpt-4o", "message": "nope", "tools": True}, "message"),
    ],
)
def test_the_first_part_of_a_match_that_fails_is_named(
    match: dict[str, Any], failed: str | None
) -> None:
    assert mismatch(match, ASK) == failed


def test_tools_are_any_none_or_all_of_the_names() -> None:
    offered = body(("user", "hi"), tools=("get_weather", "search"))
    assert mismatch({"tools": True}, offered) is None
    assert mismatch({"tools": False}, offered) == "tools"
    assert mismatch({"tools": "search"}, offered) is None
    assert mismatch({"tools": ["search", "get_weather"]}, offered) is None
    assert mismatch({"tools": ["search", "book"]}, offered) == "tools"


def test_a_tool_result_last_is_an_agents_second_turn() -> None:
    second = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
    }
    assert mismatch({"tool_result": True}, second) is None
    assert mismatch({"tool_result": False}, second) == "tool_result"
    assert mismatch({"tool_result": True}, {"model": "m", "messages": []}) == "tool_result"


def test_header_globs_match_any_value_of_a_name_in_any_case() -> None:
    match = {"headers": {"X-Team": "blue-*"}}
    assert FixtureMatch.model_validate(match).headers == {"x-team": "blue-*"}
    assert mismatch(match, ASK, headers={"x-TEAM": "blue-2"}) is None
    repeated = CIMultiDict([("X-Team", "red"), ("X-Team", "blue-9")])
    assert mismatch(match, ASK, headers=repeated) is None
    assert mismatch(match, ASK, headers={"X-Team": "red"}) == "headers"
    assert FixtureMatch.model_validate({"headers": None}).headers == {}


def test_a_bad_regex_is_refused_when_the_fixture_is_read() -> None:
    with pytest.raises(ValidationError, match="message_regex"):
        FixtureMatch.model_validate({"message_regex": "(unclosed"})


def test_tool_arguments_are_a_mapping_or_json_text_of_one() -> None:
    assert FixtureToolCall(name="f").argument_object == {}
    given = FixtureToolCall(name="f", arguments='{"city": "Paris"}')
    assert (given.arguments, given.argument_object) == ('{"city": "Paris"}', {"city": "Paris"})
    assert FixtureToolCall(name="f", arguments={"n": 1}).argument_object == {"n": 1}
    with pytest.raises(ValidationError, match="not valid JSON"):
        FixtureToolCall(name="f", arguments="{city")
    with pytest.raises(ValidationError, match="must be a JSON object"):
        FixtureToolCall(name="f", arguments="[1, 2]")


@pytest.mark.parametrize(
    ("error", "problem"),
    [
        ({"status": 429, "headers": {"Retry-After": 2}}, None),
        ({"after": 3, "message": "overloaded"}, None),
        ({}, "give exactly one of status"),
        ({"status": 500, "after": 1}, "give exactly one of status"),
        ({"after": 1, "body": "x"}, "headers and body go with status"),
        ({"after": 1, "headers": {"a": "b"}}, "headers and body go with status"),
        ({"status": 200}, "greater than or equal to 400"),
    ],
)
def test_an_error_is_a_status_or_mid_stream(error: dict[str, Any], problem: str | None) -> None:
    if problem is None:
        FixtureError.model_validate(error)
    else:
        with pytest.raises(ValidationError, match=problem):
            FixtureError.model_validate(error)


def test_a_fixture_answers_something_in_time() -> None:
    with pytest.raises(ValidationError, match="give text, tool_calls or error"):
        Fixture.model_validate({"name": "empty"})
    with pytest.raises(ValidationError, match="interval must be at most 60s"):
        Fixture.model_validate({"text": "hi", "interval": "61s"})
    assert Fixture.model_validate({"text": "hi", "interval": "60s"}).interval == 60
    assert Fixture.model_validate({"text": "hi", "match": None}).match == FixtureMatch()
    assert Fixture.model_validate({"tool_calls": [{"name": "f"}]}).text is None


def test_a_fixture_file_has_at_least_one_fixture() -> None:
    with pytest.raises(ValidationError, match="must not be empty"):
        FixtureFile.model_validate({"fixtures": []})
    assert (
        len(FixtureFile.model_validate({"fixtures": [{"text": "a"}, {"text": "b"}]}).fixtures) == 2
    )


def test_the_view_leaves_defaults_out_and_reads_back_the_same() -> None:
    fixture = Fixture.model_validate(
        {
            "name": "paris",
            "match": {"message": "Paris", "headers": {"X-Team": "b*"}},
            "text": "Sunny.",
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
            "error": {"after": 2},
            "interval": "250ms",
            "times": 1,
        }
    )
    view = fixture.as_dict()
    assert view == {
        "name": "paris",
        "match": {"message": "Paris", "headers": {"x-team": "b*"}},
        "text": "Sunny.",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
        "error": {"after": 2},
        "interval": "250ms",
        "times": 1,
    }
    assert Fixture.model_validate(orjson.loads(orjson.dumps(view))) == fixture
