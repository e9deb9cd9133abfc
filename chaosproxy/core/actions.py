"""Actions: what the core asks the I/O shell to do. The core never does it itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from chaosproxy.core.events import Event

CutHow = Literal["close", "abort", "reset"]


# Not frozen, for the cost of construction (one Send per event; see Frame);
# immutable by convention.
@dataclass(slots=True, unsafe_hash=True)
class Send:
    """Write ``data`` to the client as one write (one frame-log line). Treat it as
    immutable."""

    data: bytes
    #: The events whose bytes this write carries (in order; may be partial pieces).
    events: tuple[Event, ...] = ()
    #: How many events end in this write (their last byte is in ``data``).
    ends: int = 0
    #: Names of the faults that shaped this write, in the order they acted.
    faults: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Sleep:
    """Send nothing for ``seconds`` (``math.inf``: until the client goes away)."""

    seconds: float
    fault: str = ""


@dataclass(frozen=True, slots=True)
class Cut:
    """End the response now: ``close`` ends the body cleanly, ``abort`` closes the
    socket without the final chunk, ``reset`` sends a TCP RST."""

    how: CutHow
    fault: str = "cut"
    #: Extra detail for the frame log (e.g. ``{"after_event": 6}``).
    detail: dict[str, object] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class Respond:
    """HTTP stage: answer the client with this instead of forwarding."""

    status: int
    headers: dict[str, str]
    body: bytes


Action = Send | Sleep | Cut
#: What the HTTP stage (before the upstream answers) may ask for.
HttpAction = Respond | Sleep | Cut
