"""The openai-realtime provider (chaosproxy/core/providers/openai_realtime.py): the
kinds of its server events (the GA names and the beta's), its path, first-event
detection, content, its error event, what it declares (request shape, keys, no slots,
its WebSocket mock route) and the kinds of the mock's answer."""

from __future__ import annotations

import secrets

import orjson
import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.providers import declared, get_profile, provider_for_event, provider_for_path
from chaosproxy.core.providers.base import EventContent, MockRoute
from chaosproxy.core.slots import Slot, slots_for
from chaosproxy.core.tenancy import TenantKeys
from chaosproxy.mock.common import Knobs, MockCall
from chaosproxy.mock.openai_realtime import SILENCE, Conversation, serve
from tests.support.provider_events import OT, TERM, D, E, S, T, as_set, frame_body, js, kinds_of

NAME = "openai-realtime"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/realtime", NAME),
        ("/v1/realtime?model=gpt-realtime", NAME),
        ("/openai/v1/realtime", NAME),
        ("/v1/realtime/sessions", None),
        ("/v1/realtime/client_secrets", None),
    ],
)
def test_paths(path: str, expected: str | None) -> None:
    assert provider_for_path(path) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (js({"type": "response.created"}), {S}),
        (js({"type": "response.output_text.delta", "delta": "x"}), {D}),
        (js({"type": "response.output_audio_transcript.delta", "delta": "x"}), {D}),
        (js({"type": "response.text.delta", "delta": "x"}), {D}),  # beta
        (js({"type": "response.audio_transcript.delta", "delta": "x"}), {D}),  # beta
        (js({"type": "response.output_audio.delta", "delta": SILENCE}), {OT}),
        (js({"type": "response.function_call_arguments.delta", "delta": "{"}), {T}),
        (js({"type": "response.done", "response": {"status": "completed"}}), {TERM}),
        (js({"type": "response.done", "response": {"status": "failed"}}), {E, TERM}),
        (js({"type": "error", "error": {"message": "x"}}), {E}),
        (js({"type": "session.created"}), {OT}),
        (js({"type": "rate_limits.updated"}), {OT}),
    ],
)
def test_kinds(frame: Frame, expected: set[str]) -> None:
    assert get_profile(NAME).classify(frame) == expected


def test_a_session_created_first_event_is_detected_as_realtime() -> None:
    assert provider_for_event(js({"type": "session.created", "session": {}})) == NAME
    assert provider_for_event(js({"type": "response.created", "response": {}})) != NAME


@pytest.mark.parametrize(
    ("payload", "content"),
    [
        ({"type": "response.output_text.delta", "delta": "Hi"}, EventContent(text=((0, "Hi"),))),
        ({"type": "response.output_text.delta", "delta": ""}, EventContent()),
        (
            {"type": "response.function_call_arguments.delta", "item_id": "i1", "delta": "{"},
            EventContent(tools=(("i1", "{"),)),
        ),
        (
            {"type": "response.function_call_arguments.done", "call_id": "c1"},
            EventContent(tool_ends=("c1",)),
        ),
        (
            {"type": "response.done", "response": {"status": "completed"}},
            EventContent(terminal=True, finish=((0, "completed"),)),
        ),
        ({"type": "error", "error": {}}, EventContent(error=True)),
    ],
)
def test_content(payload: dict[str, object], content: EventContent) -> None:
    assert get_profile(NAME).content(js(payload)) == content


def test_error_event_is_one_message_of_the_documented_shape() -> None:
    raw = get_profile(NAME).error_event("ndjson")
    assert raw.endswith(b"}\n") and raw.count(b"\n") == 1
    payload = orjson.loads(raw)
    assert payload["type"] == "error"
    assert payload["error"].keys() == {"type", "code", "message", "param", "event_id"}


def test_what_it_declares() -> None:
    provider = declared(NAME)
    assert provider.mock == "chaosproxy.mock.openai_realtime"
    assert provider.mock_routes == (MockRoute("/v1/realtime", method="GET", websocket=True),)
    keys = TenantKeys(secrets.token_bytes(16))
    one = keys.of([("Authorization", "Bearer sk-one")])
    assert one == keys.of([("api-key", "sk-one")])
    assert one != keys.of([("Authorization", "Bearer sk-two")])


def test_its_slots_find_text_and_tool_fragments_and_calls() -> None:
    slots = slots_for(NAME)
    assert slots is not None and slots.sequence is None
    kind = "response.output_text.delta"
    assert slots.text(js({"type": kind, "delta": "Hi"})) == Slot(("delta",), "Hi", "0")
    assert slots.text(js({"type": kind, "delta": ""})) is None
    kind = "response.function_call_arguments.delta"
    args = {"type": kind, "item_id": "item_1", "call_id": "call_1", "delta": "{"}
    assert slots.tool(js(args)) == Slot(("delta",), "{", "item_1")
    assert slots.call(js(args)) == ("fragment", "item_1")
    item = {"id": "item_1", "type": "function_call"}
    added = {"type": "response.output_item.added", "item": item}
    assert slots.call(js(added)) == ("open", "item_1")
    done = {"type": "response.function_call_arguments.done", "item_id": "item_1"}
    assert slots.call(js(done)) == ("close", "item_1")
    message = {"type": "response.output_item.added", "item": {"id": "m", "type": "message"}}
    assert slots.call(js(message)) is None


def _answer(payload: dict[str, object], tokens: int = 3) -> list[Frame]:
    call = MockCall(orjson.dumps(payload), payload, Knobs(tokens, 0.0), None, {}, {})
    body = b"".join(chunk + b"\n" for chunk in serve(call).chunks)
    return frame_body(body, "ndjson")


def test_the_mocks_answer_text_audio_then_done() -> None:
    conversation = Conversation("gpt-realtime")
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    replies, asked = conversation.receive(
        orjson.dumps({"type": "conversation.item.create", "item": item}).decode()
    )
    assert [orjson.loads(r)["type"] for r in replies] == ["conversation.item.created"]
    assert asked is None
    replies, asked = conversation.receive('{"type":"response.create"}')
    assert replies == [] and asked is not None
    frames = _answer(asked)
    assert [f.type for f in frames] == [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_item.done",
        "response.done",
    ]
    assert kinds_of(NAME, frames) == [
        as_set(k) for k in (S, OT, OT, D, D, D, OT, OT, OT, OT, OT, TERM)
    ]
    audio = frames[8].json()
    assert isinstance(audio, dict) and audio["delta"] == SILENCE


def test_the_mock_calls_the_offered_tool() -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    frames = _answer({"input": [], "tools": [tool]})
    types = [f.type for f in frames]
    assert "response.function_call_arguments.delta" in types
    done = next(f.json() for f in frames if f.type == "response.function_call_arguments.done")
    assert isinstance(done, dict) and done["name"] == "get_weather"
    assert orjson.loads(done["arguments"]) == {}
    assert types[-1] == "response.done"


def test_a_bad_client_event_is_answered_with_an_error_event() -> None:
    replies, asked = Conversation(None).receive("{not json")
    (error,) = (orjson.loads(r) for r in replies)
    assert error["type"] == "error" and "not valid JSON" in error["error"]["message"]
    assert asked is None
