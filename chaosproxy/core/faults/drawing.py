"""What a fault's file uses to say how ``chaosproxy explore`` draws it (docs/explore.md).

A fault's :class:`~chaosproxy.core.faults.base.Declaration` gives an :class:`Explore`:
its drawer, a function of the :class:`Choices` of one draw and the space it is drawn in
(the :class:`Shape` of a clean run of the client's stream), that returns the fault's
parameters. The space itself (``chaosproxy/tools/fault_space.py``) asks each fault's
drawer; what each choice means is written once, in the drawer, so that lower always
means simpler: one fault rather than several, an earlier position, a single ``nth``
before a list or a range, a smaller size or duration, the first option a fault's config
lists. Pure: no I/O, no clock; every draw comes from a ``random.Random`` seeded by the
run, or is read back from a recorded sequence of choices.
"""

from __future__ import annotations

import random
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import annotated_types
from pydantic import BaseModel

T = TypeVar("T")


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


class Within(Protocol):
    """The space a fault is drawn in, as its drawer sees it."""

    @property
    def shape(self) -> Shape:
        """The clean run's stream: positions are drawn within it."""
        ...

    @property
    def endless(self) -> bool:
        """Whether the fault may keep the stream open for ever (a timed client)."""
        ...


#: How a fault's parameters are drawn: the choices of one draw and the space, in; the
#: fault's parameters (a scenario's mapping under its name), out.
Drawer = Callable[[Choices, Within], dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Explore:
    """How ``chaosproxy explore`` draws a fault (docs/explore.md)."""

    #: Its parameters, drawn.
    draw: Drawer
    #: Its place in the space's list of faults, which each run draws from by position:
    #: a run's seeded draw depends on it, so a fault keeps its rank, and a new fault
    #: takes the next free one (the space's ranks are unique: tests/core/faults/).
    rank: int
    #: Whether it can act on a stream of this shape, beyond its ``needs`` (a provider
    #: whose text it knows where to find, a stream with text deltas); None: any.
    fits: Callable[[Shape], bool] | None = None
    #: True when it may keep a stream open for ever: drawn only for a timed client.
    endless: bool = False


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


# ---------------------------------------------------------------------------- positions

#: Event kinds a selector picks from, the simplest first (those the stream has).
SELECTOR_KINDS = ("delta", "terminal", "start", "other", "usage", "tool_delta", "ping", "error")


def selectable(shape: Shape) -> list[str]:
    """The selector kinds the stream has events of."""
    return [k for k in SELECTOR_KINDS if shape.count(k)]


def position(c: Choices, count: int) -> int:
    """An ordinal from 1 to ``count`` (1 the simplest)."""
    return c.between(1, max(1, count))


def selector(c: Choices, space: Within, kinds: Sequence[str] | None = None) -> dict[str, Any]:
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
        out["nth"] = position(c, count)
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


def anchor(c: Choices, space: Within, last: int) -> int | str:
    """An upstream event to act next to: an ordinal (1 … ``last``), the first terminal
    event, or the first start event (when the stream has them)."""
    forms: list[str] = ["ordinal"] + [k for k in ("terminal", "start") if space.shape.count(k)]
    form = c.pick(forms)
    return position(c, last) if form == "ordinal" else form


def nothing(c: Choices, space: Within) -> dict[str, Any]:
    """The drawer of a fault with no parameter to draw."""
    return {}


__all__ = [
    "SELECTOR_KINDS",
    "Choices",
    "Drawer",
    "Explore",
    "Shape",
    "Within",
    "anchor",
    "int_range",
    "nothing",
    "options",
    "position",
    "selectable",
    "selector",
]
