"""Stream integrity and the contract monitor: what the upstream meant, what the client
was sent, and every breach of the stream contract on either side.

Each framed response has two *sides*, each a :class:`Side`:

- ``upstream``: every event the upstream sent, as the framer cut it, before any fault
  (:meth:`StreamContent.upstream_event`, watching the pipeline);
- ``sent``: every event the client was sent, from the writes that happened
  (:meth:`StreamContent.wrote`, from ``Session.wrote``). An event split over several
  writes counts once its last byte is written; an event whose write was cut short was
  not sent.

A side accumulates the stream's *logical content*, as the provider profile reads each
event (:meth:`~chaosproxy.core.providers.base.ProviderProfile.content`): its text (per
choice or candidate), its tool calls (``{key: arguments}``, parallel calls apart), its
terminal events and finish reasons, and its in-stream errors. Comparing the two sides
gives the ``integrity`` of the response (:meth:`StreamContent.integrity`).

Every side is also checked against the stream contract as events arrive; each breach is
a :class:`Violation` naming its rule and the 1-based ordinal of the event on that side;
an application envelope's rules are a side's part of their own (:class:`EnvelopeCheck`).
Sans-IO: no clock, no logging; the shell logs the violations.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, get_args

import orjson

from chaosproxy.core.actions import Send
from chaosproxy.core.answer import Trail
from chaosproxy.core.events import Event
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers import Profile
from chaosproxy.core.providers.base import NOTHING, TERMINAL_PIECE, EventContent
from chaosproxy.core.records import Integrity, Rule, SideName, ViolationFields

#: Every rule of the contract monitor, in the order of the docs.
RULES: tuple[Rule, ...] = get_args(Rule)

#: At most this many violations are recorded per side (a stream that breaks a rule on
#: every event would otherwise log one line per event).
MAX_VIOLATIONS = 100

_DONE = "[DONE]"
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Violation:
    """One breach of the stream contract: ``rule`` at event ``at_event`` of ``side``."""

    side: SideName
    rule: Rule
    #: 1-based ordinal of the event on its side (``terminal_missing``: the last event,
    #: 0 when there was none).
    at_event: int

    def fields(self) -> ViolationFields:
        """The fields of its ``violation`` log line."""
        return {"side": self.side, "rule": self.rule, "at_event": self.at_event}


# --------------------------------------------------------------------------- envelope


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """An RFC 6901 JSON pointer (``/a/b~1c``) as its reference tokens; ValueError when
    it is not one (``""`` is the whole document)."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {pointer!r} must start with '/'")
    tokens = pointer[1:].split("/")
    for token in tokens:
        if "~" in token.replace("~0", "").replace("~1", ""):
            raise ValueError(f"JSON pointer {pointer!r}: '~' must be followed by 0 or 1")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in tokens)


def resolve(document: Any, tokens: tuple[str, ...]) -> Any:
    """The value at ``tokens`` in ``document``, or ``_MISSING``."""
    value = document
    for token in tokens:
        if isinstance(value, dict):
            value = value.get(token, _MISSING)
            if value is _MISSING:
                return _MISSING
        elif isinstance(value, list) and token.isdigit() and (token == "0" or token[0] != "0"):
            index = int(token)
            if index >= len(value):
                return _MISSING
            value = value[index]
        else:
            return _MISSING
    return value


@dataclass(frozen=True, slots=True)
class Envelope:
    """An application envelope: JSON pointers to each event's stream id and sequence
    number (either may be None). Events without the pointed-to value are not checked."""

    stream: str | None = None
    sequence: str | None = None

    @classmethod
    def parse(cls, text: str) -> Envelope:
        """``stream=/streamId,sequence=/sequence`` (the ``--envelope`` flag's form)."""
        given: dict[str, str] = {}
        for item in text.split(","):
            if not item.strip():
                continue
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or key not in ("stream", "sequence"):
                raise ValueError(
                    f"bad envelope item {item!r}: use stream=/pointer,sequence=/pointer"
                )
            parse_pointer(value.strip())
            given[key] = value.strip()
        if not given:
            raise ValueError("an envelope needs stream=/pointer, sequence=/pointer or both")
        return cls(**given)


# --------------------------------------------------------------------------- one side


class EnvelopeCheck:
    """One side's checks of an application envelope (``--envelope``): the stream id
    never changes (``stream_changed``), the sequence numbers go up by one
    (``sequence_repeat``, ``sequence_backwards``, ``sequence_gap``). Events without the
    pointed-to values are not checked."""

    __slots__ = ("_last_seq", "_max_seq", "_seq", "_stream", "_stream_value")

    def __init__(self, envelope: Envelope) -> None:
        self._stream = parse_pointer(envelope.stream) if envelope.stream else None
        self._seq = parse_pointer(envelope.sequence) if envelope.sequence else None
        self._stream_value: Any = _MISSING
        self._last_seq: int | None = None
        self._max_seq = 0

    def check(self, payload: Any) -> list[Rule]:
        """The rules one event's parsed JSON (``None``: not JSON) breaks."""
        broken: list[Rule] = []
        if payload is None:
            return broken
        if self._stream is not None:
            value = resolve(payload, self._stream)
            if value is not _MISSING:
                if self._stream_value is _MISSING:
                    self._stream_value = value
                elif value != self._stream_value:
                    broken.append("stream_changed")
        if self._seq is not None:
            seq = resolve(payload, self._seq)
            if isinstance(seq, int) and not isinstance(seq, bool):
                last = self._last_seq
                if last is not None:
                    if seq == last:
                        broken.append("sequence_repeat")
                    elif seq <= self._max_seq:
                        broken.append("sequence_backwards")
                    elif seq > self._max_seq + 1:
                        broken.append("sequence_gap")
                    self._max_seq = max(self._max_seq, seq)
                else:
                    self._max_seq = seq
                self._last_seq = seq
        return broken


class HasProfile(Protocol):
    """Where the stream's (possibly detected) profile is found: the pipeline's stream."""

    @property
    def profile(self) -> Profile: ...


class Side:
    """One side of a stream: its logical content and its contract checks."""

    __slots__ = (
        "_envelope",
        "_fast",
        "_generic",
        "_ids",
        "_open",
        "_peers",
        "_slow",
        "_source",
        "_text",
        "_whole",
        "check_json",
        "closed",
        "errors",
        "events",
        "finish",
        "first_terminal",
        "late",
        "name",
        "terminals",
        "tools",
        "trail",
        "violations",
    )

    def __init__(
        self, name: SideName, source: HasProfile, *, envelope: Envelope | None = None
    ) -> None:
        self.name: SideName = name
        self._source = source
        self._generic = False
        #: The other side(s): the upstream side decides for them on its first event.
        self._peers: tuple[Side, ...] = ()
        #: Events seen on this side.
        self.events = 0
        #: Terminal events seen, and the 1-based ordinal of the first (0: none yet).
        self.terminals = 0
        self.first_terminal = 0
        #: In-stream error events seen.
        self.errors = 0
        #: Events carrying text or tool arguments after the first terminal event (a
        #: client that stops at the terminal never sees them).
        self.late = 0
        #: Finish reason per channel (the last one given).
        self.finish: dict[int, str] = {}
        #: Tool-call argument fragments per call key, in order.
        self.tools: dict[str, list[str]] = {}
        self.violations: list[Violation] = []
        #: Every content-bearing event, in order, with its id: what the side's answer
        #: is folded from (:mod:`chaosproxy.core.answer`).
        self.trail: Trail = []
        self.closed = False
        self._text: dict[int, list[str]] = {}
        self._open: dict[str, None] = {}  # tool calls not yet ended
        self._whole = 0  # whole tool calls numbered so far
        self._ids: set[str] = set()
        #: Whether every event must be valid JSON (``invalid_json``): decided on the
        #: first event.
        self.check_json = False
        self._envelope = EnvelopeCheck(envelope) if envelope is not None else None
        # Anything to check per event beyond its content (JSON, envelope, terminal seen).
        self._slow = envelope is not None
        # Upstream side of a generic stream with nothing to check: count events only.
        self._fast = False

    # ------------------------------------------------------------------ content

    @property
    def text(self) -> str:
        """The text, channel after channel (choice 0's first)."""
        return "".join("".join(self._text[c]) for c in sorted(self._text))

    def texts(self) -> dict[int, str]:
        """The text of each channel (choice or candidate index)."""
        return {c: "".join(parts) for c, parts in sorted(self._text.items())}

    def tool_args(self) -> dict[str, str]:
        """Each tool call's arguments, by key."""
        return {key: "".join(parts) for key, parts in self.tools.items()}

    @property
    def text_sha256(self) -> str:
        """sha256 of the UTF-8 text without trailing whitespace (``text.rstrip()``)."""
        return hashlib.sha256(self.text.rstrip().encode("utf-8", "surrogatepass")).hexdigest()

    def same_content(self, other: Side) -> bool:
        """Same text per channel, tool arguments, terminals, finish reasons, errors, and
        as much content after the terminal event."""
        return (
            self.texts() == other.texts()
            and self.tool_args() == other.tool_args()
            and self.terminals == other.terminals
            and self.finish == other.finish
            and self.errors == other.errors
            and self.late == other.late
        )

    # ------------------------------------------------------------------ events

    def event(self, ev: Event) -> None:
        """One event (its frame has data) on this side. Runs per event on both sides:
        kept to a few attribute reads when the event carries no content."""
        frame = ev.frame
        if self._fast and not frame.id and "terminal" not in ev.kinds:
            # The usual generic event: no content, nothing to check, only counted.
            self.events += 1
            frame.piece = NOTHING
            return
        n = self.events = self.events + 1
        piece = frame.piece
        if piece is None:  # (always, upstream: the framer's frames are new)
            if n == 1 and self._peers:
                self._first()
            if self._generic:
                # A generic event means only its terminal kind, just classified (only
                # upstream events are sure to carry fresh kinds: only that side does it).
                piece = TERMINAL_PIECE if "terminal" in ev.kinds else NOTHING
            else:
                piece = self._source.profile.content(frame)
            frame.piece = piece
        if self._slow or frame.id:
            self._check(frame, piece, n)
        if piece is not NOTHING:
            self.trail.append((frame.id, piece))
            self._add(piece, n)

    def _first(self) -> None:
        # The provider is known once the first event is framed (it may be recognised
        # from it), before any event reaches the sent side. Every event of a known
        # provider is JSON (or its [DONE]); a generic stream's payload is unknown, and
        # checking it would cost a parse per event.
        generic = self._source.profile.name == "generic"
        self._generic = generic
        for side in (self, *self._peers):
            side.check_json = not generic
            side._slow = side.check_json or side._envelope is not None
        self._fast = generic and not self._slow

    def _check(self, frame: Frame, piece: EventContent, n: int) -> None:
        if self.terminals and not piece.terminal:
            self._breach("after_terminal", n)
        if self.check_json and frame.json() is None:
            stripped = (frame.data or "").strip()
            if stripped != _DONE and stripped != "null":
                self._breach("invalid_json", n)
        if frame.id:
            self._check_id(frame.id, n)
        envelope = self._envelope
        if envelope is not None:
            for rule in envelope.check(frame.json()):
                self._breach(rule, n)

    def _check_id(self, event_id: str, n: int) -> None:
        if event_id in self._ids:
            self._breach("duplicate_id", n)
        else:
            self._ids.add(event_id)

    def _add(self, piece: EventContent, n: int) -> None:
        if self.terminals and (piece.text or piece.tools):
            self.late += 1
        for channel, fragment in piece.text:
            parts = self._text.get(channel)
            if parts is None:
                self._text[channel] = [fragment]
            else:
                parts.append(fragment)
        for key, fragment in piece.tools:
            if not key:
                self._whole += 1
                self.tools[f"#{self._whole}"] = [fragment]
                continue
            parts = self.tools.get(key)
            if parts is None:
                self.tools[key] = [fragment]
                self._open[key] = None
            else:
                parts.append(fragment)
        if piece.tool_ends:
            self._end_calls(piece.tool_ends, n)
        for channel, reason in piece.finish:
            self.finish[channel] = reason
        if piece.error:
            self.errors += 1
        if piece.terminal:
            self._slow = True  # every later event is checked: after_terminal
            self._fast = False
            if self._open:
                self._end_calls(tuple(self._open), n)
            if self.terminals:
                self._breach("terminal_twice", n)
            else:
                self.first_terminal = n
            self.terminals += 1

    def _end_calls(self, ends: Iterable[str], n: int) -> None:
        for end in ends:
            if end.endswith("/"):
                keys = [k for k in self._open if k.startswith(end)]
            else:
                keys = [end] if end in self._open else []
            for key in keys:
                del self._open[key]
                args = "".join(self.tools[key])
                if args.strip():
                    try:
                        orjson.loads(args)
                    except orjson.JSONDecodeError:
                        self._breach("tool_args_invalid", n)

    def _breach(self, rule: Rule, n: int) -> None:
        if len(self.violations) < MAX_VIOLATIONS:
            self.violations.append(Violation(self.name, rule, n))

    def close(self, *, expect_terminal: bool) -> None:
        """The side is over: ``terminal_missing`` when ``expect_terminal`` and none came.
        Only the first call counts."""
        if self.closed:
            return
        self.closed = True
        if expect_terminal and not self.terminals:
            self._breach("terminal_missing", self.events)


# --------------------------------------------------------------------------- both sides


class StreamContent:
    """Both sides of one framed response (``Session.content``)."""

    def __init__(
        self,
        stream: HasProfile,
        fmt: Format,
        *,
        envelope: Envelope | None = None,
    ) -> None:
        self.format = fmt
        self.upstream = Side("upstream", stream, envelope=envelope)
        self.sent = Side("sent", stream, envelope=envelope)
        self.upstream._peers = (self.sent,)
        self._sent_event = self.sent.event
        #: Give every upstream event, as framed, to this (``Pipeline.watch``).
        self.upstream_event = self.upstream.event
        # Sent side: events whose first bytes were written but not their last, in order.
        self._open: dict[int, Event] = {}

    def wrote(self, send: Send) -> None:
        """A write to the client (its events, and how many of them end in it)."""
        events = send.events
        open_ = self._open
        if send.ends == 1 and len(events) == 1 and not open_:
            ev = events[0]  # the usual write: one whole event
            frame = ev.frame
            sent = self.sent
            if frame.piece is NOTHING and not sent._slow and not frame.id:
                sent.events += 1  # no content, nothing to check: only counted
            elif frame.data is not None:
                self._sent_event(ev)
            return
        for ev in events:
            key = id(ev)
            if key not in open_:
                open_[key] = ev
        for _ in range(send.ends):
            if not open_:
                break
            self._sent(open_.pop(next(iter(open_))))

    def _sent(self, ev: Event) -> None:
        if ev.frame.data is not None:
            self.sent.event(ev)

    def close(self, *, upstream_ended: bool) -> None:
        """The response is over. ``upstream_ended``: the upstream's body ended (cleanly
        or not), so a missing terminal there is the upstream's; otherwise the proxy
        stopped reading it early and nothing is said of its end."""
        self.upstream.close(expect_terminal=upstream_ended)
        self.sent.close(expect_terminal=True)

    def integrity(self, *, clean_end: bool) -> Integrity:
        """``broken`` when the connection did not end cleanly; else
        :meth:`content_integrity`."""
        if not clean_end:
            return "broken"
        return self.content_integrity()

    def content_integrity(self) -> Integrity:
        """What was sent, however the connection ended: ``incomplete`` when no terminal
        event was sent, else ``intact`` or ``altered``. (A client that closed the
        connection itself after an intact stream's terminal event makes it ``broken``
        with this ``intact``.)"""
        if not self.sent.terminals:
            return "incomplete"
        return "intact" if self.sent.same_content(self.upstream) else "altered"

    def violations(self) -> list[Violation]:
        """Every violation, upstream side first, each side in event order."""
        return [*self.upstream.violations, *self.sent.violations]


__all__ = [
    "MAX_VIOLATIONS",
    "RULES",
    "Envelope",
    "Integrity",
    "Side",
    "StreamContent",
    "Violation",
    "parse_pointer",
    "resolve",
]
