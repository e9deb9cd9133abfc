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

Most providers subclass one of the two shapes of stream below instead, which read what
every event of that shape has in common and leave the provider its own fields:
:class:`JsonProfile` (each event one JSON object read by its fields: OpenAI Chat,
Gemini, Ollama) and :class:`TypedProfile` (each event named by its SSE event or its
``type``: Anthropic, OpenAI Responses).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import ERROR, OTHER, TERMINAL, is_done_marker


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

    def classifier(self) -> Callable[[Frame], frozenset[str]]:
        """What the pipeline calls per event for :meth:`classify`: the same answers,
        by a compiled function where the profile has one (the generic profile)."""
        return self.classify

    def content(self, frame: Frame) -> EventContent:
        """What one event frame means: its text, tool-call argument fragments, whether
        it is terminal (and its finish reason), whether it is an error."""
        return NOTHING

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        """The raw bytes of this provider's own in-stream error event."""
        raise NotImplementedError


class JsonProfile(ProviderProfile):
    """A provider whose every event is one JSON object, read by its fields.

    What is not a JSON object is ``terminal`` when it is ``[DONE]`` (the universal
    sentinel, which gateways add to any stream) and ``other`` otherwise; an object with
    a truthy ``error`` (what the SDKs check) is an ``error``. The rest is the
    provider's: :meth:`classify_payload`, :meth:`content_payload` and
    :meth:`recognises_payload`.
    """

    @classmethod
    def recognises(cls, frame: Frame) -> bool:
        payload = frame.json()
        return isinstance(payload, dict) and cls.recognises_payload(payload)

    @classmethod
    def recognises_payload(cls, payload: dict[str, Any]) -> bool:
        """True when a first event's JSON object looks like this provider's."""
        return False

    def classify(self, frame: Frame) -> frozenset[str]:
        payload = frame.json()
        if not isinstance(payload, dict):
            return TERMINAL if is_done_marker(frame) else OTHER
        if payload.get("error"):
            return ERROR
        return self.classify_payload(payload)

    def content(self, frame: Frame) -> EventContent:
        payload = frame.json()
        if isinstance(payload, dict):
            return ERROR_PIECE if payload.get("error") else self.content_payload(payload)
        return TERMINAL_PIECE if is_done_marker(frame) else NOTHING

    def classify_payload(self, payload: dict[str, Any]) -> frozenset[str]:
        """The kinds of an event's JSON object (one without a truthy ``error``)."""
        raise NotImplementedError

    def content_payload(self, payload: dict[str, Any]) -> EventContent:
        """What an event's JSON object (one without a truthy ``error``) contributes."""
        return NOTHING


class TypedProfile(ProviderProfile):
    """A provider whose events are named: by their SSE ``event:``, else their JSON
    ``type`` (:attr:`Frame.type <chaosproxy.core.frames.Frame.type>`).

    An event with no data is ``other``; one with no name is ``terminal`` when it is
    ``[DONE]`` (gateways that bolt a chat-style sentinel onto the stream) and ``other``
    otherwise. The rest is the provider's: :meth:`classify_type`, :meth:`content_type`.
    """

    def classify(self, frame: Frame) -> frozenset[str]:
        if frame.data is None:
            return OTHER
        kind = frame.type
        if kind is None:
            return TERMINAL if is_done_marker(frame) else OTHER
        return self.classify_type(kind, frame)

    def content(self, frame: Frame) -> EventContent:
        kind = frame.type if frame.data is not None else None
        if kind is not None:
            return self.content_type(kind, frame)
        return TERMINAL_PIECE if is_done_marker(frame) else NOTHING

    def classify_type(self, kind: str, frame: Frame) -> frozenset[str]:
        """The kinds of an event named ``kind``."""
        raise NotImplementedError

    def content_type(self, kind: str, frame: Frame) -> EventContent:
        """What an event named ``kind`` contributes."""
        return NOTHING
