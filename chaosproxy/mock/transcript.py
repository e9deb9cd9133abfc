"""A real upstream's streamed answer turned into a mock fixture (docs/mock.md, Recording).

:class:`Transcript` reads one streamed response body as it passes through (bytes in,
by whatever chunks they came in), with the framers and the provider profiles the proxy
itself reads streams with: the profile's ``content()`` gives the text and the tool-call
argument fragments (folded as the verdicts fold an answer, :func:`chaosproxy.core.answer.fold`),
and a few fields the profiles do not need are read here per provider (each call's name
and id, the token usage, a refusal). :meth:`Transcript.fixture` gives the
provider-neutral :class:`~chaosproxy.scenario.Fixture` that the mock serves back in any
provider's format, with a ``match`` made from the request (its last user message,
exactly, and the tools it offers), or raises :class:`NotRecorded` with the reason: an
error status, a body that is not a stream the profiles know, an in-stream error, a
stream cut before its terminal event. A fixture is never made of a broken stream.

:func:`append_fixtures` adds fixtures to a fixture file (``fixtures:``), replacing the
file whole (a temporary file renamed over it), so a reader never sees half of it.
Nothing of the request but its last user message and its tools' names is kept: no
header, no query, no URL.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

import orjson
import yaml

from chaosproxy.core.answer import fold, piece_of
from chaosproxy.core.frames import Frame, format_for_content_type
from chaosproxy.core.framing import FramingError, make_framer
from chaosproxy.core.llm_request import RequestView
from chaosproxy.core.providers import EventContent, get_profile, provider_for_path
from chaosproxy.scenario.fixtures import Finish, Fixture

#: The most characters of text and tool-call arguments one recording keeps; a longer
#: answer is not recorded (a fixture file is read whole at start).
MAX_CONTENT = 8 * 1024 * 1024

#: Each provider's finish reasons, provider-neutral (docs/mock.md, In each provider's
#: format, read backwards); a reason not listed is ``stop``.
_FINISH: dict[str, dict[str, Finish]] = {
    "openai-chat": {
        "length": "length",
        "tool_calls": "tool_calls",
        "function_call": "tool_calls",
        "content_filter": "content_filter",
    },
    "openai-responses": {"max_output_tokens": "length", "content_filter": "content_filter"},
    "anthropic": {"max_tokens": "length", "tool_use": "tool_calls", "refusal": "refusal"},
    "gemini": {
        "MAX_TOKENS": "length",
        "SAFETY": "content_filter",
        "RECITATION": "content_filter",
        "BLOCKLIST": "content_filter",
        "PROHIBITED_CONTENT": "content_filter",
        "SPII": "content_filter",
    },
    "ollama": {"length": "length"},
    "bedrock": {
        "max_tokens": "length",
        "tool_use": "tool_calls",
        "content_filtered": "content_filter",
        "guardrail_intervened": "refusal",
    },
}


class NotRecorded(Exception):
    """An answer that does not become a fixture; the message says why."""


class Transcript:
    """One streamed response body, read as it passes: see the module docstring.

    ``path`` is the request's path (it names the provider), ``status`` and
    ``content_type`` the response's. :meth:`feed` never raises: a body that cannot be
    read is remembered and reported by :meth:`fixture`.
    """

    def __init__(self, path: str, status: int, content_type: str | None) -> None:
        self.provider = provider_for_path(path)
        self.status = status
        self._problem: str | None = None
        fmt = format_for_content_type(content_type)
        if not 200 <= status < 300:
            self._problem = f"the upstream answered {status}"
        elif self.provider is None:
            self._problem = f"{path.split('?', 1)[0]} is no provider's path the mock serves"
        elif fmt == "raw":
            self._problem = f"not a stream (Content-Type {content_type or 'none'})"
        self._framer = make_framer("sse" if fmt == "raw" else fmt)
        self._profile = get_profile(self.provider or "generic")
        self._trail: list[tuple[str | None, EventContent]] = []
        self._size = 0
        self._extras = _Extras()
        self.events = 0
        #: The client left before the upstream's body ended (:meth:`client_left`).
        self.left = False

    def feed(self, data: bytes) -> None:
        """A piece of the body, as it came."""
        if self._problem is not None:
            return
        try:
            frames = self._framer.feed(data)
        except FramingError as exc:
            self._problem = f"the body breaks its framing: {exc}"
            return
        for frame in frames:
            self._event(frame)

    def end(self) -> None:
        """The body ended (cleanly or not: :meth:`fixture` says)."""
        if self._problem is None:
            try:
                frames = self._framer.eof()
            except FramingError as exc:
                self._problem = f"the body breaks its framing: {exc}"
                return
            for frame in frames:
                self._event(frame)

    def fail(self, why: str) -> None:
        """The body did not arrive whole (the upstream failed)."""
        if self._problem is None:
            self._problem = why

    def client_left(self) -> None:
        """The client left: what it was sent is the answer. A client that stops at the
        terminal event (an SDK closes right after ``[DONE]``) leaves a whole answer, which
        is recorded; one that left before it leaves none."""
        self.left = True
        self.end()

    def _event(self, frame: Frame) -> None:
        if frame.data is None:
            return
        self.events += 1
        piece = piece_of(self._profile, frame)
        self._size += sum(len(f) for _, f in piece.text) + sum(len(f) for _, f in piece.tools)
        if self._size > MAX_CONTENT:
            self._problem = f"the answer is longer than {MAX_CONTENT} characters"
            return
        self._trail.append((None, piece))
        payload = frame.json()
        if isinstance(payload, dict) and self.provider is not None:
            self._extras.read(self.provider, frame.type, payload)

    def fixture(self, request: RequestView) -> Fixture:
        """The fixture this answer is, matched to ``request``; :class:`NotRecorded`
        when the answer is not one to replay (the reason)."""
        if self._problem is not None:
            raise NotRecorded(self._problem)
        if not self.events:
            raise NotRecorded("the body has no event")
        content = fold(self._trail, dedup=False)
        if content.errors:
            raise NotRecorded("the stream carries an error event")
        if not content.terminal:
            if self.left:
                raise NotRecorded("the client left before the terminal event")
            raise NotRecorded("the stream ended before its terminal event")
        provider = self.provider or "generic"
        calls: list[dict[str, Any]] = []
        for key, arguments in content.tools:
            if provider == "openai-chat" and not key.startswith("0/"):
                continue  # the first choice's calls (the mock answers every choice alike)
            name, call_id = self._extras.calls.get(key, [None, None])
            if name is None:
                raise NotRecorded(f"tool call {key} has no name")
            try:
                parsed = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError as exc:
                raise NotRecorded(f"tool call {name}'s arguments are not JSON: {exc}") from None
            if not isinstance(parsed, dict):
                raise NotRecorded(f"tool call {name}'s arguments are not a JSON object")
            call: dict[str, Any] = {"name": name, "arguments": parsed}
            if call_id is not None:
                call["id"] = call_id
            calls.append(call)
        text = dict(content.texts).get(0, "")
        item: dict[str, Any] = {"match": recorded_match(request)}
        if text or not calls:
            item["text"] = text
        if calls:
            item["tool_calls"] = calls
        finish = self._finish(dict(content.finish).get(0), bool(calls))
        if finish != ("tool_calls" if calls else "stop"):
            item["finish"] = finish
        if self._extras.usage:
            item["usage"] = dict(sorted(self._extras.usage.items()))
        digest = hashlib.sha256(orjson.dumps(item, option=orjson.OPT_SORT_KEYS)).hexdigest()
        named: dict[str, Any] = {"name": f"recorded-{provider}-{digest[:12]}", **item}
        return Fixture.model_validate(named)

    def _finish(self, native: str | None, calls: bool) -> Finish:
        if self._extras.refusal:
            return "refusal"
        provider = self.provider or "generic"
        if provider == "openai-responses":
            native = self._extras.responses_reason
        finish = _FINISH.get(provider, {}).get(native or "", "stop")
        if finish == "stop" and calls:
            return "tool_calls"  # Gemini and Ollama say STOP/stop after a call
        return finish


class _Extras:
    """What the profiles do not read of a stream, per provider: the calls' names and
    ids, the usage, a refusal, OpenAI Responses' incomplete reason."""

    def __init__(self) -> None:
        #: Each call's key (as the profile's content keys it) → [name, id].
        self.calls: dict[str, list[str | None]] = {}
        self.whole = 0  # whole calls (Gemini, Ollama) numbered as fold numbers them
        self.usage: dict[str, int] = {}
        self.refusal = False
        self.responses_reason: str | None = None

    def read(self, provider: str, kind: str | None, payload: dict[str, Any]) -> None:
        """One event's extras (``kind``: its event name, if it has one)."""
        if provider == "openai-chat":
            self._openai_chat(payload)
        elif provider == "openai-responses":
            self._openai_responses(kind or payload.get("type"), payload)
        elif provider == "anthropic":
            self._anthropic(kind or payload.get("type"), payload)
        elif provider == "gemini":
            self._gemini(payload)
        elif provider == "ollama":
            self._ollama(payload)
        elif provider == "bedrock":
            self._bedrock(kind, payload)

    def _count(self, key: str, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            self.usage[key] = value

    def _call(self, key: str, name: Any, call_id: Any) -> None:
        entry = self.calls.setdefault(key, [None, None])
        if isinstance(name, str) and name:
            entry[0] = name
        if isinstance(call_id, str) and call_id:
            entry[1] = call_id

    def _openai_chat(self, payload: dict[str, Any]) -> None:
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self._count("input_tokens", usage.get("prompt_tokens"))
            self._count("output_tokens", usage.get("completion_tokens"))
        for choice in _dicts(payload.get("choices")):
            index = choice.get("index", 0)
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("refusal"), str) and delta["refusal"]:
                self.refusal = True
            for call in _dicts(delta.get("tool_calls")):
                function = call.get("function")
                name = function.get("name") if isinstance(function, dict) else None
                self._call(f"{index}/{call.get('index', 0)}", name, call.get("id"))

    def _openai_responses(self, kind: Any, payload: dict[str, Any]) -> None:
        if kind == "response.refusal.delta":
            self.refusal = True
        elif kind == "response.output_item.added":
            item = payload.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                key = item.get("id")
                key = key if isinstance(key, str) else str(payload.get("output_index"))
                self._call(key, item.get("name"), item.get("call_id"))
        elif kind in ("response.completed", "response.incomplete"):
            response = payload.get("response")
            if not isinstance(response, dict):
                return
            usage = response.get("usage")
            if isinstance(usage, dict):
                self._count("input_tokens", usage.get("input_tokens"))
                self._count("output_tokens", usage.get("output_tokens"))
            details = response.get("incomplete_details")
            if isinstance(details, dict) and isinstance(details.get("reason"), str):
                self.responses_reason = details["reason"]

    def _anthropic(self, kind: Any, payload: dict[str, Any]) -> None:
        if kind == "message_start":
            message = payload.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                self._count("input_tokens", usage.get("input_tokens"))
                self._count("output_tokens", usage.get("output_tokens"))
        elif kind == "message_delta":
            usage = payload.get("usage")
            if isinstance(usage, dict):
                self._count("input_tokens", usage.get("input_tokens"))
                self._count("output_tokens", usage.get("output_tokens"))
        elif kind == "content_block_start":
            block = payload.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self._call(str(payload.get("index")), block.get("name"), block.get("id"))

    def _bedrock(self, kind: Any, payload: dict[str, Any]) -> None:
        """ConverseStream's (InvokeModel's chunks carry another vendor's events: their
        text and calls are read, their names, ids and usage are not)."""
        if kind == "contentBlockStart":
            start = payload.get("start")
            tool = start.get("toolUse") if isinstance(start, dict) else None
            if isinstance(tool, dict):
                key = str(payload.get("contentBlockIndex"))
                self._call(key, tool.get("name"), tool.get("toolUseId"))
        elif kind == "metadata":
            usage = payload.get("usage")
            if isinstance(usage, dict):
                self._count("input_tokens", usage.get("inputTokens"))
                self._count("output_tokens", usage.get("outputTokens"))

    def _gemini(self, payload: dict[str, Any]) -> None:
        usage = payload.get("usageMetadata")
        if isinstance(usage, dict):
            self._count("input_tokens", usage.get("promptTokenCount"))
            self._count("output_tokens", usage.get("candidatesTokenCount"))
        for candidate in _dicts(payload.get("candidates")):
            content = candidate.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in _dicts(parts):
                call = part.get("functionCall")
                if isinstance(call, dict):
                    call_id = call.get("id")
                    if isinstance(call_id, str) and call_id:
                        key = call_id
                    else:
                        self.whole += 1
                        key = f"#{self.whole}"
                    self._call(key, call.get("name"), call_id)

    def _ollama(self, payload: dict[str, Any]) -> None:
        if payload.get("done") is True:
            self._count("input_tokens", payload.get("prompt_eval_count"))
            self._count("output_tokens", payload.get("eval_count"))
        message = payload.get("message")
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in _dicts(calls):
            function = call.get("function")
            self.whole += 1
            name = function.get("name") if isinstance(function, dict) else None
            self._call(f"#{self.whole}", name, call.get("id"))


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def recorded_match(request: RequestView) -> dict[str, Any]:
    """The ``match`` of a recorded answer: the request's last user message, exactly
    (a regular expression anchored at both ends, so that a longer message that contains
    it is not answered by it), and the tools it offers (``false``: none)."""
    match: dict[str, Any] = {}
    last = request.last_user_message
    if last is not None:
        match["message_regex"] = r"\A" + re.escape(last) + r"\Z"
    match["tools"] = list(request.tools) if request.tools else False
    return match


def read_fixture_items(path: Path) -> list[Any]:
    """The ``fixtures:`` items of a fixture file as written (none when the file does
    not exist or is empty). Raises ValueError when it is not a fixture file: it is
    never overwritten then."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    if not text.strip():
        return []
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML: {exc}") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("fixtures"), list):
        raise ValueError(f"{path}: not a fixture file (a mapping with a fixtures: list)")
    items: list[Any] = loaded["fixtures"]
    return items


def append_fixtures(path: Path, fixtures: list[Fixture]) -> None:
    """Add ``fixtures`` at the end of the fixture file ``path`` (made when missing),
    replacing the file whole. Raises ValueError for a file that is not a fixture file,
    OSError when it cannot be written."""
    folder = path.parent if str(path.parent) else Path(".")
    # The folder locked while the file is read, extended and replaced: the workers of
    # ``serve --workers N`` record into one file without losing each other's fixtures.
    lock = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        items = read_fixture_items(path)
        items.extend(f.as_dict() for f in fixtures)
        text = yaml.safe_dump({"fixtures": items}, sort_keys=False, allow_unicode=True, width=100)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            # mkstemp's file is the owner's alone: keep the file's mode, or a usual one.
            mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
            os.chmod(temporary, mode)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    finally:
        os.close(lock)  # (and the lock with it)


__all__ = [
    "MAX_CONTENT",
    "NotRecorded",
    "Transcript",
    "append_fixtures",
    "read_fixture_items",
    "recorded_match",
]
