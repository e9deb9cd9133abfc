"""The provider registry (chaosproxy/core/providers/__init__.py) and what holds for every
profile: each declares everything the rest reads and has its own test file, detection,
error events that reparse, unknown and malformed events, and the classification
shortcuts against plain rules. Each provider's own kinds tables (written by reading its
captures, event by event), paths and declarations are in
tests/core/providers/test_<provider>.py.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers import (
    KINDS,
    PROVIDER_NAMES,
    ProviderProfile,
    declarations,
    declared,
    get_profile,
    provider_for_event,
    provider_for_path,
    provider_names,
    register,
    unregister,
)
from tests.support.properties import examples
from tests.support.provider_events import OT, TERM, D, E, S, T, U, captures, frame_body, js, sse

# --------------------------------------------------------------------------- captures
# Each provider's captures (tests/fixtures/providers/<module>_*) are tabled, event by
# event, in its own tests/core/providers/test_<module>.py; the streams of providers
# chaosproxy does not know (Cohere's) in test_generic.py.

#: Capture name prefixes that are no provider's module: the generic profile's captures.
UNKNOWN_PROVIDERS = ("cohere_",)


def test_every_capture_belongs_to_a_provider_test_file() -> None:
    modules = tuple(f"{type(p).__module__.rsplit('.', 1)[1]}_" for p in declarations())
    names = captures("")
    assert names
    assert sorted(n for n in names if not n.startswith(modules + UNKNOWN_PROVIDERS)) == []


# --------------------------------------------------------------------------- registry


def test_get_profile_returns_each_named_profile_once() -> None:
    for name in PROVIDER_NAMES:
        profile = get_profile(name)
        assert profile.name == name
        assert get_profile(name) is profile  # stateless: shared instances
    with pytest.raises(KeyError):
        get_profile("cohere")


def test_providers_are_discovered_in_rank_order() -> None:
    """Each provider module declares its place; the order is the one detection uses."""
    from chaosproxy.core.providers.base import ProviderProfile

    assert PROVIDER_NAMES == (
        "openai-chat",
        "openai-responses",
        "openai-realtime",
        "anthropic",
        "gemini",
        "ollama",
        "bedrock",
        "generic",
    )
    profiles: list[ProviderProfile] = []
    for name in PROVIDER_NAMES:
        profile = get_profile(name)
        assert isinstance(profile, ProviderProfile)
        profiles.append(profile)
    ranks = [type(p).rank for p in profiles]
    assert ranks == sorted(set(ranks))


# --------------------------------------------------------------------------- declarations

#: What every provider's class declares in its own body (chaosproxy/core/providers/base.py
#: says who reads each): a provider that inherits one has not said it, and a table
#: elsewhere would have to.
DECLARED = (
    "name",
    "rank",
    "paths",
    "request",
    "key_headers",
    "key_params",
    "slots",
    "mock",
    "mock_routes",
)
PROVIDER_TESTS = Path(__file__).parent / "providers"


def undeclared(cls: type[ProviderProfile]) -> list[str]:
    """The declarations ``cls`` leaves to its bases."""
    return [field for field in DECLARED if field not in vars(cls)]


def test_every_provider_declares_everything_the_rest_reads() -> None:
    lacking = {p.name: undeclared(type(p)) for p in declarations()}
    assert lacking == {name: [] for name in PROVIDER_NAMES}


def test_a_provider_that_leaves_a_declaration_out_is_found() -> None:
    class Half(ProviderProfile):
        name = "half"
        rank = 999
        paths = ()
        key_headers = frozenset[str]()

    assert undeclared(Half) == ["request", "key_params", "slots", "mock", "mock_routes"]


def test_every_provider_has_its_own_test_file() -> None:
    modules = {p.name: type(p).__module__.rsplit(".", 1)[1] for p in declarations()}
    missing = [
        f"tests/core/providers/test_{module}.py ({name})"
        for name, module in modules.items()
        if not (PROVIDER_TESTS / f"test_{module}.py").is_file()
    ]
    assert missing == []


@pytest.mark.parametrize("name", PROVIDER_NAMES)
def test_a_provider_names_a_mock_module_that_serves_its_routes(name: str) -> None:
    provider = declared(name)
    if provider.mock is None:
        assert provider.mock_routes == ()
        return
    module = importlib.import_module(provider.mock)
    assert provider.mock_routes
    assert callable(module.serve) and callable(module.error_body)
    if any(route.method == "GET" and not route.websocket for route in provider.mock_routes):
        assert callable(module.query_payload)
    if any(route.websocket for route in provider.mock_routes):
        assert callable(module.Conversation)


def test_a_provider_with_a_taken_name_or_rank_is_refused_and_generic_stays() -> None:
    class Twin(ProviderProfile):
        name = "anthropic"
        rank = 998

    class Crowding(ProviderProfile):
        name = "crowding"
        rank = 30  # anthropic's

    with pytest.raises(RuntimeError, match="share a name"):
        register(Twin)
    with pytest.raises(RuntimeError, match="share a rank"):
        register(Crowding)
    with pytest.raises(KeyError):
        unregister("generic")
    with pytest.raises(KeyError):
        unregister("no-such-provider")
    assert provider_names() == PROVIDER_NAMES


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", None),
        ("", None),
        ("/health?path=/v1/chat/completions", None),
    ],
)
def test_provider_for_path(path: str, expected: str | None) -> None:
    assert provider_for_path(path) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (js({"object": "chat.completion.chunk", "choices": []}), "openai-chat"),
        (js({"type": "response.created"}, "response.created"), "openai-responses"),
        (js({"type": "response.queued"}), "openai-responses"),  # type only, no event line
        (js({"type": "message_start"}, "message_start"), "anthropic"),
        (js({"type": "ping"}, "ping"), "anthropic"),
        (js({"candidates": []}), "gemini"),
        (js({"model": "m", "created_at": "t", "done": False}), "ollama"),
        (js({"model": "m", "created_at": "t"}), "generic"),
        (js({"type": "message-start"}, "message-start"), "generic"),
        (sse("[DONE]"), "generic"),
        (sse("not json"), "generic"),
        (sse(None), "generic"),
    ],
)
def test_provider_for_event(frame: Frame, expected: str) -> None:
    assert provider_for_event(frame) == expected


# --------------------------------------------------------------------------- error events


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize(
    ("fmt", "newline"), [("sse", b"\n"), ("sse", b"\r\n"), ("ndjson", b"\n"), ("raw", b"\n")]
)
def test_error_event_reparses_as_error(provider: str, fmt: Format, newline: bytes) -> None:
    profile = get_profile(provider)
    raw = profile.error_event(fmt, newline)
    natives: dict[str, Format] = {"ollama": "ndjson", "generic": "ndjson", "bedrock": "eventstream"}
    native = natives.get(provider, "sse")
    framed_as = native if fmt == "raw" else fmt
    (frame,) = frame_body(raw, framed_as)
    assert frame.complete
    assert frame.newline == (b"" if framed_as == "eventstream" else newline)
    if provider == "generic":
        # Generic knows no error shape: its made-up event is other, like everything else.
        assert profile.classify(frame) == {"other"}
    else:
        assert "error" in profile.classify(frame)


# --------------------------------------------------------------------------- every profile
# (each provider's own fine points: tests/core/providers/test_<provider>.py)

UNKNOWN_AND_MALFORMED = [
    js({"type": "brand_new_event", "x": 1}, "brand_new_event"),
    js({"type": "brand_new_event"}),
    js({"unrelated": True}),
    js([1, 2, 3]),
    js("a string"),
    sse("not json at all"),
    sse('{"truncated": '),
    sse(""),
    sse(None),  # comment-only block, no data
]


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("frame", UNKNOWN_AND_MALFORMED)
def test_unknown_and_non_json_events_are_other(provider: str, frame: Frame) -> None:
    assert get_profile(provider).classify(frame) == {"other"}


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("data", ["[DONE]", " [DONE] "])
def test_done_sentinel_is_terminal_for_every_profile(provider: str, data: str) -> None:
    assert get_profile(provider).classify(sse(data)) == {"terminal"}


_KEYS = [
    "type",
    "choices",
    "delta",
    "content",
    "role",
    "tool_calls",
    "usage",
    "error",
    "candidates",
    "parts",
    "text",
    "functionCall",
    "finishReason",
    "message",
    "response",
    "done",
    "refusal",
]
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=examples(150), deadline=None, database=None)
@given(payload=_json, event=st.none() | st.sampled_from(["error", "ping", "content_block_delta"]))
def test_classify_never_fails_and_never_returns_nothing(payload: Any, event: str | None) -> None:
    frame = js(payload, event)
    for name in PROVIDER_NAMES:
        kinds = get_profile(name).classify(frame)
        assert kinds
        assert kinds <= set(KINDS)
        assert "other" not in kinds or kinds == {"other"}


# ------------------------------------------------- classification shortcuts change nothing
# The profiles collect kinds as bit masks over shared sets, and the generic one skips the
# JSON parse when no ``"done": true`` can be in the text. Below, the same rules stated
# plainly (sets built per event, every payload parsed) must give the same kinds.


def _plain_done(data: str) -> bool:
    return data.strip() == "[DONE]"


def _plain_generic(payload: dict[str, Any]) -> set[str]:
    return {TERM} if payload.get("done") is True else {OT}


def _plain_openai_chat(payload: dict[str, Any]) -> set[str]:
    if payload.get("error"):
        return {E}
    choices = payload.get("choices")
    if choices == []:
        return {U} if isinstance(payload.get("usage"), dict) else {OT}
    kinds: set[str] = set()
    for choice in choices if isinstance(choices, list) else []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        if delta.get("role"):
            kinds.add(S)
        for key in ("content", "refusal"):
            if isinstance(delta.get(key), str) and delta[key]:
                kinds.add(D)
        calls = delta.get("tool_calls")
        if (isinstance(calls, list) and calls) or isinstance(delta.get("function_call"), dict):
            kinds.add(T)
    return kinds or {OT}


def _plain_gemini(payload: dict[str, Any]) -> set[str]:
    if payload.get("error"):
        return {E}
    kinds: set[str] = set()
    candidates = payload.get("candidates")
    for candidate in candidates if isinstance(candidates, list) else []:
        if not isinstance(candidate, dict):
            continue
        if candidate.get("finishReason"):
            kinds.add(TERM)
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict):
                continue
            text = part.get("text")
            if isinstance(text, str) and text and not part.get("thought"):
                kinds.add(D)
            if "functionCall" in part:
                kinds.add(T)
    return kinds or {OT}


def _plain_ollama(payload: dict[str, Any]) -> set[str]:
    if "error" in payload:
        return {E}
    kinds: set[str] = set()
    message = payload.get("message")
    if isinstance(message, dict):
        if isinstance(message.get("content"), str) and message["content"]:
            kinds.add(D)
        if isinstance(message.get("tool_calls"), list) and message["tool_calls"]:
            kinds.add(T)
    if isinstance(payload.get("response"), str) and payload["response"]:
        kinds.add(D)
    if payload.get("done") is True:
        kinds.add(TERM)
    return kinds or {OT}


def _is_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return bool(text)


#: Each profile's rules for the frames whose data is a JSON object, by profile name.
PLAIN: dict[str, Callable[[dict[str, Any]], set[str]]] = {
    "generic": _plain_generic,
    "openai-chat": _plain_openai_chat,
    "gemini": _plain_gemini,
    "ollama": _plain_ollama,
}


def _plain_kinds(provider: str, frame: Frame) -> set[str]:
    """The kinds of ``frame`` by the plain rules: a frame with no data is ``other``, the
    ``[DONE]`` sentinel ``terminal``, data that is not a JSON object ``other``, and a
    JSON object is read by the rules of ``provider``."""
    if frame.data is None:
        return {OT}
    if _plain_done(frame.data):
        return {TERM}
    payload = orjson.loads(frame.data) if _is_json(frame.data) else None
    return PLAIN[provider](payload) if isinstance(payload, dict) else {OT}


def _spellings(payload: Any) -> list[str]:
    """The payload as JSON text several ways: compact, spaced, every key letter "o"
    escaped (``"d\\u006fne"``), and pretty-printed with a trailing space."""
    compact = orjson.dumps(payload).decode()
    spaced = json.dumps(payload, ensure_ascii=False)
    escaped = re.sub(r'"([^"\\]*)":', lambda m: '"' + m[1].replace("o", "\\u006f") + '":', compact)
    return [compact, spaced, escaped, json.dumps(payload, indent=1) + " "]


_value: st.SearchStrategy[Any] = st.sampled_from(["x", True, [{}], {"name": "f"}, None, "", 0, []])
_chat_chunks = st.fixed_dictionaries(
    {
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "delta": st.fixed_dictionaries(
                        {},
                        optional={
                            k: _value
                            for k in ("role", "content", "refusal", "tool_calls", "function_call")
                        },
                    )
                    | _value
                },
            )
            | _value,
            max_size=3,
        )
    },
    optional={"usage": _value, "error": _value},
)
_gemini_chunks = st.fixed_dictionaries(
    {
        "candidates": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "finishReason": _value,
                    "content": st.fixed_dictionaries(
                        {},
                        optional={
                            "parts": st.lists(
                                st.fixed_dictionaries(
                                    {},
                                    optional={
                                        "text": _value,
                                        "thought": _value,
                                        "functionCall": _value,
                                    },
                                )
                                | _value,
                                max_size=3,
                            )
                            | _value
                        },
                    )
                    | _value,
                },
            )
            | _value,
            max_size=3,
        )
    },
    optional={"error": _value},
)
_ollama_chunks = st.fixed_dictionaries(
    {
        "message": st.fixed_dictionaries({"content": _value, "tool_calls": _value}) | _value,
        "done": _value,
    },
    optional={"response": _value, "error": _value},
)


def _same_kinds(payload: Any) -> None:
    for text in _spellings(payload):
        for name in PLAIN:
            frame = sse(text.replace("\n", " "))
            assert get_profile(name).classify(frame) == _plain_kinds(name, frame), (name, text)


@settings(max_examples=examples(200), deadline=None, database=None)
@given(
    payload=_json
    | st.fixed_dictionaries({"done": st.booleans() | st.just("true")}, optional={"x": _json})
)
def test_classify_equals_the_plain_rules(payload: Any) -> None:
    _same_kinds(payload)


@pytest.mark.parametrize(
    "shapes", [_chat_chunks, _gemini_chunks, _ollama_chunks], ids=["chat", "gemini", "ollama"]
)
def test_classify_equals_the_plain_rules_on_provider_shapes(shapes: Any) -> None:
    @settings(max_examples=examples(400), deadline=None, database=None)
    @given(payload=shapes)
    def check(payload: Any) -> None:
        _same_kinds(payload)

    check()


@pytest.mark.parametrize(
    "data",
    [
        '{"done": true}',
        '{"d\\u006fne": true}',
        '{"\\u0064one":true}',
        '{"done": false, "x": true}',
        '{"x": "done", "y": true}',
        '{"done": "true"}',
        "[true]",
        "true",
        '{"done": true, "done": false}',
        '{"done": false, "done": true}',
        '{"done": true',
    ],
)
def test_generic_done_true_however_spelled(data: str) -> None:
    frame = sse(data)
    assert get_profile("generic").classify(frame) == _plain_kinds("generic", frame)
