"""What a response is summed up as: the writes' accounting and the ``response_end``
record.

A :class:`Tally` counts the writes to the client as they happen (each one's ``frame``
fields start there: its number, offset, size and time) and their timing; when the
request has ended, :func:`response_end` describes it from the session's parts: the
outcome, what the client was sent, the faults that applied or were skipped, the
integrity and the answer it belongs to (:class:`~chaosproxy.core.records.ResponseEnd`).
:func:`watchdog_end` is the short one an exiting process writes for a request it could
not end in time; :func:`worker_lost_end` the one a supervisor writes for a request of a
worker that died.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, Protocol, cast

from chaosproxy.core.answer import AnswerState
from chaosproxy.core.body import BodyPath
from chaosproxy.core.faults import Fault
from chaosproxy.core.frames import Format
from chaosproxy.core.integrity import StreamContent
from chaosproxy.core.lifecycle import WORKER_LOST
from chaosproxy.core.pipeline import Pipeline, fault_fallbacks, fault_summary
from chaosproxy.core.records import AnswerFields, FrameFields, Integrity, Outcome, ResponseEnd

RAW_SKIP_REASON = "the response is not sse or ndjson, so it has no events"

#: Below this many microseconds (2**40: 12 days in milliseconds), ``t * 1000.0`` is off
#: from the exact product by less than 2**-13: far less than :func:`round_ms`'s margin.
_EXACT_ENOUGH: Final = 1099511627776.0


def round_ms(t: float) -> float:
    """``round(t, 3)``, the same float, without its cost where it can be avoided.

    ``round(t, 3)`` converts ``t`` to a decimal string and back (about 2.9k
    instructions a call, on every write's ``t_ms``). Rounding ``t * 1000`` to the
    nearest integer gives the same thousandths (divided back, the same float: a
    correctly rounded division) unless the product is within its rounding error of a
    half, where the nearest integer may differ: those, a zero (its sign), negative,
    huge or not finite values take ``round`` itself."""
    y = t * 1000.0
    if 0.0 < y < _EXACT_ENOUGH:
        whole = int(y)
        frac = y - whole
        if frac < 0.499:
            return whole / 1000.0
        if frac > 0.501:
            return (whole + 1) / 1000.0
    return round(t, 3)


class Tally:
    """The writes to the client: how many, how many bytes, and when."""

    __slots__ = ("_last_write", "_max_gap_ms", "bytes", "frames", "started", "ttfb_ms")

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0
        #: When the request began (monotonic seconds; None: it never did).
        self.started: float | None = None
        self._last_write: float | None = None
        #: Milliseconds to the first write (None: nothing written).
        self.ttfb_ms: float | None = None
        self._max_gap_ms = 0.0

    def write(self, size: int, now: float) -> FrameFields:
        """A write of ``size`` bytes at ``now``: the start of its ``frame`` fields."""
        t_ms = self.count(size, now)
        line: FrameFields = {
            "seq": self.frames - 1,
            "offset": self.bytes - size,
            "size": size,
            "t_ms": t_ms,
        }
        return line

    def write_events(
        self, size: int, now: float, events: list[int], kinds: list[str], faults: list[str]
    ) -> FrameFields:
        """A write of events: its ``frame`` fields with the events' fields, made at
        once (a dict of seven keys built whole, not grown from four, issue 34)."""
        t_ms = self.count(size, now)
        line: FrameFields = {
            "seq": self.frames - 1,
            "offset": self.bytes - size,
            "size": size,
            "t_ms": t_ms,
            "events": events,
            "kinds": kinds,
            "faults": faults,
        }
        return line

    def count(self, size: int, now: float) -> float:
        """Count a write of ``size`` bytes at ``now``; its ``t_ms``. Its ``seq`` is
        then ``frames - 1`` and its ``offset`` ``bytes - size``: a plain write's
        ``frame`` fields, for a line made without their dict
        (:meth:`chaosproxy.observe.logs.RequestLog.plain_frame`)."""
        started = self.started
        t_ms = round_ms(0.0 if started is None else (now - started) * 1000.0)
        last = self._last_write
        if last is None:
            self.ttfb_ms = t_ms
        else:
            gap = (now - last) * 1000.0
            if gap > self._max_gap_ms:
                self._max_gap_ms = gap
        self._last_write = now
        self.frames += 1
        self.bytes += size
        return t_ms

    @property
    def max_gap_ms(self) -> float:
        return round(self._max_gap_ms, 3)

    def ms_since_start(self, now: float) -> float:
        return 0.0 if self.started is None else (now - self.started) * 1000.0


class SessionParts(Protocol):
    """What a summary reads of its session (:class:`chaosproxy.core.session.Session`,
    which imports this module: a protocol, so that the two do not import each other)."""

    @property
    def outcome(self) -> Outcome | None: ...
    @property
    def tally(self) -> Tally: ...
    @property
    def status(self) -> int: ...
    @property
    def content_type(self) -> str | None: ...
    @property
    def content_encoding(self) -> str | None: ...
    @property
    def run(self) -> object | None:
        """The scenario whose faults apply (None: none)."""
        ...

    @property
    def faults(self) -> Sequence[Fault]: ...
    @property
    def head(self) -> object | None:
        """The response head, once decided."""
        ...

    @property
    def body(self) -> BodyPath | None: ...
    @property
    def pipeline(self) -> Pipeline | None: ...
    @property
    def content(self) -> StreamContent | None: ...
    @property
    def provider(self) -> str: ...
    @property
    def format(self) -> Format: ...
    @property
    def framed(self) -> bool: ...
    @property
    def integrity(self) -> Integrity | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def cut_how(self) -> str | None: ...
    @property
    def cut_stage(self) -> Literal["request"] | None: ...
    def answer(self) -> AnswerState | None: ...


def response_end(s: SessionParts, now: float) -> ResponseEnd:
    """The fields of the ``response_end`` line of ``s``, ended."""
    outcome = s.outcome
    assert outcome is not None  # (set by the transition into ENDED)
    tally = s.tally
    # (a cast: duration_ms, required, comes later, in the order the line shows)
    line = cast(
        ResponseEnd,
        {"outcome": outcome, "status": s.status, "bytes": tally.bytes, "frames": tally.frames},
    )
    if s.content_type:
        line["content_type"] = s.content_type
    if s.content_encoding:
        line["content_encoding"] = s.content_encoding
    body = s.body
    pipeline = s.pipeline
    if s.run is not None or pipeline is not None:
        line["provider"] = s.provider
        line["format"] = s.format
        if pipeline is not None:
            line["events_in"] = pipeline.events_in
            # Events the client was sent whole (a cut's unsent event is not).
            sent = s.content.sent.events if s.content is not None else None
            line["events_out"] = pipeline.events_out if sent is None else sent
    if s.run is not None:
        applied, skipped = fault_summary(pipeline.faults if pipeline is not None else s.faults)
        if body is not None:
            skipped += [
                {"fault": f.name, "position": f.ctx.position, "reason": RAW_SKIP_REASON}
                for f in body.unframed
            ]
        line["faults_applied"] = applied
        line["faults_skipped"] = skipped
        fallbacks = fault_fallbacks(pipeline.faults if pipeline is not None else s.faults)
        if fallbacks:
            line["faults_fallback"] = fallbacks
    line["ttfb_ms"] = tally.ttfb_ms
    line["max_gap_ms"] = tally.max_gap_ms
    line["duration_ms"] = round(tally.ms_since_start(now), 3)
    content = s.content
    integrity = s.integrity
    if content is not None and integrity is not None:  # (both, or neither: ended)
        line["integrity"] = integrity
        line["content_integrity"] = content.content_integrity()
        line["text_sha256"] = {
            "upstream": content.upstream.text_sha256,
            "sent": content.sent.text_sha256,
        }
    state = s.answer()
    if state is not None:
        line["answer"] = answer_fields(s, state)
    if s.error:
        line["error"] = s.error
    if s.cut_stage is not None:
        line["stage"] = s.cut_stage
    if outcome == "upstream_error":
        # Before the head (unreachable, timed out, broken) or mid-body.
        line["stage"] = "body" if s.head is not None else "connect"
        if s.reason is not None:
            line["reason"] = s.reason
    elif outcome == "cut" and s.reason is not None:
        line["reason"] = s.reason  # a limit ended a fault's hold
    return line


def answer_fields(s: SessionParts, state: AnswerState) -> AnswerFields:
    """The ``answer`` object of the summary of ``s``, ended: whether this connection
    was sound, else its first defect."""
    body = s.body
    content = s.content
    defect = None if body is None else body.soundness.defect
    after = None if body is None else body.soundness.defect_after
    if defect is None and content is not None:
        # What came after the first terminal event the client was sent is no part of
        # its answer (a second terminal, a late delta): a client that stops there never
        # reads it (docs/verdicts.md, "What the client was sent").
        sent = content.sent
        last = sent.first_terminal or sent.events
        for violation in sent.violations:
            if violation.rule != "terminal_missing" and violation.at_event <= last:
                defect = f"contract: {violation.rule}"  # (a missing one: said below)
                break
    outcome = s.outcome
    if defect is None and outcome != "client_gone" and not state.sent.terminal:
        # The proxy or the upstream ended it before the answer was whole: after all
        # the text it sent.
        if content is None:
            defect = f"answered {s.status} before the answer was whole"
        else:
            after = len(content.sent.text.rstrip())
            if outcome == "completed":
                defect = "ended without a terminal event"
            elif outcome == "cut":
                defect = f"cut ({s.cut_how})"
            else:
                defect = str(outcome)
    return state.fields(sound=defect is None, defect=defect, defect_after=after)


def watchdog_end(s: SessionParts, duration_ms: float) -> ResponseEnd:
    """The ``response_end`` fields of a request the exiting process's watchdog ends
    (``shutdown``, ``reason: watchdog``): only what is known at once, from another
    thread (nothing changes; the content is not compared: no time). A framed body is
    ``broken``: never a clean end."""
    line: ResponseEnd = {
        "outcome": "shutdown",
        "status": s.status,
        "bytes": s.tally.bytes,
        "frames": s.tally.frames,
        "duration_ms": round(duration_ms, 3),
        "reason": "watchdog",
    }
    if s.framed:
        line["integrity"] = "broken"
    return line


def worker_lost_end(duration_ms: float, reason: str) -> ResponseEnd:
    """The ``response_end`` fields of a request whose worker died with it in flight
    (``serve --workers N``), written by the supervisor from what it knows: that the
    request began, when, and how its worker ended (``reason``). The supervisor does not
    follow a request's writes (that would cost per event), so ``status``, ``bytes`` and
    ``frames`` are 0: unknown; the request's ``frame`` lines that reached the log say
    what was sent."""
    return {
        "outcome": WORKER_LOST,
        "status": 0,
        "bytes": 0,
        "frames": 0,
        "duration_ms": round(max(duration_ms, 0.0), 3),
        "reason": reason,
    }


__all__ = [
    "RAW_SKIP_REASON",
    "SessionParts",
    "Tally",
    "answer_fields",
    "response_end",
    "watchdog_end",
    "worker_lost_end",
]
