"""What the WebSocket faults share: their stage's two hooks and what they return.

A WebSocket fault (``stage="websocket"``) acts on the frames that carry one relayed
server message to the client, after the event and transport stages have decided the
message (:meth:`WebSocketFault.on_message`: frames in, frames out, or a close), and on
the client's pings (:meth:`WebSocketFault.on_ping`). The shell (``server/websocket.py``)
writes what they return; an HTTP body never reaches them, so on an HTTP request they
report ``never applied``.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing_extensions import TypeVar

from chaosproxy.core.faults.base import Fault, FaultConfig
from chaosproxy.core.framing.websocket import WsFrame

C = TypeVar("C", bound=FaultConfig, default=FaultConfig, covariant=True)


@dataclass(frozen=True, slots=True)
class WsClose:
    """Send a close frame with ``code`` and ``reason`` (after the frames before it),
    then end the connection: no message after it."""

    code: int
    reason: str
    fault: str


@dataclass(frozen=True, slots=True)
class Pong:
    """Answer a ping ``delay`` seconds late (0: at once); None from a hook: never."""

    delay: float
    fault: str = ""


#: What a WebSocket fault returns for a message.
WsOut = WsFrame | WsClose


@dataclass(frozen=True, slots=True)
class WsMessage:
    """One server message about to go to the client: its frames so far (one, unless a
    fault before split it), its number among the messages sent (1-based), and the
    kinds of its events (``delta``, ``terminal``...)."""

    frames: tuple[WsFrame, ...]
    number: int
    kinds: frozenset[str]


#: Why a WebSocket fault did nothing on a response that is no WebSocket.
NOT_A_WEBSOCKET = "not a WebSocket: it acts on the frames of a relayed WebSocket"


class WebSocketFault(Fault[C]):
    """A fault of the WebSocket stage; each hook passes what it is given by default."""

    #: Set by the relay (``server/websocket.py``) when the response is a WebSocket.
    relayed: bool = False

    def skipped(self) -> str | None:
        if not self.relayed:
            return NOT_A_WEBSOCKET
        return super().skipped()

    def on_message(self, message: WsMessage) -> list[WsOut]:
        return list(message.frames)

    def on_ping(self, pong: Pong) -> Pong | None:
        return pong


__all__ = ["NOT_A_WEBSOCKET", "Pong", "WebSocketFault", "WsClose", "WsMessage", "WsOut"]
