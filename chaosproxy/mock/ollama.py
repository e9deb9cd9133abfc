"""Ollama: ``POST /api/chat`` and ``POST /api/generate``.

Streaming is the default: NDJSON (``application/x-ndjson``), one compact JSON object and
``\\n`` per token, then a final object with ``"done": true``, ``done_reason`` and the
timing fields (nanoseconds; ``/api/generate`` also has ``context``). ``"stream": false``
returns that final object alone, holding the whole answer. With tools, ``/api/chat``
sends one message whose ``tool_calls`` hold the whole call.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from chaosproxy.mock.common import (
    JsonObject,
    Knobs,
    MockRequestError,
    Plan,
    Reply,
    compact,
    int_field,
    json_reply,
    make_plan,
    strings_in,
    tools_from,
)
from chaosproxy.mock.corpus import count_tokens

CONTENT_TYPE = "application/x-ndjson"


def respond(body: bytes, payload: JsonObject, knobs: Knobs, *, endpoint: str) -> Reply:
    """The mock's answer to ``/api/chat`` (``endpoint="chat"``) or ``/api/generate``."""
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise MockRequestError("model is required")
    options = payload.get("options")
    limit = int_field(options, "num_predict") if isinstance(options, dict) else None
    if endpoint == "chat":
        messages = payload.get("messages")
        messages = messages if isinstance(messages, list) else []
        tools = tools_from(payload.get("tools"))
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if last.get("role") == "tool":
            tools = []
        prompt: list[str] = strings_in(messages, skip=frozenset({"role", "images"}))
    else:
        tools = []
        prompt = strings_in([payload.get("system"), payload.get("prompt")])
    plan = make_plan(body, knobs, model=model, prompt_texts=prompt, limit=limit, tools=tools)
    objects = stream_objects(plan, knobs, endpoint=endpoint)
    if payload.get("stream", True) is False:
        return json_reply(_whole(plan, objects[-1], endpoint))
    return Reply(CONTENT_TYPE, [compact(o) + b"\n" for o in objects])


def _timestamp(plan: Plan, seconds: float) -> str:
    micros = plan.number("created_at", 1_000_000)
    moment = datetime.fromtimestamp(plan.created, tz=UTC) + timedelta(
        seconds=seconds, microseconds=micros
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _message(content: str, tool_calls: list[JsonObject] | None = None) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def _tool_calls(plan: Plan) -> list[JsonObject]:
    assert plan.tool is not None
    return [
        {
            "id": "call_" + plan.ident("call", 8).lower(),
            "function": {"index": 0, "name": plan.tool.name, "arguments": plan.tool.arguments},
        }
    ]


def stream_objects(plan: Plan, knobs: Knobs, *, endpoint: str) -> list[JsonObject]:
    """The objects of the stream, one per line, the last one with ``done: true``."""
    key = "message" if endpoint == "chat" else "response"

    def piece(index: int, text: str, tool_calls: list[JsonObject] | None = None) -> JsonObject:
        value: Any = _message(text, tool_calls) if key == "message" else text
        return {
            "model": plan.model,
            "created_at": _timestamp(plan, index * knobs.interval),
            key: value,
            "done": False,
        }

    if plan.tool is not None:
        objects = [piece(0, "", _tool_calls(plan))]
        eval_count = count_tokens([compact(plan.tool.arguments).decode()])
    else:
        objects = [piece(i, token) for i, token in enumerate(plan.choices[0])]
        eval_count = len(plan.choices[0])
    step = round(knobs.interval * 1e9)
    prompt_eval = plan.prompt_tokens * 250_000
    load = 1_000_000 + plan.number("load", 9_000_000)
    eval_duration = max(1, eval_count) * max(step, 1_000_000)
    reason = "length" if plan.truncated else "stop"
    final: JsonObject = {
        "model": plan.model,
        "created_at": _timestamp(plan, len(objects) * knobs.interval),
    }
    # Field order follows ollama's Go structs: ChatResponse puts done_reason before done,
    # GenerateResponse after it.
    if endpoint == "chat":
        final.update({"message": _message(""), "done_reason": reason, "done": True})
    else:
        final.update({"response": "", "done": True, "done_reason": reason})
        final["context"] = [
            plan.number(f"context{i}", 128_000) for i in range(plan.prompt_tokens + eval_count)
        ]
    final.update(
        {
            "total_duration": load + prompt_eval + eval_duration + 100_000,
            "load_duration": load,
            "prompt_eval_count": plan.prompt_tokens,
            "prompt_eval_duration": prompt_eval,
            "eval_count": eval_count,
            "eval_duration": eval_duration,
        }
    )
    return [*objects, final]


def _whole(plan: Plan, final: JsonObject, endpoint: str) -> JsonObject:
    """The single object of a ``"stream": false`` answer."""
    whole = dict(final)
    if endpoint == "chat":
        whole["message"] = _message(plan.text, _tool_calls(plan) if plan.tool else None)
    else:
        whole["response"] = plan.text
    return whole


def error_body(status: int, message: str) -> JsonObject:
    """Ollama's error shape."""
    return {"error": message}
