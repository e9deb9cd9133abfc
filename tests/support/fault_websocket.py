"""Shared by the WebSocket fault tests (tests/core/faults/test_fragment.py,
test_ws_close.py, test_pong.py): a fault made as a request makes it, and one message's
frames as the relay hands them over."""

from __future__ import annotations

from typing import Any

from chaosproxy.core.faults import build_faults, registry
from chaosproxy.core.faults._websocket import WebSocketFault, WsMessage
from chaosproxy.core.framing.websocket import TEXT, WsFrame
from chaosproxy.core.providers import get_profile


def make(name: str, config: dict[str, Any], seed: int = 7) -> WebSocketFault:
    """The fault ``name`` with ``config``, built as a request's faults are."""
    cls = registry()[name]
    (fault,) = build_faults(
        [(name, cls.Config.model_validate(config))],
        seed,
        "ndjson",
        get_profile("openai-realtime"),
    )
    assert isinstance(fault, WebSocketFault)
    fault.relayed = True  # (as the relay marks it)
    return fault


def message(payload: bytes, number: int = 1, *kinds: str) -> WsMessage:
    """One text message, whole, the ``number``-th sent, carrying events of ``kinds``."""
    return WsMessage((WsFrame(TEXT, payload),), number, frozenset(kinds or ("other",)))


__all__ = ["make", "message"]
