"""What a request asks (chaosproxy/core/llm_request.py): the reading that the journal and
the mock's fixtures share, here where it must hold against a hostile body (most of its
cases are read through the mock's fixtures: tests/mock/test_mock_fixtures.py)."""

from __future__ import annotations

from typing import Any

from chaosproxy.core.llm_request import TEXT_DEPTH, Message, read_request


def parts(depth: int, text: str) -> Any:
    """``text`` in a content of lists ``depth`` deep."""
    value: Any = text
    for _ in range(depth):
        value = [value]
    return value


def test_a_content_nested_deeper_than_it_reads_gives_no_text_never_an_error() -> None:
    shallow = {"messages": [{"role": "user", "content": parts(TEXT_DEPTH, "hi")}]}
    assert read_request("/v1/chat/completions", shallow).messages == (Message("user", "hi"),)
    deep = {"messages": [{"role": "user", "content": parts(TEXT_DEPTH + 1, "hi")}]}
    assert read_request("/v1/chat/completions", deep).messages == (Message("user", ""),)
    hostile = {"model": "m", "messages": [{"role": "user", "content": parts(5000, "hi")}]}
    view = read_request("/v1/chat/completions", hostile)  # far past the recursion limit
    assert (view.model, view.messages) == ("m", (Message("user", ""),))


def test_bedrock_converse_model_in_the_path_tools_in_tool_config() -> None:
    body = {
        "system": [{"text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"text": "Weather?"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "name": "w"}}]},
            {"role": "user", "content": [{"toolResult": {"content": [{"text": "18 C"}]}}]},
        ],
        "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather"}}, {"cachePoint": {}}]},
    }
    view = read_request("/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream", body)
    assert view.model == "anthropic.claude-3-5-haiku-20241022-v1:0"
    assert view.stream is True
    assert view.tools == ("get_weather",)
    assert view.messages == (
        Message("system", "Be brief."),
        Message("user", "Weather?"),
        Message("assistant", ""),
        Message("tool", "18 C"),
    )
    assert read_request("/model/m/converse", body).stream is False
    assert read_request("/model/m/invoke-with-response-stream", None).model == "m"
    assert read_request("/model/m/converse-stream", {"model": "x"}).model == "x"
