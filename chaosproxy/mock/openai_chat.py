"""OpenAI Chat Completions: ``POST /v1/chat/completions``.

Streams ``data:`` chunks shaped like the gpt-4o captures in the provider fixtures: a
first chunk with the role, one chunk per content token (or per tool-argument fragment),
a finish chunk per choice, a usage chunk when ``stream_options.include_usage`` is true,
then ``data: [DONE]``. With ``n`` > 1 the choices interleave by index.
"""

from __future__ import annotations

from typing import Any

from chaosproxy.mock.common import (
    JsonObject,
    Knobs,
    MockRequestError,
    Plan,
    Reply,
    compact,
    forced_name,
    hex_id,
    int_field,
    json_reply,
    make_plan,
    sse,
    strings_in,
    tools_from,
)

DEFAULT_MODEL = "gpt-4o-mini"
CONTENT_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"


def respond(body: bytes, payload: JsonObject, knobs: Knobs) -> Reply:
    """The mock's answer to one chat completion request."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        raise MockRequestError("'messages' is a required property")
    tools = tools_from(payload.get("tools"))
    if payload.get("tool_choice") == "none" or _answers_tool_result(messages):
        tools = []
    n = payload.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
        raise MockRequestError("'n' must be an integer between 1 and 16")
    plan = make_plan(
        body,
        knobs,
        model=str(payload.get("model") or DEFAULT_MODEL),
        prompt_texts=strings_in(messages, skip=frozenset({"role"})),
        limit=int_field(payload, "max_completion_tokens", "max_tokens"),
        n=n,
        tools=tools,
        forced_tool=forced_name(payload.get("tool_choice")),
    )
    if payload.get("stream") is True:
        options = payload.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        return Reply(CONTENT_TYPE, stream_events(plan, include_usage=usage))
    return json_reply(completion(plan))


def _answers_tool_result(messages: list[Any]) -> bool:
    return bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"


def _ids(plan: Plan) -> tuple[str, str]:
    return "chatcmpl-" + plan.ident("chatcmpl", 29), "fp_" + hex_id(plan, "fp", 10)


def _arguments(plan: Plan) -> str:
    assert plan.tool is not None
    return compact(plan.tool.arguments).decode()


def _call_id(plan: Plan, index: int) -> str:
    return "call_" + plan.ident(f"call{index}", 24)


def stream_events(plan: Plan, *, include_usage: bool) -> list[bytes]:
    """Every event of the streamed answer, ``[DONE]`` included."""
    chunk_id, fingerprint = _ids(plan)

    def chunk(index: int, delta: JsonObject, finish: str | None = None) -> bytes:
        return sse(
            compact(
                {
                    "id": chunk_id,
                    "object": "chat.completion.chunk",
                    "created": plan.created,
                    "model": plan.model,
                    "system_fingerprint": fingerprint,
                    "choices": [
                        {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
                    ],
                }
            )
        )

    steps: list[list[bytes]] = []
    fragments: list[str] = []
    finishes: list[str] = []
    for index, tokens in enumerate(plan.choices):
        if plan.tool is not None:
            fragments, cut = plan.fragments(_arguments(plan))
            first: JsonObject = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": _call_id(plan, index),
                        "type": "function",
                        "function": {"name": plan.tool.name, "arguments": ""},
                    }
                ],
                "refusal": None,
            }
            deltas: list[JsonObject] = [
                {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                for piece in fragments
            ]
            finishes.append("length" if cut else "tool_calls")
        else:
            first = {"role": "assistant", "content": "", "refusal": None}
            deltas = [{"content": token} for token in tokens]
            finishes.append("length" if plan.truncated else "stop")
        steps.append([chunk(index, first)] + [chunk(index, d) for d in deltas])
    events: list[bytes] = []
    for position in range(max(len(s) for s in steps)):
        events.extend(s[position] for s in steps if position < len(s))
    events.extend(chunk(i, {}, finish) for i, finish in enumerate(finishes))
    if include_usage:
        events.append(
            sse(
                compact(
                    {
                        "id": chunk_id,
                        "object": "chat.completion.chunk",
                        "created": plan.created,
                        "model": plan.model,
                        "system_fingerprint": fingerprint,
                        "choices": [],
                        "usage": _usage(plan, fragments if plan.tool else [], len(plan.choices)),
                    }
                )
            )
        )
    events.append(DONE)
    return events


def _usage(plan: Plan, fragments: list[str], n: int) -> JsonObject:
    completion_tokens = plan.completion_tokens() + len(fragments) * n
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": plan.prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def completion(plan: Plan) -> JsonObject:
    """The non-streamed ``chat.completion`` object."""
    chunk_id, fingerprint = _ids(plan)
    choices: list[JsonObject] = []
    fragments: list[str] = []
    for index, tokens in enumerate(plan.choices):
        message: JsonObject
        if plan.tool is not None:
            fragments, cut = plan.fragments(_arguments(plan))
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": _call_id(plan, index),
                        "type": "function",
                        "function": {"name": plan.tool.name, "arguments": "".join(fragments)},
                    }
                ],
                "refusal": None,
                "annotations": [],
            }
            finish = "length" if cut else "tool_calls"
        else:
            message = {
                "role": "assistant",
                "content": "".join(tokens),
                "refusal": None,
                "annotations": [],
            }
            finish = "length" if plan.truncated else "stop"
        choices.append(
            {"index": index, "message": message, "logprobs": None, "finish_reason": finish}
        )
    return {
        "id": chunk_id,
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": choices,
        "usage": _usage(plan, fragments, len(plan.choices)),
        "service_tier": "default",
        "system_fingerprint": fingerprint,
    }


def error_body(status: int, message: str) -> JsonObject:
    """OpenAI's error envelope."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    code = "not_found" if status == 404 else None
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
