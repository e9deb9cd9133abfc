"""The ``reorder`` fault (docs/faults-event.md, ``reorder``): a real Pipeline (framer,
profile, faults) over a small literal body: the exact bytes of every write, the upstream
ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig, fault_rng
from chaosproxy.core.faults.reorder import ReorderConfig
from tests.support.fault_events import (
    BODY,
    DONE,
    E1,
    E2,
    E3,
    ORDINALS,
    PING,
    Spec,
    assert_chunking_independent,
    run,
)


@pytest.mark.parametrize(
    "spec",
    [
        ("reorder", ReorderConfig(type="nope")),
    ],
    ids=lambda s: s[0],
)
def test_a_fault_that_never_applies_forwards_every_byte(spec: Spec) -> None:
    r = run([spec], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.ordinals == ORDINALS
    assert r.faults == [()] * 5
    assert r.applied == {}
    [skip] = r.skipped
    assert skip["fault"] == spec[0] and skip["reason"]


@pytest.mark.parametrize(
    ("config", "values"),
    [
        (ReorderConfig, {"window": 1}),
        (ReorderConfig, {"mode": "sort"}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


def test_reorder_reverse_window_2() -> None:
    r = run([("reorder", ReorderConfig(nth=2))], BODY)
    assert r.data == [E1, PING, E3, E2, DONE]
    assert r.ordinals == [1, 0, 3, 2, 4]
    assert r.faults == [(), (), ("reorder",), ("reorder",), ()]
    assert r.applied == {"reorder": 1}


def test_reorder_window_counts_comments_too() -> None:
    r = assert_chunking_independent([("reorder", ReorderConfig(nth=1, window=3))], BODY)
    assert r.data == [E2, PING, E1, E3, DONE]
    assert r.ordinals == [2, 0, 1, 3, 4]


def test_reorder_holds_then_starts_again_at_the_next_selected_event() -> None:
    r = run([("reorder", ReorderConfig(window=2))], BODY)
    # Groups: (1, ping), (2, 3), (4 alone at the end: nothing to swap).
    assert r.data == [PING, E1, E3, E2, DONE]
    assert r.applied == {"reorder": 2}


def test_reorder_releases_a_partial_group_at_the_end() -> None:
    r = run([("reorder", ReorderConfig(nth=3, window=5))], BODY)
    assert r.data == [E1, PING, E2, DONE, E3]
    assert r.applied == {"reorder": 1}


def test_reorder_shuffle_is_seeded() -> None:
    spec = ("reorder", ReorderConfig(nth=1, window=5, mode="shuffle"))
    r = run([spec], BODY, seed=7)
    assert r.ordinals == [4, 2, 0, 3, 1]  # seed 7, fault 0
    order = list(range(5))
    fault_rng(7, 0, "reorder").shuffle(order)
    assert r.data == [[E1, PING, E2, E3, DONE][i] for i in order]
    assert run([spec], BODY, seed=7).data == r.data
    assert run([spec], BODY, seed=8).data != r.data


def test_reorder_skipped_when_no_group_changed_order() -> None:
    r = run([("reorder", ReorderConfig(kind="terminal"))], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.skipped[0]["reason"] == (
        "1 group(s) held, none changed order"
        " (a group of one at the end of the stream, or a shuffle that kept it)"
    )
