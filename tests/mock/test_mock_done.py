"""Issue 22's "Done means", written from docs/mock.md alone: a fixture makes the mock
stream a ``get_weather`` call with ``{"city": "Paris"}``; the Python ``openai`` SDK gets
it in the OpenAI Chat and Responses formats and the ``anthropic`` SDK in Anthropic's;
``proxy.verify(...)`` shows the client offered the tool; and under ``duplicate`` of the
tool-call delta that carries ``Paris`` each gets the verdict the docs give (an accepting
client: ``silent_corruption``). Also: the docs' own first example runs as written."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from chaosproxy import ChaosProxy
from tests.support.repo import REPO

FIXTURE = """
match: {tools: get_weather}
tool_calls:
  - name: get_weather
    arguments: {city: Paris}
"""
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
QUESTION = "What's the weather in Paris?"
DUPLICATE_PARIS = {"faults": [{"duplicate": {"kind": "tool_delta", "match": "Paris"}}]}


def chat(proxy: ChaosProxy) -> str:
    """The call's arguments as the openai SDK's Chat Completions stream delivers them."""
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="test", max_retries=0)
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    stream = client.chat.completions.create(
        model="gpt-4o",
        stream=True,
        tools=tools,
        messages=[{"role": "user", "content": QUESTION}],
    )
    arguments = ""
    for chunk in stream:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert call.index == 0
            arguments += call.function.arguments or "" if call.function else ""
    return arguments


def responses(proxy: ChaosProxy) -> str:
    """The call's arguments from the Responses stream's ``function_call_arguments.delta``
    events (the call is a ``function_call`` output item)."""
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="test", max_retries=0)
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    stream = client.responses.create(model="gpt-4o", input=QUESTION, tools=tools, stream=True)
    names = []
    arguments = ""
    for event in stream:
        if event.type == "response.output_item.added" and event.item.type == "function_call":
            names.append(event.item.name)
        elif event.type == "response.function_call_arguments.delta":
            arguments += event.delta
    assert names == ["get_weather"]
    return arguments


def claude(proxy: ChaosProxy) -> str:
    """The call's input from the anthropic SDK's stream (a ``tool_use`` block filled by
    ``input_json_delta`` events)."""
    client = anthropic.Anthropic(base_url=proxy.url, api_key="test", max_retries=0)
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER}]
    stream = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=256,
        stream=True,
        tools=tools,
        messages=[{"role": "user", "content": QUESTION}],
    )
    arguments = ""
    for event in stream:
        if event.type == "content_block_start":
            assert event.content_block.type == "tool_use"
            assert event.content_block.name == "get_weather"
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            arguments += event.delta.partial_json
    return arguments


FORMATS: dict[str, Callable[[ChaosProxy], str]] = {
    "openai-chat": chat,
    "openai-responses": responses,
    "anthropic": claude,
}


@pytest.fixture
def proxy() -> Iterator[ChaosProxy]:
    with ChaosProxy(log_content=True) as running:  # (the journal keeps the prompts)
        running.add_fixture(FIXTURE)
        yield running


@pytest.mark.parametrize("provider", FORMATS)
def test_the_fixture_reaches_the_sdk_and_the_journal_saw_the_tool(
    proxy: ChaosProxy, provider: str
) -> None:
    assert json.loads(FORMATS[provider](proxy)) == {"city": "Paris"}
    (request,) = proxy.verify(count=1, tool="get_weather", path=_path(provider), contains="Paris")
    assert request["tools"] == ["get_weather"]
    messages = request["request"]["messages"]
    assert isinstance(messages, list)  # (an int only where the journal counts them)
    assert messages[-1] == {"role": "user", "text": QUESTION}


@pytest.mark.parametrize("provider", FORMATS)
def test_a_duplicated_tool_call_delta_is_silent_corruption(
    proxy: ChaosProxy, provider: str
) -> None:
    with proxy.scenario(DUPLICATE_PARIS):
        arguments = FORMATS[provider](proxy)
    assert json.loads(arguments) == {"city": "ParisParis"}  # the client accepts it
    last = proxy.last()
    assert last["integrity"] == "altered" and last["faults_applied"] == {"duplicate": 1}
    verdict = proxy.verdict(last["request_id"], text="")
    assert verdict["verdict"] == "silent_corruption"


def _path(provider: str) -> str:
    return {"openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses"}.get(
        provider, "/v1/messages"
    )


def test_the_first_example_of_the_docs_runs_as_written() -> None:
    text = (REPO / "docs" / "mock.md").read_text(encoding="utf-8")
    section = text.split("## A first test", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    exec(compile(code.group(1), "docs/mock.md", "exec"), {"__name__": "docs"})
