"""The admin's reads in a fleet (chaosproxy/control/fleet_admin.py), two replicas'
parts on a real ``redis-server`` without a proxy: a request one replica served is
listed, read and judged through the other's admin (its verdict written to the fleet's
journal), a replica's own request read in full with the fleet's verdict, and a replica
whose Redis went local answering from its own store. The fleet at work is
tests/e2e/test_fleet.py's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from chaosproxy.control.admin import AdminState, create_admin_app
from chaosproxy.control.fleet_admin import fleet_overrides
from chaosproxy.fleet.journal import FleetJournal
from chaosproxy.fleet.shared import SharedState
from chaosproxy.observe.metrics import Metrics
from chaosproxy.observe.store import RequestStore
from chaosproxy.scenario.selection import ScenarioSet
from tests.support.fleet_parts import REDIS, RedisServer, redis_server

pytestmark = [
    pytest.mark.skipif(REDIS is None, reason="needs Debian's redis-server"),
    pytest.mark.xdist_group("fleet"),
]


def lines(request_id: str) -> list[Any]:
    """A whole request as a store sees it: its request line, one frame, its end."""
    bound = {"request_id": request_id, "scenario": None}
    return [
        {
            **bound,
            "event": "request",
            "seed": 1,
            "method": "POST",
            "path": "/v1/chat/completions",
            "ts": "2026-01-01T00:00:00Z",
        },
        {
            **bound,
            "event": "frame",
            "seq": 0,
            "offset": 0,
            "size": 9,
            "t_ms": 1.0,
            "events": [1],
            "kinds": ["delta"],
            "faults": [],
            "ts": "2026-01-01T00:00:01Z",
        },
        {
            **bound,
            "event": "response_end",
            "outcome": "completed",
            "status": 200,
            "bytes": 9,
            "frames": 1,
            "duration_ms": 2.0,
            "ts": "2026-01-01T00:00:02Z",
        },
    ]


class Replica:
    """One replica's store and its journal on the fleet's Redis."""

    def __init__(self, url: str, name: str) -> None:
        self.shared = SharedState(url, "test", name, 1.0)
        self.store = RequestStore()
        self.journal = FleetJournal(self.shared, self.store, 100, 1 << 20)
        self.store.flights = self.journal

    async def serve(self, request_id: str) -> None:
        self.journal.whose(request_id, "t")
        for line in lines(request_id):
            self.store(line)
        await self.journal.published()

    def admin(self) -> TestClient[Any, Any]:
        state = AdminState(scenarios=ScenarioSet(), requests=self.store, metrics=Metrics())
        app = create_admin_app(state, fleet_overrides(self.journal, self.shared))
        return TestClient(TestServer(app))


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
async def fleet(redis: RedisServer) -> AsyncIterator[tuple[Replica, Replica]]:
    one, two = Replica(redis.url, "r1"), Replica(redis.url, "r2")
    try:
        yield one, two
    finally:
        await one.shared.close()
        await two.shared.close()


async def ask(
    client: TestClient[Any, Any], method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    data = None if body is None else orjson.dumps(body)
    headers = {} if body is None else {"Content-Type": "application/json"}
    async with client.request(method, path, data=data, headers=headers) as resp:
        return resp.status, orjson.loads(await resp.read())


async def test_another_replicas_request_is_listed_read_and_judged_here(
    fleet: tuple[Replica, Replica],
) -> None:
    one, two = fleet
    await one.serve("r-1")
    async with two.admin() as admin:
        status, listed = await ask(admin, "GET", "/requests")
        assert status == 200
        assert [s["request_id"] for s in listed["requests"]] == ["r-1"]
        assert listed["next"] is None
        status, detail = await ask(admin, "GET", "/requests/r-1")
        assert (status, detail["summary"]["request_id"], detail["summary"]["outcome"]) == (
            200,
            "r-1",
            "completed",
        )
        status, missing = await ask(admin, "GET", "/requests/r-9")
        assert (status, missing) == (
            404,
            {"error": {"type": "not_found", "message": "no recent request 'r-9'"}},
        )
        status, verdict = await ask(
            admin, "POST", "/requests/r-1/verdict", {"text": "hello", "error": None}
        )
        assert status == 200
        status, unknown = await ask(
            admin, "POST", "/requests/r-9/verdict", {"text": "", "error": None}
        )
        assert (status, unknown["error"]["type"]) == (404, "not_found")
    stored = await one.journal.detail("r-1")
    assert stored is not None and stored["summary"]["verdict"]["verdict"] == verdict["verdict"]
    assert two.store.get("r-1") is None  # (never here: nothing recorded in its own store)


async def test_a_replicas_own_request_is_read_in_full_with_the_fleets_verdict(
    fleet: tuple[Replica, Replica],
) -> None:
    one, two = fleet
    await two.serve("r-2")
    async with one.admin() as admin:  # the verdict given on the other replica
        status, verdict = await ask(
            admin, "POST", "/requests/r-2/verdict", {"text": "x", "error": None}
        )
    assert status == 200
    async with two.admin() as admin:
        status, detail = await ask(admin, "GET", "/requests/r-2")
    assert status == 200
    assert detail["summary"]["verdict"]["verdict"] == verdict["verdict"]
    assert [f["size"] for f in detail["frames"]] == [9]  # its own record: every frame


async def test_a_replica_gone_local_answers_from_its_own_store(
    fleet: tuple[Replica, Replica],
) -> None:
    one, two = fleet
    await one.serve("r-1")
    await two.serve("r-2")
    two.shared.status = "local"
    async with two.admin() as admin:
        status, listed = await ask(admin, "GET", "/requests")
        assert [s["request_id"] for s in listed["requests"]] == ["r-2"]
        status, _ = await ask(admin, "GET", "/requests/r-1")
        assert status == 404
        status, _ = await ask(admin, "POST", "/requests/r-1/verdict", {"text": "", "error": None})
        assert status == 404


async def test_with_redis_away_a_replica_answers_from_its_own_store(
    fleet: tuple[Replica, Replica], redis: RedisServer
) -> None:
    one, two = fleet
    await one.serve("r-1")
    await two.serve("r-2")
    redis.stop()
    async with two.admin() as admin:
        status, listed = await ask(admin, "GET", "/requests")
        assert (status, [s["request_id"] for s in listed["requests"]]) == (200, ["r-2"])
        status, detail = await ask(admin, "GET", "/requests/r-2")
        assert (status, detail["summary"]["request_id"]) == (200, "r-2")
        status, _ = await ask(admin, "GET", "/requests/r-1")
        assert status == 404
