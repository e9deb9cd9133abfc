"""Pipeline's per-event fast paths change nothing: the same actions, counts and summary
as a plain statement of its algorithm (the one the pipeline had before they were added:
a list per stage, every fault observing every event, clocks set on every call).

Each scenario of the library and a few fault mixes (several events out of one, none,
held ones, several actions out of one, sleeps, cuts) run over provider captures and
the benchmark's stream, read whole, one event per read and in 7-byte reads.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest

from chaosproxy.core.actions import Action, Cut, Send
from chaosproxy.core.events import Event
from chaosproxy.core.faults import build_faults, registry
from chaosproxy.core.faults.base import Fault, fault_rng
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import make_framer
from chaosproxy.core.pipeline import BUDGET_REASON, MAX_FAULT_CREDIT, MAX_FAULT_STEPS, Pipeline
from chaosproxy.core.providers import Profile, get_profile, provider_for_event
from chaosproxy.scenario import Scenario, load_scenarios, parse_scenario
from tests.support.framing_helpers import cut
from tests.support.repo import LIBRARY, fixture_bytes

MIXES = {
    "bench-framed": "- duplicate: {probability: 0}",
    "no-faults": "[]",
    "duplicate-then-drop": "- duplicate: {every: 2, times: 2}\n- drop: {nth: [2, 5]}",
    "drop-then-duplicate": "- drop: {probability: 0.3}\n- duplicate: {probability: 0.5}",
    "reorder-and-comment": "- reorder: {nth: 2, window: 3}\n- comment: {every: 2}",
    "inject-and-mutate": (
        "- inject: {after: 2, event: {data: {x: 1}}, times: 2}\n- mutate: {nth: 3, set: {y: 2}}"
    ),
    "rechunk-delay": "- rechunk: {sizes: [5, 1, 17]}\n- delay: {per_event: 10, every: 3}",
    "coalesce-then-rechunk": "- coalesce: {events: 3}\n- rechunk: {random: [3, 40]}",
    "coalesce-window": "- coalesce: {window: 5}",
    "duplicate-cut": "- duplicate: {every: 2}\n- cut: {after: 4, how: close}",
}


def scenarios() -> list[Scenario]:
    mixes = [
        parse_scenario(f"name: {n}\nfaults:\n{textwrap.indent(f, '  ')}\n", n)
        for n, f in MIXES.items()
    ]
    return mixes + list(load_scenarios([LIBRARY]).values())


def bench_body(events: int = 20) -> bytes:
    pad = b"x" * 960
    return b"".join(
        b'data: {"t": %d, "i": %d, "pad": "%b"}\n\n' % (i, i, pad) for i in range(events)
    )


BODIES: list[tuple[str, Format, str, bytes]] = [
    ("bench", "sse", "auto", bench_body()),
    (
        "bench-ndjson",
        "ndjson",
        "auto",
        bench_body().replace(b"data: ", b"").replace(b"\n\n", b"\n"),
    ),
]
for _name, _fmt, _provider in (
    ("openai_chat_n3_usage.sse", "sse", "openai-chat"),
    ("anthropic_docs_tool_use.sse", "sse", "anthropic"),
    ("gemini_2_0_flash_text.crlf.sse", "sse", "gemini"),
    ("ollama_chat_stream.ndjson", "ndjson", "ollama"),
):
    BODIES.append((_name, _fmt, _provider, fixture_bytes(_name)))  # type: ignore[arg-type]


class ReferencePipeline:
    """The pipeline's algorithm, stated plainly."""

    def __init__(
        self,
        faults: list[Fault],
        fmt: Format,
        profile: Profile,
        detect: Callable[[Frame], Profile] | None,
    ) -> None:
        self.faults = faults
        self.event_faults = [f for f in faults if f.stage == "event"]
        self.transport_faults = [f for f in faults if f.stage == "transport"]
        self.format = fmt
        self.profile = profile
        self.detect = detect
        self.framer = make_framer(fmt)
        self.ordinal = self.events_in = self.events_out = 0
        self.cut = False

    def feed(self, chunk: bytes, now: float) -> list[Action]:
        if self.cut:
            return []
        self.set_clock(now)
        out: list[Action] = []
        for frame in self.framer.feed(chunk):
            self.frame(frame, out)
            if self.stopped():
                break
        return out

    def end(self, now: float) -> list[Action]:
        if self.cut:
            return []
        self.set_clock(now)
        out: list[Action] = []
        for frame in self.framer.eof():
            self.frame(frame, out)
        for i, fault in enumerate(self.event_faults):
            if self.stopped():
                break
            for ev in fault.on_event_end():
                self.event_from(i + 1, ev, out)
        for i, fault in enumerate(self.transport_faults):
            if self.stopped():
                break
            self.actions_from(i + 1, fault.on_action_end(), out)
        return out

    def deadline(self) -> float | None:
        times = [t for f in self.transport_faults if (t := f.deadline()) is not None]
        return min(times) if times else None

    def poll(self, now: float) -> list[Action]:
        if self.cut:
            return []
        self.set_clock(now)
        out: list[Action] = []
        for i, fault in enumerate(self.transport_faults):
            t = fault.deadline()
            if t is not None and t <= now:
                self.actions_from(i + 1, fault.poll(now), out)
        return out

    def frame(self, frame: Frame, out: list[Action]) -> None:
        if self.format == "raw":
            self.ordinal += 1
            ev = Event(frame, self.ordinal, frozenset({"other"}))
        elif frame.is_event:
            if self.detect is not None:
                self.profile = self.detect(frame)
                for fault in self.faults:
                    fault.ctx.stream.profile = self.profile
                self.detect = None
            self.ordinal += 1
            ev = Event(frame, self.ordinal, self.profile.classify(frame))
        else:
            ev = Event(frame, 0, frozenset())
        if ev.ordinal:
            self.events_in += 1
            for fault in self.faults:
                fault.observe(ev)
        self.event_from(0, ev, out)

    def event_from(self, start: int, ev: Event, out: list[Action]) -> None:
        events = [ev]
        for fault in self.event_faults[start:]:
            if not events:
                return
            events = [o for e in events for o in fault.on_event(e)]
        for e in events:
            if self.cut:
                return
            if e.ordinal or e.frame.is_event:
                self.events_out += 1
            self.actions_from(0, [Send(e.raw, (e,), 1, e.faults)], out)

    def actions_from(self, start: int, actions: list[Action], out: list[Action]) -> None:
        for fault in self.transport_faults[start:]:
            if not actions:
                return
            actions = [o for a in actions for o in fault.on_action(a)]
        for a in actions:
            out.append(a)
            if isinstance(a, Cut):
                self.cut = True
                return

    def stopped(self) -> bool:
        return self.cut

    def set_clock(self, now: float) -> None:
        for fault in self.transport_faults:
            fault.set_clock(now)


Driven = Pipeline | ReferencePipeline


def drive(pipeline: Driven, reads: list[bytes]) -> list[tuple[float, list[Action]]]:
    """Feed the reads 1 ms apart, polling when a deadline has passed, then end."""
    calls: list[tuple[float, list[Action]]] = []
    now = 0.0
    for chunk in reads:
        now += 0.001
        deadline = pipeline.deadline()
        if deadline is not None and deadline <= now:
            calls.append((now, pipeline.poll(now)))
        calls.append((now, pipeline.feed(chunk, now)))
    calls.append((now, pipeline.end(now)))
    return calls


def build(
    scenario: Scenario, fmt: Format, provider: str, seed: int
) -> tuple[list[Fault], Profile, Callable[[Frame], Profile] | None]:
    profile = get_profile("generic" if provider == "auto" else provider)
    faults = build_faults(scenario.faults, seed, fmt, profile)
    faults = [f for f in faults if fmt != "raw" or not f.needs_framing(f.config)]

    def detect(frame: Frame) -> Profile:
        return get_profile(provider_for_event(frame))

    return faults, profile, detect if provider == "auto" else None


def reads_of(body: bytes, fmt: Format, how: str) -> list[bytes]:
    if how == "whole":
        return [body]
    if how == "7-byte":
        return cut(body, range(7, len(body), 7))
    sep = b"\n" if fmt == "ndjson" else (b"\r\n\r\n" if b"\r\n\r\n" in body else b"\n\n")
    pieces = body.split(sep)
    return [p + sep for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: s.name)
@pytest.mark.parametrize("body", BODIES, ids=[b[0] for b in BODIES])
@pytest.mark.parametrize("how", ["whole", "event", "7-byte"])
def test_pipeline_equals_the_plain_algorithm(
    scenario: Scenario, body: tuple[str, Format, str, bytes], how: str
) -> None:
    _, fmt, provider, data = body
    if scenario.format not in ("auto", fmt):
        fmt = scenario.format  # type: ignore[assignment]
    reads = reads_of(data, fmt, how)
    faults, profile, detect = build(scenario, fmt, provider, seed=7)
    fast = Pipeline(faults, fmt, profile, detect_profile=detect)
    faults, profile, detect = build(scenario, fmt, provider, seed=7)
    plain = ReferencePipeline(faults, fmt, profile, detect)
    got = drive(fast, reads)
    assert got == drive(plain, reads)
    assert any(actions for _, actions in got) or fmt == "raw" or not data
    assert (fast.events_in, fast.events_out) == (plain.events_in, plain.events_out)
    assert fast.summary() == Pipeline(plain.faults, fmt, profile).summary()


@pytest.mark.parametrize("reads", [1, 10, 100])
def test_probability_zero_draws_once_per_counted_event(reads: int) -> None:
    """``duplicate: {probability: 0}`` never fires but draws its seeded generator once
    per event that passes its other selectors, as it always did: a seed's draws for
    the next events do not depend on how a selector is evaluated."""
    scenario = parse_scenario(
        "name: p\nfaults:\n  - duplicate: {probability: 0}\n"
        "  - drop: {kind: terminal, probability: 0}\n",
        "p",
    )
    body = bench_body(reads) + b"data: [DONE]\n\n"
    faults = build_faults(scenario.faults, 11, "sse", get_profile("openai-chat"))
    pipeline = Pipeline(faults, "sse", get_profile("openai-chat"))
    sends = pipeline.feed(body, 0.0) + pipeline.end(0.0)
    assert b"".join(s.data for s in sends if hasattr(s, "data")) == body
    every = fault_rng(11, 0, "duplicate")
    for _ in range(reads + 1):
        every.random()
    terminal_only = fault_rng(11, 1, "drop")
    terminal_only.random()
    assert faults[0].ctx.rng.getstate() == every.getstate()
    assert faults[1].ctx.rng.getstate() == terminal_only.getstate()
    assert [f.applied for f in faults] == [0, 0]


def _spied(fault: Fault, seen: list[int]) -> None:
    """Record the ordinal of each event ``fault.on_event`` is called with (a fault is
    Python: the pipeline calls it by name, an attribute of the instance first)."""
    on_event = fault.on_event

    def spy(ev: Event) -> list[Event]:
        seen.append(ev.ordinal)
        return on_event(ev)

    fault.on_event = spy  # type: ignore[method-assign]


def test_a_fault_that_passes_unselected_events_sees_only_the_selected_ones() -> None:
    """``drop``, ``duplicate``, ``corrupt`` and ``mutate`` give back an event they do
    not select as it came: the pipeline asks their selector and calls them with the
    selected events only (the output is the plain algorithm's: above); a fault that
    may act on any event (``comment``) is called with each."""
    passing = sorted(n for n, t in registry().items() if getattr(t, "passes_unselected", False))
    assert passing == ["corrupt", "drop", "duplicate", "mutate"]
    scenario = parse_scenario(
        "name: g\nfaults:\n  - mutate: {nth: [2, 4], set: {y: 1}}\n  - comment: {every: 9}\n"
        "  - duplicate: {nth: 3}\n",
        "g",
    )
    profile = get_profile("openai-chat")
    faults = build_faults(scenario.faults, 5, "sse", profile)
    seen: dict[str, list[int]] = {f.name: [] for f in faults}
    for fault in faults:
        _spied(fault, seen[fault.name])
    pipeline = Pipeline(faults, "sse", profile)
    sends = pipeline.feed(_deltas(5), 0.0) + pipeline.end(0.0)
    assert seen == {"mutate": [2, 4], "comment": [1, 2, 3, 4, 5, 6], "duplicate": [3]}
    assert len(sends) == 6 + 1  # (the third event twice)
    assert [f.applied for f in faults] == [2, 0, 1]


# --------------------------------------------------------------------------- the budget


def _run(faults_yaml: str, body: bytes, *, reads: str = "event") -> list[Action]:
    scenario = parse_scenario(f"name: b\nfaults:\n{textwrap.indent(faults_yaml, '  ')}\n", "b")
    profile = get_profile("openai-chat")
    pipeline = Pipeline(build_faults(scenario.faults, 3, "sse", profile), "sse", profile)
    return [a for _, actions in drive(pipeline, reads_of(body, "sse", reads)) for a in actions]


def _deltas(n: int) -> bytes:
    return (
        b"".join(b'data: {"choices":[{"delta":{"content":"w%d "}}]}\n\n' % i for i in range(n))
        + b"data: [DONE]\n\n"
    )


BUDGET_CUT = Cut("abort", "duplicate", {"reason": BUDGET_REASON})


def test_faults_that_multiply_events_are_cut_by_the_budget_before_any_of_it_is_sent() -> None:
    """Three ``duplicate: {times: 1000}`` would make 10⁹ events of the first one (minutes
    of CPU); the budget aborts the response at once, nothing of the flood sent."""
    actions = _run("- duplicate: {times: 1000}\n" * 3, _deltas(3))
    assert actions == [BUDGET_CUT]
    assert BUDGET_CUT.detail["reason"] == (
        f"fault budget: the faults took more than {MAX_FAULT_STEPS} steps per upstream "
        f"event (beyond a reserve of {MAX_FAULT_CREDIT})"
    )


def test_what_was_sent_before_the_budget_ran_out_stays_sent() -> None:
    """A sustained 2,002 steps per event (a thousand copies of each, then a second
    fault) draws the reserve down: the events before are sent whole, then the cut."""
    actions = _run("- duplicate: {times: 1000}\n- drop: {nth: 999999}\n", _deltas(30))
    sends = [a for a in actions if isinstance(a, Send)]
    # Each event costs 1 + 1001 (duplicate) + 1001 * (1 + 1) (drop) = 3004 steps and the
    # frame brings 500: the reserve of 20,000 covers 7 events.
    steps = 1 + 1001 + 1001 * 2
    whole = (MAX_FAULT_CREDIT - steps) // (steps - MAX_FAULT_STEPS) + 1
    assert whole == 7
    assert len(sends) == 1001 * whole
    assert sends[-1].data == b'data: {"choices":[{"delta":{"content":"w6 "}}]}\n\n'
    assert actions[-1] == Cut("abort", "drop", {"reason": BUDGET_REASON})


def test_one_large_amplification_fits_the_reserve() -> None:
    """``times: 1000`` on one event, and on every event with nothing after it (1,002
    steps against 500 a frame: the reserve drains by 502 an event), are sent whole for
    a short answer."""
    actions = _run("- duplicate: {nth: 2, times: 1000}\n- drop: {nth: 999999}\n", _deltas(40))
    assert not any(isinstance(a, Cut) for a in actions)
    assert len(actions) == 41 + 1000
    actions = _run("- duplicate: {times: 1000}\n", _deltas(20))
    assert not any(isinstance(a, Cut) for a in actions)
    assert len(actions) == 21 * 1001


def test_a_costly_fault_spends_its_cost_per_event() -> None:
    """``mutate`` costs 15 steps an event: 32 of them (the most a scenario may have)
    cost 480 + 32, just over the 500 a frame brings, so a long answer runs on the
    reserve, and is cut at the event that spends its last step."""
    from chaosproxy.core.faults.mutate import MutateFault

    assert MutateFault.cost == 15
    faults = "- mutate: {set: {id: x}}\n" * 32
    per_event = 32 * (MutateFault.cost + 1)
    assert per_event == 512
    events = (MAX_FAULT_CREDIT - per_event) // (per_event - MAX_FAULT_STEPS) + 1
    actions = _run(faults, _deltas(events - 1))  # ( + [DONE]: `events` events)
    assert not any(isinstance(a, Cut) for a in actions)
    actions = _run(faults, _deltas(events))
    assert actions[-1] == Cut("abort", "mutate", {"reason": BUDGET_REASON})
    assert len([a for a in actions if isinstance(a, Send)]) == events


def test_the_budget_is_the_same_however_the_body_is_read() -> None:
    body = _deltas(30)
    faults = "- duplicate: {times: 1000}\n- drop: {nth: 999999}\n"
    assert _run(faults, body, reads="whole") == _run(faults, body, reads="event")
