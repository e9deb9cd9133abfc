"""The built-in mock's defaults, stated once: how long an answer is and how fast it
streams (``--mock-tokens``, ``--mock-interval-ms``, :func:`create_mock_app`), and the
address ``chaosproxy mock`` listens on. In ``core/``, below both the mock and the
configuration (``server/config.py``), which reads them without knowing the mock
(docs/architecture.md, The arrows)."""

from __future__ import annotations

#: Text tokens (delta events) per answer.
DEFAULT_TOKENS = 24
#: Seconds between two events on the wire.
DEFAULT_INTERVAL = 0.02
#: Where ``chaosproxy mock`` listens (``serve`` listens on 8080).
DEFAULT_LISTEN = ("127.0.0.1", 8000)

__all__ = ["DEFAULT_INTERVAL", "DEFAULT_LISTEN", "DEFAULT_TOKENS"]
