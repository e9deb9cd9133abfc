"""Answers: what a client was sent of one generation, over every connection, and the
clean answer it should have been (the verdicts' ground truth, docs/verdicts.md).

A *generation* is one answer of the upstream: the body of one forwarded request. A
client can receive it over several connections (a cut, then reconnects answered from
the proxy's history under ``resume:``); each connection records, as a *trail*, the
content-bearing events it sent, with the SSE id the client saw. :class:`Ledger` keeps
a generation's clean trail (the upstream's events, before any fault) and the sent
trails of its connections, and :meth:`Ledger.state` folds both:

- the **clean answer**: the upstream's content up to and including its first terminal
  event;
- the **sent answer**: what the connections sent, in order, each event id applied once
  (a client that de-duplicates by id does the right thing), up to and including the
  first terminal event (what comes after it does not change the answer);
- ``content``: ``intact`` when the sent answer reached a terminal event and equals the
  clean one, ``altered`` when it reached one and differs, ``incomplete`` when no
  terminal event was sent;
- ``prefix``: whether the sent answer is the clean answer so far (nothing wrong was
  sent yet), which is what a client that gave up early was shown.

Sans-IO and pure: no clock, no logging.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from chaosproxy.core.frames import Frame
from chaosproxy.core.providers import Profile
from chaosproxy.core.providers.base import NOTHING, TERMINAL_PIECE, EventContent

#: One content-bearing event: the SSE id the client saw (None when it had none), and
#: what the event means (its :class:`~chaosproxy.core.providers.base.EventContent`).
Trail = list[tuple[str | None, EventContent]]

from chaosproxy.core.records import AnswerContent, AnswerFields  # noqa: E402


def text_sha256(text: str) -> str:
    """sha256 of the UTF-8 text without trailing whitespace, in hex (what a client's
    text is compared by)."""
    return hashlib.sha256(text.rstrip().encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Content:
    """The logical content of an answer: text per channel, tool-call arguments per
    call, finish reasons, in-stream errors, and whether it reached a terminal event."""

    texts: tuple[tuple[int, str], ...] = ()
    tools: tuple[tuple[str, str], ...] = ()
    finish: tuple[tuple[int, str], ...] = ()
    errors: int = 0
    terminal: bool = False

    @property
    def text(self) -> str:
        """The text, channel after channel (choice 0's first)."""
        return "".join(text for _, text in self.texts)

    def is_prefix_of(self, whole: Content) -> bool:
        """Whether this is ``whole`` so far: every channel's text and every call's
        arguments a prefix of ``whole``'s, no error, finish reason or terminal event
        that ``whole`` does not have at that point."""
        if self.terminal:
            return self == whole
        texts = dict(whole.texts)
        if any(not texts.get(c, "").startswith(t) for c, t in self.texts):
            return False
        tools = dict(whole.tools)
        if any(key not in tools or not tools[key].startswith(a) for key, a in self.tools):
            return False
        finish = dict(whole.finish)
        if any(finish.get(c) != r for c, r in self.finish):
            return False
        return self.errors <= whole.errors


def piece_of(profile: Profile, frame: Frame) -> EventContent:
    """What one event means for the answer (a generic stream's events mean only their
    terminal kind, as :class:`~chaosproxy.core.integrity.Side` reads them)."""
    if profile.name == "generic":
        return TERMINAL_PIECE if "terminal" in profile.classify(frame) else NOTHING
    return profile.content(frame)


def fold(trail: Iterable[tuple[str | None, EventContent]], *, dedup: bool) -> Content:
    """The content of a trail up to and including its first terminal event; with
    ``dedup``, an event whose id was already applied is skipped."""
    seen: set[str] = set()
    texts: dict[int, list[str]] = {}
    tools: dict[str, list[str]] = {}
    whole = 0
    finish: dict[int, str] = {}
    errors = 0
    terminal = False
    for event_id, piece in trail:
        if dedup and event_id:
            if event_id in seen:
                continue
            seen.add(event_id)
        for channel, fragment in piece.text:
            texts.setdefault(channel, []).append(fragment)
        for key, fragment in piece.tools:
            if not key:  # a whole call (Gemini, Ollama): numbered in order
                whole += 1
                tools[f"#{whole}"] = [fragment]
            else:
                tools.setdefault(key, []).append(fragment)
        for channel, reason in piece.finish:
            finish[channel] = reason
        if piece.error:
            errors += 1
        if piece.terminal:
            terminal = True
            break
    return Content(
        texts=tuple((c, "".join(parts)) for c, parts in sorted(texts.items())),
        tools=tuple((k, "".join(parts)) for k, parts in tools.items()),
        finish=tuple(sorted(finish.items())),
        errors=errors,
        terminal=terminal,
    )


@dataclass(frozen=True, slots=True)
class AnswerState:
    """A generation's answer as it stands: see the module docstring."""

    generation: str
    connections: int
    clean: Content
    sent: Content

    @property
    def content(self) -> AnswerContent:
        if not self.sent.terminal:
            return "incomplete"
        return "intact" if self.sent == self.clean else "altered"

    @property
    def prefix(self) -> bool:
        return self.sent.is_prefix_of(self.clean)

    def fields(
        self, *, sound: bool, defect: str | None, defect_after: int | None = None
    ) -> AnswerFields:
        """The ``answer`` object of a ``response_end`` line: ``sound``, ``defect`` and
        ``defect_after`` say how the connection that ends now went (see ``Session``)."""
        fields: AnswerFields = {
            "generation": self.generation,
            "connections": self.connections,
            "content": self.content,
            "prefix": self.prefix,
            "sound": sound,
            "defect": defect,
            "text_sha256": {
                "clean": text_sha256(self.clean.text),
                "sent": text_sha256(self.sent.text),
            },
        }
        if defect is not None and defect_after is not None:
            fields["defect_after"] = defect_after
        return fields


class Ledger:
    """One generation: its clean trail and what its connections sent.

    The clean trail is filled as the upstream's events arrive (by the session's
    upstream side, or by the recorder of a kept stream, which reads on after a cut);
    each connection adds its sent trail once, when it ends (:meth:`add_sent`).
    """

    __slots__ = ("_limit", "_size", "clean", "connections", "generation", "overflow", "sent")

    def __init__(
        self, generation: str, clean: Trail | None = None, *, limit: int | None = None
    ) -> None:
        #: The request id of the generation's first connection.
        self.generation = generation
        self.clean: Trail = [] if clean is None else clean
        self.sent: Trail = []
        self.connections = 0
        #: At most this many characters of clean content are kept (None: no bound);
        #: beyond, the clean answer stops growing and ``overflow`` is set.
        self._limit = limit
        self._size = 0
        self.overflow = False

    def add_clean(self, event_id: str | None, piece: EventContent) -> None:
        """One upstream event of the generation, before any fault."""
        if piece is NOTHING or self.overflow:
            return
        limit = self._limit
        if limit is not None:
            self._size += sum(len(f) for _, f in piece.text) + sum(len(f) for _, f in piece.tools)
            if self._size > limit:
                self.overflow = True
                return
        self.clean.append((event_id, piece))

    def add_sent(self, trail: Iterable[tuple[str | None, EventContent]]) -> None:
        """One connection of the generation ended, having sent ``trail``."""
        self.sent.extend(trail)
        self.connections += 1

    def state(self) -> AnswerState:
        return AnswerState(
            self.generation,
            self.connections,
            clean=fold(self.clean, dedup=False),
            sent=fold(self.sent, dedup=True),
        )


__all__ = [
    "AnswerContent",
    "AnswerState",
    "Content",
    "Ledger",
    "Trail",
    "fold",
    "text_sha256",
]
