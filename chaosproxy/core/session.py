"""One request's lifecycle, decided in one place.

The I/O shell (:mod:`chaosproxy.server.exchange`) tells a :class:`Session` what happened — the
request cannot be served, the upstream's head arrived, a read of its body, its end or
failure, the client left, the proxy is stopping, a bug of ours — and carries out what
the session returns. Everything that decides what happens to one request lives here:
the faults of its scenario, the HTTP stage, the response head (headers, framing and
provider, decided once), the body pipeline, the outcome and the ``response_end``
summary. Time is data: every call that needs it takes ``now`` (seconds, monotonic).

The states and the events that move between them are one table, :data:`TRANSITIONS`
(as h11 keeps all connection state in ``_state.py``). An event the table does not
allow in the current phase raises :class:`SessionError`: that is a bug in the shell,
never something a peer can cause. The outcome is set exactly once, by the transition
into ``ENDED``; later reports (a client that leaves after its stream was cut) find no
change to make::

    START ─start─► HTTP ─head / respond─► BODY ─finish─► ENDED (completed)
      │             │                       │
      refuse        unavailable, cut,       cut, upstream_failed,
      │             request_cut,            hold_timeout
      │             hold_timeout            │
      ▼             ▼                       ▼
    ENDED         ENDED                   ENDED
    (and from any phase but ENDED: client_gone, shutdown, internal_error)
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson

from chaosproxy.core.actions import Action, Cut, CutRequest, HoldRequest, HttpAction, Respond, Send
from chaosproxy.core.answer import AnswerState, Ledger
from chaosproxy.core.events import Event
from chaosproxy.core.faults import Fault, FaultConfig, build_faults
from chaosproxy.core.frames import Format, Frame, format_for_content_type
from chaosproxy.core.framing import DEFAULT_MAX_SIZE
from chaosproxy.core.integrity import Envelope, Integrity, StreamContent, Violation
from chaosproxy.core.pipeline import Pipeline, fault_summary
from chaosproxy.core.providers import (
    Profile,
    choose_profile,
    get_profile,
    provider_for_event,
)
from chaosproxy.core.recent import RecentStreams, StreamRecord
from chaosproxy.core.tenancy import ANONYMOUS

Outcome = Literal["completed", "cut", "client_gone", "upstream_error", "shutdown", "proxy_error"]

RAW_SKIP_REASON = "the response is not sse or ndjson, so it has no events"

#: Hop-by-hop headers (RFC 9110 §7.6.1): never forwarded in either direction.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: Request headers the proxy sets itself (or that describe the client's hop only).
REQUEST_DROP = HOP_BY_HOP | {"host", "accept-encoding", "content-length"}
#: Response headers recomputed for the client (a framed body changes its length).
RESPONSE_DROP = HOP_BY_HOP | {"content-length"}

Headers = Sequence[tuple[str, str]]


class ScenarioLike(Protocol):
    """What a session needs of a scenario (:class:`chaosproxy.scenario.Scenario`)."""

    @property
    def name(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def faults(self) -> Sequence[tuple[str, FaultConfig]]: ...
    @property
    def envelope(self) -> EnvelopeLike | None:
        """JSON pointers to an application envelope (the contract monitor checks it)."""
        ...


class EnvelopeLike(Protocol):
    """A scenario's ``envelope:`` (:class:`chaosproxy.scenario.model.EnvelopeRule`)."""

    @property
    def stream(self) -> str | None: ...
    @property
    def sequence(self) -> str | None: ...


class Phase(enum.Enum):
    #: Created: nothing decided yet.
    START = "start"
    #: The scenario's HTTP faults run; the upstream has not answered.
    HTTP = "http"
    #: The response head is decided (and being sent); the body flows.
    BODY = "body"
    #: The outcome is set; only the bytes of a salvage or an error answer may follow.
    ENDED = "ended"


#: Faults that change only how and when the bytes arrive, never which events: a correct
#: client sees the same stream through them (a hold for ever is judged apart: ``hold``).
#: And the content faults that cut the same content into other valid events of the
#: provider's format (``resegment``, ``split_tool_args``, ``interleave_tool_calls``): a
#: provider may send any of those streams, so a client that raises on one raised on a
#: clean answer (``snapshot`` changes what the events mean: it is not here).
BENIGN = frozenset(
    {
        "bom",
        "coalesce",
        "comment",
        "compress",
        "delay",
        "hang",
        "ids",
        "interleave_tool_calls",
        "line_endings",
        "rechunk",
        "resegment",
        "split_tool_args",
        "stall",
        "throttle",
    }
)


def _in_group(ev: Event, ordinal: int) -> bool:
    """Whether ``ev`` was sent in a group (a content fault's merge or interleaving)
    that holds upstream event ``ordinal`` too: no gap or disorder between them."""
    group = ev.group
    return group is not None and group[0] <= ordinal <= group[1]


#: Phases in which nothing may be written to the client (a tuple: cheaper to search
#: than a set of enum members, whose hash is a Python call).
_NO_WRITES = (Phase.START, Phase.HTTP)


class SessionError(Exception):
    """The shell reported an event the current phase does not allow (a bug)."""


#: (phase, event) → next phase. Anything absent is illegal.
TRANSITIONS: dict[tuple[Phase, str], Phase] = {
    (Phase.START, "start"): Phase.HTTP,
    (Phase.START, "refuse"): Phase.ENDED,
    (Phase.HTTP, "respond"): Phase.BODY,
    (Phase.HTTP, "head"): Phase.BODY,
    (Phase.HTTP, "unavailable"): Phase.ENDED,
    (Phase.HTTP, "cut"): Phase.ENDED,
    # A request_cut: the connection ends while the request body is still arriving.
    (Phase.HTTP, "request_cut"): Phase.ENDED,
    (Phase.HTTP, "hold_timeout"): Phase.ENDED,
    (Phase.BODY, "cut"): Phase.ENDED,
    (Phase.BODY, "hold_timeout"): Phase.ENDED,
    (Phase.BODY, "upstream_failed"): Phase.ENDED,
    (Phase.BODY, "finish"): Phase.ENDED,
    # Reports that can race with any other end: the first end wins, later ones are
    # no-ops (a client leaving a stream that was already cut is still a cut).
    **{(phase, event): Phase.ENDED for phase in Phase for event in ("client_gone", "shutdown")},
    **{(phase, "internal_error"): Phase.ENDED for phase in Phase},
}

#: The outcome each ending event sets.
OUTCOMES: dict[str, Outcome] = {
    "refuse": "proxy_error",
    "unavailable": "upstream_error",
    "cut": "cut",
    "request_cut": "cut",
    # A fault's hold (a stall, a hang, a delay) outlasted the hold timeout: it ends as
    # a cut (the response aborted), with the reason.
    "hold_timeout": "cut",
    "upstream_failed": "upstream_error",
    "finish": "completed",
    "client_gone": "client_gone",
    "shutdown": "shutdown",
    "internal_error": "proxy_error",
}


@dataclass(frozen=True, slots=True)
class Head:
    """The response head to send: decided once, by :meth:`Session.response_head`."""

    status: int
    reason: str | None
    headers: list[tuple[str, str]]
    #: Whether the body goes through the fault pipeline (else each read as it is).
    framed: bool


def forwarded_request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The request headers sent upstream: without hop-by-hop headers (and those the
    client's ``Connection`` names), ``X-Chaos-*``, ``Host`` and ``Content-Length``;
    ``Accept-Encoding: identity``, so the body can be framed."""
    items = list(headers)
    named = {
        token.strip().lower()
        for name, value in items
        if name.lower() == "connection"
        for token in value.split(",")
    }
    out = [
        (name, value)
        for name, value in items
        if (lower := name.lower()) not in REQUEST_DROP
        and lower not in named
        and not lower.startswith("x-chaos-")
    ]
    out.append(("Accept-Encoding", "identity"))
    return out


def error_answer(status: int, message: str, headers: Iterable[tuple[str, str]] = ()) -> Respond:
    """An answer the proxy gives itself: a JSON error body, the reason also in
    ``X-Chaos-Proxy-Error``, plus ``headers``."""
    body = orjson.dumps({"error": {"type": "chaosproxy_error", "message": message}})
    out = {
        "Content-Type": "application/json; charset=utf-8",
        "X-Chaos-Proxy-Error": message.encode("ascii", "replace").decode()[:200],
    }
    out.update(headers)
    return Respond(status, out, body)


class Session:
    """One request through the proxy; see the module docstring."""

    def __init__(
        self,
        request_id: str,
        *,
        scenario: ScenarioLike | None,
        seed: int,
        path: str,
        active: bool = True,
        label: str | None = None,
        provider: str | None = None,
        max_event_size: int = DEFAULT_MAX_SIZE,
        streams: RecentStreams | None = None,
        tenant: str = ANONYMOUS,
        envelope: Envelope | None = None,
    ) -> None:
        """``scenario`` is the one chosen (None: passthrough); ``active`` False when
        its ``requests:`` leave this request alone (forwarded untouched, but
        reported under the scenario's name). ``path`` is the path and query that
        will be forwarded; ``label`` the name reported when there is no scenario
        (the name a refused request asked for); ``provider`` overrides the
        scenario's (``chaosproxy simulate --provider``); ``streams`` the proxy's
        recent framed streams, which a framed body joins (and ``splice`` reads);
        ``tenant`` whose the request is (its stream joins them as that tenant's);
        ``envelope`` the one ``--envelope`` names (a scenario's own ``envelope:``
        wins)."""
        self.request_id = request_id
        self.seed = seed
        self.path = path
        self.scenario = scenario
        self._run = scenario if (scenario is not None and active) else None
        #: The scenario the body is framed under: every request that chose one, active
        #: or not (an inactive one is framed and checked, but no fault applies).
        self._framing = scenario
        self.label = scenario.name if scenario is not None else (label or "none")
        self._provider_override = provider
        self._max_event_size = max_event_size
        self._streams = streams
        self.tenant = tenant
        self._record: StreamRecord | None = None
        self.phase = Phase.START
        self.outcome: Outcome | None = None
        self.error: str | None = None
        #: Why the upstream failed, in a few words (``upstream_error``), or which limit
        #: ended a fault's hold (``cut``: ``hold timeout``).
        self.reason: str | None = None
        self.faults: list[Fault] = []
        self.pipeline: Pipeline | None = None
        #: The response head, once decided.
        self.head: Head | None = None
        #: Faults left out because the body has no events to act on.
        self._unframed: list[Fault] = []
        self._provider: str | None = None
        self._envelope = envelope
        #: Both sides of a framed body (what the upstream sent, what the client was
        #: sent): their content and contract checks. None when the body is not framed.
        self.content: StreamContent | None = None
        self._cut_how: str | None = None
        #: ``request`` when a request_cut ended it (the summary's ``stage``).
        self._cut_stage: str | None = None
        self._upstream_ended = False
        #: The generation this response belongs to when it is one connection of an
        #: answer kept under ``resume:`` (else the response is its own generation).
        self._ledger: Ledger | None = None
        self._ledger_added = False
        #: The first thing sent to the client that a correct client may object to: a
        #: fault that changes events or headers, a gap or a step back in the events, a
        #: hold for ever before the terminal event (None: only chunking and timing).
        self._defect: str | None = None
        #: The highest upstream ordinal written whole so far, and the events whose
        #: first bytes were written but not their last, in order.
        self._high = 0
        self._open: dict[int, Event] = {}
        # What the client was sent, for the summary.
        self.status = 0
        self.content_type: str | None = None
        self.content_encoding: str | None = None
        self.frames = 0
        self.bytes = 0
        self._started: float | None = None
        self._last_write: float | None = None
        self._ttfb_ms: float | None = None
        self._max_gap_ms = 0.0

    # ------------------------------------------------------------------ state

    def _move(self, event: str) -> bool:
        """Take the transition for ``event``; True when it set the outcome."""
        try:
            target = TRANSITIONS[(self.phase, event)]
        except KeyError:
            raise SessionError(f"{event} is not allowed in phase {self.phase.name}") from None
        if self.phase is Phase.ENDED:
            return False  # already ended: the first end stands
        self.phase = target
        if target is Phase.ENDED:
            self.outcome = OUTCOMES[event]
            if self._record is not None and self._streams is not None:
                self._streams.close(self._record)
            return True
        return False

    @property
    def ended(self) -> bool:
        return self.phase is Phase.ENDED

    @property
    def framed(self) -> bool:
        return self.pipeline is not None

    @property
    def batchable(self) -> bool:
        """Whether the sends of one upstream read may leave together (one write to the
        socket, each its own chunk and frame line): no fault shapes the writes
        themselves (a transport fault decides their sizes and their times)."""
        pipeline = self.pipeline
        return pipeline is None or not pipeline.shapes_writes

    def chaos_headers(self) -> list[tuple[str, str]]:
        """``X-Chaos-*`` headers on every response, so a test finds its request."""
        return [
            ("X-Chaos-Request-Id", self.request_id),
            ("X-Chaos-Scenario", self.label),
            ("X-Chaos-Seed", str(self.seed)),
        ]

    # ------------------------------------------------------------------ before the head

    def start(self, now: float) -> list[HttpAction]:
        """The request is going ahead: the HTTP stage's actions, in order, empty to
        forward at once: first those on the request as its body arrives (a held body, a
        cut upload: :class:`HoldRequest`, :class:`CutRequest`), then the rest (a held
        header, a canned answer, a cut before any byte)."""
        self._move("start")
        self._started = now
        if self._run is None:
            return []
        self.faults = build_faults(
            self._run.faults,
            self.seed,
            "raw",
            get_profile("generic"),
            streams=self._streams,
            request_id=self.request_id,
            tenant=self.tenant,
        )
        actions: list[HttpAction] = []
        for fault in self.faults:
            for request_action in fault.before_request():
                actions.append(request_action)
                if isinstance(request_action, CutRequest):
                    return actions  # the request ends there: no other fault runs
        for fault in self.faults:
            for action in fault.before_upstream():
                actions.append(action)
                if isinstance(action, Respond | Cut):
                    return actions  # nothing after a canned answer or a cut happens
        return actions

    def refuse(self, status: int, message: str, now: float) -> Respond:
        """The request cannot be served (an unknown scenario, a bad seed)."""
        self._started = now
        self._move("refuse")
        return self._error_answer(status, message)

    def unavailable(self, status: int, message: str, reason: str | None = None) -> Respond:
        """The upstream could not be reached or failed before its head (502, 504);
        ``reason`` says why in a few words (``head timeout``, ``unreachable``...)."""
        self._move("unavailable")
        self.reason = reason
        return self._error_answer(status, message)

    def _error_answer(self, status: int, message: str) -> Respond:
        self.status = status
        self.error = message
        respond = error_answer(status, message, self.chaos_headers())
        self.content_type = respond.headers["Content-Type"]
        return respond

    def respond(self, answer: Respond) -> Head:
        """The head of a canned answer (the ``status`` fault) about to be sent."""
        self._move("respond")
        headers = [*answer.headers.items(), *self.chaos_headers()]
        headers.append(("Content-Length", str(len(answer.body))))
        return self._decided(Head(answer.status, None, headers, framed=False))

    def response_head(self, status: int, reason: str | None, headers: Headers) -> Head:
        """The upstream's head arrived: decide the client's head and, under an active
        scenario, the body's framing, provider and pipeline (once, here)."""
        self._move("head")
        out = [(k, v) for k, v in headers if k.lower() not in RESPONSE_DROP]
        if self._framing is None:
            length = [(k, v) for k, v in headers if k.lower() == "content-length"]
            out += length[:1]  # passthrough keeps the upstream's length
        else:
            self._begin_body(headers)
            out = self._edit_headers(status, out)
        out += self.chaos_headers()
        return self._decided(Head(status, reason, out, framed=self._framing is not None))

    def _decided(self, head: Head) -> Head:
        self.head = head
        self.status = head.status
        for name, value in head.headers:
            lower = name.lower()
            if lower == "content-type" and self.content_type is None:
                self.content_type = value
            elif lower == "content-encoding" and self.content_encoding is None:
                self.content_encoding = value
        return head

    def _edit_headers(self, status: int, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        editors = [f for f in self.faults if f.edits_headers]
        if not editors:
            return headers
        self._flaw(editors[0].name)
        plain = dict(headers)  # (a dict loses repeated headers: only when a fault edits)
        for fault in editors:
            plain = fault.response_headers(status, plain)
        return list(plain.items())

    def _begin_body(self, headers: Headers) -> None:
        scenario = self._framing
        assert scenario is not None
        lookup = {k.lower(): v for k, v in headers}
        encoded = lookup.get("content-encoding", "identity").lower() != "identity"
        fmt: Format = "raw" if encoded else format_for_content_type(lookup.get("content-type"))
        if scenario.format != "auto":
            fmt = scenario.format  # type: ignore[assignment]
        chosen = choose_profile(self._provider_override or scenario.provider, self.path)
        detect: Callable[[Frame], Profile] | None = None
        if chosen is None:
            profile = get_profile("generic")

            def detect(frame: Frame) -> Profile:
                return get_profile(provider_for_event(frame))

        else:
            profile = chosen
            self._provider = chosen.name
        active = []
        for fault in self.faults:
            if fmt == "raw" and fault.needs_framing(fault.config):
                self._unframed.append(fault)
            else:
                active.append(fault)
        if fmt != "raw" and self._streams is not None:
            self._record = self._streams.open(self.request_id, fmt, self.tenant)
        self.pipeline = Pipeline(
            active,
            fmt,
            profile,
            detect_profile=detect,
            max_size=self._max_event_size,
            record=self._record.record if self._record is not None else None,
        )
        if fmt != "raw":
            rule = scenario.envelope
            envelope = Envelope(rule.stream, rule.sequence) if rule else self._envelope
            self.content = StreamContent(self.pipeline.stream, fmt, envelope=envelope)
            self.pipeline.watch(self.content.upstream_event)

    # ------------------------------------------------------------------ the body

    def _pipeline(self) -> Pipeline | None:
        if self.phase is not Phase.BODY:
            raise SessionError(f"body data is not allowed in phase {self.phase.name}")
        return self.pipeline

    def feed(self, data: bytes, now: float) -> list[Action]:
        """One upstream read; the actions to carry out for it, in order. May raise
        :class:`~chaosproxy.core.framing.FramingError` (report it as
        :meth:`upstream_failed` without salvage)."""
        pipeline = self._pipeline()
        if pipeline is None:
            return [Send(data)]
        return pipeline.feed(data, now)

    def deadline(self) -> float | None:
        """When :meth:`poll` wants calling without new input (a coalesce window)."""
        pipeline = self.pipeline
        return None if pipeline is None or self.ended else pipeline.deadline()

    def poll(self, now: float) -> list[Action]:
        pipeline = self._pipeline()
        return [] if pipeline is None else pipeline.poll(now)

    def body_end(self, now: float) -> list[Action]:
        """The upstream body ended cleanly: what the faults still hold. Once they
        are carried out, report :meth:`finish` (or :meth:`cut` for a Cut)."""
        pipeline = self._pipeline()
        if pipeline is None:
            return []
        self._upstream_ended = True
        return pipeline.end(now)

    def finish(self) -> None:
        """The response ended cleanly: the last byte was handed to the client."""
        self._move("finish")

    def upstream_failed(
        self, message: str, now: float, *, reason: str | None = None, salvage: bool = True
    ) -> list[Send]:
        """The upstream broke mid-body (or broke its framing; ``reason`` says how in a
        few words). Returns what did arrive of an unfinished event, to send before the
        connection is aborted (never a clean end): as passthrough would have sent it."""
        pipeline = self.pipeline
        if not self._move("upstream_failed"):
            return []
        self.error = message
        self.reason = reason
        self._upstream_ended = True
        if not salvage or pipeline is None:
            return []
        return [a for a in pipeline.salvage(now) if isinstance(a, Send)]

    def cut(self, cut: Cut) -> dict[str, Any]:
        """A Cut is being carried out; the fields of its ``action`` log line."""
        if self._move("cut"):
            self._cut_how = cut.how
        return {"action": "cut", "how": cut.how, "fault": cut.fault, **cut.detail}

    def request_cut(self, cut: CutRequest, received: int) -> dict[str, Any]:
        """A CutRequest is being carried out, ``received`` bytes of the request body read;
        the fields of its ``action`` log line."""
        if self._move("request_cut"):
            self._cut_how = cut.how
            self._cut_stage = "request"
        return {
            "action": "request_cut",
            "how": cut.how,
            "fault": cut.fault,
            "after_bytes": cut.after_bytes,
            "received": received,
        }

    def request_held(self, hold: HoldRequest) -> dict[str, Any]:
        """A HoldRequest was carried out; the fields of its ``action`` log line."""
        return {"action": "request_delay", "seconds": hold.seconds, "fault": hold.fault}

    # ------------------------------------------------------------------ answers

    def join(self, ledger: Ledger) -> None:
        """This response is one connection of a kept generation (``resume:``): what it
        sends is added to ``ledger`` when it ends, and its summary's ``answer`` is the
        generation's. Call before the body starts (or for an answer the proxy makes
        itself about the generation, such as a 204)."""
        self._ledger = ledger

    def hold(self, seconds: float) -> None:
        """The shell is about to hold the response for ``seconds`` (``math.inf``: a
        stall for ever, a hang) with nothing sent."""
        content = self.content
        if math.isinf(seconds) and content is not None and not content.sent.terminals:
            self._flaw("held open for ever before the terminal event")

    def _ended(self, ev: Event) -> None:
        """An upstream event's last byte was written: upstream ordinals must follow one
        another (0: not an upstream event: a comment, a made-up event), except inside a
        group a content fault sent as one (a merge, interleaved calls, the pieces of
        one event), where they may come in any order."""
        ordinal = ev.ordinal
        if ordinal:
            high = self._high
            if ordinal == high + 1:
                self._high = ordinal
            elif ordinal > high:
                if not _in_group(ev, high + 1):
                    self._flaw("a gap in the events")
                self._high = ordinal
            elif not _in_group(ev, high):
                self._flaw("events out of order")

    def _flaw(self, what: str) -> None:
        if self._defect is None:
            self._defect = what

    def answer(self) -> AnswerState | None:
        """The answer this response belongs to, as it stands (None when the body is
        not framed and the response belongs to no kept generation). Once ended, its
        sent events are part of it."""
        content = self.content
        ledger = self._ledger
        if ledger is None:
            if content is None:
                return None
            ledger = Ledger(self.request_id, clean=content.upstream.trail)
            ledger.add_sent(content.sent.trail)
            return ledger.state()
        if self.ended and not self._ledger_added and content is not None:
            self._ledger_added = True
            ledger.add_sent(content.sent.trail)
        return ledger.state()

    def _answer_fields(self, state: AnswerState) -> dict[str, Any]:
        """The ``answer`` object of the summary (only once ended)."""
        defect = self._defect
        if defect is None and self.content is not None:
            for violation in self.content.sent.violations:
                if violation.rule != "terminal_missing":  # (said by the end, below)
                    defect = f"contract: {violation.rule}"
                    break
        if defect is None and self.outcome != "client_gone" and not state.sent.terminal:
            # The proxy or the upstream ended it before the answer was whole.
            if self.content is None:
                defect = f"answered {self.status} before the answer was whole"
            elif self.outcome == "completed":
                defect = "ended without a terminal event"
            elif self.outcome == "cut":
                defect = f"cut ({self._cut_how})"
            else:
                defect = str(self.outcome)
        return state.fields(sound=defect is None, defect=defect)

    def hold_timeout(self, fault: str, limit: float) -> dict[str, Any]:
        """A fault's hold (a ``Sleep``: ``stall``, ``hang``, ``delay``) has held the
        response ``limit`` seconds with nothing sent, the longest allowed: the response
        is aborted (never a clean end). The fields of its ``action`` log line."""
        before_head = self.head is None
        if self._move("hold_timeout"):
            self._cut_how = "abort"
            self.reason = "hold timeout"
            who = f"the {fault} fault" if fault else "a fault"
            self.error = f"{who} held the response {limit:g} s with nothing sent"
        fields: dict[str, Any] = {"action": "cut", "how": "abort", "fault": fault}
        if before_head:  # nothing of the response went out (as cut: {before: headers})
            fields["before"] = "headers"
        return {**fields, "reason": "hold timeout"}

    # ------------------------------------------------------------------ any time

    def client_gone(self) -> None:
        """The client left (its connection closed or a write to it failed)."""
        self._move("client_gone")

    def shutdown(self) -> None:
        """The proxy is stopping and ends this response."""
        self._move("shutdown")

    def internal_error(self, message: str) -> bool:
        """A bug of ours. Returns True when the head was already sent (the shell
        can only end uncleanly then), False when a 500 can still be answered."""
        head_sent = self.head is not None
        if self._move("internal_error"):
            self.error = message
            if not head_sent:
                self.status = 500
        return head_sent

    def error_answer(self) -> Respond:
        """The 500 for :meth:`internal_error` before the head."""
        if self.outcome != "proxy_error" or self.error is None or self.head is not None:
            raise SessionError("error_answer() is only for an internal error")
        return self._error_answer(500, self.error)

    # ------------------------------------------------------------------ accounting

    def wrote(self, send: Send, now: float) -> dict[str, Any]:
        """One write to the client is about to happen: account for it, and return
        the fields of its ``frame`` log line."""
        if self.phase in _NO_WRITES:
            raise SessionError(f"a write is not allowed in phase {self.phase.name}")
        size = len(send.data)
        started = self._started
        t_ms = 0.0 if started is None else (now - started) * 1000.0
        last = self._last_write
        if last is None:
            self._ttfb_ms = round(t_ms, 3)
        else:
            gap = (now - last) * 1000.0
            if gap > self._max_gap_ms:
                self._max_gap_ms = gap
        self._last_write = now
        line: dict[str, Any] = {
            "seq": self.frames,
            "offset": self.bytes,
            "size": size,
            "t_ms": round(t_ms, 3),
        }
        events = send.events
        if self.pipeline is not None and events:
            if send.faults and self._defect is None:
                for name in send.faults:
                    if name not in BENIGN:
                        self._flaw(name)
                        break
            if send.ends == 1 and len(events) == 1 and not self._open:
                self._ended(events[0])  # the usual write: one whole event
            else:
                # Events are judged in the order they end: a write may carry pieces of
                # events that ended before it or end after it (coalesce, rechunk).
                opened = self._open
                for ev in events:
                    key = id(ev)  # (by identity: a duplicate is an event of its own)
                    if key not in opened:
                        opened[key] = ev
                for _ in range(send.ends):
                    if opened:
                        self._ended(opened.pop(next(iter(opened))))
            if self.content is not None:
                self.content.wrote(send)
            if len(events) == 1:  # the usual case: no comprehension frames per write
                line["events"] = [events[0].ordinal]
                line["kinds"] = sorted(events[0].kinds)
            else:
                line["events"] = [e.ordinal for e in events]
                line["kinds"] = sorted({k for e in events for k in e.kinds})
            line["faults"] = list(send.faults)
            if "splice" in send.faults:
                sources = list(dict.fromkeys(e.splice_from for e in send.events if e.splice_from))
                if sources:
                    line["splice_from"] = sources[0] if len(sources) == 1 else sources
        self.frames += 1
        self.bytes += size
        return line

    def _ms_since_start(self, now: float) -> float:
        return 0.0 if self._started is None else (now - self._started) * 1000.0

    def summary(self, now: float) -> dict[str, Any]:
        """The fields of the ``response_end`` line (only once ended)."""
        if not self.ended:
            raise SessionError(f"summary() before the end (phase {self.phase.name})")
        line: dict[str, Any] = {
            "outcome": self.outcome,
            "status": self.status,
            "bytes": self.bytes,
            "frames": self.frames,
        }
        if self.content_type:
            line["content_type"] = self.content_type
        if self.content_encoding:
            line["content_encoding"] = self.content_encoding
        pipeline = self.pipeline
        if self._run is not None or pipeline is not None:
            line["provider"] = self.provider
            line["format"] = self.format
            if pipeline is not None:
                line["events_in"] = pipeline.events_in
                # Events the client was sent whole (a cut's unsent event is not).
                sent = self.content.sent.events if self.content is not None else None
                line["events_out"] = pipeline.events_out if sent is None else sent
        if self._run is not None:
            applied, skipped = fault_summary(
                pipeline.faults if pipeline is not None else self.faults
            )
            skipped += [
                {"fault": f.name, "position": f.ctx.position, "reason": RAW_SKIP_REASON}
                for f in self._unframed
            ]
            line["faults_applied"] = applied
            line["faults_skipped"] = skipped
        line["ttfb_ms"] = self._ttfb_ms
        line["max_gap_ms"] = round(self._max_gap_ms, 3)
        line["duration_ms"] = round(self._ms_since_start(now), 3)
        content = self.content
        if content is not None:
            line["integrity"] = self.integrity
            line["content_integrity"] = content.content_integrity()
            line["text_sha256"] = {
                "upstream": content.upstream.text_sha256,
                "sent": content.sent.text_sha256,
            }
        state = self.answer()
        if state is not None:
            line["answer"] = self._answer_fields(state)
        if self.error:
            line["error"] = self.error
        if self._cut_stage is not None:
            line["stage"] = self._cut_stage
        if self.outcome == "upstream_error":
            # Before the head (unreachable, timed out, broken) or mid-body.
            line["stage"] = "body" if self.head is not None else "connect"
            if self.reason is not None:
                line["reason"] = self.reason
        elif self.outcome == "cut" and self.reason is not None:
            line["reason"] = self.reason  # a limit ended a fault's hold
        return line

    @property
    def integrity(self) -> Integrity | None:
        """The framed body's integrity once ended (None before, or when not framed):
        ``broken`` when the connection did not end cleanly (every outcome but
        ``completed`` and a ``cut`` with ``how: close``), else as the content says."""
        content = self.content
        if content is None or not self.ended:
            return None
        clean = self.outcome == "completed" or (self.outcome == "cut" and self._cut_how == "close")
        return content.integrity(clean_end=clean)

    def violations(self) -> list[Violation]:
        """Every breach of the stream contract, upstream side first (only once ended;
        empty when the body is not framed). The sides are closed on the first call:
        ``terminal_missing`` is then known."""
        if not self.ended:
            raise SessionError(f"violations() before the end (phase {self.phase.name})")
        content = self.content
        if content is None:
            return []
        content.close(upstream_ended=self._upstream_ended)
        return content.violations()

    @property
    def provider(self) -> str:
        """The provider profile in use: decided by the scenario or the path, else by
        the first event (``auto`` while none has come)."""
        if self._provider is not None:
            return self._provider
        pipeline = self.pipeline
        if pipeline is not None and not pipeline.detecting:
            return pipeline.profile.name
        return "auto"

    @property
    def format(self) -> Format:
        """The body's framing (``raw`` when it is not framed)."""
        return "raw" if self.pipeline is None else self.pipeline.format


__all__ = [
    "HOP_BY_HOP",
    "TRANSITIONS",
    "Head",
    "Outcome",
    "Phase",
    "Session",
    "SessionError",
    "error_answer",
    "forwarded_request_headers",
]
