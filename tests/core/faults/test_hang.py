"""The ``hang`` fault (docs/faults-transport.md, ``hang``): upstream bytes in, the exact
actions out, through the real Pipeline."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.cut import CutConfig
from chaosproxy.core.faults.hang import HangConfig
from tests.support.fault_transport import DONE, E1, E2, cut_detail, run, script


def test_hang_never_ends_the_body() -> None:
    out, p = run([("hang", HangConfig())])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), (DONE, 1, ()), ("sleep", math.inf, "hang")]
    assert p.summary() == ({"hang": 1}, [])


def test_hang_does_not_apply_after_a_cut() -> None:
    out, p = run([("cut", CutConfig(after=1)), ("hang", HangConfig())])
    assert script(out) == [(E1, 1, ()), ("cut", "abort", cut_detail(1, "boundary"))]
    assert p.summary()[1] == [
        {"fault": "hang", "position": 1, "reason": "the body never ended (it was cut first)"}
    ]


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (HangConfig, {"x": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)
