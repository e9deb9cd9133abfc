"""The mock's Ollama answers (chaosproxy/mock/ollama.py), rendered by its ``serve`` without
sockets and read back by the recorder (chaosproxy/mock/transcript.py) as the fixture
they came from: text, a tool call, a finish reason, a stream broken by its in-stream
error after one delta; its error body. Against the real captures and the SDKs:
test_fixtures.py and test_app.py."""

from __future__ import annotations

from typing import Any

import pytest

from chaosproxy.mock import ollama
from tests.support.mock_render import read_back, served

PATH = "/api/chat"
REQUEST: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
}
PARAMS: dict[str, str] = {"endpoint": "chat"}
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
    response = served(ollama, REQUEST, fixture, params=PARAMS, query=QUERY)
    assert (response.status, response.content_type) == (200, "application/x-ndjson")
    assert read_back(PATH, REQUEST, response) == recorded


def test_a_stream_broken_after_one_delta_ends_with_its_error_event() -> None:
    broken = {"text": "Sunny and mild.", "error": {"after": 1}}
    response = served(ollama, REQUEST, broken, params=PARAMS, query=QUERY)
    assert read_back(PATH, REQUEST, response) == "the stream carries an error event"
    whole = served(ollama, REQUEST, {"text": "Sunny and mild."}, params=PARAMS, query=QUERY)
    assert len(response.chunks) < len(whole.chunks)
    assert response.chunks[:-1] == whole.chunks[: len(response.chunks) - 1]  # then the error


def test_its_error_body() -> None:
    assert ollama.error_body(429, "slow down") == {"error": "slow down"}
