"""Memory that comes back: once ``serve`` has no request in flight, the garbage of the
load it just carried is collected and the C allocator's free pages go back to the
system (docs/operations.md, Memory after load).

``serve`` lets Python's full garbage-collector pass come at most every
``cli.FULL_GC_EVERY`` second-generation passes, so that none holds 2,000 streams for
100 ms (docs/benchmark.md). The other side of that: a stream's connection, request and
session form reference cycles, and when the load stops, so do the allocations that
would trigger the next full pass. What the last few thousand streams left stayed in
the heap for as long as the proxy stayed idle (57 -> 197 MB over four soak phases,
measured). An idle proxy can afford the pass: nobody is waiting on the loop.

:class:`IdleReclaimer` looks every ``interval`` seconds. When no request is in flight
and the process has allocated since it last reclaimed (a young collection happened),
it runs a full collection, then ``malloc_trim(0)`` where the C library has it (glibc):
freed objects larger than 512 bytes live in glibc's heap, which otherwise keeps its
free pages. An idle proxy that allocates nothing is never collected twice.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Callable
from dataclasses import dataclass

#: How often the reclaimer looks (seconds): memory comes back within about this long
#: of the last request's end.
INTERVAL = 0.5


def _load_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (musl, macOS: nothing to call)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _load_malloc_trim()


def release_memory() -> None:
    """A full collection, then the C allocator's free pages back to the system."""
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)


def young_collections() -> int:
    """How many times the collector has run on the youngest generation: it runs every
    ~700 net container allocations, so an unchanged count means a quiet process."""
    return int(gc.get_stats()[0]["collections"])


@dataclass
class IdleReclaimer:
    """Reclaims memory when the proxy goes idle (see the module's docstring).

    ``in_flight`` says how many requests are being answered now.
    """

    in_flight: Callable[[], int]
    interval: float = INTERVAL
    #: Reclaims done (the tests read it).
    reclaims: int = 0
    _seen: int = -1
    _task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """One look: reclaim if idle and something was allocated since the last time.
        Returns whether it reclaimed."""
        if self.in_flight() > 0:
            return False
        young = young_collections()
        if young == self._seen:
            return False
        release_memory()
        self.reclaims += 1
        # The pass itself counts as a collection of every generation.
        self._seen = young_collections()
        return True

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


__all__ = ["INTERVAL", "IdleReclaimer", "release_memory", "young_collections"]
