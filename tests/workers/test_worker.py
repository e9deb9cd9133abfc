"""A worker's side of the supervisor (chaosproxy/workers/worker.py): its requests in
flight told to the supervisor once per loop iteration, the short ones never."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from chaosproxy.workers.worker import Flights


async def test_flights_are_told_once_per_loop_iteration_and_short_ones_never() -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    flights = Flights(lambda op, **fields: notes.append((op, fields)))
    before = time.monotonic()
    flights({"event": "request", "request_id": "r-1", "scenario": "slow"})
    flights({"event": "request", "request_id": "r-2", "scenario": None})
    flights({"event": "response_end", "request_id": "r-2", "scenario": None})  # ended at once
    assert notes == []  # not before the iteration ends
    await asyncio.sleep(0)
    ((op, fields),) = notes
    assert op == "flights" and fields["ended"] == []
    ((request_id, scenario, began),) = fields["begun"]
    assert (request_id, scenario) == ("r-1", "slow") and before <= began <= time.monotonic()
    flights({"event": "response_end", "request_id": "r-1", "scenario": "slow"})
    await asyncio.sleep(0)
    assert notes[1] == ("flights", {"begun": [], "ended": ["r-1"]})
    await asyncio.sleep(0)
    assert len(notes) == 2  # nothing more to tell: nothing told
