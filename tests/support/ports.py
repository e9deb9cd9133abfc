"""Loopback ports in a known state while a block runs."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def busy_port() -> Iterator[int]:
    """A port of 127.0.0.1 that a socket listens on, while the block runs."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where connections are refused while the block runs: bound, never
    listening, so no other test (another xdist worker) can listen there meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]
