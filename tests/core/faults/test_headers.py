"""The ``headers`` fault (docs/faults-transport.md, ``headers``): upstream bytes in, the
exact actions out, through the real Pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.headers import HeadersConfig
from tests.support.fault_http import UPSTREAM_HEADERS, fault


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (HeadersConfig, {}, "give at least one of set, remove"),
        (HeadersConfig, {"set": {}, "remove": []}, "give at least one of set, remove"),
        (HeadersConfig, {"set": {"X": 1}}, "Input should be a valid string"),
        (HeadersConfig, {"remove": "X-One"}, "Input should be a valid list"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)


def test_headers_set_and_remove_case_insensitively() -> None:
    cfg = HeadersConfig.model_validate(
        {
            "set": {"content-type": "application/json", "Content-Encoding": "gzip"},
            "remove": ["CACHE-CONTROL", "x-missing"],
        }
    )
    f = fault("headers", cfg)
    assert f.response_headers(200, dict(UPSTREAM_HEADERS)) == {
        "content-length": "44",
        "X-Request-Id": "abc",
        "content-type": "application/json",
        "Content-Encoding": "gzip",
    }
    assert f.applied == 1


def test_headers_that_change_nothing_are_skipped() -> None:
    f = fault("headers", HeadersConfig(remove=["X-Absent"]))
    assert f.response_headers(200, dict(UPSTREAM_HEADERS)) == UPSTREAM_HEADERS
    assert f.applied == 0
    assert f.skipped() is not None
