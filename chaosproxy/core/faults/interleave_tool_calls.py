"""``interleave_tool_calls``: the fragments of parallel tool calls interleaved.

A provider streams parallel calls one after the other; this fault holds the events of a
run of calls and sends them interleaved, each call still valid on its own: first every
call's opening event (OpenAI Chat: the chunk with its id and name; Responses:
``response.output_item.added``; Anthropic: ``content_block_start``), in order, then the
fragments, ``step`` of each call in turn, then every call's closing events, in order.
Responses' ``sequence_number`` is given out again in the new order. Each fragment still
names its call (``index``, ``output_index``), so the arguments, assembled per call, are
unchanged. Anthropic's own API never interleaves content blocks; its format allows it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from chaosproxy.core.events import Event
from chaosproxy.core.faults._rewrite import Rewriter, skip_reason
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.slots import CallRole, fragments_problem


class InterleaveToolCallsConfig(FaultConfig):
    #: Fragments of one call sent together before the next call's turn.
    step: Annotated[int, Field(ge=1, le=10_000, strict=True)] = 1


class InterleaveToolCallsFault(
    Fault[InterleaveToolCallsConfig], name="interleave_tool_calls", stage="event"
):
    declaration = Declaration(
        needs="framed",
        keeps_answer=True,
        explore=None,
        example="interleave_tool_calls: {step: 1}",
    )

    #: Parses and re-encodes the event (measured: docs/scenarios.md, Limits).
    cost = 25

    def __init__(self, config: InterleaveToolCallsConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._edit = Rewriter(self.name, ctx)
        #: The held run: each event with its role and call (None: not a call's).
        self._held: list[tuple[Event, CallRole | None, str]] = []
        #: Calls opened in the held run, in order.
        self._calls: list[str] = []

    @classmethod
    def provider_problem(cls, config: FaultConfig, provider: str) -> str | None:
        return fragments_problem(provider)

    def on_event(self, ev: Event) -> list[Event]:
        slots = self._edit.slots
        found = slots.call(ev.frame) if slots is not None and ev.frame.data is not None else None
        role, key = found if found is not None else (None, "")
        if role is not None and role != "open" and key not in self._calls:
            role = None  # (an Anthropic text block's stop; a call this run never opened)
        if role is None:
            if self._held and "ping" in ev.kinds:
                self._held.append((ev, None, ""))
                return []
            # Anything else ends the run of calls (OpenAI Chat's finish chunk, Anthropic's
            # message_delta, Responses' next output item).
            return [*self._release(), self._edit.same(ev)]
        if role == "open":
            if key in self._calls:
                return [*self._release(), *self.on_event(ev)]
            self._calls.append(key)
        self._held.append((ev, role, key))
        return []

    def on_event_end(self) -> list[Event]:
        return self._release()

    def _release(self) -> list[Event]:
        held, self._held = self._held, []
        calls, self._calls = self._calls, []
        if len(calls) < 2:
            return [self._edit.same(ev) for ev, _, _ in held]
        opens = [i for i, (_, role, _) in enumerate(held) if role == "open"]
        closes = [i for i, (_, role, _) in enumerate(held) if role == "close"]
        others = [i for i, (_, role, _) in enumerate(held) if role is None]
        queues = {
            key: [i for i, (_, role, k) in enumerate(held) if role == "fragment" and k == key]
            for key in calls
        }
        fragments: list[int] = []
        step = self.config.step
        while any(queues.values()):
            for key in calls:
                fragments += queues[key][:step]
                del queues[key][:step]
        order = [*opens, *others, *fragments, *closes]
        if order == list(range(len(held))):
            return [self._edit.same(ev) for ev, _, _ in held]
        self.applied += 1
        return self._edit.reordered([ev for ev, _, _ in held], order)

    def skipped(self) -> str | None:
        return skip_reason(self, lambda: "no two parallel tool calls came")
