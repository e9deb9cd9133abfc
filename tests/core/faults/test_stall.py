"""The ``stall`` fault (docs/faults-transport.md, ``stall``): upstream bytes in, the exact
actions out, through the real Pipeline."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Sleep
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.rechunk import RechunkConfig
from chaosproxy.core.faults.stall import StallConfig
from tests.support.fault_transport import BODY, DONE, E1, E2, R, Spec, body, run, script


def test_stall_after_an_ordinal_for_a_duration() -> None:
    out, p = run([("stall", StallConfig(after=1, duration=2500))])
    assert script(out) == [(E1, 1, ()), ("sleep", 2.5, "stall"), (E2, 1, ()), (DONE, 1, ())]
    assert p.summary() == ({"stall": 1}, [])


def test_stall_forever_after_terminal() -> None:
    out, _ = run([("stall", StallConfig(after="terminal", forever=True))])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), (DONE, 1, ()), ("sleep", math.inf, "stall")]


def test_stall_before_the_first_byte() -> None:
    out, _ = run([("stall", StallConfig(after=0, duration=1000))])
    assert script(out)[:2] == [("sleep", 1.0, "stall"), (E1, 1, ())]
    # An empty body still stalls.
    out, _ = run([("stall", StallConfig(after=0, duration=1000))], b"")
    assert script(out) == [("sleep", 1.0, "stall")]


def test_stall_after_the_last_piece_of_a_rechunked_event() -> None:
    specs: list[Spec] = [
        ("rechunk", RechunkConfig(size=10)),
        ("stall", StallConfig(after=1, duration=5)),
    ]
    out, _ = run(specs, E1)
    assert script(out) == [(E1[:10], 0, R), (E1[10:], 1, R), ("sleep", 0.005, "stall")]


def test_stall_skipped_when_the_event_never_came() -> None:
    out, p = run([("stall", StallConfig(after=9, forever=True))])
    assert body(out) == BODY
    assert not any(isinstance(a, Sleep) for a in out)
    assert p.summary()[1] == [
        {"fault": "stall", "position": 0, "reason": "event 9 never came: the stream ended first"}
    ]
    _, p = run([("stall", StallConfig(after="start", duration=1))])
    assert p.summary()[1][0]["reason"] == "a start event never came: the stream ended first"


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (StallConfig, {"after": 1}, "give exactly one of duration, forever"),
        (StallConfig, {"after": 1, "duration": 1, "forever": True}, "give exactly one of"),
        (StallConfig, {"after": -1, "duration": 1}, "greater than or equal to 0"),
        (StallConfig, {"after": "middle", "duration": 1}, "'start' or 'terminal'"),
        (StallConfig, {"duration": 1}, "Field required"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)
