"""The openai-responses provider (chaosproxy/core/providers/openai_responses.py): the
kinds of its captures' events (tables written by reading each capture, event by event),
its paths, its error event, and what it declares for the rest: its request shape, key
headers, slots and mock routes."""

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
    TERM,
    D,
    E,
    Kinds,
    S,
    T,
    as_set,
    captures,
    frame_body,
    js,
    kinds_of,
    load,
    mock_answer,
)

NAME = "openai-responses"

#: Each capture's kinds, and what its first event is detected as.
CAPTURES: dict[str, tuple[list[Kinds], str]] = {
    "openai_responses_error_events.sse": ([E], NAME),
    # seq 0 created; 1-13 in_progress, items, reasoning summary (5 deltas), parts;
    # 14-25 output_text.delta; 26-28 done events; 29 completed.
    "openai_responses_o4mini_reasoning_text.sse": (
        [S, *[OT] * 13, *[D] * 12, OT, OT, OT, TERM],
        NAME,
    ),
}


def test_every_capture_of_it_has_a_table() -> None:
    assert set(CAPTURES) == captures("openai_responses_")


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_kinds_and_first_event(name: str) -> None:
    expected, first = CAPTURES[name]
    frames = load(name)
    assert kinds_of(NAME, frames) == [as_set(k) for k in expected]
    assert provider_for_event(frames[0]) == first


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/responses", NAME),
        ("/openai/v1/responses?x=1", NAME),
        ("/v1/responses/resp_123?stream=true", NAME),
        ("/v1/responses/resp_123/input_items", None),
    ],
)
def test_paths(path: str, expected: str | None) -> None:
    assert provider_for_path(path) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        # dispatch on the event name, else on the JSON type
        (js({"type": "response.failed"}, "response.failed"), {E, TERM}),
        (js({"type": "response.incomplete"}, "response.incomplete"), {TERM}),
        (js({"type": "response.function_call_arguments.delta"}), {T}),
        (js({"type": "response.refusal.delta"}), {D}),
        (js({"type": "response.reasoning_text.delta"}), {OT}),
        (js({"type": "error", "error": {"message": "x"}}, "error"), {E}),
        (js({"type": "response.mcp_call.failed"}), {OT}),
    ],
)
def test_fine_points(frame: Frame, expected: set[str]) -> None:
    assert get_profile(NAME).classify(frame) == expected


def test_error_event_has_the_documented_flat_shape() -> None:
    (captured,) = load("openai_responses_error_events.sse")
    raw = get_profile(NAME).error_event("sse")
    (frame,) = frame_body(raw, "sse")
    assert frame.event == captured.event == "error"
    payload = frame.json()
    assert payload.keys() == captured.json().keys()
    assert payload["type"] == "error"
    assert payload["param"] is None
    assert payload["sequence_number"] == 0  # a stateless profile cannot know the next one
    assert payload["code"] and payload["message"]


# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize(
    ("given", "messages"),
    [
        ("Hello", (Message("system", "Be brief."), Message("user", "Hello"))),
        (
            [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "function_call", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "sunny"},
            ],
            (
                Message("system", "Be brief."),
                Message("user", "Weather?"),
                Message("assistant", ""),
                Message("tool", "sunny"),
            ),
        ),
    ],
)
def test_its_request_shape_reads_instructions_and_input(
    given: object, messages: tuple[Message, ...]
) -> None:
    body = {
        "model": "o4-mini",
        "instructions": "Be brief.",
        "input": given,
        "tools": [{"type": "function", "name": "get_weather"}],
    }
    assert read_request("/v1/responses", body) == RequestView(
        "o4-mini", messages, ("get_weather",), None
    )


def test_its_key_headers_make_one_tenant() -> None:
    keys = TenantKeys(secrets.token_bytes(16))
    assert declared(NAME).key_headers == {"authorization", "api-key"}
    assert keys.of([("Authorization", "Bearer sk-one")]) == keys.of([("api-key", "sk-one")])


def test_its_slots_find_text_fragments_and_sequence_numbers() -> None:
    slots = slots_for(NAME)
    assert slots is not None and slots.sequence == ("sequence_number",)
    delta = {"type": "response.output_text.delta", "delta": "Hi", "sequence_number": 4}
    assert slots.text(js(delta, "response.output_text.delta")) == Slot(("delta",), "Hi", "0")
    kind = "response.function_call_arguments.delta"
    args = {"type": kind, "delta": "{", "output_index": 1}
    assert slots.call(js(args, kind)) == ("fragment", "1")


async def test_the_mock_serves_its_route() -> None:
    body = {"model": "m", "stream": True, "input": "hi"}
    status, content_type, answer = await mock_answer("POST", "/v1/responses", body, tokens=3)
    assert (status, content_type) == (200, "text/event-stream")
    expected = (S, OT, OT, OT, D, D, D, OT, OT, OT, TERM)
    assert kinds_of(NAME, frame_body(answer, "sse")) == [as_set(k) for k in expected]
