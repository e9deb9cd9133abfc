"""The fixtures a mock answers with, and which one answers a request (docs/mock.md,
Fixtures).

Three sources, tried in this order, the first match winning: the ``mock:`` fixtures of
the request's scenario (the proxy names it in :data:`SCENARIO_HEADER` when it forwards
to its own mock), those added at run time (admin ``POST /mock/fixtures``,
``proxy.add_fixture``), in the order added, then those of the fixture files
(``--mock-fixtures``), in file order. No match: the mock's corpus answers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chaosproxy.core.llm_request import RequestView
from chaosproxy.scenario.fixtures import SCENARIO_HEADER, Fixture

#: The header on an answer a fixture made: its ``name``, else where it is
#: (``scenario NAME mock[0]``, ``added[1]``, ``files[2]``).
FIXTURE_HEADER = "X-Mock-Fixture"

#: The most fixtures a mock holds added at run time: each is kept until removed, so
#: without a bound a client could grow the proxy without end (docs/mock.md, Fixtures).
MAX_ADDED = 1000


class TooManyFixtures(ValueError):
    """Adding these fixtures would pass :data:`MAX_ADDED`; none was added. ``alone``:
    they are more than that by themselves."""

    def __init__(self, held: int, adding: int) -> None:
        self.held = held
        self.adding = adding
        self.alone = adding > MAX_ADDED
        if self.alone:
            message = (
                f"{adding} fixtures at once: a mock holds at most {MAX_ADDED} fixtures "
                "added at run time; nothing was added"
            )
        else:
            message = (
                f"a mock holds at most {MAX_ADDED} fixtures added at run time; it holds "
                f"{held} and these are {adding}: nothing was added (remove them first: "
                "DELETE /mock/fixtures, proxy.clear_fixtures())"
            )
        super().__init__(message)


#: A scenario's fixtures by its name (empty for an unknown scenario).
ScenarioFixtures = Callable[[str], Sequence[Fixture]]


@dataclass(frozen=True, slots=True)
class Chosen:
    """The fixture that answers a request, and what to call it."""

    fixture: Fixture
    label: str


class MockFixtures:
    """The fixtures of one mock: from files (fixed), added at run time, and the
    scenarios' (looked up by name). Safe to use from several threads (a test adds
    fixtures from its own thread while the mock answers on the proxy's)."""

    def __init__(
        self,
        files: Sequence[Fixture] = (),
        scenarios: ScenarioFixtures | None = None,
    ) -> None:
        self.files: tuple[Fixture, ...] = tuple(files)
        #: How a scenario's fixtures are found (set by the proxy that owns the mock).
        self.scenarios = scenarios
        self._added: list[Fixture] = []
        #: Answers given by each fixture with ``times``, by identity (the fixture is
        #: kept, so its id is not reused while it counts).
        self._used: dict[int, tuple[Fixture, int]] = {}
        self._lock = threading.Lock()

    @property
    def added(self) -> tuple[Fixture, ...]:
        with self._lock:
            return tuple(self._added)

    def add(self, fixtures: Sequence[Fixture]) -> None:
        """Add fixtures after those added before (and before the files'); all or none:
        raises :class:`TooManyFixtures` past :data:`MAX_ADDED`."""
        with self._lock:
            if len(self._added) + len(fixtures) > MAX_ADDED:
                raise TooManyFixtures(len(self._added), len(fixtures))
            self._added.extend(fixtures)

    def add_recorded(self, fixture: Fixture) -> None:
        """A fixture just recorded into a fixture file (record-on-miss): tried after
        the files' (it is one of them now), and kept by :meth:`clear` and :meth:`reset`."""
        with self._lock:
            self.files = (*self.files, fixture)

    def clear(self) -> None:
        """Remove the fixtures added at run time (the files' stay)."""
        with self._lock:
            for fixture in self._added:
                self._used.pop(id(fixture), None)
            self._added.clear()

    def reset(self) -> None:
        """Back to the start: no fixture added, every ``times`` counted from 0."""
        with self._lock:
            self._added.clear()
            self._used.clear()

    def listing(self) -> list[dict[str, Any]]:
        """The fixtures added at run time, then the files', each as its mapping with
        ``source`` (``added`` or ``files``), in the order they are tried."""
        with self._lock:
            added = list(self._added)
        return [
            {**f.as_dict(), "source": source}
            for source, group in (("added", added), ("files", self.files))
            for f in group
        ]

    def choose(
        self,
        path: str,
        request: RequestView,
        headers: Mapping[str, str],
        scenario: str | None = None,
    ) -> Chosen | None:
        """The fixture that answers this request (counting it when it has ``times``),
        or None: the corpus answers."""
        groups: list[tuple[str, Sequence[Fixture]]] = []
        if scenario and self.scenarios is not None:
            groups.append((f"scenario {scenario} mock", self.scenarios(scenario)))
        with self._lock:
            groups += [("added", list(self._added)), ("files", self.files)]
            for where, fixtures in groups:
                for i, fixture in enumerate(fixtures):
                    if fixture.match.mismatch(path, request, headers) is not None:
                        continue
                    if fixture.times is not None:
                        _, used = self._used.get(id(fixture), (fixture, 0))
                        if used >= fixture.times:
                            continue
                        self._used[id(fixture)] = (fixture, used + 1)
                    return Chosen(fixture, fixture.name or f"{where}[{i}]")
        return None


__all__ = [
    "FIXTURE_HEADER",
    "MAX_ADDED",
    "SCENARIO_HEADER",
    "Chosen",
    "MockFixtures",
    "ScenarioFixtures",
    "TooManyFixtures",
]
