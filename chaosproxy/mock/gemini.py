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

from chaosproxy.mock.common import (
    JsonObject,
    Knobs,
    MockRequestError,
    Plan,
    Reply,
    base64url_id,
    google_json,
    int_field,
    make_plan,
    sse,
    strings_in,
    tools_from,
)
from chaosproxy.mock.corpus import count_tokens

SSE_CONTENT_TYPE = "text/event-stream"
JSON_CONTENT_TYPE = "application/json; charset=UTF-8"
CRLF = b"\r\n"


def respond(
    body: bytes, payload: JsonObject, knobs: Knobs, *, model: str, action: str, alt: str | None
) -> Reply:
    """The mock's answer to one ``generateContent``/``streamGenerateContent`` request."""
    contents = payload.get("contents")
    if not isinstance(contents, list):
        raise MockRequestError("* GenerateContentRequest.contents: contents is not specified")
    config = _field(payload, "generationConfig", "generation_config")
    tool_config = _field(
        _field(payload, "toolConfig", "tool_config"),
        "functionCallingConfig",
        "function_calling_config",
    )
    tools = tools_from(payload.get("tools"))
    if str(tool_config.get("mode", "")).upper() == "NONE" or _answers_tool_result(contents):
        tools = []
    allowed = tool_config.get("allowedFunctionNames", tool_config.get("allowed_function_names"))
    plan = make_plan(
        body,
        knobs,
        model=model,
        prompt_texts=strings_in(
            [_field(payload, "systemInstruction", "system_instruction"), contents],
            skip=frozenset({"role"}),
        ),
        limit=int_field(config, "maxOutputTokens", "max_output_tokens"),
        tools=tools,
        forced_tool=allowed[0] if isinstance(allowed, list) and allowed else None,
    )
    chunks = stream_chunks(plan)
    if action == "generateContent":
        return Reply(JSON_CONTENT_TYPE, [_pretty(complete(plan))], streamed=False)
    if alt == "sse":
        return Reply(SSE_CONTENT_TYPE, [sse(google_json(c), newline=CRLF) for c in chunks])
    # Without alt=sse Google streams one JSON array, elements separated by ",\r\n".
    parts = [_pretty(c) for c in chunks]
    writes = [(b"[" if i == 0 else b",\r\n") + p for i, p in enumerate(parts)]
    writes[-1] += b"]"
    return Reply(JSON_CONTENT_TYPE, writes)


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
    if plan.tool is None:
        output = plan.completion_tokens()
    else:
        output = count_tokens([json.dumps(plan.tool.arguments, ensure_ascii=False)])
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
        "promptTokensDetails": details,
        "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": output}],
    }


def _chunk(plan: Plan, parts: list[JsonObject], final: bool) -> JsonObject:
    content: JsonObject = {"parts": parts, "role": "model"} if parts else {"role": "model"}
    candidate: JsonObject = {"content": content}
    if final:
        candidate["finishReason"] = "MAX_TOKENS" if plan.truncated else "STOP"
    candidate["index"] = 0
    return {
        "candidates": [candidate],
        "usageMetadata": _usage(plan, final),
        "modelVersion": plan.model,
        "responseId": base64url_id(plan, "responseId", 23),
    }


def stream_chunks(plan: Plan) -> list[JsonObject]:
    """The response objects of the stream, one per token, the last one final."""
    if plan.tool is not None:
        call = {"functionCall": {"name": plan.tool.name, "args": plan.tool.arguments}}
        return [_chunk(plan, [call], final=True)]
    tokens = plan.choices[0]
    if not tokens:
        return [_chunk(plan, [], final=True)]
    return [
        _chunk(plan, [{"text": token}], final=i == len(tokens) - 1)
        for i, token in enumerate(tokens)
    ]


def complete(plan: Plan) -> JsonObject:
    """The non-streamed ``GenerateContentResponse``."""
    if plan.tool is not None:
        parts: list[JsonObject] = [
            {"functionCall": {"name": plan.tool.name, "args": plan.tool.arguments}}
        ]
    else:
        parts = [{"text": plan.text}] if plan.text else []
    return _chunk(plan, parts, final=True)


def error_body(status: int, message: str) -> JsonObject:
    """Google's error envelope."""
    names = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "INVALID_ARGUMENT"}
    return {"error": {"code": status, "message": message, "status": names.get(status, "INTERNAL")}}
