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

from chaosproxy.mock import common
from chaosproxy.mock.common import JsonObject, Knobs, MockResponse, Plan, Tag, compact
from chaosproxy.mock.corpus import count_tokens
from chaosproxy.scenario.fixtures import Fixture

CONTENT_TYPE = "application/x-ndjson"


def serve(call: common.MockCall) -> MockResponse:
    """The answer to a call to the mock's ``/api/chat`` or ``/api/generate`` route (its
    ``endpoint`` param; the declaration's renderer)."""
    return respond(
        call.body, call.payload, call.knobs, endpoint=call.params["endpoint"], fixture=call.fixture
    )


def respond(
    body: bytes,
    payload: JsonObject,
    knobs: Knobs,
    *,
    endpoint: str,
    fixture: Fixture | None = None,
) -> MockResponse:
    """The mock's answer to ``/api/chat`` (``endpoint="chat"``) or ``/api/generate``
    (``fixture``'s when given)."""
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise common.MockRequestError("model is required")
    options = payload.get("options")
    limit = common.int_field(options, "num_predict") if isinstance(options, dict) else None
    if endpoint == "chat":
        messages = payload.get("messages")
        messages = messages if isinstance(messages, list) else []
        tools = common.tools_from(payload.get("tools"))
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if last.get("role") == "tool":
            tools = []
        prompt: list[str] = common.strings_in(messages, skip=frozenset({"role", "images"}))
    else:
        tools = []
        prompt = common.strings_in([payload.get("system"), payload.get("prompt")])
    plan = common.make_plan(
        body, knobs, model=model, prompt_texts=prompt, limit=limit, tools=tools, fixture=fixture
    )
    objects = stream_objects(plan, knobs, endpoint=endpoint)
    if payload.get("stream", True) is False:
        if plan.error is not None:
            return common.interrupted(plan, error_body)
        return common.json_reply(_whole(plan, objects[-1], endpoint))
    return MockResponse(CONTENT_TYPE, [compact(o) + b"\n" for o in objects])


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
    return [
        {
            "id": call.id or "call_" + plan.ident(plan.label("call", j), 8).lower(),
            "function": {"index": j, "name": call.name, "arguments": call.arguments},
        }
        for j, call in enumerate(plan.tools)
    ]


def stream_objects(plan: Plan, knobs: Knobs, *, endpoint: str) -> list[JsonObject]:
    """The objects of the stream, one per line, the last one with ``done: true`` (or the
    plan's in-stream error instead of the end)."""
    key = "message" if endpoint == "chat" else "response"

    def piece(index: int, text: str, tool_calls: list[JsonObject] | None = None) -> JsonObject:
        value: Any = _message(text, tool_calls) if key == "message" else text
        return {
            "model": plan.model,
            "created_at": _timestamp(plan, index * knobs.interval),
            key: value,
            "done": False,
        }

    objects = [(piece(i, token), Tag.DELTA) for i, token in enumerate(plan.choices[0])]
    if plan.tools and endpoint == "chat":
        objects.append((piece(len(objects), "", _tool_calls(plan)), Tag.DELTA))
    eval_count = plan.output_tokens
    if eval_count is None:
        eval_count = len(plan.choices[0]) + sum(
            count_tokens([compact(call.arguments).decode()]) for call in plan.tools
        )
    step = round(knobs.interval * 1e9)
    prompt_eval = plan.prompt_tokens * 250_000
    load = 1_000_000 + plan.number("load", 9_000_000)
    eval_duration = max(1, eval_count) * max(step, 1_000_000)
    reason = "length" if plan.neutral_finish() == "length" else "stop"
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
    objects.append((final, Tag.OTHER))
    return common.with_error(objects, plan, error_event(plan))


def error_event(plan: Plan) -> JsonObject:
    """The in-stream error line, as the Ollama server writes it."""
    error = plan.error
    return {"error": (error.message if error else None) or _GENERATION_FAILED}


_GENERATION_FAILED = "an error was encountered while running the model"


def _whole(plan: Plan, final: JsonObject, endpoint: str) -> JsonObject:
    """The single object of a ``"stream": false`` answer."""
    whole = dict(final)
    if endpoint == "chat":
        whole["message"] = _message(plan.text, _tool_calls(plan) if plan.tools else None)
    else:
        whole["response"] = plan.text
    return whole


def error_body(status: int, message: str, kind: str | None = None) -> JsonObject:
    """Ollama's error shape (it has no error type)."""
    return {"error": message}
