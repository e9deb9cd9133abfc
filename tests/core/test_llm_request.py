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
