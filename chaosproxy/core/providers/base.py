"""What a provider declares: everything the rest of chaosproxy needs to know about it.

A provider is one module in this package with one :class:`ProviderProfile` subclass
that sets ``name`` (found by discovery, as faults are); nothing else in the package
names it. Its class declares, as class attributes and methods::

    class OllamaProfile(JsonProfile):
        name = "ollama"                      # provider: in a scenario, --provider
        rank = 50                            # its place in every provider-by-provider order
        paths = (re.compile(r"/api/(?:chat|generate)$"),)   # requests that are its
        request = RequestShape(messages=("messages",), system=("system",),
                               prompt=("prompt",))           # what a request body asks
        key_headers = frozenset[str]()       # headers that carry a client's API key
        key_params = frozenset[str]()        # query parameters that carry one
        slots = OllamaSlots()                # where its events keep text and tool fragments
        mock = "chaosproxy.mock.ollama"      # the mock module that renders its answers
        mock_routes = (MockRoute("/api/chat", params=(("endpoint", "chat"),)), ...)

        @classmethod
        def recognises(cls, frame: Frame) -> bool: ...      # its first event, by payload

        def classify(self, frame: Frame) -> frozenset[str]: ...   # the kinds of an event
        def content(self, frame: Frame) -> EventContent: ...      # an event's content
        def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes: ...

Who reads what (each from the registry, ``chaosproxy.core.providers``): detection
(``paths``, ``recognises_type``, ``recognises``); the pipeline, faults, integrity and
verdicts (``classify``, ``content``, ``error_event``); the content faults
(``slots``, :mod:`chaosproxy.core.slots`; None: they skip its streams and say why);
the request journal and the mock's fixtures (``request``,
:mod:`chaosproxy.core.llm_request`: every provider's keys are read, in rank order, so a
body is read the same at any path); tenancy (``key_headers``, ``key_params``:
:mod:`chaosproxy.core.tenancy`); the masking of logs (the same names:
:mod:`chaosproxy.core.redact`); the built-in mock (``mock_routes``, served by the
module named in ``mock``: ``mock/app.py`` builds its routes from them; the module gives
``serve(call)`` and ``error_body(status, message, kind)``, docs/mock.md). The core never
imports the mock: ``mock`` is a module's dotted name, which the mock imports.

Every attribute above is declared in the class body, an empty one too (a provider with
no key, no slots, no mock says so): tests/core/test_providers.py fails on one left to
a base, and on a provider without its own test file,
tests/core/providers/test_<module>.py. ``rank`` orders everything that goes provider by
provider: ``PROVIDER_NAMES``, path matching and first-event detection (lowest first). A
test may add a provider for its duration with :func:`chaosproxy.core.providers.register`
(and ``unregister``): tests/e2e/test_new_provider.py declares a whole one.

Most providers subclass one of the two shapes of stream below rather than
:class:`ProviderProfile` itself; each reads what every event of that shape has in
common and leaves the provider its own fields:
:class:`JsonProfile` (each event one JSON object read by its fields: OpenAI Chat,
Gemini, Ollama) and :class:`TypedProfile` (each event named by its SSE event or its
``type``: Anthropic, OpenAI Responses).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.jsonspan import Path
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


@dataclass(frozen=True, slots=True)
class RequestShape:
    """Where a provider's request body says what it asks (read by
    :func:`chaosproxy.core.llm_request.read_request`). Each field names body keys (a
    dotted name is a key in a key: ``toolConfig.tools``); of a provider's alternatives,
    the first present is read."""

    #: The model asked for.
    model: tuple[str, ...] = ("model",)
    #: A path that names the model (group 1, percent-decoded), for a provider whose body
    #: does not (Gemini's ``/models/{model}:streamGenerateContent``).
    model_in_path: re.Pattern[str] | None = None
    #: Searched in such a path: found, the answer streams (when the body does not say).
    stream_in_path: re.Pattern[str] | None = None
    #: A system prompt: a text, text blocks, or a content with parts.
    system: tuple[str, ...] = ()
    #: The conversation: a list of messages (or contents) with a role each.
    messages: tuple[str, ...] = ()
    #: The conversation as input: a text (one user message) or a list of input items.
    items: tuple[str, ...] = ()
    #: A single prompt text (one user message).
    prompt: tuple[str, ...] = ()
    #: The tools offered: a list of declarations.
    tools: tuple[str, ...] = ("tools",)
    #: Keys of a tool that hold the declaration itself (``{"type": "function",
    #: "function": {...}}``).
    tool_wrappers: tuple[str, ...] = ()
    #: Keys of a tool that hold a list of declarations (Gemini's
    #: ``functionDeclarations``).
    tool_groups: tuple[str, ...] = ()
    #: Roles this provider spells otherwise, as the journal shows them.
    roles: tuple[tuple[str, str], ...] = ()
    #: What makes a message a tool's result: a block (or part) with one of these keys
    #: (Gemini's ``functionResponse``), or of one of these ``type`` s (Anthropic's
    #: ``tool_result``).
    result_keys: tuple[str, ...] = ()
    result_types: tuple[str, ...] = ()
    #: Keys of a block that hold its text, besides those every provider's are read by
    #: (``text``, ``content``, ``parts``, ``output``).
    text_keys: tuple[str, ...] = ()


#: The request shape of a provider that declares none: nothing but ``model``, ``tools``.
NO_SHAPE = RequestShape()


@dataclass(frozen=True, slots=True)
class MockRoute:
    """One route the built-in mock serves for a provider: an aiohttp path (``{name}`` or
    ``{name:regex}`` parts are the call's params), its method, and fixed params the
    provider's mock module is given with every call to it."""

    path: str
    method: Literal["GET", "POST"] = "POST"
    params: tuple[tuple[str, str], ...] = ()
    #: A WebSocket's route (a ``GET`` that upgrades): the module's ``Conversation``
    #: answers each client event (``mock/app.py``; OpenAI Realtime's).
    websocket: bool = False


#: What an event does in a tool call.
CallRole = Literal["open", "fragment", "close"]


@dataclass(frozen=True, slots=True)
class Slot:
    """One string of an event's content: where it is, what it says, whose it is."""

    #: The JSON path of the string in the event's data.
    path: Path
    #: The string (decoded).
    value: str
    #: Its channel (text: the choice or candidate index) or its call (tool fragments).
    key: str
    #: The event also ends the stream (a Gemini chunk with ``finishReason``, Ollama's
    #: ``done: true``): only its last piece may keep that.
    terminal: bool = False
    #: The event also opens its call (an OpenAI Chat chunk with the call's id and name):
    #: only its first piece may keep that.
    opens: bool = False


class ProviderSlots:
    """A provider's content slots (:mod:`chaosproxy.core.slots`): where its events keep
    their text and tool fragments. Stateless; one instance per provider."""

    #: The path of the stream's sequence number in every event (None: it has none).
    sequence: ClassVar[Path | None] = None
    #: Whether tool calls come as argument fragments (False: each call whole).
    fragments: ClassVar[bool] = True

    def text(self, frame: Frame) -> Slot | None:
        """The text string of a plain text delta event, else None."""
        raise NotImplementedError

    def tool(self, frame: Frame) -> Slot | None:
        """The arguments fragment of an event that carries one call's, else None."""
        return None

    def call(self, frame: Frame) -> tuple[CallRole, str] | None:
        """What the event does in a tool call, and the call's key; None for others."""
        return None

    def without_end(self, payload: Any) -> Any:
        """A copy of a terminal text event's payload that does not end the stream."""
        return payload

    def without_opening(self, payload: Any, slot: Slot) -> Any:
        """A copy of a call-opening fragment event's payload that only continues it."""
        return payload


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
    #: What its request bodies ask, and where they say it.
    request: ClassVar[RequestShape] = NO_SHAPE
    #: Request headers that carry a client's API key (lower case): its tenant, and
    #: masked wherever a request is shown.
    key_headers = frozenset[str]()
    #: Query parameters that carry one (lower case).
    key_params = frozenset[str]()
    #: Where its events keep their text and tool fragments (None: the content faults
    #: cannot rewrite its streams).
    slots: ClassVar[ProviderSlots | None] = None
    #: The dotted name of the mock module that renders its answers (None: the mock does
    #: not serve it); ``mock_routes`` are the routes it serves them on.
    mock: ClassVar[str | None] = None
    mock_routes: ClassVar[tuple[MockRoute, ...]] = ()

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
