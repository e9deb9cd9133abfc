"""Where ``after: N`` / ``before: N`` falls (chaosproxy/core/faults/anchor.py): the
upstream ordinal named, or the first ``terminal`` / ``start`` event's; the first later
event when event N was removed upstream of the fault; the end of the stream when N
came but nothing after it; never when the stream was shorter; each fires once."""

from __future__ import annotations

import pytest

from chaosproxy.core.events import Event
from chaosproxy.core.faults.anchor import OrdinalAnchor, Placement
from chaosproxy.core.frames import Frame

DELTA = frozenset({"delta"})
TERMINAL = frozenset({"terminal"})


def event(ordinal: int, kinds: frozenset[str] = DELTA) -> Event:
    return Event(Frame(f"data: {ordinal}\n\n".encode(), data=str(ordinal)), ordinal, kinds)


def fire(anchor: OrdinalAnchor, ordinals: list[int], where: Placement) -> list[object]:
    """What ``at`` says for each event in turn (observed first, as the faults do), and
    what ``at_end`` says after the last."""
    said: list[object] = []
    for n in ordinals:
        ev = event(n)
        anchor.observe(ev)
        said.append(anchor.at(ev, where))
    said.append(anchor.at_end())
    return said


@pytest.mark.parametrize("where", ["after", "before"])
def test_the_named_ordinal_fires_on_its_side_once(where: Placement) -> None:
    assert fire(OrdinalAnchor(2), [1, 2, 3, 4], where) == [None, where, None, None, False]


@pytest.mark.parametrize("where", ["after", "before"])
def test_an_ordinal_removed_earlier_falls_before_the_next_one_that_came(
    where: Placement,
) -> None:
    assert fire(OrdinalAnchor(2), [1, 3, 4], where) == [None, "before", None, False]


def test_an_ordinal_that_came_last_but_was_removed_falls_at_the_end() -> None:
    anchor = OrdinalAnchor(3)
    # 3 came upstream (observed), but the earlier fault dropped it: only 1 and 2 arrive.
    for n in (1, 2):
        ev = event(n)
        anchor.observe(ev)
        assert anchor.at(ev, "after") is None
    anchor.observe(event(3))
    assert (anchor.seen, anchor.fired) == (3, False)
    assert anchor.at_end() is True
    assert anchor.at_end() is False  # once


def test_a_stream_shorter_than_the_ordinal_never_reaches_it() -> None:
    anchor = OrdinalAnchor(9)
    assert fire(anchor, [1, 2, 3], "after") == [None, None, None, False]
    assert anchor.never_reached("after: 9") == "after: 9 never reached: the stream had 3 events"


def test_terminal_is_the_ordinal_of_the_first_terminal_event() -> None:
    anchor = OrdinalAnchor("terminal")
    assert anchor.ordinal is None
    said = []
    for n, kinds in ((1, DELTA), (2, DELTA), (3, TERMINAL), (4, TERMINAL)):
        ev = event(n, kinds)
        anchor.observe(ev)
        said.append(anchor.at(ev, "before"))
    assert said == [None, None, "before", None]
    assert anchor.ordinal == 3


def test_a_kind_that_never_came_is_named_in_the_reason() -> None:
    anchor = OrdinalAnchor("terminal")
    assert fire(anchor, [1, 2], "after") == [None, None, False]
    assert anchor.never_reached("after: terminal") == (
        "after: terminal never reached: the stream had no terminal event"
    )


def test_events_that_are_not_upstream_ones_neither_count_nor_fire() -> None:
    anchor = OrdinalAnchor(1)
    made_up = event(0)  # a fault's own event, or a comment
    anchor.observe(made_up)
    assert anchor.at(made_up, "after") is None
    assert anchor.seen == 0
    assert anchor.at_end() is False


def test_none_is_an_anchor_that_never_fires() -> None:
    anchor = OrdinalAnchor(None)
    assert fire(anchor, [1, 2], "after") == [None, None, False]
