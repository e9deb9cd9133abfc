"""``snapshot``: text deltas turned into running text.

Each text delta carries everything so far (its channel's text up to and including its
own piece) in place of its piece, as a provider or gateway that streams cumulative
snapshots does. The stream no longer means what the provider's format says (a client
that appends each delta shows the text many times over); the proxy's accounting still
reads each event as the piece it stands for, so a client that takes the last snapshot
gets the clean text.
"""

from __future__ import annotations

from chaosproxy.core.events import Event
from chaosproxy.core.faults._rewrite import Rewriter, skip_reason
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.slots import text_problem


class SnapshotConfig(FaultConfig):
    """No parameters."""


class SnapshotFault(Fault[SnapshotConfig], name="snapshot", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=None,
        example="snapshot",
    )

    #: Parses and re-encodes the event (measured: docs/scenarios.md, Limits).
    cost = 25

    def __init__(self, config: SnapshotConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._edit = Rewriter(self.name, ctx)
        #: The text so far, per channel.
        self._running: dict[str, str] = {}

    @classmethod
    def provider_problem(cls, config: FaultConfig, provider: str) -> str | None:
        return text_problem(provider)

    def on_event(self, ev: Event) -> list[Event]:
        slot = self._edit.text(ev)
        if slot is None:
            return [ev]
        before = self._running.get(slot.key, "")
        running = self._running[slot.key] = before + slot.value
        if not before:
            return [ev]  # the first piece is already everything so far
        self.applied += 1
        return [self._edit.snapshot(ev, slot, running, self.ctx.profile.content(ev.frame))]

    def skipped(self) -> str | None:
        return skip_reason(self, self._why_not)

    def _why_not(self) -> str:
        if not self._running:
            return "no text delta came"
        return "a single text delta came: it is its own snapshot"
