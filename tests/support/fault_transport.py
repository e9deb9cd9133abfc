"""Shared by the fault tests that were tests/core/test_faults_transport.py, now one file per
fault in tests/core/faults/: their streams, configs and runners."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chaosproxy.core.actions import Action, Send, Sleep
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.frames import Format
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile

GENERIC = get_profile("generic")

E1 = b'data: {"n":1}\n\n'

E2 = b'data: {"n":2}\n\n'

DONE = b"data: [DONE]\n\n"

BODY = E1 + E2 + DONE

Spec = tuple[str, FaultConfig]


def pipeline(specs: Sequence[Spec], fmt: Format = "sse", seed: int = 1) -> Pipeline:
    return Pipeline(build_faults(specs, seed, fmt, GENERIC), fmt, GENERIC)


def run(
    specs: Sequence[Spec], *chunks: bytes, fmt: Format = "sse", seed: int = 1
) -> tuple[list[Action], Pipeline]:
    """Feed ``chunks`` (default: BODY in one read) at t=0 and end the body."""
    p = pipeline(specs, fmt, seed)
    out: list[Action] = []
    for chunk in chunks or (BODY,):
        out += p.feed(chunk, 0.0)
    out += p.end(0.0)
    return out, p


def script(actions: Sequence[Action]) -> list[tuple[Any, ...]]:
    """Actions as comparable tuples: writes with their ends and faults, sleeps, cuts."""
    out: list[tuple[Any, ...]] = []
    for a in actions:
        if isinstance(a, Send):
            out.append((a.data, a.ends, a.faults))
        elif isinstance(a, Sleep):
            out.append(("sleep", a.seconds, a.fault))
        else:
            out.append(("cut", a.how, a.detail))
    return out


def body(actions: Sequence[Action]) -> bytes:
    return b"".join(a.data for a in actions if isinstance(a, Send))


def ordinals(send: Action) -> list[int]:
    assert isinstance(send, Send)
    return [ev.ordinal for ev in send.events]


R = ("rechunk",)

C = ("coalesce",)


def cut_detail(after_event: int, position: str, **extra: object) -> dict[str, object]:
    return {"after_event": after_event, "position": position, **extra}


__all__ = [
    "BODY",
    "DONE",
    "E1",
    "E2",
    "GENERIC",
    "C",
    "R",
    "Spec",
    "body",
    "cut_detail",
    "ordinals",
    "pipeline",
    "run",
    "script",
]
