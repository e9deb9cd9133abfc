"""What every provider profile declares: its name, its place, its request paths, how to
recognise its first event, and how it classifies events.

A provider is one module in this package with one :class:`ProviderProfile` subclass
that sets ``name`` (found by discovery, as faults are)::

    class OllamaProfile(ProviderProfile):
        name = "ollama"
        rank = 50
        paths = (re.compile(r"/api/(?:chat|generate)$"),)

        @classmethod
        def recognises(cls, frame: Frame) -> bool: ...

        def classify(self, frame: Frame) -> frozenset[str]: ...

        def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes: ...

``rank`` orders everything that goes provider by provider: ``PROVIDER_NAMES``, path
matching and first-event detection (lowest first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from chaosproxy.core.frames import Format, Frame


# Not frozen, for the cost of construction (one per event); immutable by convention.
@dataclass(slots=True)
class EventContent:
    """What one event contributes to a stream's logical content (see
    :mod:`chaosproxy.core.integrity`). Treat it as immutable.

    Text and finish reasons are per *channel* (an OpenAI Chat choice, a Gemini
    candidate; 0 otherwise). A tool call's key is a string naming the call within the
    stream (``"0/1"``: choice 0, tool call index 1); the key ``""`` is a whole call
    (Gemini, Ollama) that the accumulator numbers itself. ``tool_ends`` names the calls
    that end at this event: a key, or a prefix ending in ``/`` for every call under it.
    """

    text: tuple[tuple[int, str], ...] = ()
    tools: tuple[tuple[str, str], ...] = ()
    tool_ends: tuple[str, ...] = ()
    terminal: bool = False
    finish: tuple[tuple[int, str], ...] = ()
    error: bool = False


#: An event that carries no content (a ping, a start, an unknown type).
NOTHING = EventContent()
#: A bare terminal event (``[DONE]``, ``message_stop``).
TERMINAL_PIECE = EventContent(terminal=True)
#: An in-stream error event.
ERROR_PIECE = EventContent(error=True)


class ProviderProfile:
    """Base of every profile. Profiles are stateless: one shared instance each."""

    #: The provider's name (``provider:`` in a scenario, ``--provider``).
    name: ClassVar[str]
    #: Its place in ``PROVIDER_NAMES``, path matching and first-event detection.
    rank: ClassVar[int]
    #: Request paths it serves: searched, in order, in the path without its query
    #: string and trailing "/" (any prefix is allowed: gateways mount providers under
    #: /openai, /anthropic, ...).
    paths: ClassVar[tuple[re.Pattern[str], ...]] = ()

    @classmethod
    def recognises_type(cls, type_: str) -> bool:
        """True when a first event of this type (its SSE event name, else its JSON
        ``type``) is this provider's. Every provider is asked this, in rank order,
        before any is asked :meth:`recognises`."""
        return False

    @classmethod
    def recognises(cls, frame: Frame) -> bool:
        """True when the first event ``frame`` (which has data) looks like this
        provider's, by its payload, when no type said it."""
        return False

    def classify(self, frame: Frame) -> frozenset[str]:
        """The kinds of one event frame; never empty (``{"other"}`` at least)."""
        raise NotImplementedError

    def content(self, frame: Frame) -> EventContent:
        """What one event frame means: its text, tool-call argument fragments, whether
        it is terminal (and its finish reason), whether it is an error."""
        return NOTHING

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """The raw bytes of this provider's own in-stream error event."""
        raise NotImplementedError
