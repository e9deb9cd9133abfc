"""AWS Bedrock: ``POST /model/{modelId}/converse-stream`` and
``POST /model/{modelId}/invoke-with-response-stream``.

Both answer an AWS event stream (``application/vnd.amazon.eventstream``), one message
per event (:mod:`chaosproxy.core.framing.eventstream`).

ConverseStream sends ``messageStart``, the text as ``contentBlockDelta`` events
(``delta.text``) and its ``contentBlockStop`` (a text block has no start event), each
tool call as ``contentBlockStart`` (``start.toolUse``: its id and name), its input JSON
in ``contentBlockDelta`` fragments (``delta.toolUse.input``) and ``contentBlockStop``,
then ``messageStop`` with the stop reason and ``metadata`` with the usage and metrics.

InvokeModelWithResponseStream sends the model vendor's own events, each the base64
``bytes`` of a ``chunk`` event: Anthropic's Messages events for ``anthropic.`` models
(the body is a Messages request with ``anthropic_version``; no ``ping``, as Bedrock
sends none), ConverseStream's events named as their key (``{"contentBlockDelta":
{...}}``) for Amazon Nova (``amazon.nova``, whose body is Converse's). The last chunk
carries ``amazon-bedrock-invocationMetrics``. Other models are a 400
``ValidationException``.

A fixture's in-stream error is an ``exception`` message (``modelStreamErrorException``
unless the fixture names another) after which nothing comes. Errors before the stream
are AWS's JSON error (``{"__type": ..., "message": ...}``), which botocore reads.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson

from chaosproxy.core.framing.eventstream import event_message, exception_message
from chaosproxy.mock import anthropic, common
from chaosproxy.mock.common import JsonObject, Knobs, MockResponse, Plan, Tag, Tagged, compact
from chaosproxy.scenario.fixtures import Fixture

CONTENT_TYPE = "application/vnd.amazon.eventstream"
#: The exception a fixture's in-stream error is, unless it names one.
STREAM_ERROR = "modelStreamErrorException"
#: Bedrock's stop reason for each provider-neutral finish reason.
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "content_filtered",
    "refusal": "guardrail_intervened",
}
INVOCATION_METRICS = "amazon-bedrock-invocationMetrics"


def serve(call: common.MockCall) -> MockResponse:
    """The answer to a call to the mock's Bedrock route (the declaration's renderer):
    its ``{model}`` (decoded: botocore sends ``:`` as ``%3A``) and ``{action}``."""
    return respond(
        call.body,
        call.payload,
        call.knobs,
        model=call.params["model"],
        action=call.params["action"],
        fixture=call.fixture,
    )


def respond(
    body: bytes,
    payload: JsonObject,
    knobs: Knobs,
    *,
    model: str,
    action: str,
    fixture: Fixture | None = None,
) -> MockResponse:
    """The mock's answer to one ConverseStream (``action="converse-stream"``) or
    InvokeModelWithResponseStream request for ``model`` (``fixture``'s when given)."""
    if action == "converse-stream":
        return MockResponse(
            CONTENT_TYPE, stream_events(_converse_plan(body, payload, knobs, model, fixture))
        )
    if ".anthropic." in f".{model}" or model.startswith("anthropic."):
        return MockResponse(CONTENT_TYPE, _anthropic_chunks(body, payload, knobs, model, fixture))
    if "amazon.nova" in model:
        plan = _converse_plan(body, payload, knobs, model, fixture)
        return MockResponse(CONTENT_TYPE, _nova_chunks(plan))
    raise common.MockRequestError(
        f"The mock answers InvokeModelWithResponseStream for Anthropic (anthropic.*) and "
        f"Amazon Nova (amazon.nova*) models, not {model!r}; ConverseStream answers any model."
    )


def _converse_plan(
    body: bytes, payload: JsonObject, knobs: Knobs, model: str, fixture: Fixture | None
) -> Plan:
    messages = common.required_list(payload, "messages", "messages: Field required")
    config = payload.get("inferenceConfig")
    limit = common.int_field(config, "maxTokens") if isinstance(config, dict) else None
    tools, forced = _tools(payload.get("toolConfig"))
    if _answers_tool_result(messages):
        tools = []
    return common.make_plan(
        body,
        knobs,
        model=model,
        prompt_texts=common.strings_in([payload.get("system"), messages], skip=frozenset({"role"})),
        limit=limit,
        tools=tools,
        forced_tool=forced,
        fixture=fixture,
    )


def _tools(config: Any) -> tuple[list[common.ToolSpec], str | None]:
    """The function tools of a ``toolConfig`` (each ``toolSpec``, its schema in
    ``inputSchema.json``) and the one ``toolChoice.tool`` forces."""
    if not isinstance(config, dict):
        return [], None
    specs = []
    tools = config.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        spec = tool.get("toolSpec") if isinstance(tool, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            schema = spec.get("inputSchema")
            params = schema.get("json") if isinstance(schema, dict) else None
            specs.append(common.ToolSpec(spec["name"], params if isinstance(params, dict) else {}))
    choice = config.get("toolChoice")
    forced = common.forced_name(choice.get("tool")) if isinstance(choice, dict) else None
    return specs, forced


def _answers_tool_result(messages: list[Any]) -> bool:
    last = messages[-1] if messages else None
    content = last.get("content") if isinstance(last, dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and "toolResult" in block for block in content
    )


def _fragments(plan: Plan, call: int) -> tuple[list[str], bool]:
    return plan.fragments(compact(plan.tools[call].arguments).decode())


def converse_events(plan: Plan) -> list[tuple[str, JsonObject, Tag]]:
    """ConverseStream's events for ``plan``: name, payload and what each is."""
    events: list[tuple[str, JsonObject, Tag]] = [("messageStart", {"role": "assistant"}, Tag.START)]
    index = 0
    if plan.choices[0] or not plan.tools:
        events += [
            ("contentBlockDelta", {"delta": {"text": piece}, "contentBlockIndex": 0}, Tag.DELTA)
            for piece in plan.choices[0]
        ]
        events.append(("contentBlockStop", {"contentBlockIndex": 0}, Tag.OTHER))
        index = 1
    pieces: list[str] = []
    cut = False
    for j, call in enumerate(plan.tools):
        fragments, was_cut = _fragments(plan, j)
        pieces += fragments
        cut = cut or was_cut
        tool_id = call.id or "tooluse_" + plan.ident(plan.label("tooluse", j), 22)
        start = {"toolUse": {"toolUseId": tool_id, "name": call.name}}
        events.append(
            ("contentBlockStart", {"start": start, "contentBlockIndex": index}, Tag.OTHER)
        )
        events += [
            (
                "contentBlockDelta",
                {"delta": {"toolUse": {"input": fragment}}, "contentBlockIndex": index},
                Tag.DELTA,
            )
            for fragment in fragments
        ]
        events.append(("contentBlockStop", {"contentBlockIndex": index}, Tag.OTHER))
        index += 1
    stop = STOP_REASONS.get(plan.neutral_finish(cut=cut), "end_turn")
    events.append(("messageStop", {"stopReason": stop}, Tag.OTHER))
    output = plan.completion_tokens(pieces)
    usage = {
        "inputTokens": plan.prompt_tokens,
        "outputTokens": output,
        "totalTokens": plan.prompt_tokens + output,
    }
    latency = 200 + plan.number("latency", 800)
    events.append(("metadata", {"usage": usage, "metrics": {"latencyMs": latency}}, Tag.OTHER))
    return events


def stream_events(plan: Plan) -> list[bytes]:
    """Every message of the ConverseStream answer (or the plan's in-stream error
    instead of the end)."""
    tagged: list[Tagged] = [
        (event_message(name, compact(body)), tag) for name, body, tag in converse_events(plan)
    ]
    return common.with_error(tagged, plan, error_event(plan))


def error_event(plan: Plan) -> bytes:
    """The in-stream error: an ``exception`` message (its type the fixture's, else
    ``modelStreamErrorException``)."""
    error = plan.error
    kind = (error.type if error else None) or STREAM_ERROR
    message = (error.message if error else None) or common.GENERATION_FAILED
    return exception_message(kind, compact({"message": message}))


def _chunk(event: JsonObject) -> bytes:
    return event_message("chunk", compact({"bytes": base64.b64encode(compact(event)).decode()}))


def _metrics(digest: bytes, input_tokens: int, output_tokens: int) -> JsonObject:
    """The last chunk's ``amazon-bedrock-invocationMetrics`` (latencies from the
    request's digest: the same request, the same bytes)."""
    return {
        "inputTokenCount": input_tokens,
        "outputTokenCount": output_tokens,
        "invocationLatency": 200 + int.from_bytes(digest[:2], "big") % 800,
        "firstByteLatency": 100 + digest[2] % 100,
    }


def _nova_chunks(plan: Plan) -> list[bytes]:
    """Nova's InvokeModel stream: ConverseStream's events, each named as its key."""
    events = converse_events(plan)
    tagged: list[Tagged] = []
    for i, (name, body, tag) in enumerate(events):
        event: JsonObject = {name: body}
        if i == len(events) - 1:
            usage = body["usage"]
            event[INVOCATION_METRICS] = _metrics(
                plan.digest, usage["inputTokens"], usage["outputTokens"]
            )
        tagged.append((_chunk(event), tag))
    return common.with_error(tagged, plan, error_event(plan))


def _anthropic_chunks(
    body: bytes, payload: JsonObject, knobs: Knobs, model: str, fixture: Fixture | None
) -> list[bytes]:
    """Anthropic's Messages stream for ``payload`` (a Messages request without
    ``model`` and ``stream``), each event a chunk; its error event, an exception."""
    reply = anthropic.respond(body, {**payload, "model": model, "stream": True}, knobs, fixture)
    error = fixture.error if fixture is not None else None
    exception = (error.type if error is not None else None) or STREAM_ERROR
    tokens = {"input": 0, "output": 0}
    out: list[bytes] = []
    for sse in reply.chunks:
        event = _sse_data(sse)
        kind = event.get("type")
        if kind == "ping":
            continue
        if kind == "error":
            message = event["error"]["message"]
            out.append(exception_message(exception, compact({"message": message})))
            break
        if kind == "message_start":
            tokens["input"] = event["message"]["usage"]["input_tokens"]
        elif kind == "message_delta":
            tokens["output"] = event["usage"]["output_tokens"]
        elif kind == "message_stop":
            digest = hashlib.sha256(body).digest()
            event[INVOCATION_METRICS] = _metrics(digest, tokens["input"], tokens["output"])
        out.append(_chunk(event))
    return out


def _sse_data(event: bytes) -> JsonObject:
    """The JSON of one SSE event the Anthropic mock rendered (one ``data:`` line)."""
    data = event.split(b"data: ", 1)[1].rstrip(b"\n")
    value = orjson.loads(data)
    return value if isinstance(value, dict) else {}


#: Bedrock's error ``__type`` for a status.
ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    405: "ValidationException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def error_body(status: int, message: str, kind: str | None = None) -> JsonObject:
    """AWS's JSON error (``kind``: its ``__type``, else from the status), which botocore
    raises as a ``ClientError`` of that code."""
    if kind is None:
        kind = ERROR_TYPES.get(
            status, "ValidationException" if status < 500 else "InternalServerException"
        )
    return {"__type": kind, "message": message}
