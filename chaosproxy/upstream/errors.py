"""What can go wrong talking to the upstream, as exceptions the proxy maps to answers
(502, 504, an unclean end). Messages are one line and name the upstream as
``host:port`` only: never the request target, its query string or credentials.

Each error also has a short machine-readable :attr:`UpstreamError.reason` (``"connect
timeout"``, ``"closed early"``, ...) that the proxy logs next to the message.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "StartupError",
    "UpstreamClosed",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamHeadTimeout",
    "UpstreamIdleTimeout",
    "UpstreamProtocolError",
    "UpstreamTimeout",
]


class StartupError(Exception):
    """Start-up cannot go on; the message is the one-line reason. The upstream client's
    settings raise it (a TLS file that does not load), and so does the rest of start-up
    (chaosproxy.server.net re-exports it): defined here, the upstream client imports
    nothing of the server."""


class UpstreamError(Exception):
    """Anything that went wrong talking to the upstream; ``str()`` is one safe line."""

    #: A short machine-readable reason, for the log (``reason``).
    reason: ClassVar[str] = "upstream error"


class UpstreamConnectError(UpstreamError):
    """Could not connect, or the TLS handshake failed (the proxy answers 502)."""

    reason = "unreachable"


class UpstreamTimeout(UpstreamConnectError):
    """The connect (resolution, TCP and TLS) timed out (the proxy answers 504)."""

    reason = "connect timeout"


class UpstreamHeadTimeout(UpstreamError):
    """The request went out but no response head came in time (the proxy answers 504)."""

    reason = "head timeout"


class UpstreamProtocolError(UpstreamError):
    """The upstream broke HTTP/1.1: a bad status line or chunk size, a head too large."""

    reason = "protocol error"


class UpstreamClosed(UpstreamError):
    """The connection closed or was reset before the head or mid-body.

    ``body_bytes`` is how many body bytes had arrived (``None`` before the head)."""

    reason = "closed early"

    def __init__(self, message: str, *, body_bytes: int | None = None) -> None:
        super().__init__(message)
        self.body_bytes = body_bytes


class UpstreamIdleTimeout(UpstreamClosed):
    """The upstream sent nothing for the idle timeout mid-body, while we were reading:
    the connection was dropped (the proxy aborts the client's response)."""

    reason = "idle timeout"


def one_line(exc: BaseException) -> str:
    """``exc`` as one short line, for the messages above."""
    text = getattr(exc, "strerror", None) or str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (first or type(exc).__name__)[:200]
