"""Provider profiles: what each event of a provider's stream *means*.

A profile classifies every event into provider-neutral kinds (see ``KINDS``), so that
one scenario (``drop: {kind: delta, nth: 3}``) means the same for every provider.
"""

from __future__ import annotations

from typing import Protocol

from chaosproxy.core.frames import Format, Frame

KINDS = ("start", "delta", "tool_delta", "usage", "ping", "error", "terminal", "other")

PROVIDER_NAMES = ("openai-chat", "openai-responses", "anthropic", "gemini", "ollama", "generic")


class Profile(Protocol):
    #: One of PROVIDER_NAMES.
    name: str

    def classify(self, frame: Frame) -> frozenset[str]:
        """The kinds of one event frame; never empty (``{"other"}`` at least)."""
        ...

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """The raw bytes of this provider's own in-stream error event."""
        ...


def get_profile(name: str) -> Profile:
    """The profile called ``name`` (one of PROVIDER_NAMES)."""
    from chaosproxy.core.providers.generic import GenericProfile

    if name not in PROVIDER_NAMES:
        raise KeyError(name)
    return GenericProfile()


def provider_for_path(path: str) -> str | None:
    """The provider a request path belongs to, or None when the path says nothing."""
    return None


def provider_for_event(frame: Frame) -> str:
    """The provider a first event looks like; ``generic`` when unsure."""
    return "generic"
