"""Reading the frame log: a line of text in, a typed record out (:mod:`chaosproxy.core.records`).

The one place where a line of the log (a file, a trace, a pipe) becomes a
:data:`~chaosproxy.core.records.LogLine`; the report and replay read through it, and so
may users' tools (docs/observability.md)::

    from chaosproxy.observe.reading import read_log

    for line in read_log("frames.jsonl"):
        if line["event"] == "frame":  # mypy narrows: line is a FrameLine
            print(line["seq"], line["size"], line.get("faults", []))

How strict it is. A line is validated against its kind's record with pydantic (strict
mode: no coercion, ``"5"`` is no ``int`` and ``true`` no number; no NaN or infinity;
keys the records do not name are kept, for a log from a later version). So a reader may
take every value it is typed to have: ``line["t_ms"]`` is a finite float,
``line.get("faults")`` a list of strings or absent. What does not fit is never raised:

- a line that is not JSON (a truncated last line, a console log), not an object, with
  no ``event`` or one this version does not know, or whose required key is missing or
  of the wrong type (``outcome`` a version has not heard of) is *unreadable*:
  :func:`read_line` says why (:class:`Unreadable`), :func:`parse_log_line` gives None and
  :func:`read_lines` skips it and tells ``unreadable`` (when given);
- a key a line need not have (``NotRequired``) whose value is of the wrong type is left
  out, as if it had not been logged: the rest of the line is read.

Blank lines are passed over. Validating costs a few microseconds a line on top of
decoding it (a 200,000-line log, mostly frame lines, on a busy two-core machine: 0.8 s
read by :func:`read_log`, 0.3 s decoded by orjson alone; ``chaosproxy report`` of it,
2.3 s of CPU instead of 2.1 s, the same page), which buys every reader its types.
This module is not compiled (pydantic builds the validator at run time); the proxy's own
observers (the store, the metrics, the traces) are given each line as the log makes it,
already of its record, and never parse.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pydantic_core
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from chaosproxy.core.records import LINE_KINDS, LogLine

#: How a line's kind is told: by its ``event``.
_TAGGED = Annotated[LogLine, Field(discriminator="event")]
#: Strict types; unknown keys kept (a later version's fields); numbers finite.
_CONFIG = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
#: Longest piece of a line quoted in a reason.
_QUOTE = 60


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A line that is no record of the log, and why (one line of text, for a person)."""

    reason: str
    #: Whether it was a JSON object (of no kind known, or not of its kind's record).
    json_object: bool = False


@functools.cache
def _adapter() -> TypeAdapter[LogLine]:
    # Built on first use (some tens of milliseconds): importing this module is free.
    adapter: TypeAdapter[LogLine] = TypeAdapter(_TAGGED, config=_CONFIG)
    return adapter


@functools.cache
def _optional_keys() -> dict[str, frozenset[str]]:
    """Each kind's ``NotRequired`` keys (read from the records' annotations: the
    ``__optional_keys__`` of a TypedDict under ``from __future__ import annotations``
    miss them)."""
    found: dict[str, frozenset[str]] = {}
    for record in typing.get_args(LogLine):
        hints = typing.get_type_hints(record, include_extras=True)
        (kind,) = typing.get_args(hints["event"])
        found[kind] = frozenset(
            key for key, hint in hints.items() if typing.get_origin(hint) is typing.NotRequired
        )
    return found


def read_line(text: str | bytes) -> LogLine | Unreadable:
    """The record of one line of the log (its newline or none), or why it is none."""
    try:
        return _adapter().validate_json(text)
    except ValidationError as exc:
        return _repair(text, exc)


def parse_log_line(text: str | bytes) -> LogLine | None:
    """The record of one line of the log, or None when it is none (:func:`read_line`
    says why)."""
    line = read_line(text)
    return None if isinstance(line, Unreadable) else line


def check_line(value: object) -> LogLine | Unreadable:
    """As :func:`read_line`, for a line already decoded (a dict from ``json.loads``, a
    line of ``ChaosProxy.lines``): a new dict, the record, or why it is none."""
    try:
        return _adapter().validate_python(value)
    except ValidationError as exc:
        return _fix(value, exc)


def read_lines(
    lines: Iterable[str | bytes], unreadable: Callable[[int, Unreadable], None] | None = None
) -> Iterator[LogLine]:
    """The records of ``lines`` (a file opened in binary or text mode), in order; each
    unreadable one is skipped, and told to ``unreadable`` with its 1-based number.
    Blank lines are passed over."""
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        line = read_line(text)
        if isinstance(line, Unreadable):
            if unreadable is not None:
                unreadable(number, line)
        else:
            yield line


def read_log(
    path: str | Path, unreadable: Callable[[int, Unreadable], None] | None = None
) -> Iterator[LogLine]:
    """The records of a frame-log file, as :func:`read_lines` reads them."""
    with Path(path).open("rb") as stream:
        yield from read_lines(stream, unreadable)


def _repair(text: str | bytes, exc: ValidationError) -> LogLine | Unreadable:
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        return Unreadable(f"not JSON ({_short(first['msg'].removeprefix('Invalid JSON: '))})")
    try:
        value = pydantic_core.from_json(text)
    except ValueError as err:  # the validator's parser said otherwise: keep its word
        return Unreadable(f"not JSON ({_short(str(err))})")
    return _fix(value, exc)


def _fix(value: object, exc: ValidationError) -> LogLine | Unreadable:
    """The record ``value`` is once its optional keys of a wrong type are left out, or
    why there is none."""
    if not isinstance(value, Mapping):
        return Unreadable("not a JSON object")
    event = value.get("event")
    if event is None:
        return Unreadable("no event", json_object=True)
    if event not in LINE_KINDS:
        return Unreadable(f"unknown event {_short(repr(event))}", json_object=True)
    optional = _optional_keys()[event]
    drop: set[str] = set()
    for error in exc.errors():
        where = error["loc"][1:]  # after the kind (the tag)
        key = where[0] if where else None
        if key not in optional:
            place = ".".join(str(p) for p in where) or "line"
            if error["type"] != "missing":  # the value, then what it should be
                place += f" {_short(repr(error['input']), 30)}"
            return Unreadable(f"{event} line: {place}: {_short(error['msg'])}", json_object=True)
        drop.add(str(key))
    trimmed: dict[str, Any] = {k: v for k, v in value.items() if k not in drop}
    try:
        return _adapter().validate_python(trimmed)
    except ValidationError as again:  # (no second error follows from leaving keys out)
        reason = f"{event} line: {_short(str(again.errors()[0]['msg']))}"
        return Unreadable(reason, json_object=True)


def _short(text: str, limit: int = _QUOTE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["Unreadable", "check_line", "parse_log_line", "read_line", "read_lines", "read_log"]
