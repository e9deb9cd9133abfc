"""The fault pipeline: upstream bytes in, actions out, for one response body.

::

    bytes ─► framer ─► Event (ordinal, kinds) ─► event faults ─► Send ─► transport faults ─► actions

The pipeline owns no clock: callers pass ``now`` (seconds, any monotonic origin) with
every call, and ask :meth:`deadline` when a fault (``coalesce: {window: …}``) wants to
be woken without new input. Given the same bytes, chunking, times, faults and seed, it
returns the same actions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from chaosproxy.core.actions import Action, Cut, Send
from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Fault, SelectingFault, Stream
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import DEFAULT_MAX_SIZE, Framer, make_framer
from chaosproxy.core.framing.sse import SseFramer
from chaosproxy.core.integrity import Side
from chaosproxy.core.providers import Profile
from chaosproxy.core.records import FallbackFault, SkippedFault
from chaosproxy.core.selector import Selector

#: The fault budget (docs/scenarios.md, Limits). An event into an event fault costs
#: the fault's ``cost`` steps (about its microseconds of CPU), each event out of one a
#: step; the budget starts at MAX_FAULT_CREDIT steps, each upstream frame
#: adds MAX_FAULT_STEPS and unused steps carry over up to MAX_FAULT_CREDIT. Spent, the
#: response is aborted. Without it faults that multiply events (``duplicate`` with
#: ``times: 1000``, several in a row) cost one request minutes of CPU for one upstream
#: event; with it a request's fault work is at most MAX_FAULT_CREDIT steps plus
#: MAX_FAULT_STEPS per upstream frame, whatever the scenario.
MAX_FAULT_STEPS: Final = 500
MAX_FAULT_CREDIT: Final = 20_000
#: The ``reason`` of the ``action`` line of such a cut.
BUDGET_REASON = (
    f"fault budget: the faults took more than {MAX_FAULT_STEPS} steps per upstream event "
    f"(beyond a reserve of {MAX_FAULT_CREDIT})"
)

# (Final, these and the budget's: compiled code reads a Final constant directly, any
# other module global through the module's dict, about 140 instructions a read.)
_NO_KINDS: Final[frozenset[str]] = frozenset()
_RAW_KINDS: Final = frozenset({"other"})


class Pipeline:
    def __init__(
        self,
        faults: Sequence[Fault],
        fmt: Format,
        profile: Profile,
        *,
        detect_profile: Callable[[Frame], Profile] | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
        record: Callable[[Event], None] | None = None,
    ) -> None:
        """``detect_profile``, when given, replaces ``profile`` from the first event;
        ``record``, when given, sees every upstream event before any fault (the proxy's
        recent streams, :mod:`chaosproxy.core.recent`).

        The faults share one :class:`~chaosproxy.core.faults.Stream` (those of one
        :func:`~chaosproxy.core.faults.build_faults` already do); the pipeline decides it
        here, and replaces the profile once when it is recognised from the first event."""
        self._detect = detect_profile
        self.faults = list(faults)
        self.stream = self.faults[0].ctx.stream if self.faults else Stream(fmt, profile)
        self.stream.format = fmt
        self.stream.profile = profile
        for fault in self.faults:
            fault.ctx.stream = self.stream
        # HTTP-stage faults act before the body: they take part in neither body stage
        # (but are in ``faults``, so summary() reports them).
        self._event_faults = [f for f in self.faults if f.stage == "event"]
        #: For each event fault, its selector when the fault passes the events it does
        #: not select as they came (``passes_unselected``): asked here, so that only
        #: the selected ones go into the fault.
        self._gates: list[Selector | None] = [
            f.selector if isinstance(f, SelectingFault) and f.passes_unselected else None
            for f in self._event_faults
        ]
        self._transport_faults = [f for f in self.faults if f.stage == "transport"]
        # Per event, every fault's observe() runs; a selecting fault's only feeds its
        # selector, so call that directly and skip faults that observe nothing.
        # The selectors (compiled: called directly) before the other observers: each
        # keeps its own state and draws from its own fault's generator, so the order
        # between them changes nothing.
        self._selectors: list[Selector] = []
        self._observers: list[Callable[[Event], None]] = []
        self._sides: list[Side] = []
        for f in self.faults:
            observe = type(f).observe
            if observe is Fault.observe:
                continue
            if isinstance(f, SelectingFault) and observe is SelectingFault.observe:
                self._selectors.append(f.selector)
            else:
                self._observers.append(f.observe)
        if record is not None:
            self._observers.append(record)
        #: The profile the events were last classified by, and how (its
        #: ``classifier()``: a compiled function for the generic profile).
        self._classified: Profile | None = None
        self._classify: Callable[[Frame], frozenset[str]] = profile.classify
        self._raw = fmt == "raw"
        self._framer: Framer = make_framer(fmt, max_size)
        #: The same framer when it is the SSE one: called directly (a compiled call,
        #: not Python's call through the Framer protocol), once per read.
        self._sse = self._framer if isinstance(self._framer, SseFramer) else None
        self._ordinal = 0
        #: Fault steps left (see MAX_FAULT_STEPS).
        self._credit = MAX_FAULT_CREDIT
        #: Upstream events seen, and events handed to the transport stage.
        self.events_in = 0
        self.events_out = 0
        self._cut = False

    def watch(self, observer: Callable[[Event], None]) -> None:
        """Call ``observer`` with every upstream event, as framed, before any fault."""
        self._observers.append(observer)

    def watch_side(self, side: Side) -> None:
        """Give every upstream event, as framed, before any fault, to ``side`` (the
        stream's upstream content: :mod:`chaosproxy.core.integrity`), after the other
        observers: called directly, a compiled call per event."""
        self._sides.append(side)

    @property
    def format(self) -> Format:
        return self.stream.format

    @property
    def profile(self) -> Profile:
        return self.stream.profile

    @property
    def detecting(self) -> bool:
        """True while the provider is still to be recognised from the first event."""
        return self._detect is not None

    @property
    def shapes_writes(self) -> bool:
        """Whether a transport fault decides how the events become writes (their sizes,
        their times, the end): then each write is its own."""
        return bool(self._transport_faults)

    @property
    def done(self) -> bool:
        """True once a Cut was emitted: nothing more comes out."""
        return self._cut

    def _stopped(self) -> bool:
        # A method, not the property, so type checkers do not narrow it across calls
        # that may emit a Cut.
        return self._cut

    # ------------------------------------------------------------------ input

    def feed(self, chunk: bytes, now: float) -> list[Action]:
        """One upstream read. May raise :class:`~chaosproxy.core.framing.FramingError`."""
        if self._cut:
            return []
        if self._transport_faults:
            self._set_clock(now)
        out: list[Action] = []
        sse = self._sse
        for frame in self._framer.feed(chunk) if sse is None else sse.feed(chunk):
            self._frame(frame, out)
            if self._stopped():
                break
        return out

    def end(self, now: float) -> list[Action]:
        """The upstream body ended cleanly: flush framer and faults."""
        if self.done:
            return []
        self._set_clock(now)
        out: list[Action] = []
        for frame in self._framer.eof():
            self._frame(frame, out)
        self._credit = min(self._credit + MAX_FAULT_STEPS, MAX_FAULT_CREDIT)  # the flush
        for i, fault in enumerate(self._event_faults):
            if self._stopped():
                break
            for ev in fault.on_event_end():
                self._event_from(i + 1, ev, out)
        for i, fault in enumerate(self._transport_faults):
            if self._stopped():
                break
            self._actions_from(i + 1, fault.on_action_end(), out)
        return out

    def salvage(self, now: float) -> list[Action]:
        """The upstream failed mid-body: the unfinished event that did arrive, through
        the faults, without ending them (nothing is flushed that the body did not send)."""
        if self.done:
            return []
        self._set_clock(now)
        out: list[Action] = []
        for frame in self._framer.eof():
            self._frame(frame, out)
        return out

    def deadline(self) -> float | None:
        """The earliest time a fault wants :meth:`poll` called, or None."""
        if not self._transport_faults:
            return None
        times = [t for f in self._transport_faults if (t := f.deadline()) is not None]
        return min(times) if times else None

    def poll(self, now: float) -> list[Action]:
        """Release what is due at ``now`` (call when :meth:`deadline` has passed)."""
        if self.done:
            return []
        self._set_clock(now)
        out: list[Action] = []
        for i, fault in enumerate(self._transport_faults):
            t = fault.deadline()
            if t is not None and t <= now:
                self._actions_from(i + 1, fault.poll(now), out)
        return out

    # ------------------------------------------------------------------ stages

    def _frame(self, frame: Frame, out: list[Action]) -> None:
        credit = self._credit + MAX_FAULT_STEPS  # (no min(): once per event, a call less)
        self._credit = credit if credit < MAX_FAULT_CREDIT else MAX_FAULT_CREDIT
        if self._raw:
            self._ordinal += 1
            ev = Event(frame, self._ordinal, _RAW_KINDS)
        elif frame.data is None:  # not frame.is_event
            self._event_from(0, Event(frame, 0, _NO_KINDS), out)
            return
        else:
            if self._detect is not None:
                self.stream.profile = self._detect(frame)
                self._detect = None
            self._ordinal += 1
            profile = self.stream.profile
            if profile is not self._classified:  # (the first event, or a new profile)
                self._classified = profile
                classifier = getattr(profile, "classifier", None)
                self._classify = profile.classify if classifier is None else classifier()
            ev = Event(frame, self._ordinal, self._classify(frame))
        self.events_in += 1
        for selector in self._selectors:
            selector.observe(ev)
        for observe in self._observers:
            observe(ev)
        for side in self._sides:
            side.event(ev)
        self._event_from(0, ev, out)

    def _event_from(self, start: int, ev: Event, out: list[Action]) -> None:
        """Run ``ev`` through event faults ``start``…, then into the transport stage;
        abort the response when they spend more steps than the budget has left."""
        events = [ev]
        credit = self._credit
        faults = self._event_faults
        gates = self._gates
        for i in range(start, len(faults)):
            fault = faults[i]
            gate = gates[i]
            # Usually one event goes in and one comes out: no list to flatten then.
            if len(events) == 1:
                if gate is not None and not gate.selects(events[0]):
                    credit -= fault.cost + 1  # (what its ``[ev]`` costs)
                else:
                    events = fault.on_event(events[0])
                    credit -= fault.cost + len(events)
            else:
                flat: list[Event] = []
                cost = fault.cost
                for e in events:
                    if gate is not None and not gate.selects(e):
                        flat.append(e)
                    else:
                        flat += fault.on_event(e)
                    credit -= cost
                    if len(flat) > credit:
                        break
                events = flat
                credit -= len(flat)
            if credit < 0:
                self._credit = 0
                self._over_budget(fault, out)
                return
            if not events:
                self._credit = credit
                return
        self._credit = credit
        if self._cut:
            return
        if not self._transport_faults:
            # Straight out: a Send never ends the response, so nothing can stop it.
            for e in events:
                frame = e.frame
                if e.ordinal or frame.data is not None:
                    self.events_out += 1
                out.append(Send(frame.raw, (e,), 1, e.faults))
            return
        for e in events:
            if self._stopped():
                return
            if e.ordinal or e.frame.data is not None:
                self.events_out += 1
            self._actions_from(0, [Send(e.frame.raw, (e,), 1, e.faults)], out)

    def _over_budget(self, fault: Fault, out: list[Action]) -> None:
        """The faults took too many steps on one event: nothing of what they made is
        sent, and the response is aborted at once, past any transport fault (never a
        clean end: the client must not take it for a whole answer)."""
        out.append(Cut("abort", fault.name, {"reason": BUDGET_REASON}))
        self._cut = True

    def _actions_from(self, start: int, actions: list[Action], out: list[Action]) -> None:
        """Run actions through transport faults ``start``…, then out."""
        for fault in self._transport_faults[start:] if start else self._transport_faults:
            if not actions:
                return
            if len(actions) == 1:
                actions = fault.on_action(actions[0])
            else:
                flat: list[Action] = []
                for a in actions:
                    flat += fault.on_action(a)
                actions = flat
        for a in actions:
            out.append(a)
            if isinstance(a, Cut):
                self._cut = True
                return

    def _set_clock(self, now: float) -> None:
        for fault in self._transport_faults:
            fault.set_clock(now)

    # ------------------------------------------------------------------ report

    def summary(self) -> tuple[dict[str, int], list[SkippedFault]]:
        """``faults_applied`` (name → count) and ``faults_skipped`` for the log."""
        return fault_summary(self.faults)


def fault_summary(faults: Sequence[Fault]) -> tuple[dict[str, int], list[SkippedFault]]:
    """``faults_applied`` (name → count) and ``faults_skipped`` of a request's faults."""
    applied: dict[str, int] = {}
    skipped: list[SkippedFault] = []
    for fault in faults:
        if fault.applied:
            applied[fault.name] = applied.get(fault.name, 0) + fault.applied
        else:
            reason = fault.skipped()
            if reason:
                skipped.append(
                    {"fault": fault.name, "position": fault.ctx.position, "reason": reason}
                )
    return applied, skipped


def fault_fallbacks(faults: Sequence[Fault]) -> list[FallbackFault]:
    """``faults_fallback``: the faults of a request that applied otherwise than asked."""
    out: list[FallbackFault] = []
    for fault in faults:
        fell = fault.fallback()
        if fell is not None:
            requested, actual, reason = fell
            out.append(
                {
                    "fault": fault.name,
                    "position": fault.ctx.position,
                    "requested": requested,
                    "actual": actual,
                    "reason": reason,
                }
            )
    return out
