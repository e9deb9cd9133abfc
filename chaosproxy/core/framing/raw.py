"""Raw framer: every upstream read is one frame, passed through untouched.

Used when the body has no framing the proxy understands. Transport faults still work
on it, counting reads instead of events.
"""

from __future__ import annotations

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing.base import BodyRead

__all__ = ["RawFramer"]


class RawFramer:
    """One frame per non-empty read: ``Frame(raw=data, data=None, newline=b"")``."""

    __slots__ = ()

    def feed(self, data: BodyRead) -> list[Frame]:
        """Return the read as one frame (none for an empty read)."""
        if not data:
            return []
        return [Frame(bytes(data), None, None, None, None, (), b"", True)]

    def eof(self) -> list[Frame]:
        """Nothing is ever buffered, so nothing is left at eof."""
        return []
