"""OpenAI Chat Completions: ``POST /v1/chat/completions``.

Streams ``data:`` chunks shaped like the gpt-4o captures in the provider fixtures: a
first chunk with the role, one chunk per content token (or per tool-argument fragment),
a finish chunk per choice, a usage chunk when ``stream_options.include_usage`` is true,
then ``data: [DONE]``. With ``n`` > 1 the choices interleave by index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chaosproxy.mock import common
from chaosproxy.mock.common import JsonObject, Knobs, MockResponse, Plan, Tag, Tagged, compact, sse
from chaosproxy.scenario.fixtures import Fixture

DEFAULT_MODEL = "gpt-4o-mini"
CONTENT_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"


def serve(call: common.MockCall) -> MockResponse:
    """The answer to a call to the mock's chat route (the declaration's renderer)."""
    return respond(call.body, call.payload, call.knobs, call.fixture)


def query_payload(query: Mapping[str, str]) -> JsonObject:
    """``GET /v1/chat/completions?q=TEXT&model=NAME``: the streamed chat request for one
    user message, for a browser's ``EventSource``, which can only GET (and so cannot
    send a body)."""
    return {
        "model": query.get("model", common.MODELS[0]),
        "stream": True,
        "messages": [{"role": "user", "content": query.get("q", "hi")}],
    }


def respond(
    body: bytes, payload: JsonObject, knobs: Knobs, fixture: Fixture | None = None
) -> MockResponse:
    """The mock's answer to one chat completion request (``fixture``'s when given)."""
    messages = common.required_list(payload, "messages", "'messages' is a required property")
    tools = common.tools_from(payload.get("tools"))
    if payload.get("tool_choice") == "none" or _answers_tool_result(messages):
        tools = []
    n = payload.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
        raise common.MockRequestError("'n' must be an integer between 1 and 16")
    plan = common.make_plan(
        body,
        knobs,
        model=str(payload.get("model") or DEFAULT_MODEL),
        prompt_texts=common.strings_in(messages, skip=frozenset({"role"})),
        limit=common.int_field(payload, "max_completion_tokens", "max_tokens"),
        n=n,
        tools=tools,
        forced_tool=common.forced_name(payload.get("tool_choice")),
        fixture=fixture,
    )
    if payload.get("stream") is True:
        options = payload.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        return MockResponse(CONTENT_TYPE, stream_events(plan, include_usage=usage))
    if plan.error is not None:
        return common.interrupted(plan, error_body)
    return common.json_reply(completion(plan))


def _answers_tool_result(messages: list[Any]) -> bool:
    return bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"


def _ids(plan: Plan) -> tuple[str, str]:
    return "chatcmpl-" + plan.ident("chatcmpl", 29), "fp_" + common.hex_id(plan, "fp", 10)


def _call_id(plan: Plan, choice: int, call: int) -> str:
    given = plan.tools[call].id
    return given or "call_" + plan.ident(plan.label(f"call{choice}", call), 24)


def _calls(plan: Plan) -> list[tuple[list[str], bool]]:
    """Each call's argument fragments, and whether the request's limit cut them."""
    return [plan.fragments(compact(call.arguments).decode()) for call in plan.tools]


#: OpenAI's finish_reason for each provider-neutral one (a refusal is its text's field).
FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "refusal": "stop",
}


def _finish(plan: Plan, calls: list[tuple[list[str], bool]]) -> str:
    return FINISH[plan.neutral_finish(cut=any(cut for _, cut in calls))]


def stream_events(plan: Plan, *, include_usage: bool) -> list[bytes]:
    """Every event of the streamed answer, ``[DONE]`` included (or the plan's in-stream
    error instead of the end)."""
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

    calls = _calls(plan)
    text_field = "refusal" if plan.refusal else "content"
    steps: list[list[Tagged]] = []
    for index, pieces in enumerate(plan.choices):
        headers = [
            {
                "index": j,
                "id": _call_id(plan, index, j),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            for j, call in enumerate(plan.tools)
        ]
        step: list[Tagged] = []
        if plan.tools and not pieces:  # the call's head comes with the role
            first: JsonObject = {
                "role": "assistant",
                "content": None,
                "tool_calls": headers[:1],
                "refusal": None,
            }
        elif plan.refusal:
            first = {"role": "assistant", "content": None, "refusal": ""}
        else:
            first = {"role": "assistant", "content": "", "refusal": None}
        step.append((chunk(index, first), Tag.START))
        step += [(chunk(index, {text_field: piece}), Tag.DELTA) for piece in pieces]
        for j, (fragments, _) in enumerate(calls):
            if j or pieces:
                step.append((chunk(index, {"tool_calls": [headers[j]]}), Tag.OTHER))
            step += [
                (
                    chunk(index, {"tool_calls": [{"index": j, "function": {"arguments": p}}]}),
                    Tag.DELTA,
                )
                for p in fragments
            ]
        steps.append(step)
    events: list[Tagged] = []
    for position in range(max(len(s) for s in steps)):
        events.extend(s[position] for s in steps if position < len(s))
    finish = _finish(plan, calls)
    events.extend((chunk(i, {}, finish), Tag.OTHER) for i in range(len(plan.choices)))
    if include_usage:
        usage_chunk = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": plan.created,
            "model": plan.model,
            "system_fingerprint": fingerprint,
            "choices": [],
            "usage": _usage(plan, calls),
        }
        events.append((sse(compact(usage_chunk)), Tag.OTHER))
    events.append((DONE, Tag.OTHER))
    return common.with_error(events, plan, sse(compact(error_event(plan))))


def error_event(plan: Plan) -> JsonObject:
    """The in-stream error: a top-level ``error`` (what the SDKs raise ``APIError`` on)."""
    error = plan.error
    message = (error.message if error else None) or (
        "The server had an error while processing your request. Sorry about that!"
    )
    kind = (error.type if error else None) or "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _usage(plan: Plan, calls: list[tuple[list[str], bool]]) -> JsonObject:
    fragments = sum(len(f) for f, _ in calls) * len(plan.choices)
    completion_tokens = plan.completion_tokens([""] * fragments)
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
    calls = _calls(plan)
    choices: list[JsonObject] = []
    for index, pieces in enumerate(plan.choices):
        text = "".join(pieces)
        message: JsonObject = {
            "role": "assistant",
            "content": None if plan.refusal or (plan.tools and not text) else text,
        }
        if plan.tools:
            message["tool_calls"] = [
                {
                    "id": _call_id(plan, index, j),
                    "type": "function",
                    "function": {"name": call.name, "arguments": "".join(calls[j][0])},
                }
                for j, call in enumerate(plan.tools)
            ]
        message["refusal"] = text if plan.refusal else None
        message["annotations"] = []
        choices.append(
            {
                "index": index,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish(plan, calls),
            }
        )
    return {
        "id": chunk_id,
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": choices,
        "usage": _usage(plan, calls),
        "service_tier": "default",
        "system_fingerprint": fingerprint,
    }


def error_body(status: int, message: str, kind: str | None = None) -> JsonObject:
    """OpenAI's error envelope (``kind``: its ``type``, else from the status)."""
    if kind is None:
        kind = "invalid_request_error" if status < 500 else "server_error"
    code = {404: "not_found", 429: "rate_limit_exceeded"}.get(status)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
