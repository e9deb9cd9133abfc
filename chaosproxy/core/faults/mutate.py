"""``mutate``: edit the JSON payload of selected events.

Paths are dot-separated keys, with integer segments indexing lists
(``choices.0.delta.content``). ``set`` creates missing mapping keys on the way;
``delete`` removes a key or list item. A path that cannot be followed (an index out
of range, a key under a string) leaves the event as it is for that path. Events whose
data is not JSON are forwarded unchanged. The edited JSON is written back compactly;
the other SSE lines (``event:``, ``id:``, ``retry:``, comments) stay where they were.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import AfterValidator, model_validator

from chaosproxy.core.events import Event
from chaosproxy.core.faults.base import Declaration, FaultContext, SelectingFault, SelectorConfig
from chaosproxy.core.faults.drawing import Choices, Explore, Shape, Within, selector
from chaosproxy.core.framing.encode import replace_data


def _check_path(path: str) -> str:
    if not path or any(not seg for seg in path.split(".")):
        raise ValueError(f"bad path {path!r}: use dot-separated keys, e.g. choices.0.delta")
    return path


JsonPath = Annotated[str, AfterValidator(_check_path)]


class MutateConfig(SelectorConfig):
    #: path → new value (any YAML value, written as JSON).
    set: dict[JsonPath, Any] | None = None
    #: paths to remove.
    delete: list[JsonPath] | None = None

    @model_validator(mode="after")
    def _something_to_do(self) -> MutateConfig:
        if not self.set and not self.delete:
            raise ValueError("give set and/or delete, with at least one path")
        for path, value in (self.set or {}).items():
            try:
                orjson.dumps(value)
            except orjson.JSONEncodeError as exc:
                raise ValueError(f"set.{path}: cannot be encoded as JSON: {exc}") from None
        return self


class PathError(Exception):
    """A path that does not lead anywhere in this payload."""


def _step(node: Any, seg: str, path: str) -> tuple[Any, str | int]:
    """The container ``node`` and the key or index ``seg`` names in it."""
    if isinstance(node, dict):
        return node, seg
    if isinstance(node, list):
        try:
            index = int(seg)
        except ValueError:
            raise PathError(f"{path}: {seg!r} is not a list index") from None
        if not -len(node) <= index < len(node):
            raise PathError(f"{path}: index {index} out of range (list of {len(node)})")
        return node, index
    raise PathError(f"{path}: cannot go into {type(node).__name__} at {seg!r}")


def set_path(doc: Any, path: str, value: Any) -> None:
    """Set ``path`` in ``doc`` to ``value``, creating missing mapping keys."""
    *parents, leaf = path.split(".")
    node = doc
    for seg in parents:
        container, key = _step(node, seg, path)
        if isinstance(container, dict) and key not in container:
            container[key] = {}
        node = container[key]
    container, key = _step(node, leaf, path)
    container[key] = value


def delete_path(doc: Any, path: str) -> None:
    """Remove ``path`` from ``doc``; a missing key is a :class:`PathError`."""
    *parents, leaf = path.split(".")
    node = doc
    for seg in parents:
        container, key = _step(node, seg, path)
        if isinstance(container, dict) and key not in container:
            raise PathError(f"{path}: no key {key!r}")
        node = container[key]
    container, key = _step(node, leaf, path)
    if isinstance(container, dict) and key not in container:
        raise PathError(f"{path}: no key {key!r}")
    del container[key]


#: Where, in an event's JSON, each provider's text delta is (explore edits it).
CONTENT_PATHS: dict[str, str] = {
    "openai-chat": "choices.0.delta.content",
    "openai-responses": "delta",
    "anthropic": "delta.text",
    "gemini": "candidates.0.content.parts.0.text",
    "ollama": "message.content",
}


def _fits(shape: Shape) -> bool:
    return shape.provider in CONTENT_PATHS


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    path = CONTENT_PATHS[space.shape.provider]
    sel = selector(c, space, ("delta",))
    if c.pick(("set", "delete")) == "delete":
        return {**sel, "delete": [path]}
    return {**sel, "set": {path: c.pick(("?", "", " (mutated)"))}}


class MutateFault(SelectingFault[MutateConfig], name="mutate", stage="event"):
    declaration = Declaration(
        needs="framed",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=5, fits=_fits),
        example="mutate: {kind: delta, nth: 1, set: {choices.0.delta.content: '?'}}",
    )

    passes_unselected = True
    #: Parses and re-encodes the event (measured: docs/scenarios.md, Limits).
    cost = 15

    def __init__(self, config: MutateConfig, ctx: FaultContext) -> None:
        super().__init__(config, ctx)
        self._selected = 0
        self._not_json = 0
        #: Why paths failed, first one per path (for the skipped reason).
        self.failures: dict[str, str] = {}

    def on_event(self, ev: Event) -> list[Event]:
        if not self.selector.selects(ev):
            return [ev]
        self._selected += 1
        if ev.frame.json() is None or not ev.frame.data:
            self._not_json += 1
            return [ev]
        doc = orjson.loads(ev.frame.data)  # a fresh copy: frame.json() is shared
        done = 0
        ops = [(p, True, v) for p, v in (self.config.set or {}).items()]
        ops += [(p, False, None) for p in self.config.delete or []]
        for path, is_set, value in ops:
            try:
                if is_set:
                    set_path(doc, path, value)
                else:
                    delete_path(doc, path)
            except PathError as exc:
                self.failures.setdefault(path, str(exc))
                continue
            done += 1
        if not done:
            return [ev]
        self.applied += 1
        frame = replace_data(ev.frame, self.ctx.format, orjson.dumps(doc))
        return [ev.touched(self.name, frame)]

    def skipped(self) -> str | None:
        if self.applied:
            return None
        if self._selected and self._not_json == self._selected:
            return f"the {self._selected} selected event(s) had no JSON data"
        if self.failures:
            return "; ".join(self.failures.values())
        return super().skipped()
