"""Anthropic Messages: ``POST /v1/messages``.

Streams the documented flow: ``message_start``, ``content_block_start``, ``ping``,
``content_block_delta`` (``text_delta``)..., ``content_block_stop``, ``message_delta``
with the stop reason and cumulative usage, ``message_stop``. With tools, the block is a
``tool_use`` filled by ``input_json_delta`` fragments (the first one empty, as in the
docs' capture) and the stop reason is ``tool_use``. JSON is compact except the ping,
whose data is ``{"type": "ping"}`` as in every capture.
"""

from __future__ import annotations

import json
from typing import Any

from chaosproxy.mock import common
from chaosproxy.mock.common import JsonObject, Knobs, MockResponse, Plan, Tag, Tagged, compact, sse
from chaosproxy.scenario.fixtures import Fixture

DEFAULT_MODEL = "claude-sonnet-4-5"
CONTENT_TYPE = "text/event-stream"
PING = sse(b'{"type": "ping"}', event="ping")


def serve(call: common.MockCall) -> MockResponse:
    """The answer to a call to the mock's Messages route (the declaration's renderer)."""
    return respond(call.body, call.payload, call.knobs, call.fixture)


def respond(
    body: bytes, payload: JsonObject, knobs: Knobs, fixture: Fixture | None = None
) -> MockResponse:
    """The mock's answer to one Messages request (``fixture``'s when given)."""
    messages = common.required_list(payload, "messages", "messages: Field required")
    limit = common.int_field(payload, "max_tokens")
    if limit is None:
        raise common.MockRequestError("max_tokens: Field required")
    tools = common.tools_from(payload.get("tools"))
    choice = payload.get("tool_choice")
    if (isinstance(choice, dict) and choice.get("type") == "none") or _answers_tool_result(
        messages
    ):
        tools = []
    plan = common.make_plan(
        body,
        knobs,
        model=str(payload.get("model") or DEFAULT_MODEL),
        prompt_texts=common.strings_in(
            [payload.get("system"), messages], skip=frozenset({"role", "type"})
        ),
        limit=limit,
        tools=tools,
        forced_tool=common.forced_name(choice),
        fixture=fixture,
    )
    if payload.get("stream") is True:
        return MockResponse(CONTENT_TYPE, stream_events(plan))
    if plan.error is not None:
        return common.interrupted(plan, error_body)
    return common.json_reply(message(plan))


def _answers_tool_result(messages: list[Any]) -> bool:
    if not messages or not isinstance(messages[-1], dict):
        return False
    content = messages[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _fragments(plan: Plan, call: int) -> tuple[list[str], bool]:
    # Claude's partial_json has spaces after colons and commas, as json.dumps does.
    return plan.fragments(json.dumps(plan.tools[call].arguments, ensure_ascii=False))


def _all_fragments(plan: Plan) -> tuple[list[str], bool]:
    """Every call's fragments, and whether the limit cut any."""
    pieces: list[str] = []
    cut = False
    for j in range(len(plan.tools)):
        fragments, was_cut = _fragments(plan, j)
        pieces += fragments
        cut = cut or was_cut
    return pieces, cut


#: Anthropic's stop_reason for each provider-neutral finish reason.
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "refusal": "refusal",
}


def _stop_reason(plan: Plan) -> str:
    return STOP_REASONS[plan.neutral_finish(cut=_all_fragments(plan)[1])]


def _usage(plan: Plan, output_tokens: int) -> JsonObject:
    return {
        "input_tokens": plan.prompt_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _message(plan: Plan, content: list[JsonObject], stop: str | None, output: int) -> JsonObject:
    return {
        "id": "msg_01" + plan.ident("msg", 22),
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _usage(plan, output),
    }


def _tool_block(plan: Plan, call: int, arguments: JsonObject) -> JsonObject:
    given = plan.tools[call].id
    return {
        "type": "tool_use",
        "id": given or "toolu_01" + plan.ident(plan.label("toolu", call), 22),
        "name": plan.tools[call].name,
        "input": arguments,
    }


def _has_text(plan: Plan) -> bool:
    """Whether the content has a text block (text, or no call to make)."""
    return bool(plan.choices[0]) or not plan.tools


def stream_events(plan: Plan) -> list[bytes]:
    """Every event of the streamed answer, ``message_stop`` included (or the plan's
    in-stream error instead of the end)."""

    def event(body: JsonObject) -> bytes:
        return sse(compact(body), event=str(body["type"]))

    events: list[Tagged] = [
        (event({"type": "message_start", "message": _message(plan, [], None, 1)}), Tag.START)
    ]
    blocks: list[tuple[JsonObject, list[JsonObject]]] = []
    if _has_text(plan):
        blocks.append(
            (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": piece} for piece in plan.choices[0]],
            )
        )
    for j in range(len(plan.tools)):
        fragments, _ = _fragments(plan, j)
        blocks.append(
            (
                _tool_block(plan, j, {}),
                [{"type": "input_json_delta", "partial_json": p} for p in ["", *fragments]],
            )
        )
    for index, (block, deltas) in enumerate(blocks):
        start = {"type": "content_block_start", "index": index, "content_block": block}
        events.append((event(start), Tag.START if index == 0 else Tag.OTHER))
        if index == 0:
            events.append((PING, Tag.START))
        events += [
            (event({"type": "content_block_delta", "index": index, "delta": d}), Tag.DELTA)
            for d in deltas
        ]
        events.append((event({"type": "content_block_stop", "index": index}), Tag.OTHER))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": _stop_reason(plan), "stop_sequence": None},
        "usage": {"output_tokens": plan.completion_tokens(_all_fragments(plan)[0])},
    }
    events.append((event(delta), Tag.OTHER))
    events.append((event({"type": "message_stop"}), Tag.OTHER))
    return common.with_error(events, plan, event(error_event(plan)))


def error_event(plan: Plan) -> JsonObject:
    """The in-stream error, nested (an ``overloaded_error`` unless the fixture says)."""
    error = plan.error
    return {
        "type": "error",
        "error": {
            "type": (error.type if error else None) or "overloaded_error",
            "message": (error.message if error else None) or "Overloaded",
        },
    }


def message(plan: Plan) -> JsonObject:
    """The non-streamed ``message`` object."""
    fragments, _ = _all_fragments(plan)
    content: list[JsonObject] = []
    if _has_text(plan):
        content.append({"type": "text", "text": plan.text})
    for j, call in enumerate(plan.tools):
        # A cut tool input cannot be an object; real responses then carry what parsed.
        content.append(_tool_block(plan, j, {} if _fragments(plan, j)[1] else call.arguments))
    return _message(plan, content, _stop_reason(plan), plan.completion_tokens(fragments))


#: Anthropic's error type for a status (else invalid_request_error, or api_error).
ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str, kind: str | None = None) -> JsonObject:
    """Anthropic's error envelope (``kind``: its type, else from the status)."""
    if kind is None:
        kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
