"""Scenario problems, and pydantic's errors rephrased as short located messages.

Users read these in a terminal or an API response, one per line, so each says where
(``FILE:LINE: path``) and what, in a few words::

    scenarios/dup.yaml:7: faults[1].rechunk.size: must be >= 1
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in one file; ``line`` is 1-based, 0 when it concerns the whole file."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class ScenarioError(Exception):
    """One or more problems; ``str()`` gives one ``FILE:LINE: message`` per line."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


@dataclass(frozen=True, slots=True)
class Located:
    """A pydantic error placed in the document: its line, and its path there.

    ``union`` is where a union branch tag appeared in the error's ``loc`` (the path
    depth, the tag), so that the branches of one union can be merged.
    """

    err: ErrorDetails
    line: int
    path: tuple[str | int, ...]
    union: tuple[int, str] | None


# Type errors: the value had the wrong type for a branch. Each maps to a noun.
_TYPE_NOUNS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "frozen_set_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "none_required": "null",
}


def phrase_errors(
    located: list[Located], model: type[BaseModel]
) -> Iterator[tuple[int, tuple[str | int, ...], str]]:
    """Turn errors into (line, path, message), merging the branches of a union.

    When a value fits no branch of a union, pydantic reports every branch. A branch
    whose only complaint is the type of the value itself is noise when another branch
    got further (right type, wrong value): that one is reported alone. When every
    branch failed on the type, one message names all: "must be an integer or a list".
    """
    groups: dict[tuple[tuple[str | int, ...], int], dict[str, list[Located]]] = {}
    order: list[Located | tuple[tuple[str | int, ...], int]] = []
    for item in located:
        if item.union is None:
            order.append(item)
            continue
        depth, tag = item.union
        point = (item.path[:depth], depth)
        if point not in groups:
            groups[point] = {}
            order.append(point)
        groups[point].setdefault(tag, []).append(item)
    seen: set[tuple[int, tuple[str | int, ...], str]] = set()
    for entry in order:
        if isinstance(entry, Located):
            out = [entry]
        else:
            branches = groups[entry]
            at_point = len(entry[0])

            def type_only(items: list[Located], at: int = at_point) -> bool:
                return all(len(i.path) == at and _noun(i.err) is not None for i in items)

            close = [b for b in branches.values() if not type_only(b)]
            if close:
                out = [i for b in close for i in b]
            else:
                first = next(iter(branches.values()))[0]
                nouns = _unique(_noun(i.err) or "" for b in branches.values() for i in b)
                result = (first.line, first.path, "must be " + " or ".join(nouns))
                if result not in seen:
                    seen.add(result)
                    yield result
                continue
        for item in out:
            result = (item.line, *_phrase(item, model))
            if result not in seen:
                seen.add(result)
                yield result


def _noun(err: ErrorDetails) -> str | None:
    """What the value should have been, for an error that says "not this kind of value"
    (a wrong type, or none of a fixed set of values); None for other errors."""
    kind = err["type"]
    if kind in ("literal_error", "enum"):
        expected = str((err.get("ctx") or {}).get("expected", ""))
        options = [o.strip().strip("'\"") for o in re.split(r",| or ", expected) if o.strip()]
        return f"one of: {', '.join(options)}"
    return _TYPE_NOUNS.get(kind)


#: Words people write for a key that spelling alone does not find (``stall: {for: 5s}``
#: is a ``duration``, not ``forever``), used where the key they mean is allowed.
_MEANT = {
    "for": "duration",
    "time": "duration",
    "seconds": "duration",
    "secs": "duration",
    "period": "duration",
    "length": "duration",
    "ms": "duration",
}


def _phrase(item: Located, model: type[BaseModel]) -> tuple[tuple[str | int, ...], str]:
    """(path, short human message) for one located error."""
    err = item.err
    kind = err["type"]
    ctx = err.get("ctx") or {}
    path = item.path
    if kind == "missing":
        if path and isinstance(path[-1], int):
            return path[:-1], f"too few items (expected at least {path[-1] + 1})"
        return path, "required"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, path[:-1])
        key = str(path[-1]) if path else ""
        hint = ""
        if allowed:
            meant = _MEANT.get(key.lower())
            close = [meant] if meant in allowed else difflib.get_close_matches(key, allowed, n=1)
            hint = f", did you mean {close[0]!r}?" if close else ""
            hint += f" (allowed: {', '.join(allowed)})"
        return path, f"unknown key{hint}"
    noun = _noun(err)
    if noun is not None:
        return path, f"must be {noun}"
    bounds = {
        "greater_than_equal": (">=", "ge"),
        "greater_than": (">", "gt"),
        "less_than_equal": ("<=", "le"),
        "less_than": ("<", "lt"),
    }
    if kind in bounds:
        op, key = bounds[kind]
        return path, f"must be {op} {_number(ctx.get(key))}"
    if kind == "too_short":
        n = int(ctx.get("min_length", 1))
        return path, "must not be empty" if n == 1 else f"must have at least {n} items"
    if kind == "too_long":
        return path, f"must have at most {ctx.get('max_length')} items"
    if kind == "string_too_short":
        n = int(ctx.get("min_length", 1))
        return path, "must not be empty" if n == 1 else f"must be at least {n} characters"
    if kind == "string_too_long":
        return path, f"must be at most {ctx.get('max_length')} characters"
    if kind == "string_pattern_mismatch":
        return path, f"must match {ctx.get('pattern')}"
    if kind == "multiple_of":
        return path, f"must be a multiple of {_number(ctx.get('multiple_of'))}"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return path, msg


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _allowed_keys(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The keys of the model found at ``path`` inside ``model`` (best effort)."""
    current: Any = model
    for elem in path:
        if isinstance(elem, int):
            current = _item_type(current)
        else:
            fields = _model_fields(current)
            if fields is None or elem not in fields:
                return []
            current = fields[elem]
        if current is None:
            return []
    fields = _model_fields(current)
    return list(fields) if fields is not None else []


def _model_fields(tp: Any) -> dict[str, Any] | None:
    """The keys a document may give for ``tp`` (excluded fields are not such keys)."""
    for candidate in _flatten(tp):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            fields = candidate.model_fields.items()
            return {(f.alias or name): f.annotation for name, f in fields if not f.exclude}
    return None


def _item_type(tp: Any) -> Any:
    for candidate in _flatten(tp):
        args = get_args(candidate)
        if args:
            return args[0]
    return None


def _flatten(tp: Any) -> list[Any]:
    """The members of a union / the type inside Annotated, recursively."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _flatten(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(tp) for m in _flatten(arg)]
    return [tp]


def dotted(path: Sequence[str | int]) -> str:
    """``faults[1].rechunk.size`` for ``("faults", 1, "rechunk", "size")``."""
    out = ""
    for elem in path:
        if isinstance(elem, int):
            out += f"[{elem}]"
        else:
            out += f".{elem}" if out else str(elem)
    return out
