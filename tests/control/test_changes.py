"""An admin change made elsewhere, applied here (chaosproxy/control/changes.py), on one
proxy's parts without sockets: each ``op`` as the admin API tells it (a scenario added
under its given name, removed even when already gone, made the default; fixtures added
and cleared; a reset back to the start), a change that cannot be made refused with the
scenario's own problem, an unknown one named, and the fleet's set loaded in order.
Changes across a live fleet are tests/fleet/test_changes.py's and tests/e2e/test_fleet.py's."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from chaosproxy.control.admin import RequestStore
from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.changes import ChangeTarget
from chaosproxy.fleet.shared import Startup
from chaosproxy.mock.fixtures import MockFixtures
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import parse_fixtures, parse_scenario
from chaosproxy.scenario.errors import ScenarioError
from chaosproxy.scenario.selection import ScenarioSet, UnknownScenario
from chaosproxy.server.state import ProxyState

STARTED = parse_scenario("name: started\nfaults: [{drop: {nth: 2}}]\n", "scenarios/started.yaml")
FILE_FIXTURE = parse_fixtures(b"text: from a file\n", "fixtures.yaml")


def target(fixtures: bool = True) -> ChangeTarget:
    scenarios = ScenarioSet({"started": STARTED}, None, 7)
    state = ProxyState(
        config=EMBEDDED, upstream_url="http://127.0.0.1:9", scenarios=scenarios, log=FrameLog(None)
    )
    return ChangeTarget(state, RequestStore(), MockFixtures(FILE_FIXTURE) if fixtures else None)


def names(t: ChangeTarget) -> list[str]:
    return sorted(t.state.scenarios.scenarios)


async def test_a_scenario_is_added_under_its_name_or_the_one_given() -> None:
    t = target()
    await t.apply({"op": "add_scenario", "body": b"name: own\nfaults: []\n"})
    await t.apply({"op": "add_scenario", "body": b"faults: [{drop: {nth: 3}}]\n", "name": "given"})
    assert names(t) == ["given", "own", "started"]
    given = t.state.scenarios.get("given")
    assert ([name for name, _ in given.faults], given.source) == (["drop"], "body")


async def test_a_scenario_the_admin_showed_is_taken_back_read_only() -> None:
    t = target()
    shown = STARTED.as_dict()  # with its read-only ``source``
    await t.apply({"op": "add_scenario", "body": orjson.dumps({**shown, "name": "copy"})})
    copy = t.state.scenarios.get("copy")
    assert copy.faults == STARTED.faults


async def test_a_removed_scenario_goes_and_one_gone_already_is_no_error() -> None:
    t = target()
    await t.apply({"op": "remove_scenario", "scenario": "started"})
    assert names(t) == []
    await t.apply({"op": "remove_scenario", "scenario": "started"})  # (removed here too)
    assert names(t) == []


async def test_the_default_is_set_and_unset_and_an_unknown_one_refused() -> None:
    t = target()
    await t.apply({"op": "set_default", "scenario": "started"})
    assert t.state.scenarios.default == "started"
    await t.apply({"op": "set_default"})
    assert t.state.scenarios.default is None
    with pytest.raises(UnknownScenario):
        await t.apply({"op": "set_default", "scenario": "elsewhere-only"})
    assert t.state.scenarios.default is None


async def test_fixtures_are_added_after_those_before_and_cleared_the_files_kept() -> None:
    t = target()
    assert t.fixtures is not None
    await t.apply({"op": "add_fixtures", "body": b"text: one\n"})
    await t.apply({"op": "add_fixtures", "body": b"fixtures: [{text: two}, {text: three}]\n"})
    assert [f.text for f in t.fixtures.added] == ["one", "two", "three"]
    await t.apply({"op": "clear_fixtures"})
    assert t.fixtures.added == ()
    assert [f.text for f in t.fixtures.files] == ["from a file"]


async def test_fixture_changes_without_a_mock_change_nothing() -> None:
    t = target(fixtures=False)
    await t.apply({"op": "add_fixtures", "body": b"text: one\n"})
    await t.apply({"op": "clear_fixtures"})
    await t.apply({"op": "reset"})
    assert t.fixtures is None


async def test_a_reset_is_back_to_the_start() -> None:
    t = target()
    assert t.fixtures is not None
    line: Any = {
        "event": "request",
        "request_id": "r-1",
        "scenario": None,
        "ts": "t",
        "seed": 1,
        "method": "POST",
        "path": "/v1/chat/completions",
    }
    t.requests(line)
    assert len(t.requests) == 1
    await t.apply({"op": "add_scenario", "body": b"name: later\nfaults: []\n"})
    await t.apply({"op": "remove_scenario", "scenario": "started"})
    await t.apply({"op": "set_default", "scenario": "later"})
    await t.apply({"op": "add_fixtures", "body": b"text: one\n"})
    await t.apply({"op": "reset"})
    assert names(t) == ["started"]
    assert t.state.scenarios.default is None
    assert len(t.requests) == 0
    assert t.fixtures.added == ()


async def test_a_change_that_cannot_be_made_is_refused_with_its_problem() -> None:
    t = target()
    with pytest.raises(ScenarioError, match=r"^body:2: faults\[0\]\.drop: "):
        await t.apply({"op": "add_scenario", "body": b"name: bad\nfaults: [{drop: 3}]\n"})
    with pytest.raises(ScenarioError):
        await t.apply({"op": "add_fixtures", "body": b"text: [not, text]\n"})
    with pytest.raises(ValueError, match=r"^unknown change 'rename'$"):
        await t.apply({"op": "rename"})
    assert names(t) == ["started"]


async def test_the_fleets_set_is_loaded_as_a_late_replica_finds_it() -> None:
    t = target()
    assert t.fixtures is not None
    startup = Startup(
        scenarios=[(b"name: first\nfaults: []\n", None), (b"faults: []\n", "second")],
        default="second",
        fixtures=[b"text: one\n", b"text: two\n"],
    )
    await t.load(startup)
    assert names(t) == ["first", "second", "started"]
    assert t.state.scenarios.default == "second"
    assert [f.text for f in t.fixtures.added] == ["one", "two"]
    await t.load(Startup(default=None))
    assert t.state.scenarios.default is None
    await t.apply({"op": "set_default", "scenario": "first"})
    await t.load(Startup())  # "unset": the default is left as it is
    assert t.state.scenarios.default == "first"
