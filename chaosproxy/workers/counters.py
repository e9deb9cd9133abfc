"""Request counters shared by every worker of ``serve --workers N``: the proxy's
request number (what ``--seed`` derives each request's seed and ``rate`` draw from) and
each scenario's count (its ``requests:`` ordinals) are the whole proxy's, not a
worker's.

An array of 64-bit integers in shared memory and one lock (a process-shared semaphore:
uncontended, no system call). Slot 0 is the request number; each scenario has a slot
of its own, which the supervisor assigns (:class:`Slots`): a scenario added or replaced
gets a fresh slot (its count starts again, as in one process), and a slot comes free
only once every worker has been told the scenario is gone. Each request takes the lock
once for its number and once more for its scenario's ordinal (none when it has no
scenario); docs/operations.md gives what that costs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Scenario slots (slot 0 is the request number): scenarios loaded at once, at most.
SLOTS = 4096


class TooManyScenarios(Exception):
    """Every slot is taken: no more scenarios can be loaded at once."""


class SharedCounters:
    """The counters as a worker (or the supervisor) uses them.

    ``array`` is a ``multiprocessing`` ``RawArray("q", SLOTS + 1)`` and ``lock`` its
    ``Lock``, made by the supervisor before the workers start; ``slots`` maps each
    scenario's name to its slot (:meth:`remap` replaces it)."""

    def __init__(self, array: Any, lock: Any, slots: Mapping[str, int] | None = None) -> None:
        self._array = array
        #: The same memory as 64-bit integers: a plain index, no ctypes conversion.
        self._counts = memoryview(array).cast("B").cast("q")
        self._lock = lock
        self._slots: dict[str, int] = dict(slots or {})

    def remap(self, slots: Mapping[str, int]) -> None:
        self._slots = dict(slots)

    def next_request(self) -> int:
        """The proxy's next request number (1-based)."""
        counts = self._counts
        with self._lock:
            number: int = counts[0] + 1
            counts[0] = number
        return number

    def next_ordinal(self, name: str) -> int | None:
        """The next ordinal (1-based) among the requests of scenario ``name``; None
        when it has no slot (unknown to the supervisor: never, in a worker)."""
        slot = self._slots.get(name)
        if slot is None:
            return None
        counts = self._counts
        with self._lock:
            ordinal: int = counts[slot] + 1
            counts[slot] = ordinal
        return ordinal

    def zero(self, slots: Iterable[int] | None = None) -> None:
        """Counts back to 0: ``slots``, or every slot and the request number."""
        with self._lock:
            if slots is None:
                for i in range(len(self._counts)):
                    self._counts[i] = 0
            else:
                for slot in slots:
                    self._counts[slot] = 0

    def value(self, slot: int) -> int:
        with self._lock:
            return int(self._counts[slot])


class Slots:
    """The supervisor's assignment of slots to scenario names."""

    def __init__(self, counters: SharedCounters, names: Iterable[str] = (), size: int = SLOTS):
        self.counters = counters
        self._size = size
        self.of: dict[str, int] = {}
        self._free = list(range(size, 0, -1))  # slot 1 first
        #: Slots waiting to come free once every worker has dropped them.
        self._retired: list[int] = []
        for name in names:
            self.fresh(name)
        #: What ``POST /reset`` goes back to.
        self.initial = dict(self.of)

    def fresh(self, name: str) -> int:
        """A new slot, at 0, for ``name`` (its old one, if any, retired)."""
        slot = self._take()
        old = self.of.get(name)
        if old is not None:
            self._retired.append(old)
        self.of[name] = slot
        return slot

    def _take(self) -> int:
        if not self._free:
            raise TooManyScenarios(f"more than {self._size} scenarios loaded at once")
        slot = self._free.pop()
        self.counters.zero([slot])
        return slot

    def drop(self, name: str) -> None:
        old = self.of.pop(name, None)
        if old is not None:
            self._retired.append(old)

    def restore(self) -> None:
        """Back to the scenarios of the start (or of the files' last change:
        :meth:`rebase`), each with a slot; every count at 0 once released and
        zeroed."""
        restored: dict[str, int] = {}
        # Every count is zeroed once every worker has the new map (Workers.changed): a
        # slot retired, or one leaving now, may serve another name at once.
        spare = [*self._retired, *(s for n, s in self.of.items() if n not in self.initial)]
        self._retired = []
        for name in self.initial:
            slot = self.of.get(name)
            if slot is None:
                slot = spare.pop() if spare else self._take()
            restored[name] = slot
        self._retired.extend(spare)
        self.of = restored
        self.initial = dict(restored)

    def rebase(self, names: Iterable[str]) -> None:
        """The scenarios :meth:`restore` goes back to are ``names`` from now on (the
        scenario files changed); only the names count."""
        self.initial = {name: self.of.get(name, 0) for name in names}

    def release(self) -> None:
        """Every worker has the current map: the retired slots are free again."""
        self._free.extend(self._retired)
        self._retired.clear()


__all__ = ["SLOTS", "SharedCounters", "Slots", "TooManyScenarios"]
