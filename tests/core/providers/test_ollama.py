"""The ollama provider (chaosproxy/core/providers/ollama.py): the kinds of its captures'
events (tables written by reading each capture, event by event), its paths, its error
event, and what it declares for the rest: its request shape (chat and generate), no key
(a local server), slots and mock routes."""

from __future__ import annotations

import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.llm_request import Message, RequestView, read_request
from chaosproxy.core.providers import declared, get_profile, provider_for_event, provider_for_path
from chaosproxy.core.slots import Slot, slots_for
from tests.support.provider_events import (
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

NAME = "ollama"

#: Each capture's kinds (every first event is detected as ollama).
CAPTURES: dict[str, list[Kinds]] = {
    "ollama_chat_stream.ndjson": [D, TERM],
    # The final object has "response": "": terminal only.
    "ollama_generate_stream.ndjson": [D, TERM],
    "ollama_midstream_error.ndjson": [D, E],
}


def test_every_capture_of_it_has_a_table() -> None:
    assert set(CAPTURES) == captures("ollama_")


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_kinds_and_first_event(name: str) -> None:
    frames = load(name)
    assert kinds_of(NAME, frames) == [as_set(k) for k in CAPTURES[name]]
    assert provider_for_event(frames[0]) == NAME


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/api/chat", NAME), ("/api/generate", NAME), ("/ollama/api/chat", NAME), ("/api/tags", None)],
)
def test_paths(path: str, expected: str | None) -> None:
    assert provider_for_path(path) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (js({"message": {"content": "", "tool_calls": [{"function": {}}]}, "done": False}), {T}),
        (js({"message": {"content": "x"}, "done": True}), {D, TERM}),
        (js({"message": {"content": "", "thinking": "hm"}, "done": False}), {OT}),
        (js({"response": "", "done": False}), {OT}),
    ],
)
def test_fine_points(frame: Frame, expected: set[str]) -> None:
    assert get_profile(NAME).classify(frame) == expected


def test_error_event_matches_the_capture() -> None:
    captured = [f for f in load("ollama_midstream_error.ndjson") if "error" in f.json()]
    assert [get_profile(NAME).error_event("ndjson", b"\n")] == [f.raw for f in captured]


# --------------------------------------------------------------------------- declarations


def test_its_request_shape_reads_chat_and_generate() -> None:
    chat = {
        "model": "llama3.2",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        "stream": False,
    }
    assert read_request("/api/chat", chat) == RequestView(
        "llama3.2", (Message("system", "Be brief."), Message("user", "Hi")), ("get_weather",), False
    )
    generate = {"model": "llama3.2", "system": "Be brief.", "prompt": "Hi"}
    assert read_request("/api/generate", generate) == RequestView(
        "llama3.2", (Message("system", "Be brief."), Message("user", "Hi")), (), None
    )


def test_it_takes_no_key() -> None:
    assert (declared(NAME).key_headers, declared(NAME).key_params) == (frozenset(), frozenset())


def test_its_slots_find_text_but_no_tool_fragments() -> None:
    slots = slots_for(NAME)
    assert slots is not None and not slots.fragments
    last = js({"message": {"role": "assistant", "content": "Hi"}, "done": True})
    assert slots.text(last) == Slot(("message", "content"), "Hi", "0", terminal=True)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/chat", {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]}),
        ("/api/generate", {"model": "llama3.2", "prompt": "hi"}),
    ],
)
async def test_the_mock_serves_its_routes(path: str, body: object) -> None:
    status, content_type, answer = await mock_answer("POST", path, body, tokens=3)
    assert (status, content_type) == (200, "application/x-ndjson")
    assert kinds_of(NAME, frame_body(answer, "ndjson")) == [as_set(k) for k in (D, D, D, TERM)]
