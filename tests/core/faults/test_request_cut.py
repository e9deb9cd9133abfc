"""The ``request_cut`` fault (docs/faults-transport.md, ``request_cut``): decided before
the upstream answers or applied to the response headers: actions in, actions out, exact."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.support.fault_http import fault


@pytest.mark.parametrize(("how", "after"), [("close", 0), ("reset", 1024)])
def test_request_cut_ends_the_upload(how: str, after: int) -> None:
    from chaosproxy.core.actions import CutRequest
    from chaosproxy.core.faults.request_cut import RequestCutConfig

    f = fault("request_cut", RequestCutConfig.model_validate({"how": how, "after_bytes": after}))
    assert f.skipped() == "the request was never received"
    assert f.before_request() == [CutRequest(how, after, fault="request_cut")]  # type: ignore[arg-type]
    assert f.before_upstream() == [] and f.applied == 1 and f.skipped() is None
    assert RequestCutConfig().how == "reset" and RequestCutConfig().after_bytes == 0


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("request_cut", {"how": "abort"}, "Input should be 'close' or 'reset'"),
        ("request_cut", {"after_bytes": -1}, "greater than or equal to 0"),
    ],
)
def test_request_faults_refuse_bad_configs(name: str, params: dict[str, Any], message: str) -> None:
    from chaosproxy.core.faults import registry

    with pytest.raises(ValidationError, match=message):
        registry()[name].Config.model_validate(params)
