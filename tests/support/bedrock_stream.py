"""Shared by the fault tests' AWS event stream (Bedrock) cases
(tests/core/faults/test_<fault>.py, tests/core/test_pipeline_eventstream.py): a
ConverseStream body built with the encoder, one with a tool call, and a real Pipeline
(the event stream framer, the bedrock profile, the faults) run over it; what botocore's
own decoder reads of a body (it checks both CRCs and every length)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from botocore.eventstream import EventStreamBuffer

from chaosproxy.core.actions import Send
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.framing.eventstream import event_message
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile

Spec = tuple[str, FaultConfig]


def converse(name: str, payload: Any) -> bytes:
    """One ConverseStream event message."""
    return event_message(name, orjson.dumps(payload))


START = converse("messageStart", {"role": "assistant"})
D1, D2, D3 = (
    converse("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": t}})
    for t in ("Hel", "lo", " you")
)
STOP_BLOCK = converse("contentBlockStop", {"contentBlockIndex": 0})
STOP = converse("messageStop", {"stopReason": "end_turn"})
META = converse("metadata", {"usage": {"inputTokens": 2, "outputTokens": 3}})
BODY = START + D1 + D2 + D3 + STOP_BLOCK + STOP + META

#: A tool call whose input comes in two fragments (an escape in the first).
TOOL = b"".join(
    [
        START,
        converse(
            "contentBlockStart",
            {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t1", "name": "w"}}},
        ),
        converse(
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"toolUse": {"input": '{"city":"S\\u00e3o'}}},
        ),
        converse(
            "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": ' P"}'}}}
        ),
        converse("contentBlockStop", {"contentBlockIndex": 0}),
        STOP,
        META,
    ]
)


def pipeline(specs: Sequence[Spec], seed: int = 7) -> Pipeline:
    """A pipeline of these faults over a Bedrock event stream."""
    profile = get_profile("bedrock")
    return Pipeline(build_faults(list(specs), seed, "eventstream", profile), "eventstream", profile)


def run(specs: Sequence[Spec], chunks: Sequence[bytes] = (BODY,), seed: int = 7) -> list[Send]:
    """The writes of these faults over ``chunks`` (every action a write)."""
    running = pipeline(specs, seed)
    actions = [a for chunk in chunks for a in running.feed(chunk, 0.0)] + running.end(0.0)
    sends = [a for a in actions if isinstance(a, Send)]
    assert len(sends) == len(actions)
    return sends


def decoded(body: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """What botocore reads in ``body``: it checks both CRCs and every length."""
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    messages = [(m.headers, m.payload) for m in buffer]
    assert sum(16 + len(p) for _, p in messages) <= len(body)
    return messages


def names(body: bytes) -> list[str]:
    """The event (or exception) names botocore reads in ``body``."""
    return [str(h.get(":event-type", h.get(":exception-type"))) for h, _ in decoded(body)]


def deltas(body: bytes, *path: str) -> list[Any]:
    """The value at ``path`` in each ``contentBlockDelta`` payload botocore reads."""
    found = []
    for headers, payload in decoded(body):
        if headers[":event-type"] == "contentBlockDelta":
            value = orjson.loads(payload)
            for key in path:
                value = value[key]
            found.append(value)
    return found
