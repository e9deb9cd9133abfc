"""``oversize``: send an event whose data is ``bytes`` long, to test a client's limits.

The payload is the JSON object ``{"oversize":"xxx…"}`` padded to exactly ``bytes``
bytes (just ``x``s when ``bytes`` is under 16), so a client that can hold it parses it.
SSE sends it as ``data: <payload>``; NDJSON as the line itself; an AWS event stream as
the payload of a ``chunk`` event message (with ``terminated: false``, all of it but its
final CRC: the message never completes).

``after: N`` sends it right after upstream event N (``0``: before the first event).
With ``terminated: false`` the line never ends: no terminator is sent, and nothing
more from upstream may follow (it would become part of that line), so every later
frame is withheld; the count is in :attr:`OversizeFault.withheld`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictBool

from chaosproxy.core.events import Event
from chaosproxy.core.faults.anchor import OrdinalAnchor
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.faults.drawing import Choices, Explore, Within, int_range
from chaosproxy.core.frames import Frame
from chaosproxy.core.framing.encode import newline_of
from chaosproxy.core.framing.eventstream import event_message

MAX_BYTES = 64 * 1024 * 1024
_WRAP = (b'{"oversize":"', b'"}')


class OversizeConfig(FaultConfig):
    after: Annotated[int, Field(ge=0, strict=True)]
    bytes: Annotated[int, Field(ge=1, le=MAX_BYTES, strict=True)]
    terminated: StrictBool = True


def oversize_payload(size: int) -> bytes:
    """Exactly ``size`` bytes: a JSON object when it fits, else ``x``s."""
    overhead = len(_WRAP[0]) + len(_WRAP[1])
    if size <= overhead:
        return b"x" * size
    return b"".join([_WRAP[0], b"x" * (size - overhead), _WRAP[1]])


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    low, high = int_range(OversizeConfig, "bytes", 64, 32 * 1024)
    return {
        "after": c.between(*int_range(OversizeConfig, "after", 0, max(0, space.shape.events - 1))),
        "bytes": min(high, max(low, 64 * 8 ** c.below(4))),  # 64 B … 32 KiB
        "terminated": not c.coin(0.2),
    }


class OversizeFault(Fault[OversizeConfig], name="oversize", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=7),
        example="oversize: {after: 2, bytes: 1048576}",
    )

    def __init__(self, config: OversizeConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._anchor = OrdinalAnchor(config.after or None)
        self._newline = b"\n"
        #: True once the endless line went out (``terminated: false``).
        self.open_line = False
        #: Frames withheld after an endless line.
        self.withheld = 0

    def observe(self, ev: Event) -> None:
        self._anchor.observe(ev)

    def on_event(self, ev: Event) -> list[Event]:
        if self.open_line:
            self.withheld += 1
            return []
        self._newline = newline_of(ev.frame)
        if self.applied:
            return [ev]
        if self.config.after == 0:
            place = "before" if ev.ordinal > 0 else None
        else:
            place = self._anchor.at(ev, "after")
        if place is None:
            return [ev]
        big = self._event()
        if place == "after":
            return [ev, big]
        if not self.config.terminated:
            self.withheld += 1
            return [big]
        return [big, ev]

    def on_event_end(self) -> list[Event]:
        if not self.applied and (self.config.after == 0 or self._anchor.at_end()):
            return [self._event()]
        return []

    def _event(self) -> Event:
        self.applied += 1
        sse = self.ctx.format == "sse"
        terminated = self.config.terminated
        self.open_line = not terminated
        if self.ctx.format == "eventstream":
            return self._message(terminated)
        newline = self._newline if sse else b"\n"
        end = (newline * 2 if sse else newline) if terminated else b""
        raw = b"".join([b"data: " if sse else b"", oversize_payload(self.config.bytes), end])
        frame = Frame(
            raw=raw,
            data=str(memoryview(raw)[6 if sse else 0 : len(raw) - len(end)], "ascii"),
            newline=newline,
            complete=terminated,
        )
        # Classify the payload's shape, not its megabytes: the kinds are the same.
        shape = Frame(raw=b"", data=oversize_payload(min(self.config.bytes, 16)).decode())
        return Event(frame, 0, self.ctx.profile.classify(shape), (self.name,))

    def _message(self, terminated: bool) -> Event:
        payload = oversize_payload(self.config.bytes)
        whole = event_message("chunk", payload)
        raw = whole if terminated else whole[:-4]
        frame = Frame(
            raw, payload.decode("ascii") if terminated else None, "chunk", None, None, (), b"",
            terminated,
        )  # fmt: skip
        shape = Frame(raw=b"", data=oversize_payload(min(self.config.bytes, 16)).decode())
        return Event(frame, 0, self.ctx.profile.classify(shape), (self.name,))

    def skipped(self) -> str | None:
        if self.applied:
            return None
        return self._anchor.never_reached(f"after: {self.config.after}")
