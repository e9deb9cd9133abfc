"""HTTP faults: decided before the upstream answers (``before_upstream``) or applied to
the response headers (``response_headers``). Actions in, actions out, exact."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Cut, Respond, Send, Sleep
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import Fault, FaultConfig
from chaosproxy.core.faults.compress import CompressConfig
from chaosproxy.core.faults.cut import CutConfig
from chaosproxy.core.faults.delay import DelayConfig
from chaosproxy.core.faults.headers import HeadersConfig
from chaosproxy.core.faults.status import StatusConfig
from chaosproxy.core.frames import Format
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile

GENERIC = get_profile("generic")

UPSTREAM_HEADERS = {
    "Content-Type": "text/event-stream",
    "content-length": "44",
    "Cache-Control": "no-cache",
    "X-Request-Id": "abc",
}


def fault(name: str, config: FaultConfig) -> Fault:
    return build_faults([(name, config)], 1, "sse", GENERIC)[0]


# ---------------------------------------------------------------------- status


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


# ---------------------------------------------------------------------- headers


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


# ---------------------------------------------------------------------- stage


@pytest.mark.parametrize("fmt", ["sse", "ndjson", "raw"])
def test_http_faults_take_no_part_in_the_body_but_are_reported(fmt: Format) -> None:
    status = fault("status", StatusConfig(code=500))
    headers = fault("headers", HeadersConfig(set={"X-Chaos": "1"}))
    assert (status.stage, headers.stage) == ("http", "http")
    assert not status.needs_framing(status.config)
    assert not headers.needs_framing(headers.config)
    headers.response_headers(200, dict(UPSTREAM_HEADERS))
    p = Pipeline([status, headers], fmt, GENERIC)
    body = b"data: x\n\n" if fmt == "sse" else b'{"a":1}\n'
    assert [(type(a), getattr(a, "data", None)) for a in p.feed(body, 0.0)] == [(Send, body)]
    assert p.end(0.0) == []
    assert p.summary() == (
        {"headers": 1},
        [{"fault": "status", "position": 0, "reason": "the request never reached the upstream"}],
    )


# ---------------------------------------------------------------------- delay, cut


def test_delay_headers_holds_the_response_headers_back() -> None:
    f = fault("delay", DelayConfig.model_validate({"headers": "1.5s"}))
    assert f.before_upstream() == [Sleep(1.5, fault="delay")]
    assert f.applied == 1
    # headers alone leaves the body alone.
    p = Pipeline([f], "sse", GENERIC)
    out = p.feed(b"data: x\n\n", 0.0) + p.end(0.0)
    assert [(type(a), getattr(a, "data", None)) for a in out] == [(Send, b"data: x\n\n")]


def test_delay_without_headers_does_nothing_before_upstream() -> None:
    f = fault("delay", DelayConfig(first_byte=10))
    assert f.before_upstream() == []


@pytest.mark.parametrize("how", ["close", "abort", "reset"])
def test_cut_before_headers(how: str) -> None:
    f = fault("cut", CutConfig.model_validate({"before": "headers", "how": how}))
    [cut] = f.before_upstream()
    assert cut == Cut(how, fault="cut")  # type: ignore[arg-type]
    assert cut.detail == {"before": "headers"}
    assert f.applied == 1
    assert f.before_upstream() == []  # once


def test_cut_before_headers_never_touches_the_body() -> None:
    f = fault("cut", CutConfig(before="headers"))
    assert f.skipped() == "the request never reached the upstream"
    p = Pipeline([f], "sse", GENERIC)
    out = p.feed(b"data: x\n\n", 0.0)
    assert [(type(a), getattr(a, "data", None)) for a in out] == [(Send, b"data: x\n\n")]
    assert p.end(0.0) == []


def test_transport_only_faults_do_nothing_before_upstream() -> None:
    f = fault("cut", CutConfig(after=1))
    assert f.before_upstream() == []
    assert f.response_headers(200, dict(UPSTREAM_HEADERS)) == UPSTREAM_HEADERS


# ---------------------------------------------------------------------- compress


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compress_sets_content_encoding_and_drops_content_length(encoding: str) -> None:
    f = fault("compress", CompressConfig.model_validate({"encoding": encoding}))
    headers = {**UPSTREAM_HEADERS, "content-encoding": "identity"}
    assert f.response_headers(200, headers) == {
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "X-Request-Id": "abc",
        "Content-Encoding": encoding,
    }


# ---------------------------------------------------------------------- validation
# Bad status, headers, delay and cut configs: with every fault's in
# tests/core/test_faults_transport.py (test_bad_configs_fail_with_a_clear_message).


def test_configs_are_frozen() -> None:
    cfg = StatusConfig(code=500)
    with pytest.raises(ValidationError):
        cfg.code = 501


# ---------------------------------------------------------------------- request direction


def test_request_delay_holds_the_body_before_anything_else() -> None:
    from chaosproxy.core.actions import HoldRequest
    from chaosproxy.core.faults.request_delay import RequestDelayConfig

    f = fault("request_delay", RequestDelayConfig.model_validate({"duration": "1.5s"}))
    assert f.before_request() == [HoldRequest(1.5, fault="request_delay")]
    assert f.before_upstream() == [] and f.applied == 1 and f.skipped() is None
    idle = fault("request_delay", RequestDelayConfig.model_validate({"duration": 0}))
    assert idle.before_request() == [] and idle.skipped() == "the duration was 0"


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
        ("request_delay", {}, "Field required"),
        ("request_delay", {"duration": "soon"}, "not a duration"),
        ("request_cut", {"how": "abort"}, "Input should be 'close' or 'reset'"),
        ("request_cut", {"after_bytes": -1}, "greater than or equal to 0"),
    ],
)
def test_request_faults_refuse_bad_configs(name: str, params: dict[str, Any], message: str) -> None:
    from chaosproxy.core.faults import registry

    with pytest.raises(ValidationError, match=message):
        registry()[name].Config.model_validate(params)
