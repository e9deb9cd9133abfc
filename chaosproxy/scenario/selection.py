"""Choosing the scenario and the seed of each request (docs/scenarios.md, Choosing the
scenario for a request; Seeds).

In this order, the first hit wins: the ``X-Chaos-Scenario`` header, a ``/_chaos/NAME/``
path prefix (always removed before forwarding), the first loaded scenario whose
``match:`` matches, the default scenario, none (pure passthrough).

The seed: ``X-Chaos-Seed``, else the scenario's ``seed:``, else derived from the base
seed and the request's ordinal, else random.

When clients are not trusted (``--trust-client-scenarios no``), they have no say: the
header, the seed header and the path prefix are ignored (the prefix stays in the path,
which is forwarded as sent), each one noted in :attr:`Choice.ignored`.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol
from urllib.parse import unquote

from chaosproxy.core.seeds import SeedError, parse_seed_text
from chaosproxy.scenario import PASSTHROUGH, Scenario, header_values

SCENARIO_HEADER = "X-Chaos-Scenario"
SEED_HEADER = "X-Chaos-Seed"
PATH_PREFIX = "/_chaos/"

#: Derived and random seeds stay below this, so they are exact in JSON (a double).
SEED_LIMIT = 2**53

#: What an untrusting proxy ignores (:attr:`Choice.ignored`, the ``what`` label of
#: ``chaosproxy_client_choices_ignored_total``): the scenario header, the seed header,
#: the path prefix, the built-in mock's knobs (``X-Mock-*`` headers: not forwarded).
IGNORED_HEADER = "header"
IGNORED_SEED = "seed"
IGNORED_PATH = "path"
IGNORED_MOCK = "mock"
#: The prefix of the mock's knob headers (``X-Mock-Tokens``, ``X-Mock-Interval-Ms``),
#: lower case.
MOCK_KNOB_PREFIX = "x-mock-"


@dataclass(frozen=True, slots=True)
class Choice:
    """What a request gets: its scenario, whether it applies, its seed, where it goes."""

    #: The selected scenario; None for pure passthrough.
    scenario: Scenario | None
    #: False when the scenario's ``requests:`` excludes this ordinal: forward the
    #: request untouched, but still report the scenario's name.
    active: bool
    #: 1-based count of the requests that selected this scenario (0 when none).
    ordinal: int
    #: The effective seed of this request.
    seed: int
    #: The path and query to forward (without any ``/_chaos/NAME`` prefix, unless
    #: clients are not trusted: then as the client sent it).
    path: str
    #: What the client asked for and was ignored, clients not being trusted:
    #: ``header``, ``seed``, ``path``, ``mock`` (empty when trusted).
    ignored: tuple[str, ...] = ()
    #: True when the fleet's state (``--state redis``) could not be reached in time
    #: and this replica's own counters numbered the request (docs/fleet.md).
    local: bool = False


@dataclass(frozen=True)
class Rebased:
    """What :meth:`ScenarioSet.rebase` changed in the set: the scenarios added or
    replaced (their counters start again) and those removed."""

    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


class UnknownScenario(Exception):
    """A request (or a caller) named a scenario that is not loaded."""

    def __init__(self, name: str, known: list[str] | None = None) -> None:
        self.name = name
        close = difflib.get_close_matches(name, known or [], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        super().__init__(f"unknown scenario {name!r}{hint}")


class ScenarioSet:
    """The loaded scenarios, the default, and the request counters.

    Safe to use from several threads (the admin API and the proxy may run apart).
    With ``trust_client`` False (``--trust-client-scenarios no``) a request's headers
    and path prefix never choose its scenario or seed.
    """

    def __init__(
        self,
        scenarios: Mapping[str, Scenario] | None = None,
        default: str | None = None,
        base_seed: int | None = None,
        *,
        trust_client: bool = True,
        salt: str | None = None,
    ) -> None:
        self._scenarios: dict[str, Scenario] = dict(scenarios or {})
        self._view = MappingProxyType(self._scenarios)
        self._base_seed = base_seed
        #: Mixed into the seeds and draws derived from ``base_seed``: the replica's
        #: name under ``--state memory``, so that replicas given the same ``--seed``
        #: never repeat each other (docs/fleet.md). None: none (a shared request
        #: number already makes them the fleet's own).
        self.salt = salt
        #: The salt of the seeds a fleet's replica derives alone, its fleet away
        #: (:meth:`choose_in_fleet`).
        self.fallback_salt = salt
        self.trust_client = trust_client
        self._lock = threading.Lock()
        #: The seeds and draws of a set without ``--seed`` (its chooser's, kept here:
        #: a test gives the set a seeded one).
        self._random: random.Random = random.SystemRandom()
        #: Each request's choice, and the counters it keeps.
        self._chooser = Chooser(self, self._lock)
        self._default: str | None = None
        self.set_default(default)
        #: What :meth:`restore` goes back to.
        self._initial: tuple[dict[str, Scenario], str | None] = (
            dict(self._scenarios),
            self._default,
        )
        #: Counters shared with other processes (``serve --workers N``,
        #: :class:`chaosproxy.workers.counters.SharedCounters`): the request number and
        #: each scenario's ordinals are then theirs, not this set's. None: this set's.
        self.counters: SharedCounterSource | None = None

    # -- the library

    @property
    def scenarios(self) -> Mapping[str, Scenario]:
        """A read-only, live view, in load order."""
        return self._view

    @property
    def default(self) -> str | None:
        return self._default

    @property
    def base_seed(self) -> int | None:
        return self._base_seed

    def add(self, scenario: Scenario) -> None:
        """Add a scenario, or replace the one with its name (keeping its place in the
        ``match:`` order); its request counter starts again."""
        with self._lock:
            self._scenarios[scenario.name] = scenario
            self._chooser.forget(scenario.name)

    def remove(self, name: str) -> None:
        """Remove a scenario; if it was the default, there is no default any more."""
        with self._lock:
            if name not in self._scenarios:
                raise UnknownScenario(name, list(self._scenarios))
            del self._scenarios[name]
            self._chooser.forget(name)
            if self._default == name:
                self._default = None

    def set_default(self, name: str | None) -> None:
        with self._lock:
            if name is not None and name not in self._scenarios:
                raise UnknownScenario(name, list(self._scenarios))
            self._default = name

    def reset(self) -> None:
        """Forget every request: ordinals and derived seeds start again from 1."""
        with self._lock:
            self._chooser.reset()

    def restore(self) -> None:
        """Back to the state at construction: the scenarios added at run time removed,
        those replaced or removed back, the first default, and :meth:`reset`."""
        with self._lock:
            scenarios, default = self._initial
            self._scenarios.clear()
            self._scenarios.update(scenarios)
            self._default = default if default in scenarios else None
            self._chooser.reset()

    def initial(self) -> tuple[dict[str, Scenario], str | None]:
        """What :meth:`restore` goes back to: the scenarios the set started from (or was
        last rebased on: :meth:`rebase`) and the first default."""
        with self._lock:
            scenarios, default = self._initial
            return dict(scenarios), default

    def rebase(
        self, base: Mapping[str, Scenario], default: str | None, *, apply: bool = True
    ) -> Rebased:
        """The set starts from ``base`` from now on (its scenario files changed): what
        :meth:`restore` goes back to, with ``default``. With ``apply`` the set itself
        follows, where nothing changed it at run time (docs/scenarios.md, Watched
        files): a scenario of the old base that is still there as it was is replaced
        by its new version (its counter starts again) or removed (no default any
        more, if it was); a scenario new in ``base`` is added, unless one of its name
        was added at run time. What was added, replaced or removed at run time stays
        as it is. A scenario of ``base`` equal to the old base's is the same one: its
        counter goes on."""
        with self._lock:
            old, _ = self._initial
            base = {
                name: old[name] if name in old and old[name] == scenario else scenario
                for name, scenario in base.items()
            }
            changed: list[str] = []
            removed: list[str] = []
            if apply:
                live = self._scenarios
                for name, scenario in base.items():
                    now = live.get(name)
                    if (now is None and name not in old) or (
                        name in old and now is old[name] and scenario is not now
                    ):
                        live[name] = scenario
                        self._chooser.forget(name)
                        changed.append(name)
                for name, scenario in old.items():
                    if name not in base and live.get(name) is scenario:
                        del live[name]
                        self._chooser.forget(name)
                        removed.append(name)
                        if self._default == name:
                            self._default = None
            self._initial = (base, default)
        return Rebased(tuple(changed), tuple(removed))

    def snapshot(self) -> tuple[dict[str, Scenario], str | None]:
        """A copy of the scenarios (in load order) and the default, taken together:
        safe to use from another thread while the set changes."""
        with self._lock:
            return dict(self._scenarios), self._default

    def get(self, name: str) -> Scenario:
        """The scenario called ``name``; raises UnknownScenario."""
        with self._lock:
            return _lookup(self._scenarios, name)

    # -- one request

    def choose(self, method: str, path_qs: str, headers: Mapping[str, str]) -> Choice:
        """Choose for one request. Raises UnknownScenario when the header or the path
        prefix names a scenario that is not loaded, and ValueError for a bad
        ``X-Chaos-Seed``; neither counts as a request. Clients not trusted, none of
        them is even read: only ``match:``, ``rate`` and the default choose."""
        return self._chooser.choose(method, path_qs, headers, self.salt)

    async def choose_in_fleet(
        self, method: str, path_qs: str, headers: Mapping[str, str], fleet: FleetCounterSource
    ) -> Choice:
        """:meth:`choose` with the fleet's counters (``--state redis``: docs/fleet.md;
        :meth:`Chooser.choose_in_fleet`)."""
        return await self._chooser.choose_in_fleet(method, path_qs, headers, fleet)


class Chooser:
    """One request's choice, for a :class:`ScenarioSet`: the request counters (this
    set's, or those shared by workers or a fleet), the ``match:`` rules with their
    ``rate``, and the seed. Holds the set's lock while it counts; the set tells it when
    counters start again (:meth:`forget`, :meth:`reset`, under that lock)."""

    def __init__(self, owner: ScenarioSet, lock: threading.Lock) -> None:
        self._owner = owner
        self._lock = lock
        self._counts: dict[str, int] = {}
        self._requests = 0

    def forget(self, name: str) -> None:
        """``name``'s ordinals start again (under the set's lock)."""
        self._counts.pop(name, None)

    def reset(self) -> None:
        """Every counter starts again (under the set's lock)."""
        self._counts.clear()
        self._requests = 0

    def choose(
        self, method: str, path_qs: str, headers: Mapping[str, str], salt: str | None
    ) -> Choice:
        """:meth:`ScenarioSet.choose`, the seeds derived from ``--seed`` salted with
        ``salt``."""
        owner = self._owner
        ignored: tuple[str, ...] = ()
        if owner.trust_client:
            header_seed = _parse_seed(headers)
            named = _first(headers, SCENARIO_HEADER)
            prefixed, path_qs = _strip_prefix(path_qs)
        else:
            ignored = _asked(path_qs, headers)
            header_seed = named = prefixed = None
        if owner.counters is not None:
            return self._choose_shared(
                owner.counters, method, path_qs, headers, header_seed, named or prefixed, ignored
            )
        with self._lock:
            number = self._requests + 1  # counted below, once the choice stands
            chosen = named or prefixed
            if chosen == PASSTHROUGH:
                scenario: Scenario | None = None  # explicitly none, whatever the default
            elif chosen is not None:
                scenario = _lookup(owner.scenarios, chosen)  # an explicit choice ignores rate
            else:
                draw = self._draw(header_seed, number, salt) if self._partial else None
                scenario = self._matching(method, path_qs, headers, draw)
            self._requests = number
            ordinal = 0
            if scenario is not None:
                ordinal = self._counts.get(scenario.name, 0) + 1
                self._counts[scenario.name] = ordinal
        return self._choice(scenario, ordinal, number, header_seed, path_qs, ignored, salt)

    async def choose_in_fleet(
        self, method: str, path_qs: str, headers: Mapping[str, str], fleet: FleetCounterSource
    ) -> Choice:
        """:meth:`choose` with the fleet's counters (``--state redis``: docs/fleet.md):
        the request's number and its scenario's ordinal in one round trip, or two when
        a ``rate`` draw derived from ``--seed`` must know the number before the match.
        When the fleet does not answer in time, :meth:`choose` with this replica's own
        counters (its seeds salted with :attr:`fallback_salt`), marked ``local``."""
        owner = self._owner
        if owner.trust_client:
            header_seed = _parse_seed(headers)
            chosen = _first(headers, SCENARIO_HEADER)
            prefixed, stripped = _strip_prefix(path_qs)
            chosen = chosen or prefixed
            ignored: tuple[str, ...] = ()
        else:
            ignored = _asked(path_qs, headers)
            header_seed, chosen, stripped = None, None, path_qs
        scenario: Scenario | None = None  # PASSTHROUGH: explicitly none
        number_first = False
        with self._lock:
            if chosen is not None and chosen != PASSTHROUGH:
                scenario = _lookup(owner.scenarios, chosen)  # an explicit choice ignores rate
            elif chosen is None:
                number_first = self._partial and header_seed is None and owner.base_seed is not None
                if not number_first:
                    draw = self._draw(header_seed, 0) if self._partial else None
                    scenario = self._matching(method, stripped, headers, draw)
        if not number_first:
            counts = await fleet.counts(scenario.name if scenario is not None else None)
            if counts is None:
                return self._fallback(method, path_qs, headers)
            number, ordinal = counts
        else:
            counts = await fleet.counts(None)
            if counts is None:
                return self._fallback(method, path_qs, headers)
            number = counts[0]
            with self._lock:
                scenario = self._matching(
                    method, stripped, headers, self._draw(None, number, owner.salt)
                )
            ordinal = 0
            if scenario is not None:
                shared = await fleet.ordinal(scenario.name)
                if shared is None:  # numbered by the fleet, counted here
                    with self._lock:
                        shared = self._counts.get(scenario.name, 0) + 1
                        self._counts[scenario.name] = shared
                    choice = self._choice(
                        scenario, shared, number, header_seed, stripped, ignored, owner.salt
                    )
                    return dataclasses.replace(choice, local=True)
                ordinal = shared
        return self._choice(scenario, ordinal, number, header_seed, stripped, ignored, owner.salt)

    def _fallback(self, method: str, path_qs: str, headers: Mapping[str, str]) -> Choice:
        """:meth:`choose` by this replica alone, its derived seeds salted apart from
        the fleet's (whose numbers its own repeat)."""
        owner = self._owner
        choice = self.choose(method, path_qs, headers, owner.fallback_salt)
        return dataclasses.replace(choice, local=True)

    def _choose_shared(
        self,
        counters: SharedCounterSource,
        method: str,
        path_qs: str,
        headers: Mapping[str, str],
        header_seed: int | None,
        chosen: str | None,
        ignored: tuple[str, ...],
    ) -> Choice:
        """:meth:`choose` with counters shared by every worker: the scenario named
        (which may raise) first, then the request's number, the match, and its
        scenario's ordinal, each count one short hold of the shared lock."""
        owner = self._owner
        scenario: Scenario | None = None  # PASSTHROUGH: explicitly none
        with self._lock:
            if chosen is not None and chosen != PASSTHROUGH:
                scenario = _lookup(owner.scenarios, chosen)  # an explicit choice ignores rate
            number = counters.next_request()
            if chosen is None:
                draw = self._draw(header_seed, number, owner.salt) if self._partial else None
                scenario = self._matching(method, path_qs, headers, draw)
        ordinal = 0
        if scenario is not None:
            shared = counters.next_ordinal(scenario.name)
            if shared is None:  # (a scenario the supervisor never heard of)
                with self._lock:
                    shared = self._counts.get(scenario.name, 0) + 1
                    self._counts[scenario.name] = shared
            ordinal = shared
        return self._choice(scenario, ordinal, number, header_seed, path_qs, ignored, owner.salt)

    def _choice(
        self,
        scenario: Scenario | None,
        ordinal: int,
        number: int,
        header_seed: int | None,
        path_qs: str,
        ignored: tuple[str, ...],
        salt: str | None = None,
    ) -> Choice:
        owner = self._owner
        active = scenario is not None and (
            scenario.requests is None or ordinal in scenario.requests
        )
        if header_seed is not None:
            seed = header_seed
        elif scenario is not None and scenario.seed is not None:
            seed = scenario.seed
        elif owner.base_seed is not None:
            seed = derive_seed(owner.base_seed, number, salt)
        else:
            seed = owner._random.randrange(SEED_LIMIT)
        return Choice(scenario, active, ordinal, seed, path_qs, ignored)

    def _matching(
        self, method: str, path_qs: str, headers: Mapping[str, str], draw: float | None
    ) -> Scenario | None:
        """The first ``match:`` rule (then the default) that takes the request.

        With rates, one draw ``u`` in [0, 1) per request is laid along the rules that
        match it, in order: the first takes ``u < rate1``, the next
        ``rate1 <= u < rate1 + rate2``, and so on; a request none takes falls through
        to passthrough. So ``cut`` at 0.05 and ``dup`` at 0.02 take 5 % and 2 % of the
        requests they both match, and the rest are clean."""
        owner = self._owner
        path = path_qs.split("?", 1)[0]
        below = 0.0
        candidates = [
            s
            for s in owner.scenarios.values()
            if s.match is not None and s.match.matches(method, path, headers)
        ]
        default = owner.scenarios[owner.default] if owner.default is not None else None
        if default is not None and default not in candidates:
            candidates.append(default)
        for scenario in candidates:
            if draw is None or scenario.rate >= 1.0:
                return scenario
            below += scenario.rate
            if draw < below:
                return scenario
        return None

    @property
    def _partial(self) -> bool:
        """Whether any scenario takes only a fraction of its requests."""
        return any(s.rate < 1.0 for s in self._owner.scenarios.values())

    def _draw(self, header_seed: int | None, number: int, salt: str | None = None) -> float:
        """The request's draw for ``rate``: from its ``X-Chaos-Seed``, else from the
        base seed and its number (the same split for the same ``--seed``), else random."""
        owner = self._owner
        if header_seed is not None:
            basis: int = header_seed
        elif owner.base_seed is not None:
            basis = derive_seed(owner.base_seed, number, salt)
        else:
            return owner._random.random()
        return random.Random(f"{basis}:rate").random()


class FleetCounterSource(Protocol):
    """A fleet's counters (:class:`chaosproxy.fleet.shared.SharedState`): None when
    they could not be had in time."""

    async def counts(self, scenario: str | None) -> tuple[int, int] | None: ...

    async def ordinal(self, scenario: str) -> int | None: ...


class SharedCounterSource(Protocol):
    """Counters kept outside a :class:`ScenarioSet` (shared by processes)."""

    def next_request(self) -> int: ...

    def next_ordinal(self, name: str) -> int | None: ...


def derive_seed(base_seed: int, n: int, salt: str | None = None) -> int:
    """The seed of the ``n``-th request (1-based) under base seed ``base_seed`` (and
    ``salt``, a replica's name: docs/fleet.md)."""
    basis = f"{base_seed}:{n}" if salt is None else f"{base_seed}:{salt}:{n}"
    digest = hashlib.sha256(basis.encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 11  # 53 bits: exact as a JSON number


def _lookup(scenarios: Mapping[str, Scenario], name: str) -> Scenario:
    try:
        return scenarios[name]
    except KeyError:
        raise UnknownScenario(name, list(scenarios)) from None


def _first(headers: Mapping[str, str], name: str) -> str | None:
    values = header_values(headers, name)
    if not values:
        return None
    return values[0].strip() or None


def _parse_seed(headers: Mapping[str, str]) -> int | None:
    raw = _first(headers, SEED_HEADER)
    if raw is None:
        return None
    try:
        return parse_seed_text(raw)
    except SeedError as exc:  # one line with the range, whatever the length of raw
        raise ValueError(f"{SEED_HEADER} {exc}") from None


def _asked(path_qs: str, headers: Mapping[str, str]) -> tuple[str, ...]:
    """What a request asks for that an untrusting proxy ignores (present, even empty
    or invalid, counts: the client tried)."""
    asked: list[str] = []
    if header_values(headers, SCENARIO_HEADER):
        asked.append(IGNORED_HEADER)
    if header_values(headers, SEED_HEADER):
        asked.append(IGNORED_SEED)
    if path_qs.startswith(PATH_PREFIX):
        asked.append(IGNORED_PATH)
    if any(name.lower().startswith(MOCK_KNOB_PREFIX) for name in headers):
        asked.append(IGNORED_MOCK)
    return tuple(asked)


def _strip_prefix(path_qs: str) -> tuple[str | None, str]:
    """(scenario name, path to forward) for ``/_chaos/NAME/rest?query``."""
    if not path_qs.startswith(PATH_PREFIX):
        return None, path_qs
    rest = path_qs[len(PATH_PREFIX) :]
    end = len(rest)
    for sep in "/?":
        i = rest.find(sep)
        if i != -1:
            end = min(end, i)
    name, remainder = unquote(rest[:end]), rest[end:]
    if not remainder.startswith("/"):
        remainder = "/" + remainder
    return name, remainder


__all__ = [
    "IGNORED_HEADER",
    "IGNORED_PATH",
    "IGNORED_SEED",
    "PATH_PREFIX",
    "SCENARIO_HEADER",
    "SEED_HEADER",
    "Choice",
    "Chooser",
    "Rebased",
    "ScenarioSet",
    "UnknownScenario",
    "derive_seed",
]
