"""``chaosproxy simulate``: the core run offline, on a virtual clock.

Upstream bytes come from a buffer instead of a socket, sleeps advance a virtual clock
instead of waiting, and the result is the exact sequence of actions the live proxy
would carry out for the same bytes, chunking, scenario and seed.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chaosproxy.core.actions import (
    Action,
    Cut,
    CutRequest,
    HoldRequest,
    HttpAction,
    Respond,
    Send,
    Sleep,
)
from chaosproxy.core.frames import Format
from chaosproxy.core.providers import provider_names
from chaosproxy.core.records import SkippedFault
from chaosproxy.core.session import Session
from chaosproxy.scenario import Scenario


@dataclass
class Simulation:
    seed: int
    format: Format
    provider: str
    #: (virtual time in seconds, action), in order.
    actions: list[tuple[float, Action | HttpAction]] = field(default_factory=list)
    applied: dict[str, int] = field(default_factory=dict)
    skipped: list[SkippedFault] = field(default_factory=list)
    #: How many of the first ``actions`` came from the HTTP stage (before the response
    #: headers: a held header, a canned status, a cut before any byte).
    http_actions: int = 0
    #: The request's ``response_end`` fields (its integrity, its answer, …).
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def body(self) -> bytes:
        """What the client receives: every Send up to a Cut (or a Respond's body)."""
        parts = []
        for _, action in self.actions:
            if isinstance(action, Send):
                parts.append(action.data)
            elif isinstance(action, Respond):
                parts.append(action.body)
        return b"".join(parts)

    @property
    def writes(self) -> list[bytes]:
        return [a.data for _, a in self.actions if isinstance(a, Send)]

    def log_lines(self) -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = [
            {
                "event": "simulate",
                "seed": self.seed,
                "format": self.format,
                "provider": self.provider,
            }
        ]
        offset = 0
        for i, (t, action) in enumerate(self.actions):
            line: dict[str, Any] = {"t_ms": round(t * 1000.0, 3)}
            if i < self.http_actions:
                line["stage"] = "http"
            if isinstance(action, Send):
                line |= {
                    "action": "send",
                    "offset": offset,
                    "size": len(action.data),
                    "events": [e.ordinal for e in action.events],
                    "faults": list(action.faults),
                }
                offset += len(action.data)
            elif isinstance(action, Sleep):
                seconds = "forever" if math.isinf(action.seconds) else action.seconds * 1000.0
                line |= {"action": "sleep", "ms": seconds, "fault": action.fault}
            elif isinstance(action, Cut):
                line |= {"action": "cut", "how": action.how, "fault": action.fault, **action.detail}
            elif isinstance(action, HoldRequest):
                line |= {"action": "hold_request", "ms": action.seconds * 1000.0}
            elif isinstance(action, CutRequest):
                line |= {"action": "cut_request", "how": action.how, "fault": action.fault}
            else:
                line |= {"action": "respond", "status": action.status, "size": len(action.body)}
            lines.append(line)
        end: dict[str, Any] = {
            "event": "end",
            "faults_applied": self.applied,
            "faults_skipped": self.skipped,
        }
        if "faults_fallback" in self.summary:
            end["faults_fallback"] = self.summary["faults_fallback"]
        lines.append(end)
        return lines


#: The Content-Type a body of each format would have come with.
CONTENT_TYPES: dict[str, str] = {
    "sse": "text/event-stream",
    "ndjson": "application/x-ndjson",
    "eventstream": "application/vnd.amazon.eventstream",
    "raw": "application/octet-stream",
}


def sniff_format(data: bytes) -> Format:
    """Guess the framing of a body with no Content-Type: an AWS event stream when it
    opens with a prelude whose CRC is right."""
    if len(data) >= 12 and zlib.crc32(data[:8]) == int.from_bytes(data[8:12], "big"):
        return "eventstream"
    head = data.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:16]
    if head.startswith((b"data:", b"event:", b"id:", b"retry:", b":")):
        return "sse"
    if head.startswith(b"{"):
        return "ndjson"
    return "raw"


def simulate(
    scenario: Scenario,
    data: bytes,
    *,
    seed: int | None = None,
    fmt: Format | None = None,
    provider: str | None = None,
    path: str = "/",
    chunk: int = 0,
) -> Simulation:
    """Run ``scenario`` over ``data`` as the proxy would, without sockets or clocks.

    ``fmt`` stands in for the response's Content-Type (default: sniffed from ``data``),
    ``path`` for the request path (it picks the provider when ``provider`` is not
    given), and ``chunk`` for the size of upstream reads (default: one read). Raises
    ValueError for an unknown ``provider``.
    """
    names = provider_names()  # (as registered now: a test's provider too)
    if provider is not None and provider not in (*names, "auto"):
        raise ValueError(f"unknown provider {provider!r}; one of auto, {', '.join(names)}")
    if seed is None:
        seed = (
            scenario.seed if scenario.seed is not None else random.SystemRandom().randrange(2**53)
        )
    session = Session("simulate", scenario=scenario, seed=seed, path=path, provider=provider)
    sim = Simulation(seed, "raw", "none")
    now = 0.0

    def record(actions: Sequence[Action | HttpAction], *, http: bool = False) -> bool:
        """Note the actions on the virtual clock; True once the response is over."""
        nonlocal now
        for action in actions:
            sim.actions.append((now, action))
            sim.http_actions += http
            if isinstance(action, Send):
                session.wrote(action, now)  # (accounts what the client was sent)
            elif isinstance(action, Sleep):
                if math.isinf(action.seconds):
                    session.client_gone()  # a hang: only the client can end it
                    return True
                now += action.seconds
            elif isinstance(action, Cut):
                session.cut(action)
                return True
            elif isinstance(action, Respond):
                session.respond(action)
                session.finish()
                return True
            elif isinstance(action, HoldRequest):
                now += action.seconds
            else:  # a CutRequest: the request is cut before any of its body is read
                session.request_cut(action, 0)
                return True
        return False

    if not record(session.start(now), http=True):
        body_format = fmt or (scenario.format if scenario.format != "auto" else sniff_format(data))
        session.response_head(200, "OK", [("Content-Type", CONTENT_TYPES[body_format])])
        size = chunk if chunk > 0 else max(len(data), 1)
        done = False
        for start in range(0, len(data), size):
            if record(session.feed(data[start : start + size], now)):
                done = True
                break
            deadline = session.deadline()
            if deadline is not None and deadline <= now and record(session.poll(now)):
                done = True
                break
        if not done and not record(session.body_end(now)):
            session.finish()
        sim.format = session.format
        sim.provider = session.provider
    summary = session.summary(now)
    sim.summary = dict(summary)
    sim.applied, sim.skipped = summary["faults_applied"], summary["faults_skipped"]  # (a scenario)
    return sim
