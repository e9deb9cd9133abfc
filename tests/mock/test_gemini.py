"""The mock's Gemini answers (chaosproxy/mock/gemini.py), rendered by its ``serve`` without
sockets and read back by the recorder (chaosproxy/mock/transcript.py) as the fixture
they came from: text, a tool call (whole, without an id: Gemini has none), a finish
reason, a stream broken by its in-stream error after one delta; its error body; a
request without its contents refused, a route naming no action unknown. Against the real
captures and the SDKs: test_fixtures.py and test_app.py."""

from __future__ import annotations

from typing import Any

import pytest

from chaosproxy.mock import gemini
from chaosproxy.mock.common import MockRequestError
from tests.support.mock_render import read_back, served

PATH = "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
REQUEST: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}]}
PARAMS: dict[str, str] = {"target": "gemini-2.0-flash:streamGenerateContent"}
QUERY: dict[str, str] = {"alt": "sse"}


@pytest.mark.parametrize(
    ("fixture", "recorded"),
    [
        (
            {"text": "Sunny and mild."},
            {"text": "Sunny and mild.", "usage": {"input_tokens": 7, "output_tokens": 4}},
        ),
        (
            {
                "tool_calls": [
                    {"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}
                ]
            },
            {
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
                "usage": {"input_tokens": 7, "output_tokens": 6},
            },
        ),
        (
            {"text": "Sunny", "usage": {"input_tokens": 7, "output_tokens": 2}, "finish": "length"},
            {"text": "Sunny", "finish": "length", "usage": {"input_tokens": 7, "output_tokens": 2}},
        ),
    ],
)
def test_an_answer_reads_back_as_the_fixture_it_came_from(
    fixture: dict[str, Any], recorded: dict[str, Any]
) -> None:
    response = served(gemini, REQUEST, fixture, params=PARAMS, query=QUERY)
    assert (response.status, response.content_type) == (200, "text/event-stream")
    assert read_back(PATH, REQUEST, response) == recorded


def test_a_stream_broken_after_one_delta_ends_with_its_error_event() -> None:
    broken = {"text": "Sunny and mild.", "error": {"after": 1}}
    response = served(gemini, REQUEST, broken, params=PARAMS, query=QUERY)
    assert read_back(PATH, REQUEST, response) == "the stream carries an error event"
    whole = served(gemini, REQUEST, {"text": "Sunny and mild."}, params=PARAMS, query=QUERY)
    assert len(response.chunks) < len(whole.chunks)
    assert response.chunks[:-1] == whole.chunks[: len(response.chunks) - 1]  # then the error


def test_its_error_body() -> None:
    assert gemini.error_body(429, "slow down") == {
        "error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}
    }


def test_a_request_without_what_it_needs_is_refused() -> None:
    with pytest.raises(MockRequestError) as caught:
        served(gemini, {}, params=PARAMS, query=QUERY)
    assert str(caught.value) == "* GenerateContentRequest.contents: contents is not specified"


def test_a_route_naming_no_action_is_unknown() -> None:
    assert gemini.unknown({"target": "gemini-2.0-flash:streamGenerateContent"}) is False
    assert gemini.unknown({"target": "gemini-2.0-flash:nope"}) is True
    assert gemini.unknown({"target": ":streamGenerateContent"}) is True
