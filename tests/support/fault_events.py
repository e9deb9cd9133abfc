"""Shared by the fault tests that were tests/core/test_faults_event.py, now one file per
fault in tests/core/faults/: their streams, configs and runners."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chaosproxy.core.actions import Send
from chaosproxy.core.events import Event
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.inject import InjectConfig
from chaosproxy.core.frames import Format
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile
from chaosproxy.core.records import SkippedFault

Spec = tuple[str, FaultConfig]

# A small generic stream: four events (ordinals 1-4) and a keepalive comment (ordinal 0).
E1 = b'data: {"n":1}\n\n'

PING = b": ping\n\n"

E2 = b'data: {"n":2}\n\n'

E3 = b'data: {"n":3}\n\n'

DONE = b"data: [DONE]\n\n"

BODY = E1 + PING + E2 + E3 + DONE

ORDINALS = [1, 0, 2, 3, 4]

NDJSON = b'{"n":1}\n{"n":2}\n{"n":3,"done":true}\n'


class Run:
    """The Sends one pipeline made, and the pipeline (for its summary)."""

    def __init__(self, sends: list[Send], pipeline: Pipeline) -> None:
        self.sends = sends
        self.pipeline = pipeline

    @property
    def data(self) -> list[bytes]:
        return [s.data for s in self.sends]

    @property
    def body(self) -> bytes:
        return b"".join(self.data)

    @property
    def events(self) -> list[Event]:
        return [e for s in self.sends for e in s.events]

    @property
    def ordinals(self) -> list[int]:
        return [e.ordinal for e in self.events]

    @property
    def faults(self) -> list[tuple[str, ...]]:
        return [s.faults for s in self.sends]

    @property
    def applied(self) -> dict[str, int]:
        return self.pipeline.summary()[0]

    @property
    def skipped(self) -> list[SkippedFault]:
        return self.pipeline.summary()[1]


def run(
    specs: Sequence[Spec],
    body: bytes | Sequence[bytes],
    *,
    seed: int = 7,
    fmt: Format = "sse",
    provider: str = "generic",
) -> Run:
    """Feed ``body`` (one chunk, or the given chunks) through a fresh pipeline."""
    profile = get_profile(provider)
    pipeline = Pipeline(build_faults(list(specs), seed, fmt, profile), fmt, profile)
    chunks = [body] if isinstance(body, bytes) else list(body)
    actions = [a for chunk in chunks for a in pipeline.feed(chunk, 0.0)]
    actions += pipeline.end(0.0)
    assert all(isinstance(a, Send) for a in actions), actions
    sends = [a for a in actions if isinstance(a, Send)]
    for s in sends:  # one write per event: a Send is exactly its event's bytes
        assert s.events and s.data == b"".join(e.raw for e in s.events)
        assert s.faults == s.events[0].faults
    return Run(sends, pipeline)


def splits(body: bytes) -> list[list[bytes]]:
    """The body cut in two at every point, and byte by byte."""
    cuts = [[body[:i], body[i:]] for i in range(1, len(body))]
    return [*cuts, [body[i : i + 1] for i in range(len(body))]]


def assert_chunking_independent(specs: Sequence[Spec], body: bytes, **kw: Any) -> Run:
    whole = run(specs, body, **kw)
    for chunks in splits(body):
        other = run(specs, chunks, **kw)
        assert other.data == whole.data, chunks
        assert other.ordinals == whole.ordinals
        assert other.faults == whole.faults
        assert other.pipeline.summary() == whole.pipeline.summary()
    return whole


def inject_cfg(**values: Any) -> InjectConfig:
    """An inject config from a mapping, as a scenario file gives it."""
    return InjectConfig.model_validate(values)


BOM = b"\xef\xbb\xbf"


__all__ = [
    "BODY",
    "BOM",
    "DONE",
    "E1",
    "E2",
    "E3",
    "NDJSON",
    "ORDINALS",
    "PING",
    "Run",
    "Spec",
    "assert_chunking_independent",
    "inject_cfg",
    "run",
    "splits",
]
