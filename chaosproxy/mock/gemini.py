"""Gemini: ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` and
``:generateContent`` (also under ``/v1/``).

With ``alt=sse``: ``data:`` lines only, each event ended by ``\\r\\n\\r\\n`` as real
Gemini does, one token per chunk; every chunk is a whole ``GenerateContentResponse``
repeating ``modelVersion`` and ``responseId`` with a partial ``usageMetadata``; the last
chunk carries the last token, ``finishReason`` and the final usage (so it is both a
delta and the terminal event). No sentinel. A tool call is one chunk with a whole
``functionCall`` part. Without ``alt=sse`` the stream is a JSON array, as Google sends it.
JSON is in Google's style: a space after colons, none after commas.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from chaosproxy.mock import common
from chaosproxy.mock.common import JsonObject, Knobs, MockResponse, Plan, Tag, google_json, sse
from chaosproxy.mock.corpus import count_tokens
from chaosproxy.scenario.fixtures import Fixture

SSE_CONTENT_TYPE = "text/event-stream"
JSON_CONTENT_TYPE = "application/json; charset=UTF-8"
CRLF = b"\r\n"


#: The actions of ``/models/{model}:{action}`` the mock serves.
ACTIONS = frozenset({"generateContent", "streamGenerateContent"})


def unknown(params: Mapping[str, str]) -> bool:
    """Whether the route's ``{target}`` (``{model}:{action}``) names nothing served."""
    model, _, action = params["target"].rpartition(":")
    return not model or action not in ACTIONS


def serve(call: common.MockCall) -> MockResponse:
    """The answer to a call to the mock's Gemini route (the declaration's renderer)."""
    model, _, action = call.params["target"].rpartition(":")
    return respond(
        call.body,
        call.payload,
        call.knobs,
        model=model,
        action=action,
        alt=call.query.get("alt"),
        fixture=call.fixture,
    )


def respond(
    body: bytes,
    payload: JsonObject,
    knobs: Knobs,
    *,
    model: str,
    action: str,
    alt: str | None,
    fixture: Fixture | None = None,
) -> MockResponse:
    """The mock's answer to one ``generateContent``/``streamGenerateContent`` request
    (``fixture``'s when given)."""
    contents = common.required_list(
        payload, "contents", "* GenerateContentRequest.contents: contents is not specified"
    )
    config = _field(payload, "generationConfig", "generation_config")
    tool_config = _field(
        _field(payload, "toolConfig", "tool_config"),
        "functionCallingConfig",
        "function_calling_config",
    )
    tools = common.tools_from(payload.get("tools"))
    if str(tool_config.get("mode", "")).upper() == "NONE" or _answers_tool_result(contents):
        tools = []
    allowed = tool_config.get("allowedFunctionNames", tool_config.get("allowed_function_names"))
    plan = common.make_plan(
        body,
        knobs,
        model=model,
        prompt_texts=common.strings_in(
            [_field(payload, "systemInstruction", "system_instruction"), contents],
            skip=frozenset({"role"}),
        ),
        limit=common.int_field(config, "maxOutputTokens", "max_output_tokens"),
        tools=tools,
        forced_tool=allowed[0] if isinstance(allowed, list) and allowed else None,
        fixture=fixture,
    )
    if action == "generateContent":
        if plan.error is not None:
            return common.interrupted(plan, error_body)
        return MockResponse(JSON_CONTENT_TYPE, [_pretty(complete(plan))], streamed=False)
    chunks = stream_chunks(plan)
    if alt == "sse":
        return MockResponse(SSE_CONTENT_TYPE, [sse(google_json(c), newline=CRLF) for c in chunks])
    # Without alt=sse Google streams one JSON array, elements separated by ",\r\n".
    parts = [_pretty(c) for c in chunks]
    writes = [(b"[" if i == 0 else b",\r\n") + p for i, p in enumerate(parts)]
    writes[-1] += b"]"
    return MockResponse(JSON_CONTENT_TYPE, writes)


def _field(payload: Any, camel: str, snake: str) -> Mapping[str, Any]:
    if not isinstance(payload, Mapping):
        return {}
    value = payload.get(camel, payload.get(snake))
    return value if isinstance(value, Mapping) else {}


def _answers_tool_result(contents: list[Any]) -> bool:
    if not contents or not isinstance(contents[-1], dict):
        return False
    parts = contents[-1].get("parts")
    return isinstance(parts, list) and any(
        isinstance(p, dict) and ("functionResponse" in p or "function_response" in p) for p in parts
    )


def _pretty(obj: JsonObject) -> bytes:
    return json.dumps(obj, ensure_ascii=False, indent=2).encode()


def _usage(plan: Plan, final: bool) -> JsonObject:
    prompt = plan.prompt_tokens
    details = [{"modality": "TEXT", "tokenCount": prompt}]
    if not final:
        return {
            "promptTokenCount": prompt,
            "totalTokenCount": prompt,
            "promptTokensDetails": details,
        }
    output = plan.output_tokens
    if output is None:
        output = len(plan.choices[0]) + sum(
            count_tokens([json.dumps(call.arguments, ensure_ascii=False)]) for call in plan.tools
        )
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
        "promptTokensDetails": details,
        "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": output}],
    }


#: Gemini's finishReason for each provider-neutral finish reason.
FINISH_REASONS = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",
    "content_filter": "SAFETY",
    "refusal": "STOP",
}


def _chunk(plan: Plan, parts: list[JsonObject], final: bool) -> JsonObject:
    content: JsonObject = {"parts": parts, "role": "model"} if parts else {"role": "model"}
    candidate: JsonObject = {"content": content}
    if final:
        candidate["finishReason"] = FINISH_REASONS[plan.neutral_finish()]
    candidate["index"] = 0
    return {
        "candidates": [candidate],
        "usageMetadata": _usage(plan, final),
        "modelVersion": plan.model,
        "responseId": common.base64url_id(plan, "responseId", 23),
    }


def _calls(plan: Plan) -> list[JsonObject]:
    return [{"functionCall": {"name": c.name, "args": c.arguments}} for c in plan.tools]


def stream_chunks(plan: Plan) -> list[JsonObject]:
    """The response objects of the stream: one per text token, then one with every
    call's whole ``functionCall`` part; the last one final (with an in-stream error,
    none is: the error object comes instead of the end)."""
    pieces = plan.choices[0]
    last = len(pieces) - (0 if plan.tools else 1)
    final = plan.error is None
    chunks: list[tuple[JsonObject, Tag]] = [
        (_chunk(plan, [{"text": piece}], final=final and i == last), Tag.DELTA)
        for i, piece in enumerate(pieces)
    ]
    if plan.tools:
        chunks.append((_chunk(plan, _calls(plan), final=final), Tag.DELTA))
    if not chunks:
        chunks.append((_chunk(plan, [], final=final), Tag.OTHER))
    return common.with_error(chunks, plan, error_event(plan))


#: The HTTP status Google gives each error status (the default one: UNAVAILABLE).
ERROR_CODES = {
    "INVALID_ARGUMENT": 400,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


_OVERLOADED = "The model is overloaded. Please try again later."


def error_event(plan: Plan) -> JsonObject:
    """The in-stream error: the Google API error envelope (``503 UNAVAILABLE`` unless
    the fixture gives another status as its ``type``)."""
    error = plan.error
    status = (error.type if error else None) or "UNAVAILABLE"
    message = (error.message if error else None) or _OVERLOADED
    return {"error": {"code": ERROR_CODES.get(status, 500), "message": message, "status": status}}


def complete(plan: Plan) -> JsonObject:
    """The non-streamed ``GenerateContentResponse``."""
    parts: list[JsonObject] = [{"text": plan.text}] if plan.text else []
    return _chunk(plan, parts + _calls(plan), final=True)


#: Google's error status for an HTTP status.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_body(status: int, message: str, kind: str | None = None) -> JsonObject:
    """Google's error envelope (``kind``: its status name, else from the status)."""
    name = kind or STATUS_NAMES.get(status, "INTERNAL")
    return {"error": {"code": status, "message": message, "status": name}}
