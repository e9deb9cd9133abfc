"""``resegment``: the same text in other deltas.

Every text delta of the stream is rewritten into new deltas, each a valid event in the
provider's format (its other fields as the upstream wrote them; OpenAI Responses'
``sequence_number`` given out again), whose text, concatenated, is the upstream's:

- ``at: graphemes``: a cut inside every grapheme cluster that has one (after its first
  code point); ``codepoints``: a delta per code point; ``bytes``: a delta per UTF-8
  byte, carrying what that byte completes (empty inside a character); ``words``: a cut
  at every word boundary;
- ``every: N``: pieces of N code points;
- ``phrase: TEXT``: the first occurrence of TEXT cut into ``parts`` pieces, each in a
  delta of its own (no delta carries it whole);
- ``merge: N``: runs of N adjacent deltas joined into one;
- ``empty: N``: N empty deltas after each delta (alone, or with any of the above).

The upstream's own cuts stay (``at``, ``every`` and ``phrase`` only add cuts).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from chaosproxy.core import segment
from chaosproxy.core.events import Event
from chaosproxy.core.faults._rewrite import Rewriter, skip_reason
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.slots import Slot, text_problem

At = Literal["graphemes", "codepoints", "bytes", "words"]

_AT = {
    "graphemes": segment.inside_graphemes,
    "codepoints": segment.codepoints,
    "bytes": segment.utf8_bytes,
    "words": segment.words,
}


class ResegmentConfig(FaultConfig):
    """Exactly one of ``at``, ``every``, ``phrase``, ``merge``; ``empty`` with any of
    them or alone."""

    at: At | None = None
    every: Annotated[int, Field(ge=1, le=100_000, strict=True)] | None = None
    phrase: Annotated[str, Field(min_length=1, max_length=10_000, strict=True)] | None = None
    parts: Annotated[int, Field(ge=2, le=10_000, strict=True)] | None = None
    merge: Annotated[int, Field(ge=2, le=10_000, strict=True)] | None = None
    empty: Annotated[int, Field(ge=1, le=1000, strict=True)] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> ResegmentConfig:
        given = self.given("at", "every", "phrase", "merge")
        if len(given) > 1:
            raise ValueError(f"give one of at, every, phrase, merge (got {', '.join(given)})")
        if not given and self.empty is None:
            raise ValueError("give one of at, every, phrase, merge, or empty")
        if self.parts is not None and self.phrase is None:
            raise ValueError("parts goes with phrase")
        if self.phrase is not None:
            clusters = len(segment.graphemes(self.phrase))
            if clusters < (self.parts or 2):
                raise ValueError(
                    f"phrase {self.phrase!r} has {clusters} character(s): it cannot be cut "
                    f"into {self.parts or 2} parts"
                )
        return self


class ResegmentFault(Fault[ResegmentConfig], name="resegment", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=True,
        explore=None,
        example="resegment: {at: graphemes}",
    )

    #: Parses and re-encodes the event (measured: docs/scenarios.md, Limits).
    cost = 25

    def __init__(self, config: ResegmentConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._edit = Rewriter(self.name, ctx)
        self._empty = config.empty or 0
        #: Text deltas seen, and those this fault could not rewrite (several strings).
        self._deltas = 0
        # phrase: held events (with the text slot of channel 0 deltas), their text
        self._held: list[tuple[Event, Slot | None]] = []
        self._buffer = ""
        self._found = False
        # merge: the current run of adjacent deltas
        self._run: list[tuple[Event, Slot]] = []

    @classmethod
    def provider_problem(cls, config: FaultConfig, provider: str) -> str | None:
        return text_problem(provider)

    # ------------------------------------------------------------------ events

    def on_event(self, ev: Event) -> list[Event]:
        cfg = self.config
        if cfg.phrase is not None:
            return self._phrase(ev)
        if cfg.merge is not None:
            return self._merge(ev)
        slot = self._edit.text(ev)
        if slot is None:
            return [self._edit.same(ev)]
        self._deltas += 1
        if cfg.at is not None:
            values = _AT[cfg.at](slot.value)
        elif cfg.every is not None:
            values = segment.every(slot.value, cfg.every)
        else:
            values = [slot.value]
        return self._pieces(ev, slot, values)

    def on_event_end(self) -> list[Event]:
        if self._run:
            return self._flush()
        held = [self._edit.same(ev) for ev, _ in self._held]
        self._held = []
        return held

    def _pieces(self, ev: Event, slot: Slot, values: list[str]) -> list[Event]:
        if len(values) == 1 and not self._empty:
            return [self._edit.same(ev)]
        self.applied += 1
        return self._edit.pieces(ev, slot, values, empty_after=self._empty)

    # ------------------------------------------------------------------ phrase

    def _phrase(self, ev: Event) -> list[Event]:
        if self._found:
            return self._after(ev)
        slot = self._edit.text(ev)
        if slot is not None and slot.key != "0":
            slot = None  # the phrase is looked for in the first channel's text
        if slot is None:
            if not self._held:
                return self._after(ev)
            self._held.append((ev, None))
            return []
        self._deltas += 1
        self._held.append((ev, slot))
        self._buffer += slot.value
        phrase = self.config.phrase
        assert phrase is not None
        at = self._buffer.find(phrase)
        if at >= 0:
            self._found = True
            cuts = [at + offset for offset in segment.parts(phrase, self.config.parts or 2)]
            return self._release(len(self._buffer), cuts)
        # Keep what may still begin an occurrence: the longest end of the buffer that
        # begins the phrase.
        longest = min(len(self._buffer), len(phrase) - 1)
        keep = next((n for n in range(longest, 0, -1) if self._buffer.endswith(phrase[:n])), 0)
        return self._release(len(self._buffer) - keep, [])

    def _release(self, upto: int, cuts: list[int]) -> list[Event]:
        """Send the held events whose text ends by ``upto`` (with the events between
        them), each cut at ``cuts`` (offsets in the buffer); keep the rest."""
        out: list[Event] = []
        start = 0
        released = 0
        for i, (ev, slot) in enumerate(self._held):
            if slot is None:
                if start >= upto and any(s is not None for _, s in self._held[i:]):
                    break
                out += self._after(ev)
                released = i + 1
                continue
            end = start + len(slot.value)
            if end > upto:
                break
            local = [c - start for c in cuts if start < c < end]
            if local:
                self.applied += 1
                pieces = segment.split_at(slot.value, local)
                out += self._edit.pieces(ev, slot, pieces, empty_after=self._empty)
            else:
                out += self._after(ev, slot)
            start = end
            released = i + 1
        del self._held[:released]
        self._buffer = self._buffer[start:]
        return out

    def _after(self, ev: Event, slot: Slot | None = None) -> list[Event]:
        """An event sent uncut: its sequence number moved; a text delta followed by its
        empty ones."""
        if self._empty:
            slot = slot or self._edit.text(ev)
            if slot is not None:
                return self._with_empty(ev, slot)
        return [self._edit.same(ev)]

    # ------------------------------------------------------------------ merge

    def _merge(self, ev: Event) -> list[Event]:
        slot = self._edit.text(ev)
        out: list[Event] = []
        if slot is None or slot.terminal:
            out += self._flush()
            if slot is not None:
                self._deltas += 1
                out += self._with_empty(ev, slot)
            else:
                out.append(self._edit.same(ev))
            return out
        self._deltas += 1
        if self._run:
            last, last_slot = self._run[-1]
            if (
                slot.key != last_slot.key
                or slot.path != last_slot.path
                or ev.ordinal != last.ordinal + 1
                or last.ordinal == 0
            ):
                out += self._flush()
        self._run.append((ev, slot))
        merge = self.config.merge
        assert merge is not None
        if len(self._run) == merge:
            out += self._flush()
        return out

    def _flush(self) -> list[Event]:
        run, self._run = self._run, []
        if not run:
            return []
        if len(run) == 1:
            ev, slot = run[0]
            return self._with_empty(ev, slot)
        self.applied += 1
        merged = self._edit.merged([ev for ev, _ in run], [slot for _, slot in run])
        if not self._empty:
            return [merged]
        merged_slot = self._edit.text(merged)
        assert merged_slot is not None
        return self._edit.pieces(merged, merged_slot, [merged_slot.value], empty_after=self._empty)

    def _with_empty(self, ev: Event, slot: Slot) -> list[Event]:
        if not self._empty:
            return [self._edit.same(ev)]
        self.applied += 1
        return self._edit.pieces(ev, slot, [slot.value], empty_after=self._empty)

    # ------------------------------------------------------------------ report

    def skipped(self) -> str | None:
        return skip_reason(self, self._why_not)

    def _why_not(self) -> str:
        if not self._deltas:
            return "no text delta came"
        cfg = self.config
        if cfg.phrase is not None:
            return f"phrase {cfg.phrase!r} never came in the text"
        if cfg.merge is not None:
            return f"no {cfg.merge} adjacent text deltas came to merge"
        if cfg.at == "graphemes":
            return "no grapheme cluster of several code points came in the text"
        return f"nothing to cut: every text delta was one piece already ({self._deltas})"
