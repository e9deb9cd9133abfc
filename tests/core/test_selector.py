"""The event selectors' per-request state (core/selector.py): which upstream events a
selecting fault acts on, counted before any fault runs."""

from __future__ import annotations

import random

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import SelectorConfig
from chaosproxy.core.frames import Frame
from chaosproxy.core.selector import Selector


def _event(ordinal: int, data: str = "{}", kinds: frozenset[str] = frozenset({"delta"})) -> Event:
    return Event(Frame(f"data: {data}\n\n".encode(), data), ordinal, kinds)


def _selected(selector: Selector, events: list[Event]) -> list[int]:
    for ev in events:
        selector.observe(ev)
    return [ev.ordinal for ev in events if selector.selects(ev)]


def test_ordinals_count_the_events_that_pass_the_filters() -> None:
    events = [_event(n, '{"type": "a"}' if n % 2 else '{"type": "b"}') for n in range(1, 11)]
    config = SelectorConfig(type="a", nth=[2, 4])
    selector = Selector(config, random.Random(0))
    assert _selected(selector, events) == [3, 7]  # the 2nd and 4th "a" events
    assert selector.matched == 5
    assert selector.unreached() is None
    assert _selected(Selector(SelectorConfig(every=3), random.Random(0)), events) == [3, 6, 9]
    assert _selected(Selector(SelectorConfig(range=(4, 6)), random.Random(0)), events) == [4, 5, 6]
    assert _selected(Selector(SelectorConfig(match="b"), random.Random(0)), events) == [
        2,
        4,
        6,
        8,
        10,
    ]
    terminal = [_event(1), _event(2, kinds=frozenset({"terminal"}))]
    assert _selected(Selector(SelectorConfig(kind="terminal"), random.Random(0)), terminal) == [2]


def test_a_probability_draws_once_per_counted_event_from_the_faults_generator() -> None:
    events = [_event(n) for n in range(1, 201)]
    selector = Selector(SelectorConfig(probability=0.25), random.Random(7))
    chosen = _selected(selector, events)
    draws = random.Random(7)
    assert chosen == [n for n in range(1, 201) if draws.random() < 0.25]
    assert len(chosen) == 60
    zero = Selector(SelectorConfig(probability=0), random.Random(7))
    assert _selected(zero, events) == []
    assert zero.matched == 200


def test_made_up_events_and_copies_are_not_counted() -> None:
    selector = Selector(SelectorConfig(nth=1), random.Random(0))
    assert _selected(selector, [_event(0), _event(1)]) == [1]
    assert selector.selects(_event(1, "copy"))  # a copy of upstream event 1: selected too
    assert selector.matched == 1


def test_an_ordinal_never_reached_says_so() -> None:
    selector = Selector(SelectorConfig(kind="terminal", nth=3), random.Random(0))
    _selected(selector, [_event(1, kinds=frozenset({"terminal"}))])
    assert selector.unreached() == "ordinal 3 never reached: the stream had 1 terminal events"
    every = Selector(SelectorConfig(every=5), random.Random(0))
    _selected(every, [_event(1), _event(2)])
    assert every.unreached() == "ordinal 5 never reached: the stream had 2 events"
