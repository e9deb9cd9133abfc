"""The ``duplicate`` fault (docs/faults-event.md, ``duplicate``): a real Pipeline (framer,
profile, faults) over a small literal body: the exact bytes of every write, the upstream
ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.faults.duplicate import DuplicateConfig
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
        ("duplicate", DuplicateConfig(kind="error")),
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
        (DuplicateConfig, {"times": 0}),
        (DuplicateConfig, {"times": True}),
        (DuplicateConfig, {"tims": 2}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


def test_duplicate_once_by_default() -> None:
    r = run([("duplicate", DuplicateConfig(nth=3))], BODY)
    assert r.data == [E1, PING, E2, E3, E3, DONE]
    assert r.ordinals == [1, 0, 2, 3, 3, 4]
    assert r.faults == [(), (), (), (), ("duplicate",), ()]
    assert r.applied == {"duplicate": 1}


def test_duplicate_times() -> None:
    r = run([("duplicate", DuplicateConfig(kind="terminal", times=3))], BODY)
    assert r.data == [E1, PING, E2, E3, DONE, DONE, DONE, DONE]
    assert r.ordinals == [1, 0, 2, 3, 4, 4, 4, 4]
    assert r.pipeline.events_in == 4 and r.pipeline.events_out == 7


def test_duplicate_then_drop_counts_upstream_ordinals() -> None:
    # The copy of event 2 is not event 3: drop nth 3 still drops upstream event 3.
    r = assert_chunking_independent(
        [("duplicate", DuplicateConfig(nth=2)), ("drop", DropConfig(nth=3))], BODY
    )
    assert r.data == [E1, PING, E2, E2, DONE]
    assert r.ordinals == [1, 0, 2, 2, 4]
    assert r.applied == {"duplicate": 1, "drop": 1}


def test_drop_after_duplicate_drops_every_copy() -> None:
    r = run([("duplicate", DuplicateConfig(nth=2)), ("drop", DropConfig(nth=2))], BODY)
    assert r.data == [E1, PING, E3, DONE]
    assert r.applied == {"duplicate": 1, "drop": 2}
