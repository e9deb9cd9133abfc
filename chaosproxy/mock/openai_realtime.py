"""OpenAI Realtime: ``GET /v1/realtime``, a WebSocket.

On connect the server sends ``session.created``. The client may send
``session.update`` (answered ``session.updated``: its ``instructions``, ``tools`` and
``model`` are the session's), ``conversation.item.create`` (a message, answered
``conversation.item.created``) and ``response.create``, which the mock answers as the
GA API streams a response: ``response.created``, ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta``...,
``response.output_text.done``, ``response.content_part.done``, one
``response.output_audio.delta`` (100 ms of silent PCM16 at 24 kHz, base64) and its
``response.output_audio.done``, ``response.output_item.done``; a tool call (a fixture's,
or the first tool offered) as a ``function_call`` item streamed by
``response.function_call_arguments.delta``/``.done``; then ``response.done``. Each
event is one text message. The answer is the one the Responses route gives for the
same conversation (its fixtures match the same request: ``instructions``, ``input``,
``tools``).
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from chaosproxy.mock import common
from chaosproxy.mock.common import JsonObject, MockResponse, Plan, Tag
from chaosproxy.mock.openai_chat import error_body

DEFAULT_MODEL = "gpt-realtime"
#: 100 ms of silence: 2400 samples of 16-bit PCM at 24 kHz.
SILENCE = base64.b64encode(bytes(4800)).decode()

__all__ = ["DEFAULT_MODEL", "SILENCE", "Conversation", "error_body", "serve"]


def serve(call: common.MockCall) -> MockResponse:
    """The events of one response to ``response.create`` (``call.payload`` is the
    conversation as a Responses request: ``model``, ``instructions``, ``input``,
    ``tools``), each one message."""
    payload = call.payload
    tools = common.tools_from(payload.get("tools"))
    if payload.get("tool_choice") == "none":
        tools = []
    plan = common.make_plan(
        call.body,
        call.knobs,
        model=str(payload.get("model") or DEFAULT_MODEL),
        prompt_texts=common.strings_in(
            [payload.get("instructions"), payload.get("input")], skip=frozenset({"role"})
        ),
        limit=common.int_field(payload, "max_output_tokens"),
        tools=tools,
        forced_tool=common.forced_name(payload.get("tool_choice")),
        fixture=call.fixture,
    )
    return MockResponse("application/json", _events(plan))


def _events(plan: Plan) -> list[bytes]:
    response_id = "resp_" + plan.ident("response", 20)
    events: list[tuple[JsonObject, Tag]] = [
        ({"type": "response.created", "response": _response(plan, response_id, [])}, Tag.START)
    ]
    output: list[JsonObject] = []
    if plan.text or not plan.tools:
        output.append(_message(plan, response_id, len(output), events))
    for call in range(len(plan.tools)):
        output.append(_call(plan, response_id, call, len(output), events))
    status = "incomplete" if plan.truncated else "completed"
    done = _response(plan, response_id, output, status=status)
    events.append(({"type": "response.done", "response": done}, Tag.OTHER))
    numbered = [
        (common.compact({"event_id": f"event_{plan.ident(f'ev{i}', 16)}", **body}), tag)
        for i, (body, tag) in enumerate(events)
    ]
    error = {"type": "error", "error": {**error_body(500, _error_text(plan))["error"]}}
    return common.with_error(numbered, plan, common.compact(error))


def _error_text(plan: Plan) -> str:
    error = plan.error
    return (error.message if error else None) or (
        "The server had an error while processing your request. Sorry about that!"
    )


def _response(
    plan: Plan, response_id: str, output: list[JsonObject], status: str = "in_progress"
) -> JsonObject:
    body: JsonObject = {
        "id": response_id,
        "object": "realtime.response",
        "status": status,
        "output": output,
    }
    if status != "in_progress":
        body["usage"] = {
            "total_tokens": plan.prompt_tokens + plan.completion_tokens(),
            "input_tokens": plan.prompt_tokens,
            "output_tokens": plan.completion_tokens(),
        }
    return body


def _message(
    plan: Plan, response_id: str, index: int, events: list[tuple[JsonObject, Tag]]
) -> JsonObject:
    item_id = "item_" + plan.ident(f"message{index}", 20)
    where: JsonObject = {"response_id": response_id, "item_id": item_id, "output_index": index}
    item: JsonObject = {"id": item_id, "type": "message", "role": "assistant", "content": []}
    part = {"type": "output_text", "text": ""}
    events.append(({"type": "response.output_item.added", **where, "item": item}, Tag.OTHER))
    events.append(
        (
            {"type": "response.content_part.added", **where, "content_index": 0, "part": part},
            Tag.OTHER,
        )
    )
    for token in plan.choices[0]:
        delta = {"type": "response.output_text.delta", **where, "content_index": 0, "delta": token}
        events.append((delta, Tag.DELTA))
    text = plan.text
    at = {**where, "content_index": 0}
    events.append(({"type": "response.output_text.done", **at, "text": text}, Tag.OTHER))
    done_part = {"type": "output_text", "text": text}
    events.append(({"type": "response.content_part.done", **at, "part": done_part}, Tag.OTHER))
    audio = {**where, "content_index": 1}
    events.append(({"type": "response.output_audio.delta", **audio, "delta": SILENCE}, Tag.OTHER))
    events.append(({"type": "response.output_audio.done", **audio}, Tag.OTHER))
    done_item = {**item, "status": "completed", "content": [done_part]}
    events.append(({"type": "response.output_item.done", **where, "item": done_item}, Tag.OTHER))
    return done_item


def _call(
    plan: Plan, response_id: str, call: int, index: int, events: list[tuple[JsonObject, Tag]]
) -> JsonObject:
    tool = plan.tools[call]
    item_id = "item_" + plan.ident(plan.label("call_item", call), 20)
    call_id = tool.id or "call_" + plan.ident(plan.label("call", call), 16)
    arguments = common.compact(tool.arguments).decode()
    fragments, _ = plan.fragments(arguments)
    where: JsonObject = {"response_id": response_id, "item_id": item_id, "output_index": index}
    item: JsonObject = {
        "id": item_id,
        "type": "function_call",
        "status": "in_progress",
        "call_id": call_id,
        "name": tool.name,
        "arguments": "",
    }
    events.append(({"type": "response.output_item.added", **where, "item": item}, Tag.OTHER))
    for piece in fragments:
        delta = {"type": "response.function_call_arguments.delta", **where, "call_id": call_id}
        events.append(({**delta, "delta": piece}, Tag.DELTA))
    done = {"type": "response.function_call_arguments.done", **where, "call_id": call_id}
    events.append(({**done, "name": tool.name, "arguments": arguments}, Tag.OTHER))
    done_item = {**item, "status": "completed", "arguments": arguments}
    events.append(({"type": "response.output_item.done", **where, "item": done_item}, Tag.OTHER))
    return done_item


class Conversation:
    """One realtime session's state: its settings and its conversation items. Each
    client event in gives the events to send back, and, for ``response.create``, the
    conversation as a Responses request for :func:`serve`."""

    def __init__(self, model: str | None) -> None:
        self.session: JsonObject = {
            "type": "realtime",
            "object": "realtime.session",
            "id": "sess_mock",
            "model": model or DEFAULT_MODEL,
            "output_modalities": ["text", "audio"],
            "instructions": "",
            "tools": [],
            "tool_choice": "auto",
        }
        self.items: list[JsonObject] = []
        self._events = 0

    def _event(self, body: JsonObject) -> bytes:
        self._events += 1
        return common.compact({"event_id": f"event_mock_{self._events}", **body})

    def created(self) -> bytes:
        return self._event({"type": "session.created", "session": self.session})

    def receive(self, data: str) -> tuple[list[bytes], JsonObject | None]:
        """The events answering one client message, and the request a
        ``response.create`` asks (None for any other)."""
        try:
            event: Any = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return [self._error(f"The client event is not valid JSON: {exc}")], None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return [self._error("A client event is a JSON object with a 'type'")], None
        kind = event["type"]
        if kind == "session.update":
            given = event.get("session")
            if isinstance(given, dict):
                self.session.update({k: v for k, v in given.items() if k != "type"})
            return [self._event({"type": "session.updated", "session": self.session})], None
        if kind == "conversation.item.create":
            item = event.get("item")
            if not isinstance(item, dict):
                return [self._error("conversation.item.create needs an 'item' object")], None
            item = {"id": f"item_mock_{len(self.items) + 1}", **item}
            self.items.append(item)
            created = {"type": "conversation.item.created", "item": item}
            return [self._event(created)], None
        if kind == "response.create":
            return [], self.request(event.get("response"))
        return [], None  # (audio buffers and the rest: nothing to answer)

    def request(self, options: Any) -> JsonObject:
        """The conversation as a Responses request (a ``response.create``'s own
        ``instructions``/``tools`` win over the session's)."""
        given = options if isinstance(options, dict) else {}
        session = self.session
        return {
            "model": session.get("model"),
            "instructions": given.get("instructions", session.get("instructions")),
            "input": [
                {"role": item.get("role", "user"), "content": item.get("content", [])}
                for item in self.items
                if item.get("type", "message") == "message"
            ],
            "tools": given.get("tools", session.get("tools")),
            "tool_choice": given.get("tool_choice", session.get("tool_choice")),
        }

    def _error(self, message: str) -> bytes:
        error = {**error_body(400, message)["error"], "event_id": None}
        return self._event({"type": "error", "error": error})
