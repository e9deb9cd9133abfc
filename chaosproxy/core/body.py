"""The body path of a framed response: its fault pipeline, both sides of its content,
and whether what the client was sent is sound.

Once the response head is decided (:mod:`chaosproxy.core.head`), a body framed under a
scenario gets a :class:`BodyPath`: the :class:`~chaosproxy.core.pipeline.Pipeline` that
turns upstream reads into actions, the :class:`~chaosproxy.core.integrity.StreamContent`
that keeps what the upstream meant and what the client was sent (their integrity and
contract checks; none for a ``raw`` body, which has no events), and the
:class:`Soundness` of the writes: the first thing sent that a correct client may
object to (a fault that changes events, a gap or a step back in the events). A body
that is not framed has no body path: each upstream read is written as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from chaosproxy.core.actions import Send
from chaosproxy.core.events import Event
from chaosproxy.core.faults import Fault, keeps_answer
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.integrity import Envelope, StreamContent
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import Profile, get_profile, provider_for_event
from chaosproxy.core.records import FrameFields

#: The faults that keep the answer: each fault's file says so in its declaration
#: (``keeps_answer``, core/faults/base.py): those that change only how and when the
#: bytes arrive, never which events, and the content faults that cut the same content
#: into other valid events of the provider's format (``resegment``, ...): a client that
#: raises on one raised on a clean answer. A hold for ever is judged apart (``hold``).
#: A body's :class:`Soundness` takes those of its own faults.
BENIGN = keeps_answer()


#: The kinds of an event, sorted, by the set a profile gave (a profile gives the same
#: few sets again and again): a lookup and a copy per write instead of a sort.
_SORTED_KINDS: Final[dict[frozenset[str], tuple[str, ...]]] = {}


def _in_group(ev: Event, ordinal: int) -> bool:
    """Whether ``ev`` was sent in a group (a content fault's merge or interleaving)
    that holds upstream event ``ordinal`` too: no gap or disorder between them."""
    group = ev.group
    return group is not None and group[0] <= ordinal <= group[1]


class Soundness:
    """Whether what the client was sent is sound: the first defect, if any. Judged up
    to the first terminal event written whole: what comes after it (a second terminal,
    a late delta) is no part of the answer a correct client reads (docs/verdicts.md,
    "What the client was sent"), so it makes no defect."""

    __slots__ = ("_benign", "_high", "_open", "_past_terminal", "defect", "defect_after")

    def __init__(self, benign: frozenset[str] = BENIGN) -> None:
        #: The faults whose writes make no defect (those that keep the answer).
        self._benign = benign
        #: The first thing sent to the client that a correct client may object to: a
        #: fault that changes events or headers, a gap or a step back in the events, a
        #: hold for ever before the terminal event (None: only chunking and timing).
        self.defect: str | None = None
        #: The characters of text (trailing whitespace aside) sent before ``defect``
        #: (None: not known): where the defect stands among the writes, for a client
        #: that gave up (docs/verdicts.md, "Judged up to the moment the client gave up").
        self.defect_after: int | None = None
        #: The highest upstream ordinal written whole so far, and the events whose
        #: first bytes were written but not their last, in order.
        self._high = 0
        self._open: dict[int, Event] = {}
        #: Whether a terminal event was written whole: nothing after it is judged.
        self._past_terminal = False

    def flaw(self, what: str) -> None:
        """``what`` was sent: the defect, unless there was one before."""
        if self.defect is None:
            self.defect = what

    def wrote(self, send: Send) -> None:
        """A write of events: its faults, and the order its events end in."""
        if self._past_terminal:
            return
        if send.faults and self.defect is None:
            for name in send.faults:
                if name not in self._benign:
                    self.flaw(name)
                    break
        events = send.events
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

    def _ended(self, ev: Event) -> None:
        """An upstream event's last byte was written: upstream ordinals must follow one
        another (0: not an upstream event: a comment, a made-up event), except inside a
        group a content fault sent as one (a merge, interleaved calls, the pieces of
        one event), where they may come in any order."""
        if self._past_terminal:
            return
        ordinal = ev.ordinal
        if ordinal:
            high = self._high
            if ordinal == high + 1:
                self._high = ordinal
            elif ordinal > high:
                if not _in_group(ev, high + 1):
                    self.flaw("a gap in the events")
                self._high = ordinal
            elif not _in_group(ev, high):
                self.flaw("events out of order")
        if "terminal" in ev.kinds:
            self._past_terminal = True


class BodyPath:
    """One framed body: its pipeline, its content (None when ``raw``), its soundness,
    the faults left out (they need events a ``raw`` body has not) and its provider
    (None while the first event decides it)."""

    __slots__ = ("content", "pipeline", "provider", "soundness", "unframed")

    def __init__(
        self,
        faults: Sequence[Fault],
        fmt: Format,
        chosen: Profile | None,
        *,
        max_size: int,
        record: Callable[[Event], None] | None,
        envelope: Envelope | None,
    ) -> None:
        """``chosen``: the provider profile the scenario or the path decides (None: the
        first event decides); ``record`` what keeps the body's events for later
        (``resume``, ``splice``); ``envelope`` the contract monitor's pointers."""
        detect: Callable[[Frame], Profile] | None = None
        if chosen is None:
            profile = get_profile("generic")

            def detect(frame: Frame) -> Profile:
                return get_profile(provider_for_event(frame))

        else:
            profile = chosen
        self.provider: str | None = None if chosen is None else chosen.name
        active: list[Fault] = []
        self.unframed: list[Fault] = []
        for fault in faults:
            if fmt == "raw" and fault.needs_framing(fault.config):
                self.unframed.append(fault)
            else:
                active.append(fault)
        self.pipeline = Pipeline(
            active, fmt, profile, detect_profile=detect, max_size=max_size, record=record
        )
        self.content: StreamContent | None = None
        if fmt != "raw":
            self.content = StreamContent(self.pipeline.stream, fmt, envelope=envelope)
            self.pipeline.watch_side(self.content.upstream)
        self.soundness = Soundness(frozenset(f.name for f in faults if f.declaration.keeps_answer))

    def flaw(self, what: str) -> None:
        """``what`` was sent (a head's edit, a hold for ever): the defect, unless there
        was one before, placed after the text sent so far."""
        soundness = self.soundness
        if soundness.defect is None:
            soundness.flaw(what)
            self._place()

    def _place(self) -> None:
        """The defect just found stands after the text sent so far."""
        content = self.content
        if content is not None:
            self.soundness.defect_after = len(content.sent.text.rstrip())

    def wrote(self, send: Send, line: FrameFields) -> None:
        """A write of events to the client: judge it, add it to the sent side, and
        give its ``frame`` line the events' fields."""
        events, kinds, faults = self.judged(send)
        line["events"] = events
        line["kinds"] = kinds
        line["faults"] = faults
        self.splice_from(send, line)

    def judged(self, send: Send) -> tuple[list[int], list[str], list[str]]:
        """Judge a write of events, add it to the sent side; its ``events``, ``kinds``
        and ``faults`` fields (for the session to make its line with, at once:
        :meth:`~chaosproxy.core.summary.Tally.write_events`)."""
        soundness = self.soundness
        fresh = soundness.defect is None
        soundness.wrote(send)
        if fresh and soundness.defect is not None:  # this write's: after the text before it
            self._place()
        content = self.content
        if content is not None:
            content.wrote(send)
        events = send.events
        if len(events) == 1:  # the usual case: no comprehension frames per write
            kinds = events[0].kinds
            ordered = _SORTED_KINDS.get(kinds)
            if ordered is None:
                ordered = tuple(sorted(kinds))
                if len(_SORTED_KINDS) < 256:
                    _SORTED_KINDS[kinds] = ordered
            faults = send.faults
            return [events[0].ordinal], list(ordered), list(faults) if faults else []
        return (
            [e.ordinal for e in events],
            sorted({k for e in events for k in e.kinds}),
            list(send.faults),
        )

    @staticmethod
    def splice_from(send: Send, line: FrameFields) -> None:
        """Give the line of a write of spliced events the streams they came from."""
        if "splice" in send.faults:
            sources = list(dict.fromkeys(e.splice_from for e in send.events if e.splice_from))
            if sources:
                line["splice_from"] = sources[0] if len(sources) == 1 else sources


__all__ = ["BENIGN", "BodyPath", "Soundness"]
