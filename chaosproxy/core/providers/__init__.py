"""Provider profiles: what each event of a provider's stream *means*.

A profile classifies every event into provider-neutral kinds (see ``KINDS``), so that
one scenario (``drop: {kind: delta, nth: 3}``) means the same for every provider.
One profile per file (a :class:`~chaosproxy.core.providers.base.ProviderProfile`
subclass), found by discovery: adding a provider is adding a file (what it declares:
:mod:`chaosproxy.core.providers.base`). This module holds the registry, what every other
module reads of the providers (``declared``, ``declarations``, ``key_headers``,
``key_params``), and auto-detection (``provider_for_path`` from the request,
``provider_for_event`` from the first event), all driven by what each profile declares.
``register`` adds a provider defined elsewhere (a test's, for its duration), and
``unregister`` takes it away again.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Protocol

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers.base import (
    EventContent,
    MockRoute,
    ProviderProfile,
    ProviderSlots,
    RequestShape,
)

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


def _discover() -> list[type[ProviderProfile]]:
    """Every profile class in this package."""
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
    return found


#: What detection answers when nothing else matches.
FALLBACK = "generic"

_PROFILES: dict[str, ProviderProfile] = {}
#: Every provider, in rank order (``generic`` last).
PROVIDER_NAMES: tuple[str, ...] = ()
_RANKED: tuple[ProviderProfile, ...] = ()
# Request paths, matched against the path without its query string and trailing "/".
_PATH_RULES: tuple[tuple[re.Pattern[str], str], ...] = ()
_KEY_HEADERS: frozenset[str] = frozenset()
_KEY_PARAMS: frozenset[str] = frozenset()


def _install(classes: list[type[ProviderProfile]]) -> None:
    """Make ``classes`` the registry, and every table read from it."""
    global PROVIDER_NAMES, _RANKED, _PATH_RULES, _KEY_HEADERS, _KEY_PARAMS
    classes = sorted(classes, key=lambda cls: cls.rank)
    ranks = [cls.rank for cls in classes]
    names = [cls.name for cls in classes]
    if len(set(ranks)) != len(ranks):
        raise RuntimeError(f"provider profiles share a rank: {[(c.name, c.rank) for c in classes]}")
    if len(set(names)) != len(names):
        raise RuntimeError(f"provider profiles share a name: {names}")
    if FALLBACK not in names:
        raise RuntimeError(
            f"no {FALLBACK!r} provider profile: detection has nothing to fall back to"
        )
    kept = {type(p): p for p in _RANKED}  # profiles are stateless: keep the instances
    _PROFILES.clear()
    _PROFILES.update((cls.name, kept.get(cls) or cls()) for cls in classes)
    PROVIDER_NAMES = tuple(_PROFILES)
    _RANKED = tuple(_PROFILES.values())
    _PATH_RULES = tuple((pattern, p.name) for p in _RANKED for pattern in p.paths)
    _KEY_HEADERS = frozenset(h.lower() for p in _RANKED for h in p.key_headers)
    _KEY_PARAMS = frozenset(q.lower() for p in _RANKED for q in p.key_params)


_install(_discover())


def register(cls: type[ProviderProfile]) -> None:
    """Add the provider ``cls`` declares (one defined outside this package: a test's)
    to the registry, and to every table read from it. Its name and rank must be new."""
    _install([type(p) for p in _RANKED] + [cls])


def unregister(name: str) -> None:
    """Take the provider called ``name`` out of the registry (one :func:`register` added)."""
    if name == FALLBACK or name not in _PROFILES:
        raise KeyError(name)
    _install([type(p) for p in _RANKED if p.name != name])


def provider_names() -> tuple[str, ...]:
    """Every provider's name, in rank order (``generic`` last), as registered now."""
    return PROVIDER_NAMES


def declarations() -> tuple[ProviderProfile, ...]:
    """Every provider's declaration, in rank order."""
    return _RANKED


def declared(name: str) -> ProviderProfile:
    """The declaration of the provider called ``name``; KeyError for anything else."""
    return _PROFILES[name]


def key_headers() -> frozenset[str]:
    """The request headers (lower case) that carry a client's API key, by any provider."""
    return _KEY_HEADERS


def key_params() -> frozenset[str]:
    """The query parameters (lower case) that carry one, by any provider."""
    return _KEY_PARAMS


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
    "MockRoute",
    "Profile",
    "ProviderProfile",
    "ProviderSlots",
    "RequestShape",
    "choose_profile",
    "declarations",
    "declared",
    "get_profile",
    "key_headers",
    "key_params",
    "provider_for_event",
    "provider_for_path",
    "provider_names",
    "register",
    "unregister",
]
