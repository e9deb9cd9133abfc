"""The answer to an upstream that failed before its head (core/unavailable.py): the
502/504 table, case by case, over the upstream client's own errors; the end to end
answers are tests/e2e/test_proxy_e2e.py's and tests/e2e/test_hostile_upstream.py's."""

from __future__ import annotations

import pytest

from chaosproxy.core.unavailable import Unavailable, unavailable
from chaosproxy.upstream.errors import (
    UpstreamClosed,
    UpstreamConnectError,
    UpstreamError,
    UpstreamHeadTimeout,
    UpstreamIdleTimeout,
    UpstreamProtocolError,
    UpstreamTimeout,
)

WHERE = "api.example:443"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            UpstreamTimeout("connect timed out"),
            Unavailable(504, "upstream timed out on connect: api.example:443"),
        ),
        (
            UpstreamHeadTimeout("no head"),
            Unavailable(504, "upstream sent no response head within 2.5 s: api.example:443"),
        ),
        (  # a connect error that names its upstream says it all
            UpstreamConnectError("upstream 10.0.0.1:443 unreachable: Connection refused"),
            Unavailable(502, "upstream 10.0.0.1:443 unreachable: Connection refused"),
        ),
        (  # one that does not (a forward proxy's refusal) is prefixed
            UpstreamConnectError("the forward proxy answered 407"),
            Unavailable(502, "upstream unreachable: the forward proxy answered 407"),
        ),
        (
            UpstreamProtocolError("bad status line"),
            Unavailable(502, "upstream failed before responding: bad status line"),
        ),
        (
            UpstreamClosed("closed before the head"),
            Unavailable(502, "upstream failed before responding: closed before the head"),
        ),
        (
            UpstreamIdleTimeout("idle"),
            Unavailable(502, "upstream failed before responding: idle"),
        ),
        (
            UpstreamError("something else"),
            Unavailable(502, "upstream failed before responding: something else"),
        ),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else "",
)
def test_each_upstream_error_has_its_answer(error: UpstreamError, expected: Unavailable) -> None:
    assert unavailable(error.reason, str(error), WHERE, 2.5) == expected


def test_the_head_timeout_is_said_as_set() -> None:
    got = [unavailable("head timeout", "x", "u:1", wait).message for wait in (60.0, 0.25, 1e-3)]
    assert got == [
        "upstream sent no response head within 60 s: u:1",
        "upstream sent no response head within 0.25 s: u:1",
        "upstream sent no response head within 0.001 s: u:1",
    ]


def test_only_the_two_timeouts_are_504() -> None:
    """The table's one rule: the gateway timed out (504), or the upstream failed (502);
    every reason the upstream client has is one of the two."""
    reasons = {
        cls.reason: unavailable(cls.reason, "x", WHERE, 1.0).status
        for cls in (
            UpstreamError,
            UpstreamConnectError,
            UpstreamTimeout,
            UpstreamHeadTimeout,
            UpstreamProtocolError,
            UpstreamClosed,
            UpstreamIdleTimeout,
        )
    }
    assert reasons == {
        "upstream error": 502,
        "unreachable": 502,
        "connect timeout": 504,
        "head timeout": 504,
        "protocol error": 502,
        "closed early": 502,
        "idle timeout": 502,
    }
