"""Events (chaosproxy/core/events.py): a frame with its upstream ordinal and kinds; an
event marked by a fault keeps everything else (its ordinal, kinds, splice source and
group), adds the fault after those before, and takes a new frame when given one;
equal events hash alike."""

from __future__ import annotations

from chaosproxy.core.events import Event
from chaosproxy.core.frames import Frame

FRAME = Frame(b"data: hi\n\n", data="hi")
OTHER = Frame(b"data: ho\n\n", data="ho")


def test_a_touched_event_keeps_all_but_its_faults_and_frame() -> None:
    ev = Event(FRAME, 4, frozenset({"delta"}), ("drop",), "r-9", (3, 5))
    touched = ev.touched("rechunk")
    assert touched == Event(FRAME, 4, frozenset({"delta"}), ("drop", "rechunk"), "r-9", (3, 5))
    assert touched.frame is FRAME
    renewed = touched.touched("resegment", OTHER)
    assert (renewed.frame, renewed.raw, renewed.faults) == (
        OTHER,
        b"data: ho\n\n",
        ("drop", "rechunk", "resegment"),
    )
    assert ev.faults == ("drop",)  # the event it came from is as it was


def test_an_event_is_its_frames_bytes_and_compares_by_value() -> None:
    ev = Event(FRAME, 1, frozenset({"delta"}))
    assert ev.raw == b"data: hi\n\n"
    assert (ev.faults, ev.splice_from, ev.group) == ((), None, None)
    same = Event(Frame(b"data: hi\n\n", data="hi"), 1, frozenset({"delta"}))
    assert ev == same and hash(ev) == hash(same)
    assert ev != Event(FRAME, 2, frozenset({"delta"}))
    assert len({ev, same, ev.touched("x")}) == 2
