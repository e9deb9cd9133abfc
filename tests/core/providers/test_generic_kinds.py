"""The generic profile's compiled classifier (core/providers/generic_kinds.py), and
every profile's ``classifier()``: what the pipeline calls per event gives what the
profile's ``classify`` gives."""

from __future__ import annotations

import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.providers import PROVIDER_NAMES, get_profile
from chaosproxy.core.providers.generic_kinds import generic_kinds

FRAMES = [
    Frame(b": ping\n\n", None, comments=(" ping",)),
    Frame(b"data: [DONE]\n\n", "[DONE]"),
    Frame(b"data:  [DONE] \n\n", " [DONE] "),
    Frame(b'data: {"done": true}\n\n', '{"done": true}'),
    Frame(b'data: {"d\\u006fne": true}\n\n', '{"d\\u006fne": true}'),
    Frame(b'data: {"done": false, "x": true}\n\n', '{"done": false, "x": true}'),
    Frame(b'data: ["done", true]\n\n', '["done", true]'),
    Frame(b'data: {"t": 1, "pad": "xx"}\n\n', '{"t": 1, "pad": "xx"}'),
    Frame(b'data: {"type": "message_stop"}\n\n', '{"type": "message_stop"}'),
    Frame(
        b'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": null}]}\n\n',
        '{"choices": [{"delta": {"content": "hi"}, "finish_reason": null}]}',
    ),
]


def test_the_generic_kinds() -> None:
    assert [sorted(generic_kinds(f)) for f in FRAMES] == [
        ["other"],
        ["terminal"],
        ["terminal"],
        ["terminal"],
        ["terminal"],
        ["other"],
        ["other"],
        ["other"],
        ["other"],
        ["other"],
    ]


@pytest.mark.parametrize("name", PROVIDER_NAMES)
def test_a_profiles_classifier_answers_as_its_classify(name: str) -> None:
    profile = get_profile(name)
    classifier = profile.classifier()
    assert [classifier(f) for f in FRAMES] == [profile.classify(f) for f in FRAMES]
    assert (classifier is generic_kinds) == (name == "generic")
