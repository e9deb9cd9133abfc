"""An admin change made elsewhere, applied here: a change another replica of the fleet
made (``--state redis``: docs/fleet.md), or the fleet's current set loaded at start.

A change is the dict the admin API tells its ``changed`` hook (control/admin.py):
``op`` (add_scenario, remove_scenario, set_default, reset, add_fixtures,
clear_fixtures) and its arguments; bodies are the bytes the admin was sent, parsed
here again as the admin parsed them.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chaosproxy.control.admin import BODY_SOURCE, RequestStore
from chaosproxy.scenario import parse_fixtures, parse_scenario
from chaosproxy.scenario.selection import UnknownScenario

if TYPE_CHECKING:
    from chaosproxy.fleet import Startup
    from chaosproxy.mock.fixtures import MockFixtures
    from chaosproxy.server.state import ProxyState


@dataclass
class ChangeTarget:
    """What a change changes: one proxy's scenarios, requests, fixtures and streams."""

    state: ProxyState
    requests: RequestStore
    fixtures: MockFixtures | None

    async def apply(self, change: dict[str, Any]) -> None:
        """Make ``change`` here. Raises ScenarioError or UnknownScenario when it
        cannot be made (a scenario this replica does not have, say)."""
        op = change["op"]
        scenarios = self.state.scenarios
        if op == "add_scenario":
            scenario = await asyncio.to_thread(
                parse_scenario,
                change["body"],
                BODY_SOURCE,
                default_name=change.get("name"),
                read_only=True,
            )
            scenarios.add(scenario)
        elif op == "remove_scenario":
            with contextlib.suppress(UnknownScenario):  # (removed here too, already)
                scenarios.remove(change["scenario"])
        elif op == "set_default":
            scenarios.set_default(change.get("scenario"))
        elif op == "reset":
            self.requests.reset()
            if self.fixtures is not None:
                self.fixtures.reset()
            scenarios.restore()
            self.state.streams.clear()
            self.state.resume.forget()
        elif op == "add_fixtures":
            if self.fixtures is not None:
                added = await asyncio.to_thread(parse_fixtures, change["body"], BODY_SOURCE)
                self.fixtures.add(added)
        elif op == "clear_fixtures":
            if self.fixtures is not None:
                self.fixtures.clear()
        else:
            raise ValueError(f"unknown change {op!r}")

    async def load(self, startup: Startup) -> None:
        """The fleet's current set, as a replica that starts late finds it."""
        for body, name in startup.scenarios:
            await self.apply({"op": "add_scenario", "body": body, "name": name})
        for body in startup.fixtures:
            await self.apply({"op": "add_fixtures", "body": body})
        if startup.default != "unset":
            await self.apply({"op": "set_default", "scenario": startup.default})


__all__ = ["ChangeTarget"]
