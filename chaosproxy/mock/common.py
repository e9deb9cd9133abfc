"""What every provider of the mock shares: the request's plan, ids, tools, encoders.

Nothing here reads the clock or a global random generator: every value is a function of
the request body's sha256 digest and the knobs, so the same request gives the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import orjson

from chaosproxy.core.llm_request import tool_declarations
from chaosproxy.mock.corpus import count_tokens, take_tokens, tokenize
from chaosproxy.scenario.fixtures import Fixture

JsonObject = dict[str, Any]
T = TypeVar("T")

#: The models the mock lists (``GET /v1/models``); a GET chat request names the first.
MODELS = ("gpt-4o-mini", "gpt-4o", "claude-sonnet-4-5", "gemini-2.0-flash", "llama3.2")

#: The earliest ``created`` timestamp the mock reports (2024-01-01T00:00:00Z).
CREATED_BASE = 1_704_067_200
#: ``created`` falls within this many seconds after CREATED_BASE.
CREATED_SPAN = 31_536_000

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

_PLACES = ("San Francisco, CA", "Kyōto, Japan", "München, Germany", "São Paulo, Brazil")
_PHRASES = ("crème brûlée recipe", "東京の天気", "weekend plans ☀️", "café near me")
_PLACE_HINTS = ("location", "city", "place", "address", "region", "country", "where")


@dataclass(frozen=True, slots=True)
class Knobs:
    """How long a mock answer is and how fast it streams."""

    #: Text tokens per answer (per choice); each is one delta event.
    tokens: int
    #: Seconds between two events on the wire.
    interval: float


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the request offers the model."""

    name: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the mock makes, with its arguments as an object."""

    name: str
    arguments: JsonObject
    #: The call's id as a fixture gives it (None: each provider derives its own).
    id: str | None = None


@dataclass(frozen=True, slots=True)
class StreamError:
    """A fixture's in-stream error: the provider's error event after ``after`` delta
    events (text or tool-call fragments); the stream ends there, with no terminal."""

    after: int
    message: str | None = None
    type: str | None = None


class Tag(StrEnum):
    """What a rendered event is, for placing a StreamError: a delta (text or tool-call
    fragment), one of the events that open the stream, or anything else."""

    DELTA = "delta"
    START = "start"
    OTHER = "other"


#: A rendered event and what it is.
Tagged = tuple[bytes, Tag]


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything a provider needs to render one deterministic answer."""

    digest: bytes
    model: str
    created: int
    prompt_tokens: int
    #: Text tokens of each choice, already cut to the request's limit.
    choices: tuple[tuple[str, ...], ...]
    #: True when the request's max-tokens limit cut the answer short.
    truncated: bool
    #: The request's max-tokens limit, if any.
    limit: int | None
    #: The calls the answer makes (in every choice), in order.
    tools: tuple[ToolCall, ...] = ()
    #: A fixture's finish reason, provider-neutral (None: from the answer itself).
    finish: str | None = None
    #: A fixture's output token count (None: counted).
    output_tokens: int | None = None
    #: A fixture's in-stream error.
    error: StreamError | None = None
    #: Tokens per tool-argument fragment.
    per_event: int = 1

    @property
    def tool(self) -> ToolCall | None:
        """The first call, if any."""
        return self.tools[0] if self.tools else None

    @property
    def text(self) -> str:
        """The text of the first choice."""
        return "".join(self.choices[0])

    @property
    def refusal(self) -> bool:
        """Whether the text is a refusal (a fixture's ``finish: refusal``)."""
        return self.finish == "refusal"

    def neutral_finish(self, cut: bool = False) -> str:
        """The finish reason, provider-neutral: the fixture's, else ``length`` when the
        request's limit (or ``cut``) cut the answer, ``tool_calls`` with calls, ``stop``."""
        if self.finish is not None:
            return self.finish
        if self.truncated or cut:
            return "length"
        return "tool_calls" if self.tools else "stop"

    def completion_tokens(self, fragments: Sequence[str] = ()) -> int:
        """Tokens generated: every choice's text tokens plus tool argument fragments
        (a fixture's ``usage.output_tokens`` when it gives them)."""
        if self.output_tokens is not None:
            return self.output_tokens
        return sum(len(c) for c in self.choices) + len(fragments)

    def label(self, base: str, call: int) -> str:
        """What a derived id of call number ``call`` is made from: ``base`` for the
        first call (the id the mock always gave it), else ``base.N``."""
        return base if call == 0 else f"{base}.{call}"

    def ident(self, label: str, length: int, alphabet: str = _BASE62) -> str:
        """A stable id of ``length`` characters, distinct per ``label``."""
        return derive_id(self.digest, label, length, alphabet)

    def number(self, label: str, modulo: int) -> int:
        """A stable number in ``range(modulo)``, distinct per ``label``."""
        raw = hashlib.sha256(self.digest + label.encode()).digest()
        return int.from_bytes(raw[:8], "big") % modulo

    def fragments(self, arguments_json: str) -> tuple[list[str], bool]:
        """Tool-argument fragments of ``arguments_json``, cut to the limit.

        Returns the fragments and whether the limit cut them.
        """
        return limit_tokens(group(tokenize(arguments_json), self.per_event), self.limit)


def derive_id(digest: bytes, label: str, length: int, alphabet: str = _BASE62) -> str:
    """``length`` characters of ``alphabet`` derived from ``digest`` and ``label``."""
    raw = hashlib.sha256(digest + b"\x00" + label.encode()).digest()
    number = int.from_bytes(raw + hashlib.sha256(raw).digest(), "big")
    out = []
    for _ in range(length):
        number, rem = divmod(number, len(alphabet))
        out.append(alphabet[rem])
    return "".join(out)


def hex_id(plan: Plan, label: str, length: int) -> str:
    """A lowercase hexadecimal id, as OpenAI's Responses API uses."""
    return plan.ident(label, length, "0123456789abcdef")


def base64url_id(plan: Plan, label: str, length: int) -> str:
    """A URL-safe base64 id, as Gemini's ``responseId`` looks."""
    raw = hashlib.sha256(plan.digest + label.encode()).digest()
    return base64.urlsafe_b64encode(raw).decode()[:length]


def group(tokens: list[str], size: int) -> list[str]:
    """``tokens`` joined ``size`` at a time (one delta event each)."""
    if size <= 1:
        return tokens
    return ["".join(tokens[i : i + size]) for i in range(0, len(tokens), size)]


def with_error(events: list[tuple[T, Tag]], plan: Plan, error_event: T) -> list[T]:
    """The events of a stream, cut for the plan's in-stream error (if any): every event
    before its ``after + 1``-th delta (after the last delta when there are fewer; after
    the opening events when there are none), then ``error_event``, then nothing."""
    if plan.error is None:
        return [data for data, _ in events]
    deltas = [i for i, (_, tag) in enumerate(events) if tag == Tag.DELTA]
    after = plan.error.after
    if after < len(deltas):
        cut = deltas[after]
    elif deltas:
        cut = deltas[-1] + 1
    else:
        cut = next((i for i, (_, tag) in enumerate(events) if tag != Tag.START), len(events))
    return [data for data, _ in events[:cut]] + [error_event]


def limit_tokens(tokens: list[str], limit: int | None) -> tuple[list[str], bool]:
    """``tokens`` cut to ``limit``, and whether it cut anything."""
    if limit is not None and len(tokens) > limit:
        return tokens[:limit], True
    return tokens, False


def make_plan(
    body: bytes,
    knobs: Knobs,
    *,
    model: str,
    prompt_texts: Iterable[str],
    limit: int | None = None,
    n: int = 1,
    tools: Sequence[ToolSpec] = (),
    forced_tool: str | None = None,
    fixture: Fixture | None = None,
) -> Plan:
    """The plan for one request.

    The answer text starts at the corpus answer chosen by the body's digest; choice ``i``
    starts ``i`` answers later. ``tools`` (already filtered to "the model may call one")
    turn the answer into a call of ``forced_tool`` or else the first tool.
    With ``fixture``, the answer is the fixture's instead (its text in every choice,
    its calls, finish reason, usage and in-stream error), never cut by the limit.
    """
    digest = hashlib.sha256(body).digest()
    start = int.from_bytes(digest[:8], "big")
    created = CREATED_BASE + int.from_bytes(digest[8:12], "big") % CREATED_SPAN
    prompt_tokens = count_tokens(list(prompt_texts)) + 3
    if fixture is not None:
        return _fixture_plan(fixture, digest, model, created, prompt_tokens, max(1, n))
    tool_call: ToolCall | None = None
    if tools:
        spec = next((t for t in tools if t.name == forced_tool), tools[0])
        tool_call = ToolCall(spec.name, example_arguments(spec.parameters, digest))
    truncated = False
    choices: list[tuple[str, ...]] = []
    if tool_call is None:
        for i in range(max(1, n)):
            tokens, cut = limit_tokens(take_tokens(start + i, knobs.tokens), limit)
            truncated = truncated or cut
            choices.append(tuple(tokens))
    else:
        choices = [() for _ in range(max(1, n))]
    return Plan(
        digest=digest,
        model=model,
        created=created,
        prompt_tokens=prompt_tokens,
        choices=tuple(choices),
        truncated=truncated,
        limit=limit,
        tools=() if tool_call is None else (tool_call,),
    )


def _fixture_plan(
    fixture: Fixture, digest: bytes, model: str, created: int, prompt_tokens: int, n: int
) -> Plan:
    pieces = tuple(group(tokenize(fixture.text or ""), fixture.tokens_per_event))
    error = fixture.error
    usage = fixture.usage
    return Plan(
        digest=digest,
        model=model,
        created=created,
        prompt_tokens=(
            prompt_tokens if usage is None or usage.input_tokens is None else usage.input_tokens
        ),
        choices=tuple(pieces for _ in range(n)),
        truncated=False,
        limit=None,
        tools=tuple(ToolCall(c.name, c.argument_object, c.id) for c in fixture.tool_calls),
        finish=fixture.finish,
        output_tokens=None if usage is None else usage.output_tokens,
        error=(
            StreamError(error.after, error.message, error.type)
            if error is not None and error.after is not None
            else None
        ),
        per_event=fixture.tokens_per_event,
    )


def example_arguments(schema: Mapping[str, Any], digest: bytes) -> JsonObject:
    """Plausible arguments for a JSON-schema ``object``, chosen by ``digest``."""
    value = _example_value(schema, "", digest, 0)
    return value if isinstance(value, dict) else {}


def _example_value(schema: Any, name: str, digest: bytes, depth: int) -> Any:
    if not isinstance(schema, Mapping):
        return "value"
    pick = digest[(depth * 7 + len(name)) % len(digest)]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[pick % len(enum)]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).lower()  # Gemini spells types in capitals
    if kind == "object":
        props = schema.get("properties")
        if not isinstance(props, Mapping) or depth > 4:
            return {}
        return {
            str(key): _example_value(sub, str(key), digest, depth + 1 + i)
            for i, (key, sub) in enumerate(props.items())
        }
    if kind == "array":
        return [_example_value(schema.get("items", {}), name, digest, depth + 1)]
    if kind == "integer":
        return 1 + pick % 9
    if kind == "number":
        return round(12.5 + pick % 20, 1)
    if kind == "boolean":
        return pick % 2 == 0
    if kind == "null":
        return None
    words = _PLACES if any(h in name.lower() for h in _PLACE_HINTS) else _PHRASES
    return words[pick % len(words)]


def tools_from(raw: Any) -> list[ToolSpec]:
    """Function tools from any provider's ``tools`` list.

    Understands OpenAI Chat/Ollama (``{"type":"function","function":{...}}``), OpenAI
    Responses (``{"type":"function","name":...}``), Anthropic (``input_schema``) and
    Gemini (``{"functionDeclarations":[...]}``). Other tools (web search...) are ignored.
    """
    specs: list[ToolSpec] = []
    for decl in tool_declarations(raw):
        params = decl.get("parameters", decl.get("input_schema", decl.get("parametersJsonSchema")))
        specs.append(ToolSpec(decl["name"], params if isinstance(params, Mapping) else {}))
    return specs


def strings_in(value: Any, skip: frozenset[str] = frozenset()) -> list[str]:
    """Every string inside a JSON value, depth first, skipping keys in ``skip``."""
    out: list[str] = []
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for key, sub in value.items():
            if key not in skip:
                out.extend(strings_in(sub, skip))
    elif isinstance(value, list):
        for sub in value:
            out.extend(strings_in(sub, skip))
    return out


def required_list(payload: Mapping[str, Any], name: str, message: str) -> list[Any]:
    """``payload[name]``, a list the request must have; else a MockRequestError with the
    provider's own ``message``."""
    value = payload.get(name)
    if not isinstance(value, list):
        raise MockRequestError(message)
    return value


def int_field(payload: Mapping[str, Any], *names: str) -> int | None:
    """The first of ``names`` in ``payload`` that holds a non-negative integer."""
    for name in names:
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def compact(obj: Any) -> bytes:
    """Compact JSON with raw UTF-8, as OpenAI, Anthropic and Ollama send it."""
    return orjson.dumps(obj)


def google_json(obj: Any) -> bytes:
    """JSON in Google's style: a space after colons, none after commas."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ": ")).encode()


def sse(data: bytes, event: str | None = None, newline: bytes = b"\n") -> bytes:
    """One SSE event: optional ``event:`` line, one ``data:`` line, blank line."""
    head = b"event: " + event.encode() + newline if event is not None else b""
    return head + b"data: " + data + newline + newline


@dataclass(frozen=True, slots=True)
class MockResponse:
    """A rendered answer: its status, Content-Type and the writes that make its body.

    A streamed answer has one item in ``chunks`` per event; the shell writes each on its
    own, pacing them by the interval. A plain JSON answer has a single chunk.
    """

    content_type: str
    chunks: list[bytes]
    status: int = 200
    streamed: bool = True


@dataclass(frozen=True, slots=True)
class MockCall:
    """One request to a provider's mock route, as its mock module's ``serve`` is given it.

    A provider names its mock module in its declaration (``mock``, with its
    ``mock_routes``: chaosproxy/core/providers/base.py); ``mock/app.py`` serves each
    route with that module, which gives:

    - ``serve(call: MockCall) -> MockResponse``: the answer (``MockRequestError``: a 400);
    - ``error_body(status, message, kind=None)``: its error envelope (:data:`ErrorBody`);
    - ``unknown(params) -> bool`` (optional): True when a route's params name nothing it
      serves (a 404, before the body is read);
    - ``query_payload(query) -> JsonObject`` (a ``GET`` route's): the request body a
      query stands for.
    """

    #: The request body, as sent.
    body: bytes
    #: The body parsed (a JSON object).
    payload: JsonObject
    knobs: Knobs
    #: The fixture that answers it, if one does.
    fixture: Fixture | None
    #: The route's ``{name}`` parts and fixed params (``MockRoute.params``).
    params: Mapping[str, str]
    #: The request's query parameters.
    query: Mapping[str, str]


class MockRequestError(Exception):
    """The request cannot be answered (400): bad JSON or a missing required field."""


def json_reply(obj: Any, status: int = 200, dumps: Any = compact) -> MockResponse:
    """A non-streamed JSON answer."""
    return MockResponse("application/json", [dumps(obj)], status=status, streamed=False)


#: A provider's error envelope: (status, message, its error type or None) → body.
ErrorBody = Callable[[int, str, str | None], JsonObject]
#: What a failed generation says when its fixture gives no message.
GENERATION_FAILED = "The server had an error while processing your request. Sorry about that!"


def interrupted(plan: Plan, error_body: ErrorBody) -> MockResponse:
    """The non-streamed answer to a fixture that breaks mid-stream (``error: {after}``):
    the generation failed, so a 500 with the provider's error body."""
    error = plan.error
    message = (error.message if error else None) or GENERATION_FAILED
    return json_reply(error_body(500, message, error.type if error else None), status=500)


def forced_name(choice: Any) -> str | None:
    """The function a ``tool_choice`` forces, in any provider's spelling, if any."""
    if isinstance(choice, Mapping):
        if isinstance(choice.get("name"), str):
            return str(choice["name"])
        function = choice.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
    return None
