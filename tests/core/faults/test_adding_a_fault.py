"""Adding a fault is one file (docs/architecture.md, "Where to add"): two faults defined
only here, registered for each test's duration (as discovery registers a file of
chaosproxy/core/faults/), are accepted by the scenario loader and its JSON Schema,
drawn by explore's space and explored by its loop (run, judged, shrunk), run by a
session and judged by the verdicts, each as its own declaration says, with nothing
else touched."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
from chaosproxy.core.records import Judgement
from chaosproxy.core.session import Session
from chaosproxy.core.verdict import ClientReport, judge
from chaosproxy.scenario import Scenario, ScenarioError, parse_scenario
from chaosproxy.tools.explore import Budget, SerialRunner, Settings, Trial, TrialResult, explore
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
from tests.support.verdict_oracle import benign

E1 = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
E2 = b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
PATH = "/v1/chat/completions"
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


def through_a_session(
    scenario_: Scenario, request_id: str, report: Callable[[list[tuple[str, ...]]], ClientReport]
) -> tuple[list[tuple[str, ...]], Judgement, list[dict[str, Any]]]:
    """The chat stream through a session under ``scenario_``: each write's faults, the
    verdict on a client that reported ``report(writes)``, and the frame-log lines."""
    session = Session(
        request_id, scenario=scenario_, active=True, seed=scenario_.seed or 7, path=PATH
    )
    session.start(0.0)
    session.response_head(200, "OK", [("Content-Type", "text/event-stream")])
    writes, lines = [], []
    for i, action in enumerate(session.feed(E1 + E2 + DONE, 0.01)):
        assert isinstance(action, Send)
        line = session.wrote(action, 0.01 + i / 1000)
        lines.append({**line, "event": "frame", "request_id": request_id})
        writes.append(tuple(line["faults"]))
    assert session.body_end(0.02) == []
    session.finish()
    summary: Any = {**session.summary(0.03), "request_id": request_id}
    lines.append({**summary, "event": "response_end"})
    return writes, judge([summary], report(writes)), lines


def run(faults: str, report: ClientReport) -> tuple[list[tuple[str, ...]], str]:
    """Each write's faults under ``faults``, and the verdict on a client that reported
    ``report``."""
    writes, judgement, _ = through_a_session(scenario(faults), "r-1", lambda _: report)
    return writes, judgement["verdict"]


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


class WaryClient(SerialRunner):
    """Explore's runner, in process: each trial's scenario over the chat stream through a
    session, judged by the verdicts, for a client that reads "ab" and raises on a write
    any fault shaped."""

    def __init__(self) -> None:
        self.ran = 0

    def one(self, trial: Trial) -> TrialResult:
        self.ran += 1
        rid = f"r-{self.ran}"

        def report(writes: list[tuple[str, ...]]) -> ClientReport:
            return RAISED if any(writes) else ClientReport(text="ab")

        _, judgement, lines = through_a_session(trial.scenario, rid, report)
        answer = lines[-1]["answer"]
        return TrialResult(
            judgement["verdict"],
            judgement["reason"],
            content=answer["content"],
            defect=answer["defect"],
            request_id=rid,
            requests=[rid],
            lines=lines,
        )


def test_explore_finds_and_shrinks_what_a_client_does_with_it() -> None:
    """``chaosproxy explore``'s own loop (tools/explore.py): the space it draws from the
    clean run's shape holds both faults; a client that raises on what ``stamp`` shaped
    raised on a clean answer (a failure, shrunk to the simplest stamp), and on what
    ``smudge`` shaped detected something (no failure)."""
    runner = WaryClient()
    found = explore(runner, Settings(seed=3, budget=Budget(runs=30), faults=("stamp", "smudge")))
    assert found.space.faults == ("stamp", "smudge")
    drawn = {f.fault for run in found.runs for f in run.draft}
    assert drawn == {"stamp", "smudge"}
    verdicts = {run.outcome.verdict for run in found.runs}
    assert "false_alarm" in verdicts and "detected" in verdicts
    ((failure,),) = [[f for f in found.found if f.verdict == "false_alarm"]]
    assert failure.faults == [{"stamp": {"kind": "delta", "nth": 1}}]
    assert failure.reproduced
    assert all(f.verdict != "detected" for f in found.found)
