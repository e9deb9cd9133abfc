"""The mock's OpenAI Responses answers (chaosproxy/mock/openai_responses.py), rendered by
its ``serve`` without sockets and read back by the recorder
(chaosproxy/mock/transcript.py) as the fixture they came from: text, a tool call, a
finish reason, a stream broken by its in-stream error after one delta; unstreamed, a
broken generation its 500; a request without its input refused. Against the real
captures and the SDKs: test_fixtures.py and test_app.py."""

from __future__ import annotations

from typing import Any

import pytest

from chaosproxy.mock import openai_responses
from chaosproxy.mock.common import MockRequestError
from tests.support.mock_render import read_back, served

PATH = "/v1/responses"
REQUEST: dict[str, Any] = {"model": "m", "stream": True, "input": "Weather in Paris?"}
PARAMS: dict[str, str] = {}
QUERY: dict[str, str] = {}


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
                "tool_calls": [
                    {"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}
                ],
                "usage": {"input_tokens": 7, "output_tokens": 5},
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
    response = served(openai_responses, REQUEST, fixture, params=PARAMS, query=QUERY)
    assert (response.status, response.content_type) == (200, "text/event-stream")
    assert read_back(PATH, REQUEST, response) == recorded


def test_a_stream_broken_after_one_delta_ends_with_its_error_event() -> None:
    broken = {"text": "Sunny and mild.", "error": {"after": 1}}
    response = served(openai_responses, REQUEST, broken, params=PARAMS, query=QUERY)
    assert read_back(PATH, REQUEST, response) == "the stream carries an error event"
    whole = served(
        openai_responses, REQUEST, {"text": "Sunny and mild."}, params=PARAMS, query=QUERY
    )
    assert len(response.chunks) < len(whole.chunks)
    assert response.chunks[:-1] == whole.chunks[: len(response.chunks) - 1]  # then the error


def test_unstreamed_a_broken_generation_is_a_500_with_openais_error_body() -> None:
    asked = {"model": "m", "input": "Weather in Paris?"}
    response = served(openai_responses, asked, {"text": "a", "error": {"after": 1}})
    assert (response.status, response.streamed, response.chunks) == (
        500,
        False,
        [
            b'{"error":{"message":"The server had an error while processing your request. '
            b'Sorry about that!","type":"server_error","param":null,"code":null}}'
        ],
    )


def test_a_request_without_what_it_needs_is_refused() -> None:
    with pytest.raises(MockRequestError) as caught:
        served(openai_responses, {"model": "m"}, params=PARAMS, query=QUERY)
    assert str(caught.value) == "'input' is a required property"
