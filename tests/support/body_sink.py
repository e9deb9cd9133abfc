"""A body sink that records what an upstream reply delivers and notes every break of the
:class:`~chaosproxy.upstream.interface.Reply` contract (data after the end, an empty
``body_data``, two ends): seen in a loop callback, where an assert would be lost, and
checked by :func:`check_sinks` when the test ends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from chaosproxy.upstream import UpstreamError
from tests.support.scripted_upstream import until

#: The sinks made since the last ``SINKS.clear()``.
SINKS: list[Sink] = []


class Sink:
    """Records the calls; ``on_data`` runs inside each body_data (to pause or close)."""

    def __init__(self, on_data: Callable[[Sink], None] | None = None) -> None:
        self.calls: list[bytes] = []
        self.times: list[float] = []
        self.ends: list[UpstreamError | None] = []
        self.broken: list[str] = []
        self.on_data = on_data
        SINKS.append(self)

    def body_data(self, data: bytes) -> None:
        if self.ends:
            self.broken.append(f"body_data({data!r}) after body_end")
        if not data:
            self.broken.append("an empty body_data")
        self.calls.append(data)
        self.times.append(asyncio.get_running_loop().time())
        if self.on_data is not None:
            self.on_data(self)

    def body_end(self, error: UpstreamError | None) -> None:
        self.ends.append(error)

    async def ended(self) -> UpstreamError | None:
        await until(lambda: bool(self.ends))
        assert len(self.ends) == 1
        return self.ends[0]


def check_sinks() -> None:
    """Every sink made kept the contract: nothing broken, at most one end."""
    for sink in SINKS:
        assert sink.broken == [], sink.broken
        assert len(sink.ends) <= 1, sink.ends
