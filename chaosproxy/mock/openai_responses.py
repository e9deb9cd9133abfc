"""OpenAI Responses: ``POST /v1/responses``.

Streams ``event:`` + ``data:`` pairs with a ``sequence_number`` counting from 0, in the
order of the o4-mini capture (without its reasoning item): ``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta``..., ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``, ``response.completed``
(``response.incomplete`` when ``max_output_tokens`` cut the answer). With tools the item
is a ``function_call`` streamed by ``response.function_call_arguments.delta``/``.done``.
No ``[DONE]``: the stream ends after the terminal event.
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
#: Text deltas are padded with ``obfuscation`` to about this many characters, as real
#: streams are by default.
_OBFUSCATION_WIDTH = 16


def respond(body: bytes, payload: JsonObject, knobs: Knobs) -> Reply:
    """The mock's answer to one Responses request."""
    given = payload.get("input")
    if not isinstance(given, str | list):
        raise MockRequestError("'input' is a required property")
    tools = tools_from(payload.get("tools"))
    if payload.get("tool_choice") == "none" or _answers_tool_result(given):
        tools = []
    plan = make_plan(
        body,
        knobs,
        model=str(payload.get("model") or DEFAULT_MODEL),
        prompt_texts=strings_in([payload.get("instructions"), given], skip=frozenset({"role"})),
        limit=int_field(payload, "max_output_tokens"),
        tools=tools,
        forced_tool=forced_name(payload.get("tool_choice")),
    )
    if payload.get("stream") is True:
        options = payload.get("stream_options")
        obfuscate = not (isinstance(options, dict) and options.get("include_obfuscation") is False)
        return Reply(CONTENT_TYPE, stream_events(plan, payload, obfuscate=obfuscate))
    return json_reply(_response(plan, payload, final=True))


def _answers_tool_result(given: Any) -> bool:
    return (
        isinstance(given, list)
        and bool(given)
        and isinstance(given[-1], dict)
        and given[-1].get("type") == "function_call_output"
    )


def _output_item(plan: Plan, *, done: bool) -> JsonObject:
    """The single output item, as added (empty) or as done (complete)."""
    if plan.tool is not None:
        fragments, cut = plan.fragments(compact(plan.tool.arguments).decode())
        return {
            "id": "fc_" + hex_id(plan, "fc", 48),
            "type": "function_call",
            "status": ("incomplete" if cut else "completed") if done else "in_progress",
            "arguments": "".join(fragments) if done else "",
            "call_id": "call_" + plan.ident("call", 24),
            "name": plan.tool.name,
        }
    return {
        "id": "msg_" + hex_id(plan, "msg", 48),
        "type": "message",
        "status": ("incomplete" if plan.truncated else "completed") if done else "in_progress",
        "content": [_part(plan.text)] if done else [],
        "role": "assistant",
    }


def _part(text: str) -> JsonObject:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _cut(plan: Plan) -> bool:
    if plan.tool is not None:
        return plan.fragments(compact(plan.tool.arguments).decode())[1]
    return plan.truncated


def _response(plan: Plan, payload: JsonObject, *, final: bool) -> JsonObject:
    """The response object: in progress (no output, no usage) or final."""
    status = "in_progress"
    usage: JsonObject | None = None
    output: list[JsonObject] = []
    if final:
        status = "incomplete" if _cut(plan) else "completed"
        output = [_output_item(plan, done=True)]
        fragments = plan.fragments(compact(plan.tool.arguments).decode())[0] if plan.tool else []
        output_tokens = plan.completion_tokens(fragments)
        usage = {
            "input_tokens": plan.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": plan.prompt_tokens + output_tokens,
        }
    tools = payload.get("tools")
    return {
        "id": "resp_" + hex_id(plan, "resp", 48),
        "object": "response",
        "created_at": plan.created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete" else None),
        "instructions": payload.get("instructions"),
        "max_output_tokens": plan.limit,
        "max_tool_calls": None,
        "model": plan.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": payload.get("previous_response_id"),
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None,
        "service_tier": "default" if final else "auto",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": payload.get("tool_choice", "auto"),
        "tools": tools if isinstance(tools, list) else [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }


def stream_events(plan: Plan, payload: JsonObject, *, obfuscate: bool = True) -> list[bytes]:
    """Every event of the streamed answer, terminal event included."""
    bodies: list[JsonObject] = [
        {"type": "response.created", "response": _response(plan, payload, final=False)},
        {"type": "response.in_progress", "response": _response(plan, payload, final=False)},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": _output_item(plan, done=False),
        },
    ]
    done_item = _output_item(plan, done=True)
    item_id = done_item["id"]

    def pad(index: int, delta: str) -> JsonObject:
        if not obfuscate:
            return {}
        width = max(1, _OBFUSCATION_WIDTH - len(delta))
        return {"obfuscation": plan.ident(f"obfuscation{index}", width)}

    if plan.tool is not None:
        fragments, _ = plan.fragments(compact(plan.tool.arguments).decode())
        bodies += [
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item_id,
                "output_index": 0,
                "delta": piece,
                **pad(i, piece),
            }
            for i, piece in enumerate(fragments)
        ]
        bodies.append(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": 0,
                "name": plan.tool.name,
                "arguments": done_item["arguments"],
            }
        )
    else:
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        bodies.append({"type": "response.content_part.added", **where, "part": _part("")})
        bodies += [
            {
                "type": "response.output_text.delta",
                **where,
                "delta": token,
                "logprobs": [],
                **pad(i, token),
            }
            for i, token in enumerate(plan.choices[0])
        ]
        bodies.append(
            {"type": "response.output_text.done", **where, "text": plan.text, "logprobs": []}
        )
        bodies.append({"type": "response.content_part.done", **where, "part": _part(plan.text)})
    bodies.append({"type": "response.output_item.done", "output_index": 0, "item": done_item})
    final = _response(plan, payload, final=True)
    bodies.append({"type": f"response.{final['status']}", "response": final})
    events = []
    for number, body in enumerate(bodies):
        # sequence_number comes right after type, as in the captures.
        ordered = {"type": body["type"], "sequence_number": number, **body}
        events.append(sse(compact(ordered), event=body["type"]))
    return events
