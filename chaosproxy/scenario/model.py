"""The Scenario value: one pydantic model, so its rules are stated once.

The loader validates a file's keys with these same models (docs/scenarios.md); only
the fault list, which needs each fault's own ``Config``, is validated by the loader.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from chaosproxy.core import faults as fault_registry
from chaosproxy.core.faults import FaultConfig
from chaosproxy.core.frames import Format
from chaosproxy.core.history import ResumeConfig
from chaosproxy.core.integrity import parse_pointer
from chaosproxy.core.seeds import MAX_SEED
from chaosproxy.scenario.fixtures import Fixture, HeaderGlobs

#: Scenario names: usable as-is in a URL path segment and an HTTP header value.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
#: What a name that does not match NAME_PATTERN is told.
NAME_RULE = "must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
#: The scenario name that selects no scenario (``X-Chaos-Scenario: none``).
PASSTHROUGH = "none"

#: A scenario's ``format:``: a framing :data:`~chaosproxy.core.frames.Format`, or
#: ``auto`` (from the response's Content-Type).
FormatChoice = Literal["auto", Format]
FORMATS: tuple[str, ...] = get_args(FormatChoice)

_NAME_RE = re.compile(NAME_PATTERN)


def name_error(name: str) -> str | None:
    """Why ``name`` cannot name a scenario, as a phrase to follow it; None when it can.

    The one name rule: used for ``name:`` keys and for names taken from file names.
    """
    if not _NAME_RE.fullmatch(name):
        return NAME_RULE
    if name == PASSTHROUGH:
        return "is reserved"
    return None


def header_values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header ``name`` (case-insensitive), for a plain dict or a multidict."""
    wanted = name.lower()
    return [v for k, v in headers.items() if k.lower() == wanted]


class MatchRule(BaseModel):
    """The ``match:`` of a scenario: all given parts must hold.

    ``method`` is compared case-insensitively; ``path`` is an ``fnmatch`` glob
    (case-sensitive, ``*`` also crosses ``/``) on the path without its query;
    ``headers`` maps header names (kept lower-cased) to ``fnmatch`` globs on their
    values (a header that is absent never matches, and a repeated header matches when
    any of its values does).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    method: Annotated[str, Field(min_length=1)] | None = None
    path: Annotated[str, Field(min_length=1)] | None = None
    headers: HeaderGlobs = Field(default_factory=dict)

    @field_validator("method")
    @classmethod
    def _upper_method(cls, v: str | None) -> str | None:
        return None if v is None else v.upper()

    def matches(self, method: str, path: str, headers: Mapping[str, str]) -> bool:
        if self.method is not None and method.upper() != self.method:
            return False
        if self.path is not None and not fnmatchcase(path.split("?", 1)[0], self.path):
            return False
        for name, pattern in self.headers.items():
            if not any(fnmatchcase(v, pattern) for v in header_values(headers, name)):
                return False
        return True


class EnvelopeRule(BaseModel):
    """The ``envelope:`` of a scenario: RFC 6901 JSON pointers to each event's stream
    id and sequence number in an application envelope (docs/integrity.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    stream: str | None = None
    sequence: str | None = None

    @field_validator("stream", "sequence")
    @classmethod
    def _pointer(cls, v: str | None) -> str | None:
        if v is not None:
            parse_pointer(v)
        return v

    @model_validator(mode="after")
    def _something(self) -> EnvelopeRule:
        if self.stream is None and self.sequence is None:
            raise ValueError("give stream, sequence or both (JSON pointers)")
        return self


class Scenario(BaseModel):
    """A validated scenario; ``faults`` are (fault name, validated config) in order.

    The fields are the keys of a scenario file, in the order problems list them, except
    ``source`` (excluded: where the scenario came from, not something a file says).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = None
    provider: str = "auto"
    format: FormatChoice = "auto"
    match: MatchRule | None = None
    #: The fraction of matched (or default) requests the scenario takes; the others
    #: fall through to the next rule (docs/scenarios.md, Staging mixes: ``rate``).
    rate: Annotated[float, Field(ge=0, le=1)] = 1.0
    #: The 1-based request ordinals the faults apply to (None: every request). A file
    #: gives a list, hence not strict here; the items stay strict.
    requests: (
        Annotated[frozenset[Annotated[int, Field(ge=1)]], Field(min_length=1, strict=False)] | None
    ) = None
    #: Reconnection and resume (docs/reconnection.md); None: reconnects are forwarded.
    resume: ResumeConfig | None = None
    faults: tuple[tuple[str, FaultConfig], ...]
    #: JSON pointers to an application envelope, checked by the contract monitor.
    envelope: EnvelopeRule | None = None
    #: Mock fixtures tried first for this scenario's requests when the upstream is the
    #: built-in mock (docs/mock.md, Fixtures). A file gives a list: not strict here.
    mock: Annotated[tuple[Fixture, ...], Field(strict=False)] = ()
    #: Where it came from: a file path, or the ``source`` given to parse_scenario.
    source: str = Field(default="", exclude=True)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        why = name_error(v)
        if why == NAME_RULE:
            raise ValueError(why)
        if why is not None:
            raise ValueError(f"{v!r} {why}: it selects no scenario")
        return v

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, v: str) -> str:
        from chaosproxy.core.providers import PROVIDER_NAMES

        allowed = ("auto", *PROVIDER_NAMES)
        if v not in allowed:
            raise ValueError(f"must be one of: {', '.join(allowed)}")
        return v

    @property
    def needs_framing(self) -> bool:
        """True when any fault needs sse/ndjson framing."""
        faults = fault_registry.registry()
        return any(faults[name].needs_framing(cfg) for name, cfg in self.faults)

    def cross_tenant_faults(self) -> list[str]:
        """The keys (``faults[0].splice.across_tenants``) of faults that take from every
        tenant's streams: another user's text in this scenario's answers. Valid, but
        ``validate`` and ``serve`` warn about each (docs/reconnection.md, Tenants)."""
        return [
            f"faults[{i}].{name}.across_tenants"
            for i, (name, cfg) in enumerate(self.faults)
            if getattr(cfg, "across_tenants", False) is True
        ]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able view in the shape of a scenario file (for the admin API):
        durations as strings with a unit (``"800ms"``), so that the view, given back
        to :func:`~chaosproxy.scenario.parse_scenario` with ``read_only=True``, is the
        same scenario. ``source`` is read-only (where the scenario came from);
        ``envelope`` is there only when set."""
        view: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "provider": self.provider,
            "format": self.format,
            "match": None
            if self.match is None
            else {
                "method": self.match.method,
                "path": self.match.path,
                "headers": dict(self.match.headers),
            },
            "rate": self.rate,
            "requests": None if self.requests is None else sorted(self.requests),
            "resume": None if self.resume is None else self.resume.model_dump(mode="json"),
            "faults": [{n: c.model_dump(mode="json")} for n, c in self.faults],
            "source": self.source,
        }
        if self.envelope is not None:
            view["envelope"] = self.envelope.model_dump()
        if self.mock:
            view["mock"] = [fixture.as_dict() for fixture in self.mock]
        return view


def cross_tenant_warnings(scenarios: Iterable[Scenario]) -> list[str]:
    """One warning per fault that crosses tenants (:meth:`Scenario.cross_tenant_faults`),
    located as a problem is (the file, else the scenario's name)."""
    return [
        f"{scenario.source or scenario.name}: {key}: true: scenario {scenario.name} puts "
        "events of every tenant's streams (other users' text) into its answers"
        for scenario in scenarios
        for key in scenario.cross_tenant_faults()
    ]
