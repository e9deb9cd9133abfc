"""Actions: what the core asks the I/O shell to do. The core never does it itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from chaosproxy.core.events import Event
from chaosproxy.core.records import CutHow


# Not frozen, for the cost of construction (one Send per event; see Frame);
# immutable by convention. An ``__init__`` of our own, compiled (see Frame).
@dataclass(slots=True, unsafe_hash=True, init=False)
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

    def __init__(
        self,
        data: bytes,
        events: tuple[Event, ...] = (),
        ends: int = 0,
        faults: tuple[str, ...] = (),
    ) -> None:
        self.data = data
        self.events = events
        self.ends = ends
        self.faults = faults


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


@dataclass(frozen=True, slots=True)
class HoldRequest:
    """Request direction: read nothing of the request body for ``seconds`` (the
    client's upload stalls once the socket buffers are full), then go on."""

    seconds: float
    fault: str = "request_delay"


@dataclass(frozen=True, slots=True)
class CutRequest:
    """Request direction: read ``after_bytes`` of the request body, then end the
    connection (``close``: a FIN; ``reset``: a TCP RST) with no response; the upstream
    never sees the request."""

    how: Literal["close", "reset"]
    after_bytes: int = 0
    fault: str = "request_cut"


Action = Send | Sleep | Cut
#: What the request direction (while the request body arrives) may ask for.
RequestAction = HoldRequest | CutRequest
#: What the HTTP stage (before the upstream answers) may ask for.
HttpAction = Respond | Sleep | Cut | RequestAction
