"""The ``ws_close`` fault (docs/faults-websocket.md): the close it returns, exactly,
after the N-th message, after the start or instead of the terminal, once."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults._websocket import WsClose
from chaosproxy.core.faults.ws_close import WsCloseConfig
from chaosproxy.core.framing.websocket import TEXT, WsFrame
from tests.support.fault_websocket import make, message

CLOSE = WsClose(1011, "boom", "ws_close")


def test_after_n_sends_the_nth_message_then_the_close_once() -> None:
    fault = make("ws_close", {"after": 2, "reason": "boom"})
    assert fault.on_message(message(b"a", 1)) == [WsFrame(TEXT, b"a")]
    assert fault.on_message(message(b"b", 2)) == [WsFrame(TEXT, b"b"), CLOSE]
    assert fault.on_message(message(b"c", 3)) == [WsFrame(TEXT, b"c")]  # (never reached)
    assert fault.applied == 1


def test_after_zero_closes_instead_of_the_first_message() -> None:
    fault = make("ws_close", {"after": 0, "code": 1001, "reason": "going away"})
    assert fault.on_message(message(b"a", 1)) == [WsClose(1001, "going away", "ws_close")]


def test_after_start_closes_after_the_message_with_the_start_event() -> None:
    fault = make("ws_close", {"after": "start", "reason": "boom"})
    assert fault.on_message(message(b"s", 1, "other")) == [WsFrame(TEXT, b"s")]
    assert fault.on_message(message(b"r", 2, "start")) == [WsFrame(TEXT, b"r"), CLOSE]


def test_before_terminal_closes_instead_of_the_terminal_message() -> None:
    fault = make("ws_close", {"before": "terminal", "reason": "boom"})
    assert fault.on_message(message(b"d", 5, "delta")) == [WsFrame(TEXT, b"d")]
    assert fault.on_message(message(b"t", 6, "terminal")) == [CLOSE]


def test_a_stream_without_the_place_never_applies() -> None:
    fault = make("ws_close", {"before": "terminal"})
    for n in range(1, 4):
        fault.on_message(message(b"d", n, "delta"))
    assert fault.skipped() == "never applied"


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"code": 1011}, "give exactly one of after, before"),
        ({"after": 1, "code": 1006}, "1006 is reserved"),
        ({"after": 1, "code": 999}, "greater than or equal to 1000"),
        ({"after": 1, "code": 5000}, "less than or equal to 4999"),
        ({"after": 1, "reason": "x" * 124}, "at most 123 bytes"),
    ],
)
def test_bad_configs_are_refused_with_a_reason(config: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        WsCloseConfig.model_validate(config)


def test_kind_counts_only_the_messages_of_that_kind() -> None:
    fault = make("ws_close", {"after": 2, "kind": "delta", "reason": "boom"})
    assert fault.on_message(message(b"c", 1, "start")) == [WsFrame(TEXT, b"c")]
    assert fault.on_message(message(b"d1", 2, "delta")) == [WsFrame(TEXT, b"d1")]
    assert fault.on_message(message(b"o", 3, "other")) == [WsFrame(TEXT, b"o")]
    assert fault.on_message(message(b"d2", 4, "delta")) == [WsFrame(TEXT, b"d2"), CLOSE]


def test_kind_needs_after_n() -> None:
    with pytest.raises(ValidationError, match="kind counts the messages of after: N"):
        WsCloseConfig.model_validate({"before": "terminal", "kind": "delta"})


def test_on_a_response_that_is_no_websocket_it_says_so() -> None:
    fault = make("ws_close", {"after": 1})
    fault.relayed = False  # (an HTTP body: the relay never marked it)
    assert fault.skipped() == "not a WebSocket: it acts on the frames of a relayed WebSocket"
