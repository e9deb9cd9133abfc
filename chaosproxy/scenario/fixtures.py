"""Mock fixtures: a ``match`` on the request and one provider-neutral answer
(docs/mock.md, Fixtures).

A fixture is written once and the mock renders it in the wire format of whichever
provider the request was sent to. Fixtures come from a scenario's ``mock:`` list, from
fixture files (``--mock-fixtures``: a YAML or JSON mapping with a ``fixtures:`` list),
or are added at run time (admin ``POST /mock/fixtures``, ``proxy.add_fixture``); they
are validated by these models, and a file's problems are located to their lines as a
scenario's are (:func:`chaosproxy.scenario.load_fixture_files`).
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from chaosproxy.core.faults.base import Duration, regex_compiles
from chaosproxy.core.llm_request import RequestView
from chaosproxy.core.regex import compile_search

#: The header in which a proxy names the request's scenario to its built-in mock, so
#: that the scenario's ``mock:`` fixtures answer first. The proxy removes every
#: ``X-Chaos-*`` header a client sends, so only the proxy sets it.
SCENARIO_HEADER = "X-Chaos-Mock-Scenario"

#: Finish reasons a fixture may give, provider-neutral (docs/mock.md, Finish reasons).
Finish = Literal["stop", "length", "tool_calls", "content_filter", "refusal"]

_CONFIG = ConfigDict(extra="forbid", frozen=True)


def _null_is_empty(value: Any) -> Any:
    return {} if value is None else value


def _lower_names(headers: dict[str, str]) -> dict[str, str]:
    return {name.lower(): pattern for name, pattern in headers.items()}


#: A ``match``'s ``headers:`` (a scenario's and a fixture's): header names, kept
#: lower-cased, to ``fnmatch`` globs on their values; ``null`` is none.
HeaderGlobs = Annotated[
    dict[str, str], BeforeValidator(_null_is_empty), AfterValidator(_lower_names)
]


class FixtureMatch(BaseModel):
    """What a request must be for the fixture to answer it; all given must hold.

    ``path`` and ``model`` are ``fnmatch`` globs (``*`` crosses ``/``); ``message`` a
    substring and ``message_regex`` a regular expression (Python's syntax, searched in
    linear time) of the last user message; ``tools`` true (some tool offered), false
    (none) or the names that must all be offered; ``tool_result`` whether the last
    message is a tool's result (an agent's second turn); ``headers`` globs on header
    values.
    """

    model_config = _CONFIG

    path: Annotated[str, Field(min_length=1)] | None = None
    model: Annotated[str, Field(min_length=1)] | None = None
    message: Annotated[str, Field(min_length=1)] | None = None
    message_regex: Annotated[str, Field(min_length=1), AfterValidator(regex_compiles)] | None = None
    tools: bool | Annotated[str, Field(min_length=1)] | list[str] | None = None
    tool_result: bool | None = None
    headers: HeaderGlobs = Field(default_factory=dict)

    def mismatch(self, path: str, request: RequestView, headers: Mapping[str, str]) -> str | None:
        """The first part that does not hold, as ``key``; None when all hold."""
        if self.path is not None and not fnmatchcase(path.split("?", 1)[0], self.path):
            return "path"
        if self.model is not None and not fnmatchcase(request.model or "", self.model):
            return "model"
        last = request.last_user_message or ""
        if self.message is not None and self.message not in last:
            return "message"
        if self.message_regex is not None and not compile_search(self.message_regex)(last):
            return "message_regex"
        tools = self.tools
        if tools is True and not request.tools:
            return "tools"
        if tools is False and request.tools:
            return "tools"
        if isinstance(tools, str | list):
            wanted = [tools] if isinstance(tools, str) else tools
            if not set(wanted) <= set(request.tools):
                return "tools"
        if self.tool_result is not None:
            last_role = request.messages[-1].role if request.messages else None
            if (last_role == "tool") != self.tool_result:
                return "tool_result"
        lowered: dict[str, list[str]] = {}
        for name, value in headers.items():
            lowered.setdefault(name.lower(), []).append(value)
        for name, pattern in self.headers.items():
            if not any(fnmatchcase(v, pattern) for v in lowered.get(name, [])):
                return "headers"
        return None


class FixtureToolCall(BaseModel):
    """One call the answer makes: the function's ``name`` and its ``arguments`` (a
    mapping, or JSON text of one); ``id`` is derived from the request when not given."""

    model_config = _CONFIG

    name: Annotated[str, Field(min_length=1)]
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: Annotated[str, Field(min_length=1)] | None = None

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, v: dict[str, Any] | str) -> dict[str, Any] | str:
        if isinstance(v, str):
            try:
                parsed = orjson.loads(v)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON: {exc}") from None
            if not isinstance(parsed, dict):
                raise ValueError("must be a JSON object (the function's arguments)")
        return v

    @property
    def argument_object(self) -> dict[str, Any]:
        """The arguments as a mapping."""
        if isinstance(self.arguments, str):
            parsed: dict[str, Any] = orjson.loads(self.arguments)
            return parsed
        return self.arguments


class FixtureUsage(BaseModel):
    """Token counts to report, provider-neutral (each default: counted by the mock)."""

    model_config = _CONFIG

    input_tokens: Annotated[int, Field(ge=0)] | None = None
    output_tokens: Annotated[int, Field(ge=0)] | None = None


class FixtureError(BaseModel):
    """An error instead of (``status``) or in the middle of (``after``) the answer.

    ``status``: the HTTP status, answered with the provider's error body (``message``,
    ``type``), or ``body`` itself, and ``headers`` (``Retry-After``). ``after``: the
    stream breaks with the provider's in-stream error event after that many delta
    events (text or tool-call fragments), and ends there without its terminal event.
    """

    model_config = _CONFIG

    status: Annotated[int, Field(ge=400, le=599)] | None = None
    after: Annotated[int, Field(ge=0)] | None = None
    message: Annotated[str, Field(min_length=1)] | None = None
    type: Annotated[str, Field(min_length=1)] | None = None
    headers: dict[str, str | int] = Field(default_factory=dict)
    body: str | dict[str, Any] | list[Any] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> FixtureError:
        if (self.status is None) == (self.after is None):
            raise ValueError("give exactly one of status (an HTTP error), after (mid-stream)")
        if self.after is not None and (self.headers or self.body is not None):
            raise ValueError("headers and body go with status, not with after")
        return self


class Fixture(BaseModel):
    """One fixture: when the request matches, the mock answers with this."""

    model_config = _CONFIG

    #: A name for the fixture (shown in the mock's ``X-Mock-Fixture`` header).
    name: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    match: FixtureMatch = Field(default_factory=FixtureMatch)
    text: str | None = None
    tool_calls: tuple[FixtureToolCall, ...] = ()
    finish: Finish | None = None
    usage: FixtureUsage | None = None
    error: FixtureError | None = None
    #: Text tokens (and tool-argument fragments) per delta event.
    tokens_per_event: Annotated[int, Field(ge=1, le=100_000)] = 1
    #: Between two events on the wire (default: the mock's interval).
    interval: Duration | None = None
    #: Answer only the first ``times`` matching requests, then let the next fixture
    #: (or the corpus) answer (``times: 1`` then another: a 429, then an answer).
    times: Annotated[int, Field(ge=1)] | None = None

    @field_validator("match", mode="before")
    @classmethod
    def _null_match(cls, v: Any) -> Any:
        return {} if v is None else v

    @model_validator(mode="after")
    def _an_answer(self) -> Fixture:
        if self.text is None and not self.tool_calls and self.error is None:
            raise ValueError("give text, tool_calls or error: what the mock answers")
        if self.interval is not None and self.interval > 60:
            raise ValueError("interval must be at most 60s")
        return self

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able view in the shape of a fixture file's item (durations with a
        unit), without the keys left at their default; read back unchanged."""
        return self.model_dump(mode="json", exclude_defaults=True)


class FixtureFile(BaseModel):
    """A fixture file: ``fixtures:``, a list tried in order."""

    model_config = _CONFIG

    fixtures: tuple[Fixture, ...]

    @field_validator("fixtures")
    @classmethod
    def _some(cls, v: tuple[Fixture, ...]) -> tuple[Fixture, ...]:
        # (Not min_length: pydantic would also report an empty list when an item fails.)
        if not v:
            raise ValueError("must not be empty")
        return v


__all__ = [
    "SCENARIO_HEADER",
    "Finish",
    "Fixture",
    "FixtureError",
    "FixtureFile",
    "FixtureMatch",
    "FixtureToolCall",
    "FixtureUsage",
]
