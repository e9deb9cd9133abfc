"""The ``pong`` fault (docs/faults-websocket.md): each ping's pong, as the relay is
told to send it: late, never, or as usual for the first ``after`` pings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults._websocket import Pong
from chaosproxy.core.faults.pong import PongConfig
from tests.support.fault_websocket import make


def test_drop_answers_no_ping_after_the_first_n() -> None:
    fault = make("pong", {"drop": True, "after": 2})
    assert [fault.on_ping(Pong(0.0)) for _ in range(4)] == [Pong(0.0), Pong(0.0), None, None]
    assert fault.applied == 2


def test_delay_adds_its_time_to_each_pong() -> None:
    fault = make("pong", {"delay": "1.5s"})
    assert fault.on_ping(Pong(0.0)) == Pong(1.5, "pong")
    assert fault.on_ping(Pong(0.25)) == Pong(1.75, "pong")  # a delay before it adds up


def test_no_ping_no_application() -> None:
    assert make("pong", {"drop": True}).skipped() == "never applied"


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({}, "give exactly one of delay, drop"),
        ({"drop": True, "delay": 10}, "give exactly one of delay, drop"),
        ({"drop": False}, "Input should be True"),
        ({"drop": True, "after": -1}, "greater than or equal to 0"),
    ],
)
def test_bad_configs_are_refused_with_a_reason(config: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        PongConfig.model_validate(config)
