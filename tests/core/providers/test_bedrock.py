"""The bedrock provider (chaosproxy/core/providers/bedrock.py): the kinds and content of
ConverseStream's events and of InvokeModelWithResponseStream's chunks (no capture of
Bedrock's binary stream is public: its messages are built with the encoder, in the
shapes of AWS's ConverseStream and InvokeModel documentation; botocore decodes what the
encoder builds: tests/core/framing/test_eventstream.py), its paths, its error event, and
what it declares for the rest: its request shape (the model in the path, Converse's
``toolConfig``), key headers, slots and mock routes."""

from __future__ import annotations

import base64
import secrets
from typing import Any

import orjson
import pytest

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing.eventstream import (
    encode_message,
    event_message,
    exception_message,
    message_headers,
)
from chaosproxy.core.llm_request import Message, RequestView, read_request
from chaosproxy.core.providers import declared, get_profile, provider_for_event, provider_for_path
from chaosproxy.core.redact import mask_headers
from chaosproxy.core.slots import Slot, slots_for
from chaosproxy.core.tenancy import TenantKeys
from tests.support.provider_events import as_set, frame_body, js, kinds_of, mock_answer

NAME = "bedrock"


def converse(name: str, payload: Any) -> bytes:
    return event_message(name, orjson.dumps(payload))


def chunk(vendor_event: Any) -> bytes:
    encoded = base64.b64encode(orjson.dumps(vendor_event)).decode()
    return event_message("chunk", orjson.dumps({"bytes": encoded}))


THROTTLED = exception_message("throttlingException", b'{"message":"Too many requests"}')

CONVERSE_STREAM: list[tuple[bytes, set[str]]] = [
    (converse("messageStart", {"role": "assistant"}), {"start"}),
    (
        converse("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hello"}}),
        {"delta"},
    ),
    (converse("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": ""}}), {"delta"}),
    (
        converse("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " world"}}),
        {"delta"},
    ),
    (converse("contentBlockStop", {"contentBlockIndex": 0}), {"other"}),
    (
        converse(
            "contentBlockStart",
            {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "w"}}},
        ),
        {"other"},
    ),
    (
        converse(
            "contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": ""}}}
        ),
        {"tool_delta"},
    ),
    (
        converse(
            "contentBlockDelta",
            {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"city":'}}},
        ),
        {"tool_delta"},
    ),
    (
        converse(
            "contentBlockDelta",
            {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '"Paris"}'}}},
        ),
        {"tool_delta"},
    ),
    (converse("contentBlockStop", {"contentBlockIndex": 1}), {"other"}),
    (
        converse(
            "contentBlockDelta",
            {"contentBlockIndex": 2, "delta": {"reasoningContent": {"text": "hm"}}},
        ),
        {"other"},
    ),
    (converse("messageStop", {"stopReason": "tool_use"}), {"other"}),
    (converse("metadata", {"usage": {"inputTokens": 3}, "metrics": {}}), {"usage", "terminal"}),
]

INVOKE_STREAM: list[tuple[bytes, set[str]]] = [
    # Anthropic's Messages events, by Anthropic's rules
    (chunk({"type": "message_start", "message": {"role": "assistant"}}), {"start"}),
    (
        chunk(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hi"},
            }
        ),
        {"delta"},
    ),
    (
        chunk(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{}"},
            }
        ),
        {"tool_delta"},
    ),
    (chunk({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}), {"usage"}),
    (chunk({"type": "message_stop", "amazon-bedrock-invocationMetrics": {}}), {"terminal"}),
    # Amazon Nova's, named as ConverseStream's events
    (chunk({"messageStart": {"role": "assistant"}}), {"start"}),
    (chunk({"contentBlockDelta": {"delta": {"text": "Hi"}, "contentBlockIndex": 0}}), {"delta"}),
    (chunk({"messageStop": {"stopReason": "end_turn"}}), {"other"}),
    (
        chunk({"metadata": {"usage": {}}, "amazon-bedrock-invocationMetrics": {}}),
        {"usage", "terminal"},
    ),
    (chunk({"messageStop": {}, "amazon-bedrock-invocationMetrics": {}}), {"terminal"}),
    # Meta Llama's and Amazon Titan's
    (chunk({"generation": "Hi", "stop_reason": None}), {"delta"}),
    (chunk({"outputText": "Hi", "index": 0}), {"delta"}),
    (
        chunk({"generation": "", "stop_reason": "stop", "amazon-bedrock-invocationMetrics": {}}),
        {"terminal"},
    ),
    # what is no vendor event
    (event_message("chunk", b'{"bytes":"not base64!"}'), {"other"}),
    (event_message("chunk", b'{"bytes":"' + base64.b64encode(b"not json") + b'"}'), {"other"}),
    (event_message("chunk", b"{}"), {"other"}),
    (event_message("brandNewEvent", b"{}"), {"other"}),
    (THROTTLED, {"error"}),
    (exception_message("modelStreamErrorException", b"{}"), {"error"}),
    (encode_message({":message-type": "error", ":error-code": "InternalFailure"}, b""), {"error"}),
]


@pytest.mark.parametrize("stream", ["converse", "invoke"])
def test_kinds(stream: str) -> None:
    table = CONVERSE_STREAM if stream == "converse" else INVOKE_STREAM
    frames = frame_body(b"".join(raw for raw, _ in table), "eventstream")
    assert kinds_of(NAME, frames) == [as_set(frozenset(kinds)) for _, kinds in table]


def test_content_reads_text_tool_input_finish_and_terminal() -> None:
    profile = get_profile(NAME)
    pieces = [
        profile.content(f)
        for f in frame_body(b"".join(r for r, _ in CONVERSE_STREAM), "eventstream")
    ]
    assert "".join(t for p in pieces for _, t in p.text) == "Hello world"
    assert [tool for p in pieces for tool in p.tools] == [
        ("1", ""),
        ("1", '{"city":'),
        ("1", '"Paris"}'),
    ]
    assert [end for p in pieces for end in p.tool_ends] == ["0", "1"]
    assert [f for p in pieces for f in p.finish] == [(0, "tool_use")]
    assert [p.terminal for p in pieces].count(True) == 1 and pieces[-1].terminal
    assert not any(p.error for p in pieces)
    (throttled,) = frame_body(THROTTLED, "eventstream")
    assert profile.content(throttled).error


def test_content_of_invoke_chunks_is_the_vendors() -> None:
    profile = get_profile(NAME)
    frames = frame_body(b"".join(r for r, _ in INVOKE_STREAM), "eventstream")
    pieces = [profile.content(f) for f in frames]
    assert [t for p in pieces for t in p.text] == [(0, "Hi")] * 4
    assert [tool for p in pieces for tool in p.tools] == [("1", "{}")]
    assert [i for i, p in enumerate(pieces) if p.terminal] == [4, 8, 9, 12]
    assert [f for p in pieces for f in p.finish] == [(0, "end_turn"), (0, "end_turn")]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream", NAME),
        ("/model/amazon.nova-lite-v1%3A0/invoke-with-response-stream", NAME),
        ("/bedrock/model/m/converse-stream/", NAME),
        ("/model/m/converse", None),
        ("/model/m/invoke", None),
        ("/model/a/b/converse-stream", None),
    ],
)
def test_paths(path: str, expected: str | None) -> None:
    assert provider_for_path(path) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        # SSE-framed (a scenario that forces the format): by its event name
        (js({"role": "assistant"}, "messageStart"), NAME),
        (js({"usage": {}}, "metadata"), "generic"),  # too common a name to tell
        # any event stream message: no other provider speaks the format
        (frame_body(event_message("chunk", b"{}"), "eventstream")[0], NAME),
        (frame_body(THROTTLED, "eventstream")[0], NAME),
    ],
)
def test_first_event(frame: Frame, expected: str) -> None:
    assert provider_for_event(frame) == expected


def test_error_event_is_a_throttling_exception() -> None:
    profile = get_profile(NAME)
    raw = profile.error_event("eventstream")
    assert raw == exception_message(
        "throttlingException", b'{"message":"Too many requests, please wait before trying again."}'
    )
    assert profile.error_event("raw") == raw
    assert message_headers(raw)[":message-type"] == "exception"
    assert profile.error_event("sse") == (
        b"event: throttlingException\ndata: "
        b'{"type":"throttlingException","message":"Too many requests, please wait before '
        b'trying again."}\n\n'
    )


# --------------------------------------------------------------------------- declarations


def test_its_request_shape_reads_the_model_from_the_path_and_tools_from_tool_config() -> None:
    body = {
        "system": [{"text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"text": "Weather?"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "name": "w"}}]},
            {"role": "user", "content": [{"toolResult": {"content": [{"text": "18 C"}]}}]},
        ],
        "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather"}}, {"cachePoint": {}}]},
    }
    path = "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"
    assert read_request(path, body) == RequestView(
        "anthropic.claude-3-5-haiku-20241022-v1:0",
        (
            Message("system", "Be brief."),
            Message("user", "Weather?"),
            Message("assistant", ""),
            Message("tool", "18 C"),
        ),
        ("get_weather",),
        True,
    )
    assert read_request("/model/m/converse", body).stream is False
    assert read_request("/model/m/invoke-with-response-stream", None) == RequestView(
        "m", (), (), True
    )
    assert read_request("/model/m/converse-stream", {"model": "x"}).model == "x"


SIGV4 = (
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261208/us-east-1/bedrock/aws4_request, "
    "SignedHeaders=host;x-amz-date, Signature={}"
)


def test_its_key_headers_make_a_tenant_and_are_masked() -> None:
    keys = TenantKeys(secrets.token_bytes(16))
    assert declared(NAME).key_headers == {"authorization", "x-amz-security-token"}
    assert declared(NAME).key_params == frozenset()
    # A Bedrock API key is a Bearer token; SigV4's whole Authorization value is the key
    # (its signature changes with every request: each request is its own tenant).
    assert keys.of([("Authorization", "Bearer k1")]) != keys.anonymous
    one, two = SIGV4.format("a" * 64), SIGV4.format("b" * 64)
    assert keys.of([("Authorization", one)]) != keys.of([("Authorization", two)])
    token = [("Authorization", one), ("X-Amz-Security-Token", "session")]
    assert keys.of(token) != keys.of([("Authorization", one)])
    assert mask_headers([*token, ("X-Amz-Date", "20261208T000000Z")]) == {
        "authorization": "***",
        "x-amz-security-token": "***",
        "x-amz-date": "20261208T000000Z",
    }


def test_its_slots_find_text_and_tool_use_input_fragments() -> None:
    slots = slots_for(NAME)
    assert slots is not None and slots.fragments
    frames = frame_body(b"".join(r for r, _ in CONVERSE_STREAM), "eventstream")
    assert [slots.text(f) for f in frames[1:4]] == [
        Slot(("delta", "text"), "Hello", "0"),
        None,  # an empty text is no slot
        Slot(("delta", "text"), " world", "0"),
    ]
    assert [slots.call(f) for f in frames[4:10]] == [
        ("close", "0"),  # a text block's stop too: the faults keep only their calls'
        ("open", "1"),
        ("fragment", "1"),
        ("fragment", "1"),
        ("fragment", "1"),
        ("close", "1"),
    ]
    assert slots.tool(frames[7]) == Slot(("delta", "toolUse", "input"), '{"city":', "1")
    # InvokeModel's chunks hold their vendor's event in base64: no plain slot
    invoke = frame_body(b"".join(r for r, _ in INVOKE_STREAM), "eventstream")
    assert [s for f in invoke if (s := slots.text(f) or slots.tool(f))] == []


async def test_the_mock_serves_its_routes() -> None:
    body = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    path = "/model/amazon.nova-lite-v1%3A0/converse-stream"
    status, content_type, answer = await mock_answer("POST", path, body, tokens=3)
    assert (status, content_type) == (200, "application/vnd.amazon.eventstream")
    frames = frame_body(answer, "eventstream")
    assert [f.type for f in frames] == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    expected = ({"start"}, {"delta"}, {"delta"}, {"delta"}, {"other"}, {"other"})
    assert kinds_of(NAME, frames) == [*map(frozenset, expected), {"usage", "terminal"}]
    path = "/model/amazon.nova-lite-v1%3A0/invoke-with-response-stream"
    status, _, answer = await mock_answer("POST", path, body, tokens=3)
    assert status == 200
    assert kinds_of(NAME, frame_body(answer, "eventstream"))[-1] == {"usage", "terminal"}
    status, _, answer = await mock_answer("POST", "/model/m/converse", body)
    assert status == 404
