"""``split_tool_args``: tool-call argument fragments cut at chosen places.

Each fragment of a call's arguments (OpenAI Chat ``function.arguments``, Responses
``response.function_call_arguments.delta``, Anthropic ``input_json_delta``) is cut into
several, each a valid event of the provider's format, at the places ``at`` names in the
arguments' JSON text, read across fragments:

- ``keys``: inside every object key (after its first character);
- ``escapes``: between every ``\\`` and the character it escapes, and in the middle of
  every ``\\uXXXX``;

and/or every ``every`` characters of each fragment. The upstream's own cuts stay. The
arguments, concatenated, are unchanged.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from chaosproxy.core import segment
from chaosproxy.core.events import Event
from chaosproxy.core.faults._rewrite import Rewriter, skip_reason
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig, FaultContext
from chaosproxy.core.slots import fragments_problem

Place = Literal["keys", "escapes"]


class SplitToolArgsConfig(FaultConfig):
    """At least one of ``at`` (a place or a list of them) and ``every``."""

    at: Place | list[Place] | None = None
    every: Annotated[int, Field(ge=1, le=100_000, strict=True)] | None = None

    @model_validator(mode="after")
    def _somewhere(self) -> SplitToolArgsConfig:
        if self.at is None and self.every is None:
            raise ValueError("give at (keys, escapes) and/or every")
        if isinstance(self.at, list) and not self.at:
            raise ValueError("at: give at least one of keys, escapes")
        return self


class _Lexer:
    """Where one call's arguments JSON is, as its fragments arrive: in a string or
    not, in a key or a value, in an escape."""

    __slots__ = ("expect_key", "hex_left", "in_string", "is_key", "key_chars", "stack")

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.expect_key = False
        self.in_string = False
        self.is_key = False
        self.key_chars = 0
        #: Hex digits of a \\u escape still to come; -1 right after a backslash.
        self.hex_left = 0

    def cuts(self, text: str, places: frozenset[str]) -> list[int]:
        """Feed ``text``; the offsets in it where ``places`` want a cut."""
        out: list[int] = []
        for i, c in enumerate(text):
            if self.in_string:
                if self.hex_left == -1:  # the character after a backslash
                    self.hex_left = 4 if c == "u" else 0
                    self._key_char()
                    continue
                if self.hex_left > 0:
                    self.hex_left -= 1
                    if self.hex_left == 2 and "escapes" in places:
                        out.append(i + 1)  # \\u00|e9
                    continue
                if c == "\\":
                    self.hex_left = -1
                    if "escapes" in places:
                        out.append(i + 1)  # \\|n
                    if self.is_key and self.key_chars == 0 and "keys" in places:
                        out.append(i + 1)
                    continue
                if c == '"':
                    self.in_string = False
                    continue
                if self.is_key and self.key_chars == 0 and "keys" in places:
                    out.append(i + 1)  # "c|ity"
                self._key_char()
                continue
            if c == '"':
                self.in_string = True
                self.is_key = self.expect_key
                self.key_chars = 0
            elif c in "{[":
                self.stack.append(c)
                self.expect_key = c == "{"
            elif c in "}]":
                if self.stack:
                    self.stack.pop()
                self.expect_key = False
            elif c == ",":
                self.expect_key = bool(self.stack) and self.stack[-1] == "{"
            elif c == ":":
                self.expect_key = False
        return out

    def _key_char(self) -> None:
        if self.is_key:
            self.key_chars += 1


class SplitToolArgsFault(Fault[SplitToolArgsConfig], name="split_tool_args", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=True,
        explore=None,
        example="split_tool_args: {at: escapes}",
    )

    #: Parses and re-encodes the event (measured: docs/scenarios.md, Limits).
    cost = 25

    def __init__(self, config: SplitToolArgsConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._edit = Rewriter(self.name, ctx)
        at = config.at
        self._places: frozenset[str] = frozenset([at] if isinstance(at, str) else at or [])
        self._lexers: dict[str, _Lexer] = {}
        self._fragments = 0

    @classmethod
    def provider_problem(cls, config: FaultConfig, provider: str) -> str | None:
        return fragments_problem(provider)

    def on_event(self, ev: Event) -> list[Event]:
        slot = self._edit.tool(ev)
        if slot is None:
            return [self._edit.same(ev)]
        self._fragments += 1
        lexer = self._lexers.setdefault(slot.key, _Lexer())
        cuts = lexer.cuts(slot.value, self._places)
        if self.config.every is not None:
            cuts += range(self.config.every, len(slot.value), self.config.every)
        pieces = segment.split_at(slot.value, cuts)
        if len(pieces) == 1:
            return [self._edit.same(ev)]
        self.applied += 1
        return self._edit.pieces(ev, slot, pieces)

    def skipped(self) -> str | None:
        return skip_reason(self, self._why_not)

    def _why_not(self) -> str:
        if not self._fragments:
            return "no tool-call argument fragment came"
        return "no fragment had a place to cut"
