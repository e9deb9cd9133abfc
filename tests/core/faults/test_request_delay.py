"""The ``request_delay`` fault (docs/faults-transport.md, ``request_delay``): decided
before the upstream answers or applied to the response headers: actions in, actions out,
exact."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.support.fault_http import fault


def test_request_delay_holds_the_body_before_anything_else() -> None:
    from chaosproxy.core.actions import HoldRequest
    from chaosproxy.core.faults.request_delay import RequestDelayConfig

    f = fault("request_delay", RequestDelayConfig.model_validate({"duration": "1.5s"}))
    assert f.before_request() == [HoldRequest(1.5, fault="request_delay")]
    assert f.before_upstream() == [] and f.applied == 1 and f.skipped() is None
    idle = fault("request_delay", RequestDelayConfig.model_validate({"duration": 0}))
    assert idle.before_request() == [] and idle.skipped() == "the duration was 0"


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("request_delay", {}, "Field required"),
        ("request_delay", {"duration": "soon"}, "not a duration"),
    ],
)
def test_request_faults_refuse_bad_configs(name: str, params: dict[str, Any], message: str) -> None:
    from chaosproxy.core.faults import registry

    with pytest.raises(ValidationError, match=message):
        registry()[name].Config.model_validate(params)
