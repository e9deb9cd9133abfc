"""The mock's OpenAI Chat answers (chaosproxy/mock/openai_chat.py), rendered by its
``serve`` without sockets and read back by the recorder (chaosproxy/mock/transcript.py)
as the fixture they came from: text, a tool call (usage only when the request asks for
it), a finish reason, a stream broken by its in-stream error after one delta; its error
body; a request without its messages refused. Against the real captures and the SDKs:
test_fixtures.py and test_app.py."""

from __future__ import annotations

from typing import Any

import pytest

from chaosproxy.mock import openai_chat
from chaosproxy.mock.common import MockRequestError
from tests.support.mock_render import read_back, served

PATH = "/v1/chat/completions"
REQUEST: dict[str, Any] = {
    "model": "m",
    "stream": True,
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
}
PARAMS: dict[str, str] = {}
QUERY: dict[str, str] = {}


@pytest.mark.parametrize(
    ("fixture", "recorded"),
    [
        ({"text": "Sunny and mild."}, {"text": "Sunny and mild."}),
        (
            {
                "tool_calls": [
                    {"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}
                ]
            },
            {
                "tool_calls": [
                    {"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}
                ]
            },
        ),
        (
            {"text": "Sunny", "usage": {"input_tokens": 7, "output_tokens": 2}, "finish": "length"},
            {"text": "Sunny", "finish": "length"},
        ),
    ],
)
def test_an_answer_reads_back_as_the_fixture_it_came_from(
    fixture: dict[str, Any], recorded: dict[str, Any]
) -> None:
    response = served(openai_chat, REQUEST, fixture, params=PARAMS, query=QUERY)
    assert (response.status, response.content_type) == (200, "text/event-stream")
    assert read_back(PATH, REQUEST, response) == recorded


def test_a_stream_broken_after_one_delta_ends_with_its_error_event() -> None:
    broken = {"text": "Sunny and mild.", "error": {"after": 1}}
    response = served(openai_chat, REQUEST, broken, params=PARAMS, query=QUERY)
    assert read_back(PATH, REQUEST, response) == "the stream carries an error event"
    whole = served(openai_chat, REQUEST, {"text": "Sunny and mild."}, params=PARAMS, query=QUERY)
    assert len(response.chunks) < len(whole.chunks)
    assert response.chunks[:-1] == whole.chunks[: len(response.chunks) - 1]  # then the error


def test_its_error_body() -> None:
    assert openai_chat.error_body(429, "slow down") == {
        "error": {
            "message": "slow down",
            "type": "invalid_request_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }


def test_a_request_without_what_it_needs_is_refused() -> None:
    with pytest.raises(MockRequestError) as caught:
        served(openai_chat, {"model": "m"}, params=PARAMS, query=QUERY)
    assert str(caught.value) == "'messages' is a required property"
