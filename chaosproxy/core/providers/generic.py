"""The generic profile: knows only the two universal terminal markers.

Every event is ``other``, except ``data: [DONE]`` and a JSON object with ``"done": true``,
which are ``terminal``: the fault engine relies on ``kind: terminal`` (``cut: {before:
terminal}``, ``inject: {after: terminal}``) for unknown providers too.
"""

from __future__ import annotations

from collections.abc import Callable

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import encode_event
from chaosproxy.core.providers.base import (
    NO_SHAPE,
    NOTHING,
    TERMINAL_PIECE,
    EventContent,
    ProviderProfile,
)
from chaosproxy.core.providers.generic_kinds import generic_kinds


class GenericProfile(ProviderProfile):
    name = "generic"
    #: Last: ``generic`` is also what detection falls back to.
    rank = 100
    #: The universal one: every gateway and most providers take ``Authorization``.
    key_headers = frozenset({"authorization"})
    key_params = frozenset[str]()
    # Detected by nothing but falling back; its requests and content are unknown, and
    # the mock does not speak it.
    paths = ()
    request = NO_SHAPE
    slots = None
    mock = None
    mock_routes = ()

    def classify(self, frame: Frame) -> frozenset[str]:
        return generic_kinds(frame)

    def classifier(self) -> Callable[[Frame], frozenset[str]]:
        return generic_kinds

    def content(self, frame: Frame) -> EventContent:
        """Only the terminal markers: a generic stream's text is unknown."""
        return TERMINAL_PIECE if "terminal" in self.classify(frame) else NOTHING

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        body = b'{"error":{"type":"chaosproxy_injected","message":"injected error"}}'
        return encode_event(fmt, newline, body, native="ndjson")
