"""The space ``chaosproxy explore`` draws scenarios from (docs/explore.md). Pure: no I/O,
no clock; every draw comes from a ``random.Random`` seeded by the run.

A scenario of the space is a *draft*: its faults, each a fault name and the sequence of
choices that drew its parameters (as Hypothesis records a test case as the choices it
made). A choice is an integer from 0, the simplest, up; reading a draft back gives the
same parameters, so a draft is the whole of a run's scenario, and a smaller draft (fewer
faults, smaller choices) is a simpler scenario: this is what :mod:`chaosproxy.tools.shrink`
reduces. What each choice means is written once, in the drawers below, so that lower
always means simpler: one fault rather than several, an earlier position, a single
``nth`` before a list or a range, a smaller size or duration, the first option a fault's
config lists.

Positions are drawn within the stream a clean run of the client showed (its
:class:`Shape`: how many events of each kind, how many bytes), so a fault seldom misses
its stream. Parameters stay within sane bounds, themselves within the bounds of each
fault's config model (``chaosproxy.core.faults``), whose options (a cut's ``how``, a
corrupt's ``mode``) are read from the models. Every fault is canonicalised by its own
config model (defaults left out, durations written with their unit), and a scenario
is validated by the scenario loader itself before anything runs it.
"""

from __future__ import annotations

import random
import types
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import annotated_types
import yaml
from pydantic import BaseModel

from chaosproxy.core import faults as fault_registry
from chaosproxy.core.seeds import MAX_SEED
from chaosproxy.scenario import Scenario, parse_scenario

T = TypeVar("T")

#: The most faults one scenario of the space has.
MAX_FAULTS = 4
#: The chance, after each fault, that the scenario has one more (while under MAX_FAULTS).
MORE = 0.45


# ---------------------------------------------------------------------------- the stream


@dataclass(frozen=True, slots=True)
class Shape:
    """What a clean run showed of the client's stream: where positions are drawn."""

    provider: str
    #: ``sse``, ``ndjson`` or ``raw`` (no event faults on a raw stream).
    format: str
    #: Upstream events in the stream.
    events: int
    #: Events of each kind (an event of two kinds counts for both).
    kinds: Mapping[str, int] = field(default_factory=dict)
    #: Body bytes.
    bytes: int = 0

    def count(self, kind: str) -> int:
        return int(self.kinds.get(kind, 0))

    def as_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "format": self.format,
            "events": self.events,
            "kinds": dict(sorted(self.kinds.items())),
            "bytes": self.bytes,
        }


def shape_of(lines: Iterable[Mapping[str, Any]], request_id: str) -> Shape | None:
    """The shape of one framed response, from its frame-log lines (a run with no faults:
    one event per write); None when the response was not framed or had no events."""
    end: Mapping[str, Any] | None = None
    kinds: Counter[str] = Counter()
    events: set[int] = set()
    for line in lines:
        if line.get("request_id") != request_id:
            continue
        if line.get("event") == "response_end":
            end = line
        elif line.get("event") == "frame":
            ordinals = [n for n in line.get("events") or () if isinstance(n, int) and n > 0]
            fresh = [n for n in ordinals if n not in events]
            events.update(fresh)
            if fresh:
                for kind in line.get("kinds") or ("other",):
                    kinds[str(kind)] += len(fresh)
    if end is None or not isinstance(end.get("format"), str) or not events:
        return None
    return Shape(
        provider=str(end.get("provider") or "generic"),
        format=str(end["format"]),
        events=int(end.get("events_in") or len(events)),
        kinds=dict(kinds),
        bytes=int(end.get("bytes") or 0),
    )


# ---------------------------------------------------------------------------- choices


class Choices:
    """The choices of one draw, each an integer from 0 (the simplest) to ``n - 1``:
    drawn from a generator (exploring), or read back from a recorded sequence (a value
    beyond its bound is taken as the last one; past the end, 0). :attr:`record` is the
    sequence as used, trailing zeros left out (they are what the end reads as)."""

    __slots__ = ("_made", "_rng", "_source")

    def __init__(self, source: random.Random | Sequence[int]) -> None:
        self._rng = source if isinstance(source, random.Random) else None
        self._source = () if isinstance(source, random.Random) else tuple(source)
        self._made: list[int] = []

    def below(self, n: int, weights: Sequence[float] | None = None) -> int:
        """A choice among ``n`` (0 … n-1); ``weights`` bias drawing, not reading back.
        With one option there is nothing to choose: nothing is recorded."""
        if n <= 1:
            return 0
        if self._rng is not None:
            if weights is None:
                value = self._rng.randrange(n)
            else:
                value = self._rng.choices(range(n), weights=weights)[0]
        else:
            i = len(self._made)
            value = max(0, min(self._source[i], n - 1)) if i < len(self._source) else 0
        self._made.append(value)
        return value

    def between(self, low: int, high: int) -> int:
        """An integer from ``low`` (the simplest) to ``high``."""
        return low + self.below(high - low + 1)

    def pick(self, options: Sequence[T], weights: Sequence[float] | None = None) -> T:
        """One of ``options``, the first the simplest."""
        return options[self.below(len(options), weights)]

    def coin(self, chance: float) -> bool:
        """True with ``chance`` when drawing (False is the simpler)."""
        return self.below(2, (1 - chance, chance)) == 1

    @property
    def record(self) -> tuple[int, ...]:
        made = list(self._made)
        while made and made[-1] == 0:
            made.pop()
        return tuple(made)


@dataclass(frozen=True, slots=True)
class FaultDraw:
    """One fault of a draft: its name and the choices that drew its parameters."""

    fault: str
    choices: tuple[int, ...] = ()


#: A scenario of the space: its faults, in order.
Draft = tuple[FaultDraw, ...]


def draft_key(draft: Draft) -> tuple[int, tuple[tuple[int, tuple[int, ...]], ...]]:
    """The order shrinking follows (smaller is simpler): fewer faults, then each fault's
    choices, shorter first, then smaller, fault by fault. Well-founded: a shrink ends."""
    return len(draft), tuple((len(f.choices), f.choices) for f in draft)


def draft_json(draft: Draft) -> list[list[Any]]:
    """A draft as JSON: ``[[fault, [choices…]], …]``."""
    return [[f.fault, list(f.choices)] for f in draft]


def draft_from_json(value: Any) -> Draft:
    """The inverse of :func:`draft_json`; ValueError for anything else."""
    try:
        return tuple(FaultDraw(str(name), tuple(int(c) for c in ch)) for name, ch in value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a draft: {value!r}") from exc


# ---------------------------------------------------------------------------- the models


def options(model: type[BaseModel], name: str) -> tuple[Any, ...]:
    """The literal values a config field takes, the simplest first: its default (what a
    scenario that says nothing gets), then the others in the order the model lists them.
    ``options(CutConfig, "how")`` is ``("abort", "close", "reset")``."""
    found: list[Any] = []

    def walk(tp: Any) -> None:
        origin = typing.get_origin(tp)
        if origin is Literal:
            found.extend(a for a in typing.get_args(tp) if a not in found)
        elif origin is typing.Annotated:
            walk(typing.get_args(tp)[0])
        elif origin in (typing.Union, types.UnionType):
            for arg in typing.get_args(tp):
                walk(arg)

    info = model.model_fields[name]
    walk(info.annotation)
    if not found:
        raise TypeError(f"{model.__name__}.{name} has no literal options")
    if info.default in found:
        found.remove(info.default)
        found.insert(0, info.default)
    return tuple(found)


def int_range(model: type[BaseModel], name: str, low: int, high: int) -> tuple[int, int]:
    """``[low, high]``, the space's sane range for an integer field, within the bounds
    the config model sets on it (``ge``, ``gt``, ``le``, ``lt``)."""
    constraints: list[Any] = list(model.model_fields[name].metadata)

    def walk(tp: Any) -> None:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            base, *extra = typing.get_args(tp)
            if base is int:
                for item in extra:
                    constraints.extend(getattr(item, "metadata", [item]))
        elif origin in (typing.Union, types.UnionType):
            for arg in typing.get_args(tp):
                walk(arg)

    walk(model.model_fields[name].annotation)
    for c in constraints:
        if isinstance(c, annotated_types.Ge):
            low = max(low, int(c.ge))  # type: ignore[call-overload]
        elif isinstance(c, annotated_types.Gt):
            low = max(low, int(c.gt) + 1)  # type: ignore[call-overload]
        elif isinstance(c, annotated_types.Le):
            high = min(high, int(c.le))  # type: ignore[call-overload]
        elif isinstance(c, annotated_types.Lt):
            high = min(high, int(c.lt) - 1)  # type: ignore[call-overload]
    if low > high:
        raise ValueError(f"{model.__name__}.{name}: no value in [{low}, {high}]")
    return low, high


def _config(fault: str) -> type[BaseModel]:
    return fault_registry.registry()[fault].Config


def canonical(fault: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as the fault's config model reads them and writes them back: defaults
    left out, durations as strings with a unit (``250ms``), in the model's key order.
    Raises pydantic's ValidationError for parameters the model refuses."""
    config = _config(fault).model_validate(dict(params))
    dumped: dict[str, Any] = config.model_dump(mode="json", exclude_defaults=True, by_alias=True)
    return dumped


# ---------------------------------------------------------------------------- drawers

#: Event kinds a selector picks from, the simplest first (those the stream has).
SELECTOR_KINDS = ("delta", "terminal", "start", "other", "usage", "tool_delta", "ping", "error")

#: Where, in an event's JSON, each provider's text delta is (``mutate`` edits it).
CONTENT_PATHS: dict[str, str] = {
    "openai-chat": "choices.0.delta.content",
    "openai-responses": "delta",
    "anthropic": "delta.text",
    "gemini": "candidates.0.content.parts.0.text",
    "ollama": "message.content",
}

#: Made-up events ``inject`` sends, besides the provider's own error event: for the
#: providers whose wire format the space knows.
INJECTED_EVENTS: dict[str, tuple[dict[str, Any], ...]] = {
    "openai-chat": (
        {"data": "[DONE]"},
        {"data": {"choices": [{"index": 0, "delta": {"content": " (injected)"}}]}},
    ),
}


@dataclass(frozen=True, slots=True)
class Space:
    """The scenarios ``explore`` draws: ``faults`` (fault names; default every fault
    the space knows that fits the stream), one to ``max_faults`` of them, each at most
    once, with positions within ``shape``. ``endless`` lets faults keep a stream open
    for ever (``hang``, ``stall: {forever: true}``): only for clients that are timed."""

    shape: Shape
    faults: tuple[str, ...] = ()
    max_faults: int = MAX_FAULTS
    endless: bool = True

    def __post_init__(self) -> None:
        usable = usable_faults(self.shape)
        chosen = self.faults or usable
        unknown = [f for f in chosen if f not in DRAWERS]
        if unknown:
            raise ValueError(
                f"not in the space: {', '.join(unknown)}; known: {', '.join(sorted(DRAWERS))}"
            )
        if not self.endless:
            chosen = tuple(f for f in chosen if f != "hang")
        chosen = tuple(f for f in chosen if f in usable)
        if not chosen:
            raise ValueError(
                f"none of these faults fits a {self.shape.format} stream of "
                f"{self.shape.provider}: {', '.join(self.faults)}"
            )
        object.__setattr__(self, "faults", chosen)

    def draw(self, seed: int) -> Draft:
        """The draft of a run seeded ``seed``: its faults (without repeats) and their
        choices."""
        rng = random.Random(f"explore:{seed}")
        pool = list(self.faults)
        drafts: list[FaultDraw] = []
        while pool:
            fault = pool.pop(rng.randrange(len(pool)))
            choices = Choices(rng)
            DRAWERS[fault](choices, self)
            drafts.append(FaultDraw(fault, choices.record))
            if len(drafts) >= self.max_faults or rng.random() >= MORE:
                break
        return tuple(drafts)

    def read(self, draft: Draft) -> tuple[Draft, list[dict[str, Any]]]:
        """The faults of ``draft`` as scenario data (``[{name: params}, …]``), and the
        draft as read (each choice as used): the form :func:`draft_key` compares."""
        used: list[FaultDraw] = []
        faults: list[dict[str, Any]] = []
        for item in draft:
            choices = Choices(item.choices)
            params = DRAWERS[item.fault](choices, self)
            used.append(FaultDraw(item.fault, choices.record))
            faults.append({item.fault: canonical(item.fault, params)})
        return tuple(used), faults


def usable_faults(shape: Shape) -> tuple[str, ...]:
    """The faults of the space that can act on a stream of this shape."""
    framed = shape.format in ("sse", "ndjson")
    usable = []
    for name, needs in NEEDS.items():
        if needs == "framed" and not framed:
            continue
        if needs == "sse" and shape.format != "sse":
            continue
        if name == "mutate" and shape.provider not in CONTENT_PATHS:
            continue
        if name == "splice" and not shape.count("delta"):
            continue
        if needs in ("framed", "sse") and not _selectable(shape):
            continue
        usable.append(name)
    return tuple(usable)


def _selectable(shape: Shape) -> list[str]:
    return [k for k in SELECTOR_KINDS if shape.count(k)]


def _position(c: Choices, count: int) -> int:
    """An ordinal from 1 to ``count`` (1 the simplest)."""
    return c.between(1, max(1, count))


def selector(c: Choices, space: Space, kinds: Sequence[str] | None = None) -> dict[str, Any]:
    """Event selectors: a kind the stream has, and where among its events: one ``nth``
    (the simplest), a list of them, a ``range``, ``every`` N, all of them, or a
    ``probability``."""
    shape = space.shape
    available = [k for k in (kinds or SELECTOR_KINDS) if shape.count(k)] or ["delta"]
    kind = c.pick(available)
    count = max(1, shape.count(kind))
    form = c.below(6, (50, 10, 15, 10, 5, 10))
    out: dict[str, Any] = {"kind": kind}
    if form == 0 or (count == 1 and form in (1, 2, 3)):
        out["nth"] = _position(c, count)
    elif form == 1:
        first = c.between(1, count - 1)
        out["nth"] = [first, first + c.between(1, min(3, count - first))]
    elif form == 2:
        first = c.between(1, count - 1)
        out["range"] = [first, first + c.between(1, min(3, count - first))]
    elif form == 3:
        out["every"] = c.between(2, max(2, min(5, count)))
    elif form == 5:
        out["probability"] = (1 + c.below(5)) / 10
    return out


def _drop(c: Choices, space: Space) -> dict[str, Any]:
    return selector(c, space)


def _duplicate(c: Choices, space: Space) -> dict[str, Any]:
    cfg = _config("duplicate")
    return {**selector(c, space), "times": c.between(*int_range(cfg, "times", 1, 3))}


def _reorder(c: Choices, space: Space) -> dict[str, Any]:
    cfg = _config("reorder")
    return {
        **selector(c, space, ("delta", "other", "start", "usage", "tool_delta")),
        "window": c.between(*int_range(cfg, "window", 2, 4)),
        "mode": c.pick(options(cfg, "mode")),
    }


def _anchor(c: Choices, space: Space, last: int) -> int | str:
    """An upstream event to act next to: an ordinal (1 … ``last``), the first terminal
    event, or the first start event (when the stream has them)."""
    forms: list[str] = ["ordinal"] + [k for k in ("terminal", "start") if space.shape.count(k)]
    form = c.pick(forms)
    return _position(c, last) if form == "ordinal" else form


def _inject(c: Choices, space: Space) -> dict[str, Any]:
    shape = space.shape
    cfg = _config("inject")
    events = ({"kind": "error"}, *INJECTED_EVENTS.get(shape.provider, ()))
    place = c.pick(("after", "before"))
    return {
        place: _anchor(c, space, shape.events),
        "event": c.pick(events),
        "times": c.between(*int_range(cfg, "times", 1, 2)),
    }


def _mutate(c: Choices, space: Space) -> dict[str, Any]:
    path = CONTENT_PATHS[space.shape.provider]
    sel = selector(c, space, ("delta",))
    if c.pick(("set", "delete")) == "delete":
        return {**sel, "delete": [path]}
    return {**sel, "set": {path: c.pick(("?", "", " (mutated)"))}}


def _corrupt(c: Choices, space: Space) -> dict[str, Any]:
    modes = options(_config("corrupt"), "mode")
    if space.shape.format != "eventstream":  # (only an event stream has CRCs to break)
        modes = tuple(m for m in modes if not m.endswith("crc"))
    return {**selector(c, space), "mode": c.pick(modes)}


def _oversize(c: Choices, space: Space) -> dict[str, Any]:
    cfg = _config("oversize")
    low, high = int_range(cfg, "bytes", 64, 32 * 1024)
    return {
        "after": c.between(*int_range(cfg, "after", 0, max(0, space.shape.events - 1))),
        "bytes": min(high, max(low, 64 * 8 ** c.below(4))),  # 64 B … 32 KiB
        "terminated": not c.coin(0.2),
    }


def _line_endings(c: Choices, space: Space) -> dict[str, Any]:
    return {"style": c.pick(options(_config("line_endings"), "style"))}


def _nothing(c: Choices, space: Space) -> dict[str, Any]:
    return {}


def _comment(c: Choices, space: Space) -> dict[str, Any]:
    return {"every": c.between(*int_range(_config("comment"), "every", 1, 5))}


def _ids(c: Choices, space: Space) -> dict[str, Any]:
    return {"start": c.between(*int_range(_config("ids"), "start", 0, 3))}


def _splice(c: Choices, space: Space) -> dict[str, Any]:
    cfg = _config("splice")
    deltas = space.shape.count("delta")
    after: int | str = "terminal" if c.coin(0.2) else _position(c, deltas)
    return {
        "from": "previous",  # one client at a time: no stream runs beside it
        "after": after,
        "count": c.between(*int_range(cfg, "count", 1, 2)),
        "kind": "delta",
    }


def _rechunk(c: Choices, space: Space) -> dict[str, Any]:
    low, high = int_range(_config("rechunk"), "size", 1, 64)
    form = c.below(4)
    if form == 0:
        return {"size": c.between(low, high)}
    if form == 1:
        return {"sizes": [c.between(low, high) for _ in range(2 + c.below(2))]}
    if form == 2:
        first = c.between(low, high)
        return {"random": [first, first + c.between(0, high - first)]}
    return {"boundaries": "hostile"}


def _coalesce(c: Choices, space: Space) -> dict[str, Any]:
    form = c.below(3)
    if form == 0:
        return {"events": c.between(*int_range(_config("coalesce"), "events", 2, 5))}
    if form == 1:
        return {"window": 10 * c.between(1, 20)}  # 10 … 200 ms
    return {"all": True}


def _delay(c: Choices, space: Space) -> dict[str, Any]:
    form = c.below(3)
    if form == 0:
        return {"first_byte": 10 * c.between(1, 30)}  # 10 … 300 ms
    per_event = 5 * c.between(1, 10)  # 5 … 50 ms a write
    if form == 1:
        return {"per_event": per_event}
    return {"per_event": per_event, "jitter": 5 * c.between(1, 10)}


def _throttle(c: Choices, space: Space) -> dict[str, Any]:
    # Slow, but never so slow that the stream (and an oversize event) outlasts a run:
    # at least its own bytes a second, and 16 kB/s.
    floor = max(16, -(-space.shape.bytes // 1000))
    low, high = int_range(_config("throttle"), "bytes_per_second", 1000 * floor, 4000 * floor)
    return {"bytes_per_second": 1000 * c.between(low // 1000, high // 1000)}


def _stall(c: Choices, space: Space) -> dict[str, Any]:
    after = _anchor(c, space, max(1, space.shape.events - 1))
    if space.endless and c.coin(0.15):
        return {"after": after, "forever": True}
    return {"after": after, "duration": 50 * c.between(1, 20)}  # 50 ms … 1 s


def _cut(c: Choices, space: Space) -> dict[str, Any]:
    shape = space.shape
    cfg = _config("cut")
    form = c.below(4, (45, 25, 15, 15))
    out: dict[str, Any]
    if form == 0:
        out = {"after": c.between(0, max(0, shape.events - 1))}
    elif form == 1:
        out = {"before": "terminal"}
    elif form == 2:
        out = {"after": "terminal" if shape.count("terminal") else "start"}
    else:
        out = {"after_bytes": c.between(0, max(0, shape.bytes - 1))}
    if "after_bytes" not in out:
        position = c.pick(options(cfg, "position"), (60, 10, 10, 10, 10))
        if position != "boundary":
            out["position"] = position
    out["how"] = c.pick(options(cfg, "how"))
    return out


def _compress(c: Choices, space: Space) -> dict[str, Any]:
    cfg = _config("compress")
    return {"encoding": c.pick(options(cfg, "encoding")), "flush": c.pick(options(cfg, "flush"))}


Drawer = Callable[[Choices, Space], dict[str, Any]]

#: Every fault of the space, with how its parameters are drawn.
DRAWERS: dict[str, Drawer] = {
    "drop": _drop,
    "duplicate": _duplicate,
    "reorder": _reorder,
    "inject": _inject,
    "mutate": _mutate,
    "corrupt": _corrupt,
    "oversize": _oversize,
    "line_endings": _line_endings,
    "bom": _nothing,
    "comment": _comment,
    "ids": _ids,
    "splice": _splice,
    "rechunk": _rechunk,
    "coalesce": _coalesce,
    "delay": _delay,
    "throttle": _throttle,
    "stall": _stall,
    "cut": _cut,
    "hang": _nothing,
    "compress": _compress,
}

#: What stream each fault of the space needs: ``framed`` (sse or ndjson), ``sse``, or
#: ``any``.
NEEDS: dict[str, str] = {
    "drop": "framed",
    "duplicate": "framed",
    "reorder": "framed",
    "inject": "framed",
    "mutate": "framed",
    "corrupt": "framed",
    "oversize": "framed",
    "line_endings": "sse",
    "bom": "any",
    "comment": "sse",
    "ids": "sse",
    "splice": "framed",
    "rechunk": "any",
    "coalesce": "any",
    "delay": "any",
    "throttle": "any",
    "stall": "any",
    "cut": "any",
    "hang": "any",
    "compress": "any",
}


# ---------------------------------------------------------------------------- scenarios


def run_seed(seed: int, run: int) -> int:
    """The seed of run ``run`` (1-based) of an exploration seeded ``seed``: the seed its
    scenario is drawn with, and the scenario's own ``seed:`` (its requests' faults)."""
    return random.Random(f"explore:{seed}:run:{run}").randrange(MAX_SEED + 1)


def scenario_data(
    name: str, faults: Sequence[Mapping[str, Any]], *, seed: int, description: str = ""
) -> dict[str, Any]:
    """A scenario as data, in the shape of a scenario file."""
    return {
        "name": name,
        "description": description,
        "seed": seed,
        "faults": [dict(f) for f in faults],
    }


def scenario_yaml(data: Mapping[str, Any], comment: Sequence[str] = ()) -> str:
    """A scenario file's text: ``comment`` lines first (``# ``), then ``data``."""
    head = "".join(f"# {line}\n" if line else "#\n" for line in comment)
    # Block style, but each fault's parameters on one line: ``- drop: {kind: delta, nth: 1}``.
    body = yaml.safe_dump(
        dict(data), sort_keys=False, allow_unicode=True, default_flow_style=None, width=1 << 16
    )
    return head + body


def validated(text: str, source: str) -> Scenario:
    """``text`` read by the scenario loader (ScenarioError when it refuses it)."""
    return parse_scenario(text, source)


__all__ = [
    "DRAWERS",
    "MAX_FAULTS",
    "Choices",
    "Draft",
    "FaultDraw",
    "Shape",
    "Space",
    "canonical",
    "draft_from_json",
    "draft_json",
    "draft_key",
    "int_range",
    "options",
    "run_seed",
    "scenario_data",
    "scenario_yaml",
    "selector",
    "shape_of",
    "usable_faults",
    "validated",
]
