"""The anthropic provider (chaosproxy/core/providers/anthropic.py): the kinds of its
captures' events (tables written by reading each capture, event by event), its paths,
its error event, and what it declares for the rest: its request shape, key headers,
slots and mock routes."""

from __future__ import annotations

import secrets

import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.llm_request import Message, RequestView, read_request
from chaosproxy.core.providers import declared, get_profile, provider_for_event, provider_for_path
from chaosproxy.core.redact import mask_headers
from chaosproxy.core.slots import Slot, slots_for
from chaosproxy.core.tenancy import TenantKeys
from tests.support.provider_events import (
    OT,
    TERM,
    D,
    E,
    Kinds,
    P,
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

NAME = "anthropic"

#: Each capture's kinds (every first event is detected as anthropic: its names are).
CAPTURES: dict[str, list[Kinds]] = {
    "anthropic_docs_basic.sse": [S, OT, P, D, D, OT, U, TERM],
    # 13 text deltas "Okay" … ":", then 9 input_json_delta fragments, the first "".
    "anthropic_docs_tool_use.sse": [S, OT, P, *[D] * 13, OT, OT, *[T] * 9, OT, U, TERM],
    "anthropic_error_overloaded.sse": [E],
    # The SDK fixtures have no blank line after message_stop: an unterminated last event.
    "anthropic_sdkfixture_basic_response.txt": [S, OT, P, D, D, D, OT, U, TERM],
    # Stops mid tool JSON (max_tokens): no content_block_stop before message_delta.
    "anthropic_sdkfixture_incomplete_partial_json_response.txt": [
        *[S, OT, P, *[D] * 5, OT, OT, *[T] * 4, U, TERM]
    ],
    "anthropic_sdkfixture_refusal_response.txt": [S, OT, OT, U, TERM],
    "anthropic_sdkfixture_tool_use_response.txt": [S, OT, P, D, D, OT, OT, *[T] * 5, OT, U, TERM],
}


def test_every_capture_of_it_has_a_table() -> None:
    assert set(CAPTURES) == captures("anthropic_")


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_kinds_and_first_event(name: str) -> None:
    frames = load(name)
    assert kinds_of(NAME, frames) == [as_set(k) for k in CAPTURES[name]]
    assert provider_for_event(frames[0]) == NAME


def test_unterminated_last_event_is_still_classified() -> None:
    last = load("anthropic_sdkfixture_basic_response.txt")[-1]
    assert last.complete is False
    assert get_profile(NAME).classify(last) == {"terminal"}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/messages", NAME),
        ("/anthropic/v1/messages?beta=true", NAME),
        ("/v1/messages/count_tokens", None),
        ("/v1/threads/t_1/messages", None),
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude:streamRawPredict",
            NAME,
        ),
    ],
)
def test_paths(path: str, expected: str | None) -> None:
    assert provider_for_path(path) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (js({"type": "content_block_delta", "delta": {"type": "thinking_delta"}}), {OT}),
        (js({"type": "content_block_delta", "delta": {"type": "signature_delta"}}), {OT}),
        (js({"type": "content_block_delta"}, "content_block_delta"), {OT}),
    ],
)
def test_fine_points(frame: Frame, expected: set[str]) -> None:
    assert get_profile(NAME).classify(frame) == expected


def test_error_event_matches_the_capture() -> None:
    (captured,) = load("anthropic_error_overloaded.sse")
    assert get_profile(NAME).error_event("sse", b"\n") == captured.raw


# --------------------------------------------------------------------------- declarations


def test_its_request_shape_reads_system_blocks_and_tool_results() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "user", "content": [{"type": "tool_result", "content": "sunny"}]},
        ],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "stream": True,
    }
    assert read_request("/v1/messages", body) == RequestView(
        "claude-sonnet-4-5",
        (Message("system", "Be brief."), Message("user", "Weather?"), Message("tool", "sunny")),
        ("get_weather",),
        True,
    )


def test_its_key_header_makes_a_tenant_and_is_masked() -> None:
    keys = TenantKeys(secrets.token_bytes(16))
    assert declared(NAME).key_headers == {"x-api-key"}
    assert keys.of([("X-Api-Key", "k1")]) == keys.of([("Authorization", "Bearer k1")])
    assert keys.of([("x-api-key", "k1")]) != keys.anonymous
    assert mask_headers([("X-Api-Key", "k1")]) == {"x-api-key": "***"}


def test_its_slots_find_text_and_tool_fragments() -> None:
    slots = slots_for(NAME)
    assert slots is not None and slots.fragments
    text = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hi"},
    }
    assert slots.text(js(text, "content_block_delta")) == Slot(("delta", "text"), "Hi", "0")
    start = {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use"}}
    assert slots.call(js(start, "content_block_start")) == ("open", "1")


async def test_the_mock_serves_its_route() -> None:
    body = {"model": "m", "max_tokens": 9, "stream": True, "messages": []}
    status, content_type, answer = await mock_answer("POST", "/v1/messages", body, tokens=3)
    assert (status, content_type) == (200, "text/event-stream")
    expected = (S, OT, P, D, D, D, OT, U, TERM)
    assert kinds_of(NAME, frame_body(answer, "sse")) == [as_set(k) for k in expected]
