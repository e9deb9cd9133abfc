"""One request through the proxy: the facade the I/O shell talks to.

The I/O shell (:mod:`chaosproxy.server.exchange`, :mod:`chaosproxy.server.pump`) tells a
:class:`Session` what happened — the request cannot be served, the upstream's head
arrived, a read of its body, its end or failure, the client left, the proxy is
stopping, a bug of ours — and carries out what the session returns. Time is data: every
call that needs it takes ``now`` (seconds, monotonic). The session is the one entry
point; each job it does lives in a module of its own:

- the lifecycle (:mod:`chaosproxy.core.lifecycle`): the phases, the typed events that
  move them (:class:`SessionEvent`), the :data:`TRANSITIONS` and :data:`OUTCOMES`
  tables, the outcome, set once;
- the response head decision (:mod:`chaosproxy.core.head`): headers both ways, the
  body's framing (the provider is chosen here, from the scenario and the path);
- the body path: the fault :class:`~chaosproxy.core.pipeline.Pipeline` and both sides
  of the stream's content and contract (:class:`~chaosproxy.core.integrity.StreamContent`),
  wired here once the head is decided;
- the log records it builds: a write's ``frame`` fields (:meth:`Session.wrote`) and the
  ``response_end`` summary (:meth:`Session.summary`), typed in
  :mod:`chaosproxy.core.records`.
"""

from __future__ import annotations

import builtins  # (the class has a ``bytes`` property)
import math
from collections.abc import Sequence
from typing import Any, Final, Literal, Protocol

from chaosproxy.core.actions import Action, Cut, CutRequest, HoldRequest, HttpAction, Respond, Send
from chaosproxy.core.answer import AnswerState, Ledger
from chaosproxy.core.body import BENIGN, BodyPath
from chaosproxy.core.faults import Fault, FaultConfig, build_faults
from chaosproxy.core.frames import Format
from chaosproxy.core.framing import DEFAULT_MAX_SIZE
from chaosproxy.core.head import (
    HOP_BY_HOP,
    Head,
    Headers,
    body_format,
    chaos_headers,
    client_headers,
    edit_headers,
    error_answer,
    forwarded_request_headers,
)
from chaosproxy.core.integrity import Envelope, Integrity, StreamContent, Violation
from chaosproxy.core.lifecycle import (
    OUTCOMES,
    TRANSITIONS,
    Lifecycle,
    Phase,
    SessionError,
    SessionEvent,
)
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import (
    choose_profile,
    get_profile,
)
from chaosproxy.core.recent import RecentStreams, StreamRecord
from chaosproxy.core.records import (
    FrameFields,
    Outcome,
    ResponseEnd,
)
from chaosproxy.core.summary import RAW_SKIP_REASON, Tally, response_end, watchdog_end
from chaosproxy.core.tenancy import ANONYMOUS


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


#: Phases in which nothing may be written to the client (a tuple: cheaper to search
#: than a set of enum members, whose hash is a Python call).
_NO_WRITES: Final = (Phase.START, Phase.HTTP)


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
        #: The scenario whose faults apply (None: none, or ``requests:`` leave it out).
        self.run = scenario if (scenario is not None and active) else None
        #: The scenario the body is framed under: every request that chose one, active
        #: or not (an inactive one is framed and checked, but no fault applies).
        self._framing = scenario
        self.label = scenario.name if scenario is not None else (label or "none")
        self._provider_override = provider
        self._max_event_size = max_event_size
        self._streams = streams
        self.tenant = tenant
        self._record: StreamRecord | None = None
        #: Its phase and outcome (moved only by ``_move``).
        self.life = Lifecycle()
        self.error: str | None = None
        #: Why the upstream failed, in a few words (``upstream_error``), or which limit
        #: ended a fault's hold (``cut``: ``hold timeout``).
        self.reason: str | None = None
        self.faults: list[Fault] = []
        #: The framed body's path (None: not framed), and its pipeline and content (both
        #: sides of the stream: their content and contract checks; None when ``raw``).
        self.body: BodyPath | None = None
        self.pipeline: Pipeline | None = None
        self.content: StreamContent | None = None
        #: The response head, once decided.
        self.head: Head | None = None
        self._envelope = envelope
        #: How a cut ended it (``close``, ``abort``, ``reset``).
        self.cut_how: str | None = None
        #: ``request`` when a request_cut ended it (the summary's ``stage``).
        self.cut_stage: Literal["request"] | None = None
        self._upstream_ended = False
        #: The generation this response belongs to when it is one connection of an
        #: answer kept under ``resume:`` (else the response is its own generation).
        self._ledger: Ledger | None = None
        self._ledger_added = False
        # What the client was sent, for the summary.
        self.status = 0
        self.content_type: str | None = None
        self.content_encoding: str | None = None
        self.tally = Tally()

    # ------------------------------------------------------------------ state

    def _move(self, event: SessionEvent) -> bool:
        """Take the transition for ``event``; True when it set the outcome."""
        if not self.life.move(event):
            return False
        if self._record is not None and self._streams is not None:
            self._streams.close(self._record)
        return True

    @property
    def phase(self) -> Phase:
        return self.life.phase

    @property
    def outcome(self) -> Outcome | None:
        return self.life.outcome

    @property
    def frames(self) -> int:
        """Writes to the client so far."""
        return self.tally.frames

    @property
    def bytes(self) -> int:
        """Body bytes written to the client so far."""
        return self.tally.bytes

    @property
    def ended(self) -> bool:
        return self.life.phase is Phase.ENDED

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
        return chaos_headers(self.request_id, self.label, self.seed)

    # ------------------------------------------------------------------ before the head

    def start(self, now: float) -> list[HttpAction]:
        """The request is going ahead: the HTTP stage's actions, in order, empty to
        forward at once: first those on the request as its body arrives (a held body, a
        cut upload: :class:`HoldRequest`, :class:`CutRequest`), then the rest (a held
        header, a canned answer, a cut before any byte)."""
        self._move(SessionEvent.START)
        self.tally.started = now
        if self.run is None:
            return []
        self.faults = build_faults(
            self.run.faults,
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
        self.tally.started = now
        self._move(SessionEvent.REFUSE)
        return self._error_answer(status, message)

    def unavailable(self, status: int, message: str, reason: str | None = None) -> Respond:
        """The upstream could not be reached or failed before its head (502, 504);
        ``reason`` says why in a few words (``head timeout``, ``unreachable``...)."""
        self._move(SessionEvent.UNAVAILABLE)
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
        self._move(SessionEvent.RESPOND)
        headers = [*answer.headers.items(), *self.chaos_headers()]
        headers.append(("Content-Length", str(len(answer.body))))
        return self._decided(Head(answer.status, None, headers, framed=False))

    def response_head(self, status: int, reason: str | None, headers: Headers) -> Head:
        """The upstream's head arrived: decide the client's head and, under an active
        scenario, the body's framing, provider and pipeline (once, here)."""
        self._move(SessionEvent.HEAD)
        framed = self._framing is not None
        out = client_headers(headers, framed)
        if framed:
            self._begin_body(headers)
            out, editor = edit_headers(self.faults, status, out)
            if editor is not None and self.body is not None:
                self.body.flaw(editor)
        out += self.chaos_headers()
        return self._decided(Head(status, reason, out, framed=framed))

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

    def _begin_body(self, headers: Headers) -> None:
        scenario = self._framing
        assert scenario is not None
        fmt = body_format(headers, scenario.format)
        if fmt != "raw" and self._streams is not None:
            self._record = self._streams.open(self.request_id, fmt, self.tenant)
        rule = scenario.envelope
        body = BodyPath(
            self.faults,
            fmt,
            choose_profile(self._provider_override or scenario.provider, self.path),
            max_size=self._max_event_size,
            record=self._record.record if self._record is not None else None,
            envelope=Envelope(rule.stream, rule.sequence) if rule else self._envelope,
        )
        self.body = body
        self.pipeline = body.pipeline
        self.content = body.content

    # ------------------------------------------------------------------ the body

    def _pipeline(self) -> Pipeline | None:
        phase = self.life.phase
        if phase is not Phase.BODY:
            raise SessionError(f"body data is not allowed in phase {phase.name}")
        return self.pipeline

    def feed(self, data: builtins.bytes, now: float) -> list[Action]:
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
        self._move(SessionEvent.FINISH)

    def upstream_failed(
        self, message: str, now: float, *, reason: str | None = None, salvage: bool = True
    ) -> list[Send]:
        """The upstream broke mid-body (or broke its framing; ``reason`` says how in a
        few words). Returns what did arrive of an unfinished event, to send before the
        connection is aborted (never a clean end): as passthrough would have sent it."""
        pipeline = self.pipeline
        if not self._move(SessionEvent.UPSTREAM_FAILED):
            return []
        self.error = message
        self.reason = reason
        self._upstream_ended = True
        if not salvage or pipeline is None:
            return []
        return [a for a in pipeline.salvage(now) if isinstance(a, Send)]

    def cut(self, cut: Cut) -> dict[str, Any]:
        """A Cut is being carried out; the fields of its ``action`` log line."""
        if self._move(SessionEvent.CUT):
            self.cut_how = cut.how
        return {"action": "cut", "how": cut.how, "fault": cut.fault, **cut.detail}

    def request_cut(self, cut: CutRequest, received: int) -> dict[str, Any]:
        """A CutRequest is being carried out, ``received`` bytes of the request body read;
        the fields of its ``action`` log line."""
        if self._move(SessionEvent.REQUEST_CUT):
            self.cut_how = cut.how
            self.cut_stage = "request"
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
        body = self.body
        content = self.content
        if math.isinf(seconds) and content is not None and not content.sent.terminals:
            assert body is not None  # (a content is a framed body's)
            body.flaw("held open for ever before the terminal event")

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

    def hold_timeout(self, fault: str, limit: float) -> dict[str, Any]:
        """A fault's hold (a ``Sleep``: ``stall``, ``hang``, ``delay``) has held the
        response ``limit`` seconds with nothing sent, the longest allowed: the response
        is aborted (never a clean end). The fields of its ``action`` log line."""
        before_head = self.head is None
        if self._move(SessionEvent.HOLD_TIMEOUT):
            self.cut_how = "abort"
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
        self._move(SessionEvent.CLIENT_GONE)

    def shutdown(self) -> None:
        """The proxy is stopping and ends this response."""
        self._move(SessionEvent.SHUTDOWN)

    def internal_error(self, message: str) -> bool:
        """A bug of ours. Returns True when the head was already sent (the shell
        can only end uncleanly then), False when a 500 can still be answered."""
        head_sent = self.head is not None
        if self._move(SessionEvent.INTERNAL_ERROR):
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

    def wrote(self, send: Send, now: float) -> FrameFields:
        """One write to the client is about to happen: account for it, and return
        the fields of its ``frame`` log line."""
        phase = self.life.phase
        if phase in _NO_WRITES:
            raise SessionError(f"a write is not allowed in phase {phase.name}")
        body = self.body
        if body is not None and send.events:
            events, kinds, faults = body.judged(send)
            line = self.tally.write_events(len(send.data), now, events, kinds, faults)
            body.splice_from(send, line)
            return line
        return self.tally.write(len(send.data), now)

    def summary(self, now: float) -> ResponseEnd:
        """The fields of the ``response_end`` line (only once ended)."""
        if not self.ended:
            raise SessionError(f"summary() before the end (phase {self.phase.name})")
        return response_end(self, now)

    def watchdog_summary(self, duration_ms: float) -> ResponseEnd:
        """The ``response_end`` fields of a request the exiting process's watchdog ends
        (``shutdown``, ``reason: watchdog``): only what is known at once, from another
        thread (nothing here changes; the content is not compared: no time). A framed
        body is ``broken``: never a clean end."""
        return watchdog_end(self, duration_ms)

    @property
    def integrity(self) -> Integrity | None:
        """The framed body's integrity once ended (None before, or when not framed):
        ``broken`` when the connection did not end cleanly (every outcome but
        ``completed`` and a ``cut`` with ``how: close``), else as the content says."""
        content = self.content
        if content is None or not self.ended:
            return None
        clean = self.outcome == "completed" or (self.outcome == "cut" and self.cut_how == "close")
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
        body = self.body
        if body is not None and body.provider is not None:
            return body.provider
        pipeline = self.pipeline
        if pipeline is not None and not pipeline.detecting:
            return pipeline.profile.name
        return "auto"

    @property
    def format(self) -> Format:
        """The body's framing (``raw`` when it is not framed)."""
        return "raw" if self.pipeline is None else self.pipeline.format


def wrote_plain(session: Session, size: int, now: float) -> tuple[int, int, int, float]:
    """A write of ``size`` bytes that carries no events is about to happen on
    ``session``: account for it as :meth:`Session.wrote` does; its ``frame`` fields
    ``seq``, ``offset``, ``size`` and ``t_ms``, for a line made without their dict
    (:meth:`chaosproxy.observe.logs.RequestLog.plain_frame`, issue 34)."""
    phase = session.life.phase
    if phase in _NO_WRITES:
        raise SessionError(f"a write is not allowed in phase {phase.name}")
    tally = session.tally
    t_ms = tally.count(size, now)
    return tally.frames - 1, tally.bytes - size, size, t_ms


__all__ = [
    "BENIGN",
    "HOP_BY_HOP",
    "OUTCOMES",
    "RAW_SKIP_REASON",
    "TRANSITIONS",
    "Head",
    "Outcome",
    "Phase",
    "Session",
    "SessionError",
    "SessionEvent",
    "error_answer",
    "forwarded_request_headers",
    "wrote_plain",
]
