"""The space ``chaosproxy explore`` draws scenarios from (docs/explore.md). Pure: no I/O,
no clock; every draw comes from a ``random.Random`` seeded by the run.

A scenario of the space is a *draft*: its faults, each a fault name and the sequence of
choices that drew its parameters (as Hypothesis records a test case as the choices it
made). A choice is an integer from 0, the simplest, up; reading a draft back gives the
same parameters, so a draft is the whole of a run's scenario, and a smaller draft (fewer
faults, smaller choices) is a simpler scenario: this is what :mod:`chaosproxy.tools.shrink`
reduces. What each choice means is written once, in each fault's drawer (the
``explore`` of its declaration, in its own file in ``chaosproxy/core/faults/``, with
:mod:`chaosproxy.core.faults.drawing`'s words), so that lower always means simpler: one
fault rather than several, an earlier position, a single ``nth`` before a list or a
range, a smaller size or duration, the first option a fault's config lists.

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
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from chaosproxy.core import faults as fault_registry
from chaosproxy.core.faults.drawing import (
    SELECTOR_KINDS,
    Choices,
    Drawer,
    Explore,
    Shape,
    int_range,
    options,
    selectable,
    selector,
)
from chaosproxy.core.seeds import MAX_SEED
from chaosproxy.scenario import Scenario, parse_scenario

#: The most faults one scenario of the space has.
MAX_FAULTS = 4
#: The chance, after each fault, that the scenario has one more (while under MAX_FAULTS).
MORE = 0.45


# ---------------------------------------------------------------------------- the stream


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


def _config(fault: str) -> type[BaseModel]:
    return fault_registry.registry()[fault].Config


def canonical(fault: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as the fault's config model reads them and writes them back: defaults
    left out, durations as strings with a unit (``250ms``), in the model's key order.
    Raises pydantic's ValidationError for parameters the model refuses."""
    config = _config(fault).model_validate(dict(params))
    dumped: dict[str, Any] = config.model_dump(mode="json", exclude_defaults=True, by_alias=True)
    return dumped


# ---------------------------------------------------------------------------- the space


def explorable() -> dict[str, Explore]:
    """Every fault the space knows, with how it is drawn (its declaration's
    ``explore``, ``chaosproxy/core/faults/``), in the order of their ranks: the order
    a run draws from. Read from the fault registry now."""
    found = {
        name: cls.declaration.explore
        for name, cls in fault_registry.registry().items()
        if cls.declaration.explore is not None
    }
    return dict(sorted(found.items(), key=lambda item: item[1].rank))


def drawer(fault: str) -> Drawer:
    """How ``fault``'s parameters are drawn (KeyError for a fault not in the space)."""
    return explorable()[fault].draw


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
        known = explorable()
        unknown = [f for f in chosen if f not in known]
        if unknown:
            raise ValueError(
                f"not in the space: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        if not self.endless:
            chosen = tuple(f for f in chosen if not known[f].endless)
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
            drawer(fault)(choices, self)
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
            params = drawer(item.fault)(choices, self)
            used.append(FaultDraw(item.fault, choices.record))
            faults.append({item.fault: canonical(item.fault, params)})
        return tuple(used), faults


def usable_faults(shape: Shape) -> tuple[str, ...]:
    """The faults of the space that can act on a stream of this shape: one its
    declaration's ``needs`` admits (and, when the fault needs events, one with events
    its selectors can pick), and its ``explore.fits``."""
    framed = shape.format in ("sse", "ndjson", "eventstream")
    registry = fault_registry.registry()
    usable = []
    for name, explore in explorable().items():
        needs = registry[name].declaration.needs
        if needs == "framed" and not framed:
            continue
        if needs == "sse" and shape.format != "sse":
            continue
        if explore.fits is not None and not explore.fits(shape):
            continue
        if needs in ("framed", "sse") and not selectable(shape):
            continue
        usable.append(name)
    return tuple(usable)


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
    "MAX_FAULTS",
    "SELECTOR_KINDS",
    "Choices",
    "Draft",
    "FaultDraw",
    "Shape",
    "Space",
    "canonical",
    "draft_from_json",
    "draft_json",
    "draft_key",
    "drawer",
    "explorable",
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
