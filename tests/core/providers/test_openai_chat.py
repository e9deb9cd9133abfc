"""The openai-chat provider (chaosproxy/core/providers/openai_chat.py): the kinds of its
captures' events (tables written by reading each capture, event by event), its paths, its
error event, and what it declares for the rest: its request shape, key headers, slots
and mock routes."""

from __future__ import annotations

import secrets

import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.llm_request import Message, RequestView, read_request
from chaosproxy.core.providers import declared, get_profile, provider_for_event, provider_for_path
from chaosproxy.core.slots import Slot, slots_for
from chaosproxy.core.tenancy import TenantKeys
from tests.support.provider_events import (
    OT,
    ST,
    TERM,
    D,
    E,
    Kinds,
    S,
    T,
    U,
    as_set,
    captures,
    frame_body,
    js,
    kinds_of,
    load,
    mock_answer,
)

NAME = "openai-chat"

#: Each capture's kinds, and what its first event is detected as (an error as the very
#: first event of a data-only stream is ambiguous: generic).
CAPTURES: dict[str, tuple[list[Kinds], str]] = {
    "openai_chat_midstream_error.sse": ([E], "generic"),
    # role chunk (content ""), 30 content chunks, finish chunk (delta {}), usage, [DONE].
    "openai_chat_text_usage.sse": ([S, *[D] * 30, OT, U, TERM], NAME),
    # n=3: each choice's role chunk is a start; 39 more content chunks; 3 finish chunks.
    "openai_chat_n3_usage.sse": ([S, D, S, D, S, D, *[D] * 39, OT, OT, OT, U, TERM], NAME),
    # The first chunk has both role and the tool call head; then 7 argument fragments.
    "openai_chat_tool_call_usage.sse": ([ST, *[T] * 7, OT, U, TERM], NAME),
}


def test_every_capture_of_it_has_a_table() -> None:
    assert set(CAPTURES) == captures("openai_chat_")


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_kinds_and_first_event(name: str) -> None:
    expected, first = CAPTURES[name]
    frames = load(name)
    assert kinds_of(NAME, frames) == [as_set(k) for k in expected]
    assert provider_for_event(frames[0]) == first


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/chat/completions", NAME),
        ("/openai/v1/chat/completions", NAME),
        ("/chat/completions", NAME),
        ("/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21", NAME),
        ("/_chaos/dup/v1/chat/completions", NAME),
        ("/v1/chat/completions/", NAME),
        ("/v1/embeddings", None),
    ],
)
def test_paths(path: str, expected: str | None) -> None:
    assert provider_for_path(path) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (js({"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]}), {D}),
        (js({"choices": [{"delta": {}, "finish_reason": "stop"}]}), {OT}),
        (js({"choices": [{"delta": {"refusal": "I can't"}}]}), {D}),
        (js({"choices": [{"delta": {"role": "assistant", "content": "Hi"}}]}), {S, D}),
        (js({"choices": [{"delta": {"content": ""}}]}), {OT}),
        (js({"choices": [{"delta": {"function_call": {"arguments": "{"}}}]}), {T}),
        (js({"choices": [], "usage": None}), {OT}),
        (js({"choices": [], "prompt_filter_results": []}), {OT}),  # Azure
        (js({"choices": [], "usage": {"total_tokens": 3}}), {U}),
        (js({"choices": [{"delta": {"content": "a"}}, {"delta": {"tool_calls": [{}]}}]}), {D, T}),
        (js({"error": None, "choices": []}), {OT}),
        (js({"choices": "nonsense"}), {OT}),
    ],
)
def test_fine_points(frame: Frame, expected: set[str]) -> None:
    assert get_profile(NAME).classify(frame) == expected


def test_error_event_matches_the_capture() -> None:
    (captured,) = load("openai_chat_midstream_error.sse")
    assert get_profile(NAME).error_event("sse", b"\n") == captured.raw


# --------------------------------------------------------------------------- declarations


def test_its_request_shape_reads_model_messages_and_tools() -> None:
    body = {
        "model": "gpt-4o",
        "stream": True,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    }
    assert read_request("/v1/chat/completions", body) == RequestView(
        "gpt-4o",
        (Message("system", "Be brief."), Message("user", "Weather?")),
        ("get_weather",),
        True,
    )


def test_its_key_headers_make_one_tenant_bearer_or_azure_key() -> None:
    keys = TenantKeys(secrets.token_bytes(16))
    bearer = keys.of([("Authorization", "Bearer sk-one")])
    assert declared(NAME).key_headers == {"authorization", "api-key"}
    assert keys.of([("api-key", "sk-one")]) == bearer != keys.anonymous
    assert keys.of([("api-key", "sk-two")]) != bearer


def test_its_slots_find_text_and_tool_fragments() -> None:
    slots = slots_for(NAME)
    assert slots is not None and slots.fragments
    text = js({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
    assert slots.text(text) == Slot(("choices", 0, "delta", "content"), "Hi", "0")
    head = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": ""}}
    call = js({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
    assert slots.call(call) == ("open", "0/0")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/chat/completions", {"model": "m", "stream": True, "messages": []}),
        ("GET", "/v1/chat/completions?q=hi", None),  # a browser's EventSource
    ],
)
async def test_the_mock_serves_its_routes(method: str, path: str, body: object) -> None:
    status, content_type, answer = await mock_answer(method, path, body, tokens=3)
    assert (status, content_type) == (200, "text/event-stream")
    assert kinds_of(NAME, frame_body(answer, "sse")) == [as_set(k) for k in (S, D, D, D, OT, TERM)]
