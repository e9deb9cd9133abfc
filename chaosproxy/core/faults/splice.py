"""``splice``: insert events taken from another framed stream of this proxy.

A response contaminated by another: a late delta from a cancelled answer, another
answer's text. ``from: previous`` takes from the framed stream of the same tenant
(:mod:`chaosproxy.core.tenancy`) that finished last before this request started
(whatever its scenario), ``from: concurrent`` from one of the same tenant's running at
the moment of the splice (another one than this); with ``across_tenants: true`` from
any tenant's (another user's text: a scenario says so, and ``validate`` and ``serve``
warn). An anonymous request kept apart (no credentials, tenant header or tenant cookie:
nothing tells its user from another's) takes from no stream but with ``across_tenants``.
``count`` consecutive events of ``kind`` (as the source's provider classified
them) are chosen with the fault's own generator — the same seed and the same source give
the same events — and sent right ``after`` the upstream event named, re-framed for this
stream: SSE with this stream's line endings (the source's ``event:`` name kept, its
``id:`` not), NDJSON as one compact JSON line. Each spliced event names its source
(``Event.splice_from``; the frame log's ``splice_from``). Spliced events have ordinal 0.

The sources are the proxy's recent streams (:mod:`chaosproxy.core.recent`); offline
(``chaosproxy simulate``) there are none, and the fault is reported skipped.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import orjson
from pydantic import ConfigDict, Field, field_validator

from chaosproxy.core.events import Event
from chaosproxy.core.faults.anchor import Anchor, OrdinalAnchor
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext, known_kind
from chaosproxy.core.faults.drawing import Choices, Explore, Shape, Within, int_range, position
from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import parse_block
from chaosproxy.core.framing.encode import data_bytes, ndjson_terminator, newline_of
from chaosproxy.core.recent import StreamRecord
from chaosproxy.core.tenancy import apart

_NEWLINES = re.compile(rb"\r\n|\r|\n")


class SpliceConfig(FaultConfig):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True
    )

    #: Where the events come from: the stream that finished last, or one running now.
    from_: Literal["previous", "concurrent"] = Field(alias="from")
    #: The upstream event they follow: an ordinal, or the first ``terminal``/``start``.
    after: Anchor
    #: How many consecutive events of the source to insert.
    count: Annotated[int, Field(ge=1, le=1000, strict=True)] = 1
    #: The kind of the source's events to take (as its provider classified them).
    kind: str = "delta"
    #: Take from every tenant's streams, not only this request's tenant's: another
    #: user's text (warned at ``validate`` and at start).
    across_tenants: Annotated[bool, Field(strict=True)] = False

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        return known_kind(v)


def _fits(shape: Shape) -> bool:
    return shape.count("delta") > 0


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    deltas = space.shape.count("delta")
    after: int | str = "terminal" if c.coin(0.2) else position(c, deltas)
    return {
        "from": "previous",  # one client at a time: no stream runs beside it
        "after": after,
        "count": c.between(*int_range(SpliceConfig, "count", 1, 2)),
        "kind": "delta",
    }


class SpliceFault(Fault[SpliceConfig], name="splice", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=12, fits=_fits),
        example="splice: {from: previous, after: 3, count: 2}",
    )

    def __init__(self, config: SpliceConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._anchor = OrdinalAnchor(config.after)
        self._last: Frame | None = None
        #: Why the splice found nothing to insert, once it tried.
        self._why: str | None = None
        #: Whose streams it takes from (None: everyone's).
        self._tenant = None if config.across_tenants else ctx.tenant
        #: ``from: previous``: the stream (of the tenant) that finished last before this
        #: request began.
        streams = ctx.streams
        self._previous = None
        if streams is not None and config.from_ == "previous":
            tenant = self._tenant
            self._previous = streams.previous if tenant is None else streams.previous_of(tenant)

    def observe(self, ev: Event) -> None:
        self._anchor.observe(ev)

    def on_event(self, ev: Event) -> list[Event]:
        if ev.frame.data is not None:
            self._last = ev.frame  # the stream's line endings, for the spliced events
        place = self._anchor.at(ev, "after")
        if place is None:
            return [ev]
        made = self._splice()
        return [ev, *made] if place == "after" else [*made, ev]

    def on_event_end(self) -> list[Event]:
        if self._anchor.at_end():
            return self._splice()
        return []

    # ------------------------------------------------------------------ the source

    def _splice(self) -> list[Event]:
        chosen = self._choose()
        if chosen is None:
            return []
        source, frames = chosen
        self.applied += 1
        profile = self.ctx.profile
        return [
            Event(frame, 0, profile.classify(frame), (self.name,), source.request_id)
            for frame in frames
        ]

    def _choose(self) -> tuple[StreamRecord, list[Frame]] | None:
        """The source stream and the re-framed events to insert (seeded), or None
        (``_why`` says why)."""
        cfg = self.config
        streams = self.ctx.streams
        what = f"{cfg.kind} events"
        if streams is None:
            self._why = (
                f"from: {cfg.from_}: no other stream to take from (an offline run has only its own)"
            )
            return None
        rng = self.ctx.rng
        tenant = self._tenant
        if tenant is not None and apart(tenant):
            self._why = (
                f"from: {cfg.from_}: an anonymous request (no credentials, tenant header or "
                "tenant cookie) takes from no other stream: nothing tells its user apart"
            )
            return None
        whose = "" if tenant is None else " of this tenant"
        if cfg.from_ == "previous":
            source = self._previous
            if source is None:
                self._why = f"from: previous: no framed stream{whose} had finished before this one"
                return None
            frames = self._usable(source)
            if not frames:
                self._why = f"from: previous: stream {source.request_id} had no {what}"
                if source.format != self.ctx.format:
                    self._why += f" that fit {self.ctx.format}"
                return None
        else:
            candidates = []
            running = streams.running(exclude=self.ctx.request_id, tenant=tenant)
            for record in running:
                usable = self._usable(record)
                if usable:
                    candidates.append((record, usable))
            if not candidates:
                self._why = (
                    f"from: concurrent: no other framed stream{whose} was running"
                    if not running
                    else f"from: concurrent: no other running stream{whose} had {what} yet"
                )
                return None
            source, frames = candidates[rng.randrange(len(candidates))]
        count = min(cfg.count, len(frames))
        start = rng.randrange(len(frames) - count + 1)
        return source, frames[start : start + count]

    def _usable(self, source: StreamRecord) -> list[Frame]:
        """The source's kept events of the wanted kind, each re-framed for this stream
        (those that cannot be, left out)."""
        out = []
        for frame in source.events(self.config.kind):
            made = self._reframe(frame, source)
            if made is not None:
                out.append(made)
        return out

    def _reframe(self, frame: Frame, source: StreamRecord) -> Frame | None:
        if self.ctx.format == "eventstream" or source.format == "eventstream":
            # A message is moved whole (its headers name it); no other framing has one.
            same = source.format == self.ctx.format
            return parse_block(frame.raw, "eventstream") if same and frame.complete else None
        data = data_bytes(frame, source.format)
        last = self._last
        if self.ctx.format == "sse":
            nl = newline_of(last) if last is not None else b"\n"
            lines = []
            if source.format == "sse" and frame.event:
                lines.append(b"event: " + frame.event.encode("utf-8"))
            lines += [b"data: " + part for part in _NEWLINES.split(data)]
            return parse_block(b"".join(line + nl for line in lines) + nl, "sse")
        # NDJSON: one JSON value on one line.
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if _NEWLINES.search(data):
            data = orjson.dumps(value)
        nl = (ndjson_terminator(last.raw) if last is not None else b"") or b"\n"
        return parse_block(data + nl, "ndjson")

    def skipped(self) -> str | None:
        if self.applied:
            return None
        if self._why is not None:
            return self._why
        return self._anchor.never_reached(f"after: {self.config.after}")
