"""A line of the frame log for tests to start from: valid against the shipped schema
and read back whole by :mod:`chaosproxy.observe.reading`, every key of its kind given.
Tests spoil a copy (``{**FRAME, "seq": -1}``) to see what a bad key does."""

from __future__ import annotations

from typing import Any

FRAME: dict[str, Any] = {
    "request_id": "r-1",
    "scenario": None,
    "seq": 0,
    "offset": 0,
    "size": 5,
    "t_ms": 1.5,
    "events": [1],
    "kinds": ["delta"],
    "faults": [],
    "event": "frame",
    "ts": "2026-01-01T00:00:00.000Z",
}
