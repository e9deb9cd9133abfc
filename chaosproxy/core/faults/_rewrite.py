"""What the content faults share: one request's :class:`Rewriter`, which finds an
event's text or tool fragment (:mod:`chaosproxy.core.slots`), makes the new events
that carry it cut, merged or reordered, each valid in the provider's format, and keeps
the stream's sequence numbers consecutive (OpenAI Responses' ``sequence_number``).

Made events keep their source's ordinal (a piece of upstream event 3 is event 3 to a
later fault's selectors, as a ``duplicate`` copy is), except events that carry nothing
of an upstream one (an added empty delta), which have ordinal 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Fault, FaultContext
from chaosproxy.core.frames import Frame
from chaosproxy.core.providers.base import EventContent
from chaosproxy.core.slots import ProviderSlots, Slot, number_at, rebuild, slots_for, string_json
from chaosproxy.core.slots import string_style as _string_style


class Rewriter:
    """Per request: the content edits of one fault."""

    def __init__(self, fault: str, ctx: FaultContext) -> None:
        self.fault = fault
        self.ctx = ctx
        #: Emitted sequence number minus upstream sequence number, from here on.
        self.offset = 0
        #: Whether the stream writes non-ASCII characters escaped (None: not seen yet).
        self._escaped: bool | None = None
        self._slots_for: str | None = None
        self._slots: ProviderSlots | None = None

    # ------------------------------------------------------------------ reading

    @property
    def slots(self) -> ProviderSlots | None:
        """The stream's provider's slots (the profile may be recognised late)."""
        name = self.ctx.profile.name
        if name != self._slots_for:
            self._slots_for = name
            self._slots = slots_for(name)
        return self._slots

    def text(self, ev: Event) -> Slot | None:
        slots = self._slots_of(ev)
        return None if slots is None else self._styled(ev.frame, slots.text(ev.frame))

    def tool(self, ev: Event) -> Slot | None:
        slots = self._slots_of(ev)
        return None if slots is None else self._styled(ev.frame, slots.tool(ev.frame))

    def _slots_of(self, ev: Event) -> ProviderSlots | None:
        """The provider's slots, when ``ev`` is a whole event with data to rewrite."""
        if not ev.frame.complete or ev.frame.data is None:
            return None
        return self.slots

    def _styled(self, frame: Frame, slot: Slot | None) -> Slot | None:
        if slot is not None:
            self._style(frame, slot)
        return slot

    def _style(self, frame: Frame, slot: Slot) -> None:
        if self._escaped is None:
            self._escaped = _string_style(frame, slot)

    def sequence(self, ev: Event) -> int | None:
        slots = self.slots
        if slots is None or slots.sequence is None:
            return None
        return number_at(ev.frame, slots.sequence)

    def string(self, value: str) -> str:
        """``value`` as a JSON string, escaped as the stream escapes its own."""
        return string_json(value, self._escaped)

    # ------------------------------------------------------------------ making

    def _frame(
        self,
        ev: Event,
        slot: Slot | None,
        value: str | None,
        seq: int | None,
        *,
        payload: Any = None,
        keep_id: bool = True,
    ) -> Frame:
        edits: list[tuple[tuple[str | int, ...], str]] = []
        if slot is not None and value is not None:
            edits.append((slot.path, self.string(value)))
        slots = self.slots
        if seq is not None and slots is not None and slots.sequence is not None:
            edits.append((slots.sequence, str(seq)))
        return rebuild(ev.frame, self.ctx.format, edits, payload=payload, keep_id=keep_id)

    def _event(self, frame: Frame, ev: Event, *, ordinal: int | None = None) -> Event:
        kinds = self.ctx.profile.classify(frame)
        return Event(
            frame,
            ev.ordinal if ordinal is None else ordinal,
            kinds,
            (*ev.faults, self.fault),
            ev.splice_from,
            ev.group,
        )

    def _payload(self, ev: Event, slot: Slot, *, end: bool, opening: bool) -> Any:
        """The payload a piece is built from (None: the event's own data)."""
        slots = self.slots
        assert slots is not None
        payload: Any = None
        if slot.terminal and not end:
            payload = slots.without_end(orjson.loads(ev.frame.data or ""))
        if slot.opens and not opening:
            payload = slots.without_opening(
                payload if payload is not None else orjson.loads(ev.frame.data or ""), slot
            )
        return payload

    def pieces(
        self, ev: Event, slot: Slot, values: Sequence[str], *, empty_after: int = 0
    ) -> list[Event]:
        """``ev`` as one event per value (in place of its string), then ``empty_after``
        empty ones (ordinal 0: they carry nothing of it): only the last keeps the end
        of the stream (the empty ones go before it, then) and the SSE id; only the
        first keeps the opening of a call."""
        seq = self.sequence(ev)
        texts = [(value, False) for value in values]
        extra = [("", True)] * empty_after
        if slot.terminal:
            texts[-1:-1] = extra
        else:
            texts += extra
        base = None if seq is None else seq + self.offset
        last = len(texts) - 1
        out: list[Event] = []
        for i, (value, added) in enumerate(texts):
            end = i == last
            payload = self._payload(ev, slot, end=end, opening=i == 0)
            n = None if base is None else base + i
            frame = self._frame(ev, slot, value, n, payload=payload, keep_id=end)
            piece = self._event(frame, ev, ordinal=0 if added else None)
            if piece.ordinal and piece.group is None:
                # The pieces of one event come in a row: one group, the same ordinal.
                piece.group = (piece.ordinal, piece.ordinal)
            out.append(piece)
        if base is not None and seq is not None:
            self.offset = base + last - seq
        return out

    def same(self, ev: Event) -> Event:
        """``ev`` as it came, its sequence number moved by what came before."""
        if not self.offset:
            return ev
        seq = self.sequence(ev)
        if seq is None:
            return ev
        frame = self._frame(ev, None, None, seq + self.offset)
        return ev.touched(self.fault, frame)

    def merged(self, events: Sequence[Event], slots: Sequence[Slot]) -> Event:
        """One event carrying the text of ``events`` (adjacent text deltas of one
        channel), built from the last (its id, its place), numbered as the first."""
        last = events[-1]
        first_seq = self.sequence(events[0])
        last_seq = self.sequence(last)
        n = None if first_seq is None else first_seq + self.offset
        text = "".join(s.value for s in slots)
        frame = self._frame(last, slots[-1], text, n)
        merged = self._event(frame, last)
        if n is not None and last_seq is not None:
            self.offset = n - last_seq
        group = (events[0].ordinal, last.ordinal)
        if all(e.ordinal > 0 for e in events) and group[1] - group[0] == len(events) - 1:
            merged.group = group
        return merged

    def snapshot(self, ev: Event, slot: Slot, running: str, piece: EventContent) -> Event:
        """``ev`` carrying ``running`` (everything so far) in place of its text; it still
        means ``piece`` (its own delta) to the proxy's accounting."""
        seq = self.sequence(ev)
        n = None if seq is None or not self.offset else seq + self.offset
        frame = self._frame(ev, slot, running, n)
        frame.piece = piece
        return ev.touched(self.fault, frame)

    def reordered(self, events: Sequence[Event], order: Sequence[int]) -> list[Event]:
        """``events`` sent in ``order`` (indexes into ``events``), their sequence
        numbers given out again in the new order; each marked as this fault's, with the
        group of upstream ordinals they span when those are one run."""
        seqs = [self.sequence(e) for e in events]
        numbered = sorted(s + self.offset for s in seqs if s is not None)
        ordinals = sorted(e.ordinal for e in events if e.ordinal > 0)
        group: tuple[int, int] | None = None
        if ordinals and ordinals == list(range(ordinals[0], ordinals[0] + len(ordinals))):
            group = (ordinals[0], ordinals[-1])
        out: list[Event] = []
        k = 0
        for i in order:
            ev = events[i]
            frame = ev.frame
            if seqs[i] is not None:
                frame = self._frame(ev, None, None, numbered[k])
                k += 1
            new = ev.touched(self.fault, frame)
            new.group = group
            out.append(new)
        return out


__all__ = ["Rewriter"]


def skip_reason(fault: Fault, why: Callable[[], str]) -> str | None:
    """A content fault's :meth:`~Fault.skipped`: None once it applied; else why its
    provider's streams cannot be rewritten (its :meth:`~Fault.provider_problem`); else
    ``why()``, read from the fault's own state."""
    if fault.applied:
        return None
    return fault.provider_problem(fault.config, fault.ctx.profile.name) or why()
