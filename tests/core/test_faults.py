"""The fault registry (chaosproxy/core/faults/__init__.py) and each fault's declaration
(core/faults/base.py, ``Declaration``): every fault declares itself whole, a fault that
does not is refused with its name and the field, and what the rest of chaosproxy knows
of faults is derived from the declarations: ``BENIGN`` and each body's soundness, the
verdict oracle's list, explore's space and its order."""

from __future__ import annotations

import dataclasses
import re
import types
from typing import Any, get_args

import pytest
import yaml

from chaosproxy.core.actions import Send
from chaosproxy.core.body import BENIGN, Soundness
from chaosproxy.core.events import Event
from chaosproxy.core.faults import keeps_answer, registry
from chaosproxy.core.faults.base import (
    Declaration,
    Fault,
    FaultConfig,
    Needs,
    check_declaration,
)
from chaosproxy.core.faults.drawing import Explore, nothing
from chaosproxy.core.framing import parse_block
from chaosproxy.scenario import ScenarioError, parse_scenario
from chaosproxy.tools.fault_space import explorable
from tests.support.repo import REPO
from tests.support.verdict_oracle import benign

#: The order explore's space lists its faults in: each run draws from it by position,
#: so a seeded run's scenario depends on it (the ranks keep it; a new fault goes last).
SPACE_ORDER = (
    "drop",
    "duplicate",
    "reorder",
    "inject",
    "mutate",
    "corrupt",
    "oversize",
    "line_endings",
    "bom",
    "comment",
    "ids",
    "splice",
    "rechunk",
    "coalesce",
    "delay",
    "throttle",
    "stall",
    "cut",
    "hang",
    "compress",
)


class NoteConfig(FaultConfig):
    """A test fault's config."""

    times: int = 1


def declared(**fields: Any) -> Declaration:
    whole: dict[str, Any] = {
        "needs": "any",
        "keeps_answer": True,
        "explore": None,
        "example": "note: {times: 2}",
    }
    return Declaration(**{**whole, **fields})


def fault_class(declaration: Declaration | None) -> type[Fault]:
    """A fault named ``note`` with ``declaration`` (None: without one)."""

    def fill(namespace: dict[str, Any]) -> None:
        if declaration is not None:
            namespace["declaration"] = declaration

    return types.new_class(
        "NoteFault", (Fault[NoteConfig],), {"name": "note", "stage": "event"}, fill
    )


# --------------------------------------------------------------------------- declared


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_fault_declares_itself_whole(name: str) -> None:
    cls = registry()[name]
    check_declaration(cls)  # (the registry ran it too)
    declaration = vars(cls)["declaration"]
    assert declaration.needs in get_args(Needs)
    # Its example is a scenario item of this fault that its config accepts.
    item = yaml.safe_load(declaration.example)
    params = item[name] if isinstance(item, dict) else {}
    assert (item if isinstance(item, str) else next(iter(item))) == name
    cls.Config.model_validate(params or {})


@pytest.mark.parametrize("name", sorted(registry()))
def test_the_event_faults_and_only_they_need_events(name: str) -> None:
    """An event fault declares it needs framed events, a transport or HTTP fault that
    it takes any body; a ``raw`` body leaves out the first (``needs_framing``, which
    core/body.py and the scenario loader ask) and a scenario with ``format: raw``
    refuses them."""
    cls = registry()[name]
    needs = cls.declaration.needs
    if cls.stage == "websocket":  # a relayed WebSocket's frames: never an HTTP body's
        assert needs == "websocket"
        assert not cls.needs_framing(cls.Config.model_construct())
        return
    assert (needs != "any") == (cls.stage == "event")
    assert cls.needs_framing(cls.Config.model_construct()) == (needs != "any")
    text = yaml.safe_dump({"format": "raw", "faults": [yaml.safe_load(cls.declaration.example)]})
    if needs == "any":
        parse_scenario(text, "<raw>", default_name="raw")
    else:
        with pytest.raises(ScenarioError, match=rf"faults\[0\]\.{name}"):
            parse_scenario(text, "<raw>", default_name="raw")


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_fault_has_its_own_test_file(name: str) -> None:
    """docs/architecture.md, "Where to add": a fault is its file and its test file."""
    assert (REPO / "tests" / "core" / "faults" / f"test_{name}.py").is_file()


def test_a_fault_without_a_declaration_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"fault 'note' \(.*NoteFault\): no declaration"):
        check_declaration(fault_class(None))


def test_a_declaration_inherited_from_another_fault_is_no_declaration() -> None:
    parent = fault_class(declared())
    child = types.new_class("LoudNoteFault", (parent,), {"name": "loud_note"})
    with pytest.raises(TypeError, match=r"fault 'loud_note' \(.*LoudNoteFault\): no declaration"):
        check_declaration(child)


def test_a_declaration_without_a_field_names_the_field() -> None:
    with pytest.raises(TypeError, match="keeps_answer"):
        Declaration(needs="any", explore=None, example="note")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"needs": "framing"},
            "declaration.needs must be one of ('any', 'framed', 'sse', 'websocket')",
        ),
        ({"keeps_answer": "yes"}, "declaration.keeps_answer must be True or False"),
        ({"explore": nothing}, "declaration.explore must be None or an Explore"),
        ({"example": "drop: {nth: 2}"}, "declaration.example must be one scenario item"),
        ({"example": "note: [1"}, "declaration.example must be one scenario item"),
        ({"example": "[note, note]"}, "declaration.example must be one scenario item"),
        ({"example": "note: {times: x}"}, "declaration.example is refused by its config"),
    ],
    ids=["needs", "keeps_answer", "explore", "other-fault", "not-yaml", "two", "refused"],
)
def test_a_wrong_field_is_refused_with_the_faults_name_and_the_field(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=r"fault 'note' \(.*NoteFault\): " + re.escape(message)):
        check_declaration(fault_class(declared(**fields)))


def test_a_whole_declaration_passes_bare_or_with_parameters() -> None:
    check_declaration(fault_class(declared(example="note")))
    check_declaration(fault_class(declared(explore=Explore(draw=nothing, rank=99))))


def test_the_registry_checks_every_fault_it_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery runs the check: a fault module without a declaration stops it, named."""
    drop = registry()["drop"]
    monkeypatch.delattr(drop, "declaration")
    registry.cache_clear()
    try:
        with pytest.raises(TypeError, match=r"fault 'drop' \(.*DropFault\): no declaration"):
            registry()
    finally:
        monkeypatch.undo()
        registry.cache_clear()
    assert registry()["drop"] is drop


# --------------------------------------------------------------------------- derived


def test_benign_is_what_the_declarations_say() -> None:
    said = {name for name, cls in registry().items() if cls.declaration.keeps_answer}
    assert BENIGN == keeps_answer() == said
    assert benign() == said  # the oracle, read on its own


def test_the_answer_kept_by_timing_and_regrouping_faults_and_no_others() -> None:
    """docs/verdicts.md, "sound": the lists it names."""
    assert {"rechunk", "coalesce", "delay", "stall", "throttle", "compress", "hang"} <= BENIGN
    assert {"bom", "comment", "ids", "line_endings"} <= BENIGN
    assert {"resegment", "split_tool_args", "interleave_tool_calls"} <= BENIGN
    changes = {"drop", "duplicate", "reorder", "inject", "mutate", "corrupt", "oversize"}
    assert not (changes | {"splice", "snapshot", "headers", "status", "cut"}) & BENIGN


@pytest.mark.parametrize("name", sorted(registry()))
def test_a_write_a_fault_shaped_is_a_defect_unless_it_keeps_the_answer(name: str) -> None:
    """Each fault, as a body judges it: its own declaration, not a list of names."""
    frame = parse_block(b'data: {"n":1}\n\n', "sse")
    sent = Send(frame.raw, (Event(frame, 1, frozenset(), (name,)),), 1, (name,))
    soundness = Soundness(frozenset(n for n in [name] if registry()[n].declaration.keeps_answer))
    soundness.wrote(sent)
    assert soundness.defect == (None if registry()[name].declaration.keeps_answer else name)
    everything = Soundness()  # the default: every fault the registry holds
    everything.wrote(sent)
    assert everything.defect == soundness.defect


# --------------------------------------------------------------------------- explore


def test_explore_draws_the_faults_whose_declaration_says_how_in_rank_order() -> None:
    drawn = explorable()
    assert tuple(drawn) == SPACE_ORDER
    ranks = [e.rank for e in drawn.values()]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    undrawn = {n for n, cls in registry().items() if cls.declaration.explore is None}
    assert undrawn == set(registry()) - set(SPACE_ORDER)
    assert [n for n, e in drawn.items() if e.endless] == ["hang"]


def test_explore_declarations_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        registry()["drop"].declaration.explore.rank = 3  # type: ignore[union-attr,misc]
