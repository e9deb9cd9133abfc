"""The upstream client's errors (chaosproxy/upstream/errors.py): each kind's reason for
the log and the answer it leads to (its class: a timeout of connecting is a connect
error too), the bytes a closed body had, and any exception as one short safe line."""

from __future__ import annotations

import pytest

from chaosproxy.upstream.errors import (
    UpstreamClosed,
    UpstreamConnectError,
    UpstreamError,
    UpstreamHeadTimeout,
    UpstreamIdleTimeout,
    UpstreamProtocolError,
    UpstreamTimeout,
    one_line,
)


def test_each_error_has_its_reason_and_family() -> None:
    assert {
        cls.__name__: (cls.reason, [b.__name__ for b in cls.__mro__[1:-3]])
        for cls in (
            UpstreamError,
            UpstreamConnectError,
            UpstreamTimeout,
            UpstreamHeadTimeout,
            UpstreamProtocolError,
            UpstreamClosed,
            UpstreamIdleTimeout,
        )
    } == {
        "UpstreamError": ("upstream error", []),
        "UpstreamConnectError": ("unreachable", ["UpstreamError"]),
        "UpstreamTimeout": ("connect timeout", ["UpstreamConnectError", "UpstreamError"]),
        "UpstreamHeadTimeout": ("head timeout", ["UpstreamError"]),
        "UpstreamProtocolError": ("protocol error", ["UpstreamError"]),
        "UpstreamClosed": ("closed early", ["UpstreamError"]),
        "UpstreamIdleTimeout": ("idle timeout", ["UpstreamClosed", "UpstreamError"]),
    }


def test_a_closed_connection_tells_the_body_bytes_that_came() -> None:
    assert UpstreamClosed("closed before the head").body_bytes is None
    idle = UpstreamIdleTimeout("idle 5s at 10.0.0.1:443", body_bytes=1234)
    assert (str(idle), idle.body_bytes, idle.reason) == (
        "idle 5s at 10.0.0.1:443",
        1234,
        "idle timeout",
    )


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (ConnectionRefusedError(111, "Connect call failed"), "Connect call failed"),
        (OSError("first\nsecond"), "first"),
        (ValueError(), "ValueError"),
        (TimeoutError(""), "TimeoutError"),
        (RuntimeError("x" * 300), "x" * 200),
        (ValueError("\n"), "ValueError"),
        (OSError("\n  \nsecond line"), "second line"),
    ],
)
def test_any_exception_is_one_short_line(exc: BaseException, line: str) -> None:
    assert one_line(exc) == line
