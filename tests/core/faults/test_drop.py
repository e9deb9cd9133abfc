"""The ``drop`` fault (docs/faults-event.md, ``drop``): a real Pipeline (framer, profile,
faults) over a small literal body: the exact bytes of every write, the upstream ordinal
of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.drop import DropConfig
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
        ("drop", DropConfig(nth=9)),
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
        (DropConfig, {"nth": 0}),
        (DropConfig, {"kind": "deltas"}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


def test_drop_nth() -> None:
    r = run([("drop", DropConfig(nth=2))], BODY)
    assert r.data == [E1, PING, E3, DONE]
    assert r.ordinals == [1, 0, 3, 4]
    assert r.applied == {"drop": 1}
    assert r.skipped == []


def test_drop_by_kind_and_match() -> None:
    assert run([("drop", DropConfig(kind="terminal"))], BODY).data == [E1, PING, E2, E3]
    assert run([("drop", DropConfig(match=r'"n":[13]'))], BODY).data == [PING, E2, DONE]


def test_drop_every_event_keeps_comments() -> None:
    r = run([("drop", DropConfig())], BODY)
    assert r.data == [PING]
    assert r.applied == {"drop": 4}


def test_drop_is_independent_of_chunking() -> None:
    r = assert_chunking_independent([("drop", DropConfig(nth=[1, 3]))], BODY)
    assert r.data == [PING, E2, DONE]


def test_drop_skipped_reason_names_the_missing_ordinal() -> None:
    r = run([("drop", DropConfig(nth=9))], BODY)
    assert r.skipped == [
        {
            "fault": "drop",
            "position": 0,
            "reason": "ordinal 9 never reached: the stream had 4 events",
        }
    ]
