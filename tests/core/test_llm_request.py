"""What a request asks (chaosproxy/core/llm_request.py): the reading that the journal and
the mock's fixtures share, here where it must hold against a hostile body, and read from
what the providers declare (each provider's own shape: tests/core/providers/; most of its
cases are read through the mock's fixtures: tests/mock/test_fixtures.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from chaosproxy.core.llm_request import TEXT_DEPTH, Message, RequestView, read_request
from chaosproxy.core.providers import ProviderProfile, RequestShape, register, unregister


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


class _ConverseLike(ProviderProfile):
    """A provider declared here only, in a shape no real provider has (Bedrock's Converse
    renamed): the model in the path (percent-encoded), the tools in a key's key,
    results as ``stepOutput`` blocks whose text is under that key."""

    name = "converse-like"
    rank = 900
    request = RequestShape(
        model_in_path=re.compile(r"/engine/([^/]+)/talk(?:-stream)?$"),
        stream_in_path=re.compile(r"-stream$"),
        system=("system",),
        messages=("messages",),
        tools=("toolBox.tools",),
        tool_wrappers=("toolDef",),
        result_keys=("stepOutput",),
        text_keys=("stepOutput",),
    )


@pytest.fixture
def converse_like() -> Iterator[None]:
    register(_ConverseLike)
    try:
        yield
    finally:
        unregister(_ConverseLike.name)


CONVERSE_LIKE = {
    "system": [{"text": "Be brief."}],
    "messages": [
        {"role": "user", "content": [{"text": "Weather?"}]},
        {"role": "user", "content": [{"stepOutput": {"content": [{"text": "sunny"}]}}]},
    ],
    "toolBox": {"tools": [{"toolDef": {"name": "get_weather"}}]},
}


def test_a_provider_declares_where_its_requests_say_what_they_ask(converse_like: None) -> None:
    path = "/engine/anthropic.claude-3-haiku-20240307-v1%3A0/talk-stream"
    assert read_request(path, CONVERSE_LIKE) == RequestView(
        "anthropic.claude-3-haiku-20240307-v1:0",
        (Message("system", "Be brief."), Message("user", "Weather?"), Message("tool", "sunny")),
        ("get_weather",),
        True,
    )
    assert read_request("/engine/m/talk", None) == RequestView("m", (), (), False)


def test_a_shape_no_provider_declares_is_not_read() -> None:
    path = "/engine/anthropic.claude-3-haiku-20240307-v1%3A0/talk-stream"
    assert read_request(path, CONVERSE_LIKE) == RequestView(
        None,
        (Message("system", "Be brief."), Message("user", "Weather?"), Message("user", "")),
        (),
        None,
    )
