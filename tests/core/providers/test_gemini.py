"""The gemini provider (chaosproxy/core/providers/gemini.py): the kinds of its captures'
events (tables written by reading each capture, event by event), its paths, its error
event, and what it declares for the rest: its request shape (the model in the path), key
header and parameter, slots and mock routes."""

from __future__ import annotations

import secrets

import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.llm_request import Message, RequestView, read_request
from chaosproxy.core.providers import declared, get_profile, provider_for_event, provider_for_path
from chaosproxy.core.redact import redact_path
from chaosproxy.core.slots import Slot, slots_for
from chaosproxy.core.tenancy import TenantKeys
from tests.support.provider_events import (
    DT,
    OT,
    TERM,
    D,
    E,
    Kinds,
    T,
    as_set,
    captures,
    frame_body,
    js,
    kinds_of,
    load,
    mock_answer,
)

NAME = "gemini"

#: Each capture's kinds, and what its first event is detected as (an error as the very
#: first event of a data-only stream is ambiguous: generic).
CAPTURES: dict[str, tuple[list[Kinds], str]] = {
    # The last chunk carries the last text and finishReason.
    "gemini_2_0_flash_text.crlf.sse": ([D, D, D, DT], NAME),
    # Here finishReason comes alone, in a chunk without parts.
    "gemini_2_5_flash_short.crlf.sse": ([D, TERM], NAME),
    "gemini_midstream_error.crlf.sse": ([E], "generic"),
}


def test_every_capture_of_it_has_a_table() -> None:
    assert set(CAPTURES) == captures("gemini_")


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_kinds_and_first_event(name: str) -> None:
    expected, first = CAPTURES[name]
    frames = load(name)
    assert kinds_of(NAME, frames) == [as_set(k) for k in expected]
    assert provider_for_event(frames[0]) == first


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse", NAME),
        ("/v1beta/models/gemini-2.0-flash:generateContent", NAME),
        (
            "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro"
            ":streamGenerateContent?alt=sse",
            NAME,
        ),
        ("/v1beta/models/gemini-2.0-flash:countTokens", None),
    ],
)
def test_paths(path: str, expected: str | None) -> None:
    assert provider_for_path(path) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (js({"candidates": [{"content": {"parts": [{"functionCall": {}}]}}]}), {T}),
        (js({"candidates": [{"content": {"parts": [{"text": "hm", "thought": True}]}}]}), {OT}),
        (js({"candidates": [{"content": {"parts": [{"text": ""}]}}]}), {OT}),
        (js({"candidates": [{"finishReason": "SAFETY"}]}), {TERM}),
        (js({"promptFeedback": {"blockReason": "SAFETY"}}), {OT}),
    ],
)
def test_fine_points(frame: Frame, expected: set[str]) -> None:
    assert get_profile(NAME).classify(frame) == expected


def test_error_event_matches_the_capture_in_crlf() -> None:
    (captured,) = load("gemini_midstream_error.crlf.sse")
    raw = get_profile(NAME).error_event("sse", b"\r\n")
    assert raw == captured.raw
    assert raw.startswith(b'data: {"error": {"code": 503,')
    assert raw.endswith(b'"status": "UNAVAILABLE"}}\r\n\r\n')
    assert b"\n" not in raw.replace(b"\r\n", b"")


# --------------------------------------------------------------------------- declarations


def test_its_request_shape_reads_the_model_from_the_path() -> None:
    body = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Weather?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "get_weather"}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "get_weather"}}]},
        ],
        "tools": [{"functionDeclarations": [{"name": "get_weather"}, {"name": "get_time"}]}],
    }
    path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
    assert read_request(path, body) == RequestView(
        "gemini-2.0-flash",
        (
            Message("system", "Be brief."),
            Message("user", "Weather?"),
            Message("assistant", ""),
            Message("tool", ""),
        ),
        ("get_weather", "get_time"),
        True,
    )
    unary = "/v1beta/models/gemini-2.0-flash:generateContent"
    assert read_request(unary, None) == RequestView("gemini-2.0-flash", (), (), False)


def test_its_key_header_and_parameter_make_one_tenant_and_are_masked() -> None:
    keys = TenantKeys(secrets.token_bytes(16))
    assert declared(NAME).key_headers == {"x-goog-api-key"}
    assert declared(NAME).key_params == {"key"}
    by_header = keys.of([("x-goog-api-key", "AIza-one")])
    assert keys.of([], "alt=sse&key=AIza-one") == by_header != keys.anonymous
    assert redact_path("/v1beta/models/g:streamGenerateContent?key=abc&alt=sse") == (
        "/v1beta/models/g:streamGenerateContent?key=***&alt=sse"
    )


def test_its_slots_find_text_but_no_tool_fragments() -> None:
    slots = slots_for(NAME)
    assert slots is not None and not slots.fragments
    chunk = {"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "finishReason": "STOP"}]}
    assert slots.text(js(chunk)) == Slot(
        ("candidates", 0, "content", "parts", 0, "text"), "Hi", "0", terminal=True
    )


async def test_the_mock_serves_its_route_and_refuses_other_actions() -> None:
    body = {"contents": [{"parts": [{"text": "hi"}]}]}
    path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
    status, content_type, answer = await mock_answer("POST", path, body, tokens=3)
    assert (status, content_type) == (200, "text/event-stream")
    assert kinds_of(NAME, frame_body(answer, "sse")) == [as_set(k) for k in (D, D, DT)]
    path = "/v1beta/models/gemini-2.0-flash:countTokens"
    status, _, answer = await mock_answer("POST", path, body)
    assert (status, answer) == (
        404,
        b'{"error":{"code":404,"message":"Unknown path: POST '
        b'/v1beta/models/gemini-2.0-flash:countTokens","status":"NOT_FOUND"}}',
    )
