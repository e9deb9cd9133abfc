"""Provider profiles: what each event of a provider's stream *means*.

A profile classifies every event into provider-neutral kinds (see ``KINDS``), so that
one scenario (``drop: {kind: delta, nth: 3}``) means the same for every provider.
One profile per file (a :class:`~chaosproxy.core.providers.base.ProviderProfile`
subclass), found by discovery: adding a provider is adding a file. This module holds the
registry and auto-detection (``provider_for_path`` from the request,
``provider_for_event`` from the first event), both driven by what each profile declares.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Protocol

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers.base import EventContent, ProviderProfile

KINDS = ("start", "delta", "tool_delta", "usage", "ping", "error", "terminal", "other")


class Profile(Protocol):
    """What the pipeline and the faults use of a profile (a ``ProviderProfile``)."""

    @property
    def name(self) -> str:
        """One of PROVIDER_NAMES."""
        ...

    def classify(self, frame: Frame) -> frozenset[str]:
        """The kinds of one event frame; never empty (``{"other"}`` at least)."""
        ...

    def content(self, frame: Frame) -> EventContent:
        """What one event frame contributes to the stream's logical content."""
        ...

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """The raw bytes of this provider's own in-stream error event."""
        ...


def _discover() -> dict[str, ProviderProfile]:
    """Name → shared instance of every profile in this package, in rank order."""
    found: list[type[ProviderProfile]] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, ProviderProfile)
                and obj.__module__ == module.__name__
                and "name" in vars(obj)
            ):
                found.append(obj)
    found.sort(key=lambda cls: cls.rank)
    ranks = [cls.rank for cls in found]
    if len(set(ranks)) != len(ranks):
        raise RuntimeError(f"provider profiles share a rank: {[(c.name, c.rank) for c in found]}")
    return {cls.name: cls() for cls in found}


_PROFILES = _discover()

#: Every provider, in rank order (``generic`` last).
PROVIDER_NAMES: tuple[str, ...] = tuple(_PROFILES)
#: What detection answers when nothing else matches.
FALLBACK = "generic"
if FALLBACK not in _PROFILES:
    raise RuntimeError(f"no {FALLBACK!r} provider profile: detection has nothing to fall back to")

_RANKED = tuple(_PROFILES.values())
# Request paths, matched against the path without its query string and trailing "/".
_PATH_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (pattern, p.name) for p in _RANKED for pattern in p.paths
)


def get_profile(name: str) -> Profile:
    """The profile called ``name`` (one of PROVIDER_NAMES); KeyError for anything else.

    Profiles are stateless, so the same instance is returned every time.
    """
    return _PROFILES[name]


def provider_for_path(path: str) -> str | None:
    """The provider a request path belongs to, or None when the path says nothing.

    The query string (and fragment) is ignored, as is a trailing slash.
    """
    path = path.split("?", 1)[0].split("#", 1)[0]
    if len(path) > 1:
        path = path.rstrip("/")
    for pattern, name in _PATH_RULES:
        if pattern.search(path):
            return name
    return None


def provider_for_event(frame: Frame) -> str:
    """The provider a first event looks like; ``generic`` when unsure.

    Its type (event name or JSON ``type``) is shown to every profile first, then its
    payload, each time in rank order.
    """
    if frame.data is None:
        return FALLBACK
    type_ = frame.type
    if type_ is not None:
        for profile in _RANKED:
            if profile.recognises_type(type_):
                return profile.name
    for profile in _RANKED:
        if profile.recognises(frame):
            return profile.name
    return FALLBACK


def choose_profile(name: str, path: str) -> Profile | None:
    """The profile a body is read with: the one called ``name`` (a scenario's
    ``provider:``), or for ``auto`` the request path's; None when only the first event
    can tell (:func:`provider_for_event`)."""
    if name == "auto":
        name = provider_for_path(path) or "auto"
    return None if name == "auto" else get_profile(name)


__all__ = [
    "FALLBACK",
    "KINDS",
    "PROVIDER_NAMES",
    "EventContent",
    "Profile",
    "ProviderProfile",
    "choose_profile",
    "get_profile",
    "provider_for_event",
    "provider_for_path",
]
