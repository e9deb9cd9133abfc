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

from chaosproxy.mock import common
from chaosproxy.mock.common import JsonObject, Knobs, MockResponse, Plan, Tag, compact, sse
from chaosproxy.mock.openai_chat import error_body
from chaosproxy.scenario.fixtures import Fixture

DEFAULT_MODEL = "gpt-4o-mini"
CONTENT_TYPE = "text/event-stream"
#: Text deltas are padded with ``obfuscation`` to about this many characters, as real
#: streams are by default.
_OBFUSCATION_WIDTH = 16


def serve(call: common.MockCall) -> MockResponse:
    """The answer to a call to the mock's Responses route (the declaration's renderer)."""
    return respond(call.body, call.payload, call.knobs, call.fixture)


def respond(
    body: bytes, payload: JsonObject, knobs: Knobs, fixture: Fixture | None = None
) -> MockResponse:
    """The mock's answer to one Responses request (``fixture``'s when given)."""
    given = payload.get("input")
    if not isinstance(given, str | list):
        raise common.MockRequestError("'input' is a required property")
    tools = common.tools_from(payload.get("tools"))
    if payload.get("tool_choice") == "none" or _answers_tool_result(given):
        tools = []
    plan = common.make_plan(
        body,
        knobs,
        model=str(payload.get("model") or DEFAULT_MODEL),
        prompt_texts=common.strings_in(
            [payload.get("instructions"), given], skip=frozenset({"role"})
        ),
        limit=common.int_field(payload, "max_output_tokens"),
        tools=tools,
        forced_tool=common.forced_name(payload.get("tool_choice")),
        fixture=fixture,
    )
    if payload.get("stream") is True:
        options = payload.get("stream_options")
        obfuscate = not (isinstance(options, dict) and options.get("include_obfuscation") is False)
        return MockResponse(CONTENT_TYPE, stream_events(plan, payload, obfuscate=obfuscate))
    if plan.error is not None:
        return common.interrupted(plan, error_body)
    return common.json_reply(_response(plan, payload, final=True))


def _answers_tool_result(given: Any) -> bool:
    return (
        isinstance(given, list)
        and bool(given)
        and isinstance(given[-1], dict)
        and given[-1].get("type") == "function_call_output"
    )


def _has_message(plan: Plan) -> bool:
    """Whether the output has a message item (text, or no call to make)."""
    return bool(plan.choices[0]) or not plan.tools


def _fragments(plan: Plan, call: int) -> tuple[list[str], bool]:
    return plan.fragments(compact(plan.tools[call].arguments).decode())


def _status(plan: Plan) -> tuple[str, str | None]:
    """The response's status and its incomplete reason."""
    cut = any(_fragments(plan, j)[1] for j in range(len(plan.tools)))
    finish = plan.neutral_finish(cut=cut)
    if finish == "length":
        return "incomplete", "max_output_tokens"
    if finish == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def _message_item(plan: Plan, *, done: bool) -> JsonObject:
    status = "in_progress"
    if done:
        status = "incomplete" if _status(plan)[0] == "incomplete" else "completed"
    return {
        "id": "msg_" + common.hex_id(plan, "msg", 48),
        "type": "message",
        "status": status,
        "content": [_part(plan, plan.text)] if done else [],
        "role": "assistant",
    }


def _call_item(plan: Plan, call: int, *, done: bool) -> JsonObject:
    fragments, cut = _fragments(plan, call)
    given = plan.tools[call].id
    return {
        "id": "fc_" + common.hex_id(plan, plan.label("fc", call), 48),
        "type": "function_call",
        "status": ("incomplete" if cut else "completed") if done else "in_progress",
        "arguments": "".join(fragments) if done else "",
        "call_id": given or "call_" + plan.ident(plan.label("call", call), 24),
        "name": plan.tools[call].name,
    }


def _items(plan: Plan, *, done: bool) -> list[JsonObject]:
    """The output items: the message (when there is one), then one per call."""
    items = [_message_item(plan, done=done)] if _has_message(plan) else []
    return items + [_call_item(plan, j, done=done) for j in range(len(plan.tools))]


def _part(plan: Plan, text: str) -> JsonObject:
    if plan.refusal:
        return {"type": "refusal", "refusal": text}
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _response(plan: Plan, payload: JsonObject, *, final: bool) -> JsonObject:
    """The response object: in progress (no output, no usage) or final."""
    status = "in_progress"
    reason: str | None = None
    usage: JsonObject | None = None
    output: list[JsonObject] = []
    if final:
        status, reason = _status(plan)
        output = _items(plan, done=True)
        fragments = [f for j in range(len(plan.tools)) for f in _fragments(plan, j)[0]]
        output_tokens = plan.completion_tokens(fragments)
        usage = {
            "input_tokens": plan.prompt_tokens,
            # (cache_write_tokens: the current SDKs' types require it.)
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": plan.prompt_tokens + output_tokens,
        }
    tools = payload.get("tools")
    return {
        "id": "resp_" + common.hex_id(plan, "resp", 48),
        "object": "response",
        "created_at": plan.created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None if reason is None else {"reason": reason},
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
    """Every event of the streamed answer, terminal event included (or the plan's
    in-stream error instead of the end)."""
    bodies: list[tuple[JsonObject, Tag]] = [
        (
            {"type": "response.created", "response": _response(plan, payload, final=False)},
            Tag.START,
        ),
        (
            {"type": "response.in_progress", "response": _response(plan, payload, final=False)},
            Tag.START,
        ),
    ]
    done_items = _items(plan, done=True)
    added_items = _items(plan, done=False)
    padded = 0

    def pad(delta: str) -> JsonObject:
        nonlocal padded
        if not obfuscate:
            return {}
        width = max(1, _OBFUSCATION_WIDTH - len(delta))
        padded += 1
        return {"obfuscation": plan.ident(f"obfuscation{padded - 1}", width)}

    for output_index, (added, done_item) in enumerate(zip(added_items, done_items, strict=True)):
        item_id = done_item["id"]
        bodies.append(
            (
                {"type": "response.output_item.added", "output_index": output_index, "item": added},
                Tag.OTHER,
            )
        )
        if done_item["type"] == "function_call":
            call = output_index - (1 if _has_message(plan) else 0)
            fragments, _ = _fragments(plan, call)
            where = {"item_id": item_id, "output_index": output_index}
            bodies += [
                (
                    {
                        "type": "response.function_call_arguments.delta",
                        **where,
                        "delta": piece,
                        **pad(piece),
                    },
                    Tag.DELTA,
                )
                for piece in fragments
            ]
            bodies.append(
                (
                    {
                        "type": "response.function_call_arguments.done",
                        **where,
                        "name": plan.tools[call].name,
                        "arguments": done_item["arguments"],
                    },
                    Tag.OTHER,
                )
            )
        else:
            where = {"item_id": item_id, "output_index": output_index, "content_index": 0}
            kind = "refusal" if plan.refusal else "output_text"
            bodies.append(
                (
                    {"type": "response.content_part.added", **where, "part": _part(plan, "")},
                    Tag.OTHER,
                )
            )
            for piece in plan.choices[0]:
                delta: JsonObject = {"type": f"response.{kind}.delta", **where, "delta": piece}
                if not plan.refusal:
                    delta["logprobs"] = []
                bodies.append(({**delta, **pad(piece)}, Tag.DELTA))
            whole: JsonObject = {"type": f"response.{kind}.done", **where}
            if plan.refusal:
                whole["refusal"] = plan.text
            else:
                whole.update(text=plan.text, logprobs=[])
            bodies.append((whole, Tag.OTHER))
            bodies.append(
                (
                    {
                        "type": "response.content_part.done",
                        **where,
                        "part": _part(plan, plan.text),
                    },
                    Tag.OTHER,
                )
            )
        bodies.append(
            (
                {
                    "type": "response.output_item.done",
                    "output_index": output_index,
                    "item": done_item,
                },
                Tag.OTHER,
            )
        )
    final = _response(plan, payload, final=True)
    bodies.append(({"type": f"response.{final['status']}", "response": final}, Tag.OTHER))
    events = []
    for number, body in enumerate(common.with_error(bodies, plan, _ERROR)):
        if body is _ERROR:
            events.append(sse(compact(error_event(plan, number)), event="error"))
            continue
        # sequence_number comes right after type, as in the captures.
        ordered = {"type": body["type"], "sequence_number": number, **body}
        events.append(sse(compact(ordered), event=body["type"]))
    return events


#: Where the in-stream error goes among the event bodies (numbered with the others).
_ERROR: JsonObject = {"type": "error"}


def error_event(plan: Plan, sequence_number: int) -> JsonObject:
    """The in-stream error, flat, in the documented field order."""
    error = plan.error
    return {
        "type": "error",
        "code": (error.type if error else None) or "server_error",
        "message": (error.message if error else None)
        or "The server had an error while processing your request. Sorry about that!",
        "param": None,
        "sequence_number": sequence_number,
    }
