"""``bom``: prepend a UTF-8 byte order mark (EF BB BF) to the body.

The BOM goes before the first frame that reaches this fault, whatever it is. It is
always added, even when the body already starts with one: a doubled BOM is a real
bug worth testing (a client strips at most one).
"""

from __future__ import annotations

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig
from chaosproxy.core.faults.drawing import Explore, nothing
from chaosproxy.core.framing.encode import BOM, with_raw


class BomConfig(FaultConfig):
    """No parameters (``bom: {}`` or ``bom:``)."""


class BomFault(Fault[BomConfig], name="bom", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=True,
        explore=Explore(draw=nothing, rank=9),
        example="bom",
    )

    def on_event(self, ev: Event) -> list[Event]:
        if self.applied:
            return [ev]
        self.applied = 1
        return [ev.touched(self.name, with_raw(ev.frame, BOM + ev.raw))]

    def skipped(self) -> str | None:
        return None if self.applied else "the body was empty"
