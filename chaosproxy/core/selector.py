"""The event selectors' per-request state (docs/scenarios.md, Selectors): which
upstream events a selecting fault acts on.

Apart from the faults (:mod:`chaosproxy.core.faults.base`, whose configs are pydantic
models) so that it is compiled with the hot modules (``chaosproxy/_build.py``): the
pipeline feeds every upstream event to every selector, and asks a fault's selector,
not the fault, whether an event is selected where the fault leaves the others
alone (:attr:`~chaosproxy.core.faults.base.SelectingFault.passes_unselected`).
"""

from __future__ import annotations

import random
from typing import Protocol

from chaosproxy.core.events import Event
from chaosproxy.core.regex import Search, compile_search

IntOrList = int | list[int]
StrOrList = str | list[str]


class SelectorSettings(Protocol):
    """The selectors a fault's config gives (:class:`~chaosproxy.core.faults.base.
    SelectorConfig`)."""

    @property
    def kind(self) -> StrOrList | None: ...
    @property
    def type(self) -> StrOrList | None: ...
    @property
    def match(self) -> str | None: ...
    @property
    def nth(self) -> IntOrList | None: ...
    @property
    def every(self) -> int | None: ...
    @property
    def range(self) -> tuple[int, int] | None: ...
    @property
    def probability(self) -> float | None: ...


class Selector:
    """Per-request state of a fault's selectors.

    The pipeline calls :meth:`observe` for every upstream event *before* any fault
    runs, so ordinals (``nth``, ``every``, ``range``) count upstream events that pass
    ``kind``/``type``/``match``, whatever earlier faults did to the stream, and the
    ``probability`` draw for an event does not depend on other faults either.
    """

    __slots__ = (
        "_cfg",
        "_every",
        "_filtered",
        "_kinds",
        "_nth",
        "_positional",
        "_probability",
        "_range",
        "_regex",
        "_rng",
        "_selected",
        "_types",
        "matched",
    )

    def __init__(self, cfg: SelectorSettings, rng: random.Random) -> None:
        self._cfg = cfg
        self._kinds = _as_set(cfg.kind)
        self._types = _as_set(cfg.type)
        self._regex: Search | None = compile_search(cfg.match) if cfg.match is not None else None
        self._nth = _as_int_set(cfg.nth)
        # Copies of the config's fields: observe() runs per event.
        self._every = cfg.every
        self._range = cfg.range
        self._probability = cfg.probability
        #: Whether kind/type/match filter at all (else every event counts).
        self._filtered = (
            self._kinds is not None or self._types is not None or self._regex is not None
        )
        #: Whether nth/every/range pick among the events that count.
        self._positional = (
            self._nth is not None or self._every is not None or self._range is not None
        )
        self._rng = rng
        #: How many upstream events passed kind/type/match so far.
        self.matched = 0
        self._selected: set[int] = set()

    def observe(self, ev: Event) -> None:
        if ev.ordinal <= 0:
            return
        if self._filtered:
            frame = ev.frame
            kinds = self._kinds
            if kinds is not None and not (kinds & ev.kinds):
                return
            types = self._types
            if types is not None and frame.type not in types:
                return
            regex = self._regex
            if regex is not None and not regex(frame.data or ""):
                return
        self.matched += 1
        if self._positional:
            n = self.matched
            nth = self._nth
            if nth is not None and n not in nth:
                return
            every = self._every
            if every is not None and n % every:
                return
            bounds = self._range
            if bounds is not None and not bounds[0] <= n <= bounds[1]:
                return
        # Drawn for every event that gets here, selected or not (probability 0
        # included), so a seed gives the same selection whatever the other faults do.
        probability = self._probability
        if probability is not None and self._rng.random() >= probability:
            return
        self._selected.add(ev.ordinal)

    def selects(self, ev: Event) -> bool:
        """True when ``ev`` (an upstream event, or a copy of one) is selected."""
        return ev.ordinal in self._selected

    def unreached(self) -> str | None:
        """Why an ordinal the config names never came, or None."""
        cfg = self._cfg
        wanted = [*(self._nth or ()), *([cfg.range[0]] if cfg.range else [])]
        if cfg.every is not None:
            wanted.append(cfg.every)
        if wanted and min(wanted) > self.matched:
            what = "events" if self._kinds is None else f"{'/'.join(sorted(self._kinds))} events"
            return f"ordinal {min(wanted)} never reached: the stream had {self.matched} {what}"
        return None


def _as_set(v: StrOrList | None) -> frozenset[str] | None:
    if v is None:
        return None
    return frozenset([v] if isinstance(v, str) else v)


def _as_int_set(v: IntOrList | None) -> frozenset[int] | None:
    if v is None:
        return None
    return frozenset([v] if isinstance(v, int) else v)
