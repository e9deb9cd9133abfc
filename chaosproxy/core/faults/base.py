"""What every fault is made of: a frozen config, per-request state, and hooks.

A fault class is configured by its ``Config`` (a frozen pydantic model: the YAML
mapping under the fault's name, validated with located errors) and instantiated once
per request with a :class:`FaultContext`. Config is shared by every request; the
instance holds that request's state (counters, held events, its own seeded RNG).

Every fault has the same shape (``drop.py`` is the model)::

    class DropConfig(SelectorConfig): ...

    class DropFault(SelectingFault[DropConfig], name="drop", stage="event"):

        def on_event(self, ev: Event) -> list[Event]: ...

``Fault[XConfig]`` types ``self.config`` as ``XConfig`` and makes ``XConfig`` the
fault's ``Config``; a config with the event
selectors (a :class:`SelectorConfig`) goes with :class:`SelectingFault`, whose
``self.selector`` is always there.

Faults act in up to three stages, each a hook with a pass-through default:

* HTTP (before the upstream answers): :meth:`Fault.before_upstream`,
  :meth:`Fault.response_headers`; faults that act only here have ``stage="http"``,
  but an event or transport fault may use these hooks too;
* event (``stage="event"``): :meth:`Fault.on_event` / :meth:`Fault.on_event_end`,
  events in, events out;
* transport (``stage="transport"``): :meth:`Fault.on_action` /
  :meth:`Fault.on_action_end`, actions in, actions out;
* websocket (``stage="websocket"``): the frames of a relayed WebSocket message and
  the pongs (``core/faults/_websocket.py``); no HTTP body goes through them.

All data read must be passed along: a hook returns what it received unless it means
to change it (Toxiproxy's rule).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from typing_extensions import TypeVar

from chaosproxy.core.actions import Action, HttpAction, RequestAction
from chaosproxy.core.events import Event
from chaosproxy.core.faults.drawing import Explore
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers import Profile
from chaosproxy.core.recent import RecentStreams
from chaosproxy.core.regex import compile_search
from chaosproxy.core.selector import Selector, StrOrList
from chaosproxy.core.tenancy import ANONYMOUS

# --------------------------------------------------------------------------- config


def parse_scenario_duration(value: Any) -> Any:
    """Durations are milliseconds as numbers, or strings with a unit: 250ms, 2s, 1.5m."""
    if isinstance(value, bool):
        return value  # let the float validator reject it
    if isinstance(value, int | float):
        return float(value) / 1000.0
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", value)
        if not m:
            raise ValueError(f"not a duration: {value!r} (use a number of ms, or 250ms, 2s)")
        number = float(m.group(1))
        unit = m.group(2) or "ms"
        return number / 1000.0 if unit == "ms" else number * {"s": 1.0, "m": 60.0}[unit]
    return value


def format_duration(seconds: float) -> str:
    """A duration as a string with a unit that parses back to exactly ``seconds``:
    ``2s`` for whole seconds, else milliseconds (``800ms``, ``0.5ms``) when a short
    enough number of them is exact, else seconds with as many places as it takes."""
    if seconds >= 1 and seconds == int(seconds):
        return f"{int(seconds)}s"
    for places in range(3, 10):
        text = f"{seconds * 1000:.{places}f}".rstrip("0").rstrip(".")
        if float(text) / 1000.0 == seconds:
            return f"{text}ms"
    places = 1
    while float(text := f"{seconds:.{places}f}") != seconds:
        places += 1
    return f"{text}s"


#: A duration, in seconds once validated; in JSON (``model_dump(mode="json")``, the
#: admin API), a string with a unit, so what is shown can be read back unchanged.
Duration = Annotated[
    float,
    BeforeValidator(parse_scenario_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    Field(ge=0),
    # What a scenario file may give (the scenario JSON Schema): ms, or a unit.
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m)?\s*$"},
            ],
            "description": "milliseconds, or a string with a unit: 250ms, 2s, 1m",
        },
        mode="validation",
    ),
]


def known_kind(kind: str) -> str:
    """``kind`` when it is one of the provider-neutral kinds; else a ValueError that
    lists them (a config validator's message)."""
    from chaosproxy.core.providers import KINDS

    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    return kind


class FaultConfig(BaseModel):
    """Base of every fault's config: strict keys, immutable.

    A config whose parameters are alternatives says so here, once: checked when it is
    validated, and said by the scenario JSON Schema (chaosproxy/tools/schema.py), so an
    editor flags ``cut: {}`` as ``validate`` does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Exactly one of these parameters must be given (not null); ``one_of_note``
    #: follows their list in the message.
    one_of: ClassVar[tuple[str, ...]] = ()
    one_of_note: ClassVar[str] = ""
    #: At least one of these parameters must be given (not null).
    some_of: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _alternatives(self) -> FaultConfig:
        if self.one_of:
            self.exactly_one(*self.one_of, note=self.one_of_note)
        if self.some_of:
            self.at_least_one(*self.some_of)
        return self

    def given(self, *fields: str) -> list[str]:
        """Which of ``fields`` the scenario gave (not None)."""
        return [f for f in fields if getattr(self, f) is not None]

    def exactly_one(self, *fields: str, note: str = "") -> str:
        """The one of ``fields`` given; ``ValueError("give exactly one of …")`` (``note``
        after the list) unless exactly one is: for a ``model_validator``."""
        given = self.given(*fields)
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(fields)}{note}")
        return given[0]

    def at_least_one(self, *fields: str) -> None:
        """``ValueError("give at least one of …")`` unless one of ``fields`` is given."""
        if not self.given(*fields):
            raise ValueError(f"give at least one of {', '.join(fields)}")


def regex_compiles(pattern: str) -> str:
    """``pattern``, once :func:`compile_search` took it (its refusal is a ValueError: a
    located message)."""
    compile_search(pattern)
    return pattern


#: A regular expression searched in text: refused at validation when it does not
#: compile or is too costly to search (``core/regex.py``).
SearchRegex = Annotated[str, AfterValidator(regex_compiles)]


class SelectorConfig(FaultConfig):
    """The event selectors (docs/scenarios.md, Selectors); all given must hold.

    A new field here is a new selector: document it there (tests/test_docs.py checks).
    """

    kind: StrOrList | None = None
    type: StrOrList | None = None
    match: SearchRegex | None = None
    nth: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] | None = None
    every: Annotated[int, Field(ge=1)] | None = None
    range: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = None
    probability: Annotated[float, Field(ge=0, le=1)] | None = None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: StrOrList | None) -> StrOrList | None:
        for k in [v] if isinstance(v, str) else v or []:
            known_kind(k)
        return v

    @field_validator("range")
    @classmethod
    def _ordered(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and v[0] > v[1]:
            raise ValueError("range must be [first, last] with first <= last")
        return v


# (The selectors' per-request state, Selector, is compiled with the hot modules:
# chaosproxy/core/selector.py.)


# --------------------------------------------------------------------------- context


@dataclass(slots=True)
class Stream:
    """What is known of the response body, shared by every fault of a request: set
    once when the head is decided, the profile once more when it is recognised from
    the first event."""

    #: The body's framing (``raw`` when no framing applies).
    format: Format
    #: The provider profile.
    profile: Profile


@dataclass(slots=True)
class FaultContext:
    """What a fault knows about the request it runs for."""

    #: This fault's own generator, seeded from the request seed and its position.
    rng: random.Random
    #: The response body, shared with the request's other faults and its pipeline.
    stream: Stream
    #: The request seed.
    seed: int
    #: The fault's position in the scenario's ``faults`` list (0-based).
    position: int
    #: The proxy's recent framed streams (``splice`` reads them); None offline.
    streams: RecentStreams | None = None
    #: The request's id (how other streams name it).
    request_id: str = ""
    #: Whose the request is (:mod:`chaosproxy.core.tenancy`): ``splice`` takes only this
    #: tenant's streams unless told otherwise.
    tenant: str = ANONYMOUS

    @property
    def format(self) -> Format:
        return self.stream.format

    @property
    def profile(self) -> Profile:
        return self.stream.profile


def fault_rng(seed: int, position: int, name: str) -> random.Random:
    """The generator of the fault at ``position``: adding a fault never changes what
    another one draws. String seeds hash with SHA-512, stable across runs."""
    return random.Random(f"{seed}:{position}:{name}")


# --------------------------------------------------------------------------- fault

#: A fault's config type.
C = TypeVar("C", bound=FaultConfig, default=FaultConfig, covariant=True)
#: A selecting fault's config type.
S = TypeVar("S", bound=SelectorConfig, default=SelectorConfig, covariant=True)


#: Where a fault acts (see :attr:`Fault.stage`).
Stage = Literal["http", "event", "transport", "websocket"]

#: The bodies a fault acts on: ``any`` (``raw`` too; an ``http`` fault acts before
#: the body, whatever it is), ``framed`` (``sse``, ``ndjson`` or an AWS ``eventstream``),
#: ``sse`` only, or ``websocket``: a relayed WebSocket's messages (a ``websocket`` stage
#: fault).
Needs = Literal["any", "framed", "sse", "websocket"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Declaration:
    """What the rest of chaosproxy needs to know about a fault, said once, in its file
    (``declaration = Declaration(...)`` in the fault's class body): the verdicts, the
    explore space, the docs' fault table (docs/scenarios.md, Faults) and the oracle of
    the verdict tests read it; its config is its ``Config``. The registry refuses a
    fault without one, naming it (:func:`check_declaration`)."""

    #: The bodies it acts on (explore draws it only for those).
    needs: Needs
    #: True when a correct client reads the same answer through it: it changes only how
    #: and when the bytes arrive, or cuts the same content into other valid events of
    #: the provider's format. The verdicts call a stream sent through it sound
    #: (docs/verdicts.md, "sound"; ``BENIGN`` in core/body.py).
    keeps_answer: bool
    #: How ``chaosproxy explore`` draws it; None: explore never draws it.
    explore: Explore | None
    #: One scenario item that uses it, as a scenario file writes it (the docs' table):
    #: ``"drop: {kind: delta, nth: 3}"``, or the bare name.
    example: str


def check_declaration(cls: type[Fault]) -> None:
    """A TypeError naming the fault and the field unless ``cls`` declares itself
    whole: its own :class:`Declaration`, each field of its type, an example that
    names the fault and that its config accepts."""
    where = f"fault {getattr(cls, 'name', '?')!r} ({cls.__module__}.{cls.__qualname__})"
    declared = vars(cls).get("declaration")
    if not isinstance(declared, Declaration):
        raise TypeError(
            f"{where}: no declaration; give its class body "
            "declaration = Declaration(needs=..., keeps_answer=..., explore=..., example=...)"
        )
    if declared.needs not in get_args(Needs):
        raise TypeError(f"{where}: declaration.needs must be one of {get_args(Needs)}")
    if not isinstance(declared.keeps_answer, bool):
        raise TypeError(f"{where}: declaration.keeps_answer must be True or False")
    explore = declared.explore
    if explore is not None and not (
        isinstance(explore, Explore) and callable(explore.draw) and isinstance(explore.rank, int)
    ):
        raise TypeError(f"{where}: declaration.explore must be None or an Explore")
    try:
        item = yaml.safe_load(declared.example) if isinstance(declared.example, str) else None
    except yaml.YAMLError:
        item = None
    params: Any = {}
    if isinstance(item, dict) and len(item) == 1:
        (named, params) = next(iter(item.items()))
    else:
        named = item
    if named != cls.name:
        raise TypeError(
            f"{where}: declaration.example must be one scenario item that names it: "
            f"{cls.name!r} or '{cls.name}: {{...}}', not {declared.example!r}"
        )
    try:
        cls.Config.model_validate(params or {})
    except ValueError as exc:
        raise TypeError(f"{where}: declaration.example is refused by its config: {exc}") from exc


class Fault(Generic[C]):
    """Base class: every hook passes everything through unchanged.

    A fault is written ``class XFault(Fault[XConfig], name="x", stage="event")``: the
    instance's :attr:`config` is then typed ``XConfig``, and ``XConfig`` is its
    :attr:`Config` (taken from that base when the class body does not set it).
    """

    #: The key under ``faults:`` in a scenario.
    name: ClassVar[str]
    #: The pydantic model of its parameters.
    Config: ClassVar[type[FaultConfig]]
    #: ``http`` faults act before the body (they take part in neither body stage);
    #: ``event`` faults run first on the body (they need sse/ndjson framing);
    #: ``transport`` faults after.
    stage: ClassVar[Stage]
    #: True when :meth:`response_headers` may change the headers (the session then
    #: hands them over as a plain mapping).
    edits_headers: ClassVar[bool] = False
    #: What one call of :meth:`on_event` costs, in steps of the pipeline's fault budget
    #: (``core/pipeline.py``, MAX_FAULT_STEPS): about its CPU in microseconds, measured
    #: on a text delta (docs/scenarios.md, Limits). Faults that parse and re-encode the
    #: event's JSON cost more than those that only select it.
    cost: ClassVar[int] = 1
    #: What the rest of chaosproxy needs to know about it (:class:`Declaration`).
    declaration: ClassVar[Declaration]

    def __init__(self, config: C, ctx: FaultContext) -> None:
        #: The validated config, shared by every request.
        self.config: C = config
        self.ctx = ctx
        #: How many times the fault changed something; reported in ``faults_applied``.
        self.applied = 0

    def __init_subclass__(
        cls, name: str | None = None, stage: Stage | None = None, **kwargs: Any
    ) -> None:
        """``class XFault(Fault[XConfig], name="x", stage="event")``: the fault's name,
        stage and ``Config`` (``XConfig``, unless the class body sets one)."""
        super().__init_subclass__(**kwargs)
        if name is not None:
            cls.name = name
        if stage is not None:
            cls.stage = stage
        if "Config" in vars(cls):
            return
        for base in getattr(cls, "__orig_bases__", ()):
            args = get_args(base)
            if args and isinstance(args[0], type) and issubclass(args[0], FaultConfig):
                cls.Config = args[0]
                return

    @classmethod
    def needs_framing(cls, config: FaultConfig) -> bool:
        """True when this config cannot work on a ``raw`` stream (validation error): an
        event fault's (its declaration says so: ``needs`` other than ``any``)."""
        return cls.stage == "event"

    @classmethod
    def provider_problem(cls, config: FaultConfig, provider: str) -> str | None:
        """Why this config cannot apply to a stream of ``provider`` (a scenario that
        names that provider is invalid), or None when it can."""
        return None

    # -- HTTP stage
    def before_request(self) -> list[RequestAction]:
        """Actions on the request while its body arrives (a held body, a cut upload):
        they come before every other fault's :meth:`before_upstream`."""
        return []

    def before_upstream(self) -> list[HttpAction]:
        """Actions before the request is forwarded (a canned status, a held header)."""
        return []

    def response_headers(self, status: int, headers: dict[str, str]) -> dict[str, str]:
        """The response headers to send (keys in their original case)."""
        return headers

    # -- event stage
    def observe(self, ev: Event) -> None:
        """Called for every upstream event before any fault runs."""

    def on_event(self, ev: Event) -> list[Event]:
        return [ev]

    def on_event_end(self) -> list[Event]:
        """Upstream ended: release anything held."""
        return []

    # -- transport stage
    def on_action(self, action: Action) -> list[Action]:
        return [action]

    def on_action_end(self) -> list[Action]:
        """No more actions will come: release anything held, or end differently."""
        return []

    def deadline(self) -> float | None:
        """When (pipeline clock, seconds) this fault wants :meth:`poll` called."""
        return None

    def poll(self, now: float) -> list[Action]:
        """Called at or after :meth:`deadline`; returns what is due."""
        return []

    def set_clock(self, now: float) -> None:
        """The pipeline's current time, given before each hook call that moves time."""
        self.now = now

    now: float = 0.0

    # -- reporting
    def skipped(self) -> str | None:
        """Why the fault never applied (reported in ``faults_skipped``), or None."""
        return None if self.applied else "never applied"

    def fallback(self) -> tuple[str, str, str] | None:
        """What the fault was asked to do, what it did instead and why, when it applied
        otherwise than asked (a ``cut`` at the boundary for want of a multi-byte
        character; reported in ``faults_fallback``), else None."""
        return None


class SelectingFault(Fault[S]):
    """A fault whose config has the event selectors: :attr:`selector` holds their
    per-request state, fed by :meth:`observe`."""

    #: True for a fault that gives back an event its selectors do not select as it
    #: came (``[ev]``), and does nothing else then: the pipeline asks the selector
    #: itself and calls :meth:`on_event` only with the selected events (the same
    #: output and fault steps, without a call into the fault per event).
    passes_unselected: ClassVar[bool] = False

    def __init__(self, config: S, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self.selector = Selector(config, ctx.rng)

    def observe(self, ev: Event) -> None:
        self.selector.observe(ev)

    def skipped(self) -> str | None:
        if self.applied:
            return None
        reason = self.selector.unreached()
        if reason:
            return reason
        if self.selector.matched == 0:
            return "no event matched the selectors"
        return "never applied"


def made_up(frame: Frame, profile: Profile, fault: str) -> Event:
    """A fault's own event (ordinal 0), classified by the profile when it has data."""
    kinds = profile.classify(frame) if frame.is_event else frozenset()
    return Event(frame, 0, kinds, (fault,))
