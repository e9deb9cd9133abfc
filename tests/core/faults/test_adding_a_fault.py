"""Adding a fault is one file (docs/architecture.md, "Where to add"): two faults defined
only here, registered for each test's duration (as discovery registers a file of
chaosproxy/core/faults/), are accepted by the scenario loader and its JSON Schema,
drawn by explore's space, run by a session and judged by the verdicts, each as its own
declaration says, with nothing else touched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from pydantic import Field

from chaosproxy.core.actions import Send
from chaosproxy.core.events import Event
from chaosproxy.core.faults import registry
from chaosproxy.core.faults.base import (
    Declaration,
    SelectingFault,
    SelectorConfig,
    check_declaration,
)
from chaosproxy.core.faults.drawing import Choices, Explore, Shape, Within, selector
from chaosproxy.core.session import Session
from chaosproxy.core.verdict import ClientReport, judge
from chaosproxy.scenario import Scenario, ScenarioError, parse_scenario
from chaosproxy.tools.fault_space import (
    FaultDraw,
    Space,
    explorable,
    run_seed,
    scenario_data,
    scenario_yaml,
    usable_faults,
    validated,
)
from chaosproxy.tools.schema import scenario_schema
from tests.verdict_oracle import benign

E1 = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
E2 = b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
CHAT = Shape("openai-chat", "sse", 3, {"delta": 2, "terminal": 1}, len(E1 + E2 + DONE))


class StampConfig(SelectorConfig):
    """Selectors, and how many marks each selected event gets."""

    marks: Annotated[int, Field(ge=1, le=3)] = 1


def _draw(c: Choices, space: Within) -> dict[str, Any]:
    return {**selector(c, space, ("delta",)), "marks": c.between(1, 3)}


class StampFault(SelectingFault[StampConfig], name="stamp", stage="event"):
    """Names itself on each selected event's write, and changes nothing of it."""

    declaration = Declaration(
        needs="framed",
        keeps_answer=True,
        explore=Explore(draw=_draw, rank=1000),
        example="stamp: {kind: delta, marks: 2}",
    )

    def on_event(self, ev: Event) -> list[Event]:
        if not self.selector.selects(ev):
            return [ev]
        self.applied += 1
        for _ in range(self.config.marks):
            ev = ev.touched(self.name)
        return [ev]


class SmudgeFault(StampFault, name="smudge"):
    """The same writes, declared as changing the answer: judged as a defect."""

    declaration = Declaration(
        needs="sse",
        keeps_answer=False,
        explore=Explore(draw=_draw, rank=1001),
        example="smudge: {nth: 1}",
    )


def scenario(text: str) -> Scenario:
    return parse_scenario(text, "<s>", default_name="s")


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Both faults in the registry for the test, checked as discovery checks a file."""
    for cls in (StampFault, SmudgeFault):
        check_declaration(cls)
        monkeypatch.setitem(registry(), cls.name, cls)
    yield
    monkeypatch.undo()
    assert "stamp" not in registry()


def test_the_loader_and_the_schema_take_it() -> None:
    loaded = scenario("faults: [{stamp: {nth: 2, marks: 3}}, smudge]\n")
    assert [name for name, _ in loaded.faults] == ["stamp", "smudge"]
    assert loaded.faults[0][1] == StampConfig(nth=2, marks=3)
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.stamp\.marks"):
        scenario("faults: [{stamp: {marks: 4}}]\n")
    with pytest.raises(ScenarioError, match="stamp"):
        scenario("format: raw\nfaults: [stamp]\n")  # it needs events
    items = scenario_schema()["properties"]["faults"]["items"]
    assert {"stamp", "smudge"} <= set(items["else"]["propertyNames"]["enum"])


def test_explore_draws_it_where_its_declaration_fits() -> None:
    assert list(explorable())[-2:] == ["stamp", "smudge"]  # the last ranks
    assert usable_faults(CHAT)[-2:] == ("stamp", "smudge")
    ndjson = Shape("ollama", "ndjson", 3, {"delta": 2, "terminal": 1}, 90)
    assert "stamp" in usable_faults(ndjson) and "smudge" not in usable_faults(ndjson)
    space = Space(CHAT, ("stamp",))
    drawn = set()
    for k in range(1, 41):
        seed = run_seed(9, k)
        draft = space.draw(seed)
        assert [f.fault for f in draft] == ["stamp"]
        read, faults = space.read(draft)
        assert read == draft
        loaded = validated(scenario_yaml(scenario_data(f"run-{k}", faults, seed=seed)), "x")
        assert [name for name, _ in loaded.faults] == ["stamp"]
        config = loaded.faults[0][1]
        assert isinstance(config, StampConfig)
        drawn.add(config.marks)
    assert drawn == {1, 2, 3}
    # Read back from its choices (one kind: no choice; the form; the nth; the marks).
    assert space.read((FaultDraw("stamp", (0, 0, 2)),))[1] == [
        {"stamp": {"kind": "delta", "nth": 1, "marks": 3}}
    ]


def run(faults: str, report: ClientReport) -> tuple[list[tuple[str, ...]], str]:
    """The chat stream through a session under ``faults``: each write's faults, and the
    verdict on a client that reported ``report``."""
    session = Session(
        "r-1", scenario=scenario(faults), active=True, seed=7, path="/v1/chat/completions"
    )
    session.start(0.0)
    session.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    writes = []
    for i, action in enumerate(session.feed(E1 + E2 + DONE, 0.01)):
        assert isinstance(action, Send)
        writes.append(session.wrote(action, 0.01 + i / 1000)["faults"])
    assert session.body_end(0.02) == []
    session.finish()
    summary: Any = {**session.summary(0.03), "request_id": "r-1"}
    return [tuple(w) for w in writes], judge([summary], report)["verdict"]


RAISED = ClientReport(text="ab", error="ValueError: unexpected event")


def test_the_verdicts_judge_it_by_its_declaration() -> None:
    writes, verdict = run("faults: [{stamp: {nth: 2, marks: 2}}]\n", RAISED)
    assert writes == [(), ("stamp", "stamp"), ()]
    assert verdict == "false_alarm"  # it keeps the answer: the client raised on a clean one
    assert run("faults: [{stamp: {nth: 2}}]\n", ClientReport(text="ab"))[1] == "tolerated"
    writes, verdict = run("faults: [{smudge: {nth: 2}}]\n", RAISED)
    assert writes == [(), ("smudge",), ()]
    assert verdict == "detected"  # declared as changing the answer: the stream is unsound
    # The oracle of the verdict tests reads the same declarations on its own.
    assert "stamp" in benign() and "smudge" not in benign()
