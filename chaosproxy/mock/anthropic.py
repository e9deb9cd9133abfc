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

from chaosproxy.mock.common import (
    JsonObject,
    Knobs,
    MockRequestError,
    Plan,
    Reply,
    compact,
    forced_name,
    int_field,
    json_reply,
    make_plan,
    sse,
    strings_in,
    tools_from,
)

DEFAULT_MODEL = "claude-sonnet-4-5"
CONTENT_TYPE = "text/event-stream"
PING = sse(b'{"type": "ping"}', event="ping")


def respond(body: bytes, payload: JsonObject, knobs: Knobs) -> Reply:
    """The mock's answer to one Messages request."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        raise MockRequestError("messages: Field required")
    limit = int_field(payload, "max_tokens")
    if limit is None:
        raise MockRequestError("max_tokens: Field required")
    tools = tools_from(payload.get("tools"))
    choice = payload.get("tool_choice")
    if (isinstance(choice, dict) and choice.get("type") == "none") or _answers_tool_result(
        messages
    ):
        tools = []
    plan = make_plan(
        body,
        knobs,
        model=str(payload.get("model") or DEFAULT_MODEL),
        prompt_texts=strings_in(
            [payload.get("system"), messages], skip=frozenset({"role", "type"})
        ),
        limit=limit,
        tools=tools,
        forced_tool=forced_name(choice),
    )
    if payload.get("stream") is True:
        return Reply(CONTENT_TYPE, stream_events(plan))
    return json_reply(message(plan))


def _answers_tool_result(messages: list[Any]) -> bool:
    if not messages or not isinstance(messages[-1], dict):
        return False
    content = messages[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _arguments(plan: Plan) -> str:
    # Claude's partial_json has spaces after colons and commas, as json.dumps does.
    assert plan.tool is not None
    return json.dumps(plan.tool.arguments, ensure_ascii=False)


def _fragments(plan: Plan) -> tuple[list[str], bool]:
    return plan.fragments(_arguments(plan)) if plan.tool else ([], plan.truncated)


def _stop_reason(plan: Plan) -> str:
    if _fragments(plan)[1]:
        return "max_tokens"
    return "tool_use" if plan.tool else "end_turn"


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


def _tool_block(plan: Plan, arguments: JsonObject) -> JsonObject:
    assert plan.tool is not None
    return {
        "type": "tool_use",
        "id": "toolu_01" + plan.ident("toolu", 22),
        "name": plan.tool.name,
        "input": arguments,
    }


def stream_events(plan: Plan) -> list[bytes]:
    """Every event of the streamed answer, ``message_stop`` included."""

    def event(body: JsonObject) -> bytes:
        return sse(compact(body), event=str(body["type"]))

    fragments, _ = _fragments(plan)
    events = [event({"type": "message_start", "message": _message(plan, [], None, 1)})]
    if plan.tool is not None:
        block = _tool_block(plan, {})
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *fragments]]
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": token} for token in plan.choices[0]]
    events.append(event({"type": "content_block_start", "index": 0, "content_block": block}))
    events.append(PING)
    events += [event({"type": "content_block_delta", "index": 0, "delta": d}) for d in deltas]
    events.append(event({"type": "content_block_stop", "index": 0}))
    events.append(
        event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _stop_reason(plan), "stop_sequence": None},
                "usage": {"output_tokens": plan.completion_tokens(fragments)},
            }
        )
    )
    events.append(event({"type": "message_stop"}))
    return events


def message(plan: Plan) -> JsonObject:
    """The non-streamed ``message`` object."""
    fragments, cut = _fragments(plan)
    if plan.tool is not None:
        # A cut tool input cannot be an object; real responses then carry what parsed.
        content = [_tool_block(plan, {} if cut else plan.tool.arguments)]
    else:
        content = [{"type": "text", "text": plan.text}]
    return _message(plan, content, _stop_reason(plan), plan.completion_tokens(fragments))


def error_body(status: int, message: str) -> JsonObject:
    """Anthropic's error envelope."""
    kind = {404: "not_found_error", 405: "invalid_request_error"}.get(
        status, "invalid_request_error" if status < 500 else "api_error"
    )
    return {"type": "error", "error": {"type": kind, "message": message}}
