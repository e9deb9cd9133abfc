"""What every framer shares: the bytes a ``feed`` takes, the one error a framer raises,
the size bound and the two-call surface. Apart from the package's ``__init__`` (which
picks a framer by format), so that the framers import it without importing that.
"""

from __future__ import annotations

from typing import Protocol

from chaosproxy.core.frames import Frame

DEFAULT_MAX_SIZE = 1024 * 1024

#: What a framer's ``feed`` takes: ``bytes`` (what the upstream client reads), or any
#: other bytes-like read, which takes the general path and is copied. Said in full, not
#: as ``bytes``: compiled code checks an argument against its annotation, and a
#: ``bytearray`` given where ``bytes`` is annotated is a TypeError there
#: (tests/test_compiled.py).
BodyRead = bytes | bytearray | memoryview


class FramingError(Exception):
    """The upstream body breaks its framing (e.g. an event over the size limit)."""


class Framer(Protocol):
    def feed(self, data: BodyRead) -> list[Frame]: ...

    def eof(self) -> list[Frame]: ...


__all__ = ["DEFAULT_MAX_SIZE", "BodyRead", "Framer", "FramingError"]
