"""What every provider profile inherits (chaosproxy/core/providers/base.py), on two small
profiles declared here: a JSON profile reads each event's object (``[DONE]`` terminal
and any other non-object ``other`` whatever the provider, a truthy ``error`` an error),
a typed profile names each event by its SSE ``event:`` else its JSON ``type``; the
base's defaults (recognises nothing, classifies through ``classify``, means nothing).
The real providers' rules are in the test files beside this one."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import parse_block
from chaosproxy.core.providers.base import (
    ERROR_PIECE,
    NOTHING,
    TERMINAL_PIECE,
    EventContent,
    JsonProfile,
    ProviderProfile,
    TypedProfile,
)

DELTA = frozenset({"delta"})
STOP = frozenset({"terminal"})


class Chatty(JsonProfile):
    name: ClassVar[str] = "chatty"
    rank: ClassVar[int] = 99

    @classmethod
    def recognises_payload(cls, payload: dict[str, Any]) -> bool:
        return payload.get("object") == "chatty.chunk"

    def classify_payload(self, payload: dict[str, Any]) -> frozenset[str]:
        return STOP if payload.get("done") else DELTA

    def content_payload(self, payload: dict[str, Any]) -> EventContent:
        return EventContent(text=((0, str(payload.get("text", ""))),))


class Named(TypedProfile):
    name: ClassVar[str] = "named"
    rank: ClassVar[int] = 98

    def classify_type(self, kind: str, frame: Frame) -> frozenset[str]:
        return STOP if kind == "end" else DELTA

    def content_type(self, kind: str, frame: Frame) -> EventContent:
        return TERMINAL_PIECE if kind == "end" else EventContent(text=((0, kind),))


def sse(text: str) -> Frame:
    return parse_block(text.encode(), "sse")


@pytest.mark.parametrize(
    ("block", "kinds", "content"),
    [
        ('data: {"object":"chatty.chunk","text":"hi"}\n\n', DELTA, EventContent(text=((0, "hi"),))),
        ('data: {"done":true}\n\n', STOP, EventContent(text=((0, ""),))),
        ("data: [DONE]\n\n", STOP, TERMINAL_PIECE),
        ("data:  [DONE] \n\n", STOP, TERMINAL_PIECE),
        ("data: not json\n\n", frozenset({"other"}), NOTHING),
        ("data: [1, 2]\n\n", frozenset({"other"}), NOTHING),
        ('data: {"error":{"message":"overloaded"}}\n\n', frozenset({"error"}), ERROR_PIECE),
        ('data: {"error":null,"text":"fine"}\n\n', DELTA, EventContent(text=((0, "fine"),))),
        (": keepalive\n\n", frozenset({"other"}), NOTHING),
    ],
)
def test_a_json_profile_reads_each_events_object(
    block: str, kinds: frozenset[str], content: EventContent
) -> None:
    frame = sse(block)
    assert (Chatty().classify(frame), Chatty().content(frame)) == (kinds, content)


def test_a_json_profile_recognises_a_first_event_by_its_object() -> None:
    assert Chatty.recognises(sse('data: {"object":"chatty.chunk"}\n\n')) is True
    assert Chatty.recognises(sse('data: {"object":"other"}\n\n')) is False
    assert Chatty.recognises(sse("data: [DONE]\n\n")) is False


@pytest.mark.parametrize(
    ("block", "kinds", "content"),
    [
        ("event: part\ndata: {}\n\n", DELTA, EventContent(text=((0, "part"),))),
        ('data: {"type":"end"}\n\n', STOP, TERMINAL_PIECE),  # no event: its JSON type
        ('event: end\ndata: {"type":"part"}\n\n', STOP, TERMINAL_PIECE),  # the event wins
        ("data: [DONE]\n\n", STOP, TERMINAL_PIECE),
        ('data: {"no":"type"}\n\n', frozenset({"other"}), NOTHING),
        ("event: part\n\n", frozenset({"other"}), NOTHING),  # no data: no event
    ],
)
def test_a_typed_profile_names_each_event(
    block: str, kinds: frozenset[str], content: EventContent
) -> None:
    frame = sse(block)
    assert (Named().classify(frame), Named().content(frame)) == (kinds, content)


def test_the_bases_defaults() -> None:
    frame = sse('data: {"type":"x"}\n\n')
    assert ProviderProfile.recognises_type("x") is False
    assert ProviderProfile.recognises(frame) is False
    assert ProviderProfile().content(frame) == NOTHING
    named = Named()
    assert named.classifier()(frame) == named.classify(frame)
    with pytest.raises(NotImplementedError):
        ProviderProfile().classify(frame)
    with pytest.raises(NotImplementedError):
        ProviderProfile().error_event("sse")
