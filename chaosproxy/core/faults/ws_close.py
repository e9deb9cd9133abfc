"""``ws_close``: the WebSocket closed by the proxy with a chosen code and reason.

``after: N`` (once N messages have been sent; 0: instead of the first; with ``kind``,
N messages carrying an event of that kind: ``{after: 2, kind: delta}`` closes after the
second text delta), ``after: start`` (once the message carrying the first ``start``
event has been sent) or ``before: terminal`` (instead of the message carrying the first
``terminal`` event).
``code`` (default 1011, an internal error; 1001 is a server going away) and
``reason``. Nothing is sent after the close frame, and the upstream connection is
closed too. A TCP cut with no close frame (the client sees 1006) is the ``cut`` fault
with ``how: abort`` or ``reset`` (docs/faults-websocket.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from chaosproxy.core.faults._websocket import WebSocketFault, WsClose, WsMessage, WsOut
from chaosproxy.core.faults.base import Declaration, FaultConfig, FaultContext, known_kind
from chaosproxy.core.framing.websocket import MAX_REASON

#: Codes an endpoint must not send in a close frame (RFC 6455, 7.4.1).
_RESERVED = frozenset({1004, 1005, 1006, 1015})


def _sendable(code: int) -> int:
    if code in _RESERVED:
        raise ValueError(f"{code} is reserved: a close frame never carries it")
    return code


def _short(reason: str) -> str:
    if len(reason.encode()) > MAX_REASON:
        raise ValueError(f"a close reason is at most {MAX_REASON} bytes of UTF-8")
    return reason


class WsCloseConfig(FaultConfig):
    """Exactly one of ``after``, ``before``; ``kind`` (with ``after: N``); ``code``;
    ``reason``."""

    one_of = ("after", "before")

    after: Annotated[int, Field(ge=0)] | Literal["start"] | None = None
    before: Literal["terminal"] | None = None
    kind: Annotated[str, AfterValidator(known_kind)] | None = None
    code: Annotated[int, Field(ge=1000, le=4999), AfterValidator(_sendable)] = 1011
    reason: Annotated[str, AfterValidator(_short)] = ""

    @model_validator(mode="after")
    def _counted(self) -> WsCloseConfig:
        if self.kind is not None and not isinstance(self.after, int):
            raise ValueError("kind counts the messages of after: N")
        return self


class WsCloseFault(WebSocketFault[WsCloseConfig], name="ws_close", stage="websocket"):
    declaration = Declaration(
        needs="websocket",
        keeps_answer=False,
        explore=None,
        example="ws_close: {after: 3, code: 1011, reason: internal error}",
    )

    def __init__(self, config: WsCloseConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        #: The messages of its ``kind`` sent so far.
        self.counted = 0

    def on_message(self, message: WsMessage) -> list[WsOut]:
        if self.applied:
            return list(message.frames)
        config = self.config
        number = message.number
        if config.kind is not None:
            self.counted += config.kind in message.kinds
            number = self.counted if config.kind in message.kinds else -1
        close = WsClose(config.code, config.reason, self.name)
        if config.before == "terminal":
            before = "terminal" in message.kinds
            after = False
        else:
            before = config.after == 0
            after = config.after == number or (config.after == "start" and "start" in message.kinds)
        if before:
            self.applied += 1
            return [close]
        if after:
            self.applied += 1
            return [*message.frames, close]
        return list(message.frames)
