"""The generic provider (chaosproxy/core/providers/generic.py), what detection falls back
to: only the universal terminal markers, the ``Authorization`` key every gateway takes,
and nothing else declared (no paths, slots or mock). Its captures are streams of
providers chaosproxy does not know (Cohere's)."""

from __future__ import annotations

import secrets

import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.llm_request import RequestView, read_request
from chaosproxy.core.providers import FALLBACK, declared, get_profile, provider_for_event
from chaosproxy.core.slots import fragments_problem, slots_for, text_problem
from chaosproxy.core.tenancy import TenantKeys
from tests.support.provider_events import OT, TERM, captures, js, kinds_of, load

NAME = "generic"

#: Not supported providers: every event is other (no [DONE], no done:true).
CAPTURES: dict[str, int] = {"cohere_v1_chat.ndjson": 5, "cohere_v2_chat.sse": 6}


def test_it_is_the_fallback() -> None:
    assert FALLBACK == NAME


def test_every_capture_of_an_unknown_provider_has_a_table() -> None:
    assert set(CAPTURES) == captures("cohere_")


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_unknown_streams_are_other_and_detected_as_generic(name: str) -> None:
    frames = load(name)
    assert kinds_of(NAME, frames) == [frozenset({OT})] * CAPTURES[name]
    assert provider_for_event(frames[0]) == NAME


@pytest.mark.parametrize(
    ("frame", "expected"),
    [(js({"done": True}), {TERM}), (js({"choices": [{"delta": {"content": "x"}}]}), {OT})],
)
def test_fine_points(frame: Frame, expected: set[str]) -> None:
    assert get_profile(NAME).classify(frame) == expected


def test_it_declares_only_the_universal_key() -> None:
    provider = declared(NAME)
    assert (provider.paths, provider.slots, provider.mock, provider.mock_routes) == (
        (),
        None,
        None,
        (),
    )
    keys = TenantKeys(secrets.token_bytes(16))
    assert provider.key_headers == {"authorization"}
    assert keys.of([("Authorization", "Bearer k")]) != keys.anonymous
    assert read_request("/anything", {"model": "m", "tools": [{"name": "f"}]}) == RequestView(
        "m", (), ("f",), None
    )


def test_content_faults_say_why_they_cannot_rewrite_it() -> None:
    assert slots_for(NAME) is None
    assert text_problem(NAME) == (
        "a generic stream's text is unknown: there are no text deltas to rewrite"
    )
    assert fragments_problem(NAME) == (
        "a generic stream's tool calls are unknown: there are no argument fragments"
    )
