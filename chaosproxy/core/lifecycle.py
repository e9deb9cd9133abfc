"""A request's lifecycle: its phases, the events that move it, and its one outcome.

The states and the events that move between them are one table, :data:`TRANSITIONS`
(as h11 keeps all connection state in ``_state.py``); the outcome each ending event
sets is another, :data:`OUTCOMES`. A :class:`Lifecycle` is the only thing that changes
a phase. An event the table does not allow in the current phase raises
:class:`SessionError`: that is a bug in the shell, never something a peer can cause.
The outcome is set exactly once, by the transition into ``ENDED``; later reports (a
client that leaves after its stream was cut) find no change to make::

    START ─start─► HTTP ─head / respond─► BODY ─finish─► ENDED (completed)
      │             │                       │
      refuse        unavailable, cut,       cut, upstream_failed,
      │             request_cut,            hold_timeout
      │             hold_timeout            │
      ▼             ▼                       ▼
    ENDED         ENDED                   ENDED
    (and from any phase but ENDED: client_gone, shutdown, internal_error)

The events are a :class:`SessionEvent` each (a typo is an AttributeError where it is
written, and mypy finds it); they are strings too, so a log or a test may name them.
"""

from __future__ import annotations

import enum

from chaosproxy.core.records import Outcome


class Phase(enum.Enum):
    #: Created: nothing decided yet.
    START = "start"
    #: The scenario's HTTP faults run; the upstream has not answered.
    HTTP = "http"
    #: The response head is decided (and being sent); the body flows.
    BODY = "body"
    #: The outcome is set; only the bytes of a salvage or an error answer may follow.
    ENDED = "ended"


class SessionEvent(enum.StrEnum):
    """What the shell reports about a request (each a method of the session)."""

    #: The request goes ahead (its scenario's HTTP stage runs).
    START = "start"
    #: The request cannot be served (an unknown scenario, a bad seed).
    REFUSE = "refuse"
    #: A fault answers instead of the upstream (``status``).
    RESPOND = "respond"
    #: The upstream's head arrived.
    HEAD = "head"
    #: The upstream could not be reached, or failed before its head.
    UNAVAILABLE = "unavailable"
    #: A fault cuts the response.
    CUT = "cut"
    #: A fault ends the connection while the request body is still arriving.
    REQUEST_CUT = "request_cut"
    #: A fault's hold (a stall, a hang, a delay) outlasted the hold timeout.
    HOLD_TIMEOUT = "hold_timeout"
    #: The upstream broke mid-body.
    UPSTREAM_FAILED = "upstream_failed"
    #: The response ended cleanly.
    FINISH = "finish"
    #: The client left.
    CLIENT_GONE = "client_gone"
    #: The proxy is stopping.
    SHUTDOWN = "shutdown"
    #: A bug of ours.
    INTERNAL_ERROR = "internal_error"


_E = SessionEvent

#: (phase, event) → next phase. Anything absent is illegal.
TRANSITIONS: dict[tuple[Phase, SessionEvent], Phase] = {
    (Phase.START, _E.START): Phase.HTTP,
    (Phase.START, _E.REFUSE): Phase.ENDED,
    (Phase.HTTP, _E.RESPOND): Phase.BODY,
    (Phase.HTTP, _E.HEAD): Phase.BODY,
    (Phase.HTTP, _E.UNAVAILABLE): Phase.ENDED,
    (Phase.HTTP, _E.CUT): Phase.ENDED,
    # A request_cut: the connection ends while the request body is still arriving.
    (Phase.HTTP, _E.REQUEST_CUT): Phase.ENDED,
    (Phase.HTTP, _E.HOLD_TIMEOUT): Phase.ENDED,
    (Phase.BODY, _E.CUT): Phase.ENDED,
    (Phase.BODY, _E.HOLD_TIMEOUT): Phase.ENDED,
    (Phase.BODY, _E.UPSTREAM_FAILED): Phase.ENDED,
    (Phase.BODY, _E.FINISH): Phase.ENDED,
    # Reports that can race with any other end: the first end wins, later ones are
    # no-ops (a client leaving a stream that was already cut is still a cut).
    **{(phase, event): Phase.ENDED for phase in Phase for event in (_E.CLIENT_GONE, _E.SHUTDOWN)},
    **{(phase, _E.INTERNAL_ERROR): Phase.ENDED for phase in Phase},
}

#: The outcome each ending event sets.
OUTCOMES: dict[SessionEvent, Outcome] = {
    _E.REFUSE: "proxy_error",
    _E.UNAVAILABLE: "upstream_error",
    _E.CUT: "cut",
    _E.REQUEST_CUT: "cut",
    # A fault's hold (a stall, a hang, a delay) outlasted the hold timeout: it ends as
    # a cut (the response aborted), with the reason.
    _E.HOLD_TIMEOUT: "cut",
    _E.UPSTREAM_FAILED: "upstream_error",
    _E.FINISH: "completed",
    _E.CLIENT_GONE: "client_gone",
    _E.SHUTDOWN: "shutdown",
    _E.INTERNAL_ERROR: "proxy_error",
}

#: The one outcome no session sets: a worker of ``serve --workers N`` died with the
#: request in flight, and its supervisor wrote the request's ``response_end``
#: (:func:`chaosproxy.core.summary.worker_lost_end`; docs/operations.md, Workers).
WORKER_LOST: Outcome = "worker_lost"


class SessionError(Exception):
    """The shell reported an event the current phase does not allow (a bug)."""


class Lifecycle:
    """One request's phase and outcome, moved only by :data:`TRANSITIONS`."""

    __slots__ = ("outcome", "phase")

    def __init__(self) -> None:
        self.phase = Phase.START
        self.outcome: Outcome | None = None

    def move(self, event: SessionEvent) -> bool:
        """Take the transition for ``event``; True when it set the outcome (the
        request ended now), False when it did not end it or it had ended before."""
        phase = self.phase
        try:
            target = TRANSITIONS[(phase, event)]
        except KeyError:
            raise SessionError(f"{event} is not allowed in phase {phase.name}") from None
        if phase is Phase.ENDED:
            return False  # already ended: the first end stands
        self.phase = target
        if target is Phase.ENDED:
            self.outcome = OUTCOMES[event]
            return True
        return False

    @property
    def ended(self) -> bool:
        return self.phase is Phase.ENDED


__all__ = [
    "OUTCOMES",
    "TRANSITIONS",
    "WORKER_LOST",
    "Lifecycle",
    "Phase",
    "SessionError",
    "SessionEvent",
]
