"""The ``status`` fault (docs/faults-transport.md, ``status``): upstream bytes in, the
exact actions out, through the real Pipeline."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Respond
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.status import StatusConfig
from tests.support.fault_http import UPSTREAM_HEADERS, fault


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (StatusConfig, {}, "Field required"),
        (StatusConfig, {"code": 99}, "greater than or equal to 100"),
        (StatusConfig, {"code": 600}, "less than or equal to 599"),
        (StatusConfig, {"code": 500, "headers": {"X": [1]}}, "headers.X"),
        (StatusConfig, {"code": 500, "body": 12}, "body"),
        (StatusConfig, {"code": 500, "retry": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)


def test_status_default_body_is_a_json_error() -> None:
    f = fault("status", StatusConfig(code=503))
    assert f.before_upstream() == [
        Respond(
            503,
            {"Content-Type": "application/json"},
            b'{"error":{"type":"chaosproxy_injected","message":"chaosproxy injected status 503"}}',
        )
    ]
    assert f.applied == 1
    assert f.response_headers(200, dict(UPSTREAM_HEADERS)) == UPSTREAM_HEADERS


def test_status_429_with_retry_after_and_a_json_body() -> None:
    cfg = StatusConfig.model_validate(
        {"code": 429, "headers": {"Retry-After": 2}, "body": {"error": {"type": "rate_limit"}}}
    )
    [respond] = fault("status", cfg).before_upstream()
    assert respond == Respond(
        429,
        {"Retry-After": "2", "Content-Type": "application/json"},
        b'{"error":{"type":"rate_limit"}}',
    )


def test_status_text_body_and_own_content_type() -> None:
    [respond] = fault("status", StatusConfig(code=500, body="boom é")).before_upstream()
    assert respond == Respond(500, {"Content-Type": "text/plain; charset=utf-8"}, "boom é".encode())
    cfg = StatusConfig(code=502, headers={"content-type": "text/html"}, body="<h1>bad gateway</h1>")
    [respond] = fault("status", cfg).before_upstream()
    assert respond == Respond(502, {"content-type": "text/html"}, b"<h1>bad gateway</h1>")
    [respond] = fault("status", StatusConfig(code=400, body=[1, "x"])).before_upstream()
    assert isinstance(respond, Respond)
    assert orjson.loads(respond.body) == [1, "x"]


def test_status_without_a_body_where_http_forbids_one() -> None:
    [respond] = fault("status", StatusConfig(code=204)).before_upstream()
    assert respond == Respond(204, {}, b"")


def test_status_reported_skipped_when_never_asked() -> None:
    f = fault("status", StatusConfig(code=500))
    assert f.skipped() == "the request never reached the upstream"
    f.before_upstream()
    assert f.skipped() is None
