"""Provider profiles: what each event of a provider's stream *means*.

A profile classifies every event into provider-neutral kinds (see ``KINDS``), so that
one scenario (``drop: {kind: delta, nth: 3}``) means the same for every provider.
One profile per file; this module holds the registry and auto-detection
(``provider_for_path`` from the request, ``provider_for_event`` from the first event).
"""

from __future__ import annotations

import re
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


_PROFILES: dict[str, Profile] = {}


def _load_profiles() -> dict[str, Profile]:
    if not _PROFILES:
        from chaosproxy.core.providers.anthropic import AnthropicProfile
        from chaosproxy.core.providers.gemini import GeminiProfile
        from chaosproxy.core.providers.generic import GenericProfile
        from chaosproxy.core.providers.ollama import OllamaProfile
        from chaosproxy.core.providers.openai_chat import OpenAIChatProfile
        from chaosproxy.core.providers.openai_responses import OpenAIResponsesProfile

        profiles: list[Profile] = [
            OpenAIChatProfile(),
            OpenAIResponsesProfile(),
            AnthropicProfile(),
            GeminiProfile(),
            OllamaProfile(),
            GenericProfile(),
        ]
        _PROFILES.update((p.name, p) for p in profiles)
    return _PROFILES


def get_profile(name: str) -> Profile:
    """The profile called ``name`` (one of PROVIDER_NAMES); KeyError for anything else.

    Profiles are stateless, so the same instance is returned every time.
    """
    return _load_profiles()[name]


# Request paths, matched against the path without its query string and trailing "/".
# Any prefix is allowed (gateways mount providers under /openai, /anthropic, ...).
_PATH_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"/chat/completions$"), "openai-chat"),
    # POST /v1/responses, and GET /v1/responses/{id}?stream=true (which streams too).
    (re.compile(r"/responses(?:/resp_[^/]*)?$"), "openai-responses"),
    (re.compile(r"(?:^|/v1)/messages$"), "anthropic"),
    # Claude on Vertex AI speaks the Messages stream.
    (re.compile(r"/publishers/anthropic/models/[^/]*:streamRawPredict$"), "anthropic"),
    (re.compile(r":(?:stream)?[gG]enerateContent$"), "gemini"),
    (re.compile(r"/api/(?:chat|generate)$"), "ollama"),
)


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
    """The provider a first event looks like; ``generic`` when unsure."""
    from chaosproxy.core.providers.anthropic import EVENT_NAMES as ANTHROPIC_EVENTS

    if frame.data is None:
        return "generic"
    kind = frame.type
    if kind is not None:
        if kind.startswith("response."):
            return "openai-responses"
        if kind in ANTHROPIC_EVENTS:
            return "anthropic"
    payload = frame.json()
    if not isinstance(payload, dict):
        return "generic"
    if payload.get("object") == "chat.completion.chunk":
        return "openai-chat"
    if kind == "error":
        # Responses' flat error carries a sequence number; Anthropic's nests the error.
        if "sequence_number" in payload:
            return "openai-responses"
        if isinstance(payload.get("error"), dict):
            return "anthropic"
    if "candidates" in payload or "promptFeedback" in payload:
        return "gemini"
    if "model" in payload and "created_at" in payload and "done" in payload:
        return "ollama"
    return "generic"


__all__ = [
    "KINDS",
    "PROVIDER_NAMES",
    "Profile",
    "get_profile",
    "provider_for_event",
    "provider_for_path",
]
