"""What a fault's file uses to say how explore draws it (chaosproxy/core/faults/drawing.py):
choices drawn and read back, options and bounds read from the config models, and
positions within the clean stream. Choices in (recorded: 0 is the simplest), exact
parameters out."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from chaosproxy.core.faults import registry
from chaosproxy.core.faults.drawing import (
    Choices,
    Shape,
    anchor,
    int_range,
    nothing,
    options,
    position,
    selectable,
    selector,
)

CHAT = Shape("openai-chat", "sse", 27, {"start": 1, "delta": 24, "other": 1, "terminal": 1}, 6704)
RAW = Shape("generic", "raw", 3, {"other": 3}, 300)


@dataclass(frozen=True)
class Within:
    """The space as a drawer sees it."""

    shape: Shape
    endless: bool = True


def test_choices_record_and_read_back() -> None:
    drawn = Choices(random.Random(1))
    values = [drawn.below(10), drawn.below(1), drawn.between(5, 9), drawn.pick("abc")]
    assert values[1] == 0  # one option: nothing chosen, nothing recorded
    replay = Choices(drawn.record)
    assert [replay.below(10), replay.below(1), replay.between(5, 9), replay.pick("abc")] == values
    # Beyond its bound a value is the last option; past the end, 0; trailing zeros go.
    short = Choices((7, 0, 0))
    assert (short.below(3), short.below(4), short.below(5), short.below(6)) == (2, 0, 0, 0)
    assert short.record == (2,)
    assert Choices((-4,)).below(3) == 0


def test_the_models_give_options_and_bounds() -> None:
    cut = registry()["cut"].Config
    assert options(cut, "how") == ("abort", "close", "reset")  # the default first
    assert options(cut, "position")[0] == "boundary"
    assert options(registry()["corrupt"].Config, "mode") == (
        "truncate_json",
        "invalid_json",
        "invalid_utf8",
        "empty_data",
        "crc",
        "prelude_crc",
    )
    duplicate = registry()["duplicate"].Config
    assert int_range(duplicate, "times", 0, 5000) == (1, 1000)  # the model's ge and le
    assert int_range(registry()["coalesce"].Config, "events", 0, 9) == (2, 9)
    assert int_range(registry()["stall"].Config, "after", -3, 4) == (0, 4)
    with pytest.raises(ValueError, match="no value"):
        int_range(duplicate, "times", 2000, 3000)
    with pytest.raises(TypeError, match="no literal options"):
        options(duplicate, "times")


def test_the_simplest_choices_give_the_simplest_parameters() -> None:
    """All zeros: the first kind the stream has, one ``nth``, the first event."""
    space = Within(CHAT)
    assert selector(Choices(()), space) == {"kind": "delta", "nth": 1}
    assert anchor(Choices(()), space, 27) == 1
    assert position(Choices(()), 24) == 1
    assert nothing(Choices(()), space) == {}


def test_recorded_choices_read_back_as_the_forms_they_name() -> None:
    space = Within(CHAT)
    # kind: the 2nd of the stream's kinds (terminal: one event, so a single nth).
    assert selector(Choices((1, 1)), space) == {"kind": "terminal", "nth": 1}
    # delta (24 events): form 1 is a list of nth from the first +1, then a step +1.
    assert selector(Choices((0, 1, 4, 1)), space) == {"kind": "delta", "nth": [5, 7]}
    assert selector(Choices((0, 2, 0, 0)), space) == {"kind": "delta", "range": [1, 2]}
    assert selector(Choices((0, 3, 3)), space) == {"kind": "delta", "every": 5}
    assert selector(Choices((0, 4)), space) == {"kind": "delta"}
    assert selector(Choices((0, 5, 2)), space) == {"kind": "delta", "probability": 0.3}
    # Kinds the caller allows, those the stream has; none: delta.
    assert selector(Choices(()), space, ("usage", "other")) == {"kind": "other", "nth": 1}
    assert selector(Choices(()), Within(RAW), ("usage",)) == {"kind": "delta", "nth": 1}
    # An anchor: an ordinal, then the first terminal, then the first start event.
    assert anchor(Choices((0, 9)), space, 27) == 10
    assert anchor(Choices((1,)), space, 27) == "terminal"
    assert anchor(Choices((2,)), space, 27) == "start"
    assert anchor(Choices((1,)), Within(RAW), 3) == 2  # no terminal: only ordinals
    assert position(Choices((99,)), 24) == 24  # beyond the bound: the last


def test_selectable_lists_the_kinds_the_stream_has_simplest_first() -> None:
    assert selectable(CHAT) == ["delta", "terminal", "start", "other"]
    assert selectable(Shape("generic", "sse", 0)) == []


def test_a_seeded_draw_is_the_same_every_time() -> None:
    draws = [selector(Choices(random.Random(f"s:{k}")), Within(CHAT)) for k in range(50)]
    again = [selector(Choices(random.Random(f"s:{k}")), Within(CHAT)) for k in range(50)]
    assert draws == again
    assert len({repr(d) for d in draws}) > 5  # and the seeds draw different selectors
