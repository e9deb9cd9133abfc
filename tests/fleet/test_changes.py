"""The fleet's admin changes (chaosproxy/fleet/changes.py) against a real
``redis-server``, two members' ``ChangeFeed``s alone, without a proxy: a change stored
and streamed, applied by the other member and acknowledged, the call answering once
it is; the member's own changes, and its replica's, skipped when read back; a live
member that never applies named. The fleet at work is tests/e2e/test_fleet.py's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from chaosproxy.fleet.changes import APPLY_WITHIN, ChangeFeed, as_text, failure_reason
from tests.support.fleet_parts import REDIS, redis_server

pytestmark = [
    pytest.mark.skipif(REDIS is None, reason="needs Debian's redis-server"),
    pytest.mark.xdist_group("fleet"),
]

PREFIX = "chaosproxy:t:"
KEYS = {
    name: PREFIX + name
    for name in (
        "requests",
        "ordinals",
        "changes",
        "scenarios",
        "default",
        "fixtures",
        "applied",
        "replicas",
    )
}


@dataclass
class Member:
    """One member's feed, and what it applied."""

    feed: ChangeFeed
    clients: tuple[Any, Any]
    applied: list[dict[str, Any]] = field(default_factory=list)
    got: asyncio.Event = field(default_factory=asyncio.Event)
    said: list[str] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    async def apply(self, change: dict[str, Any]) -> None:
        if change.get("op") == "broken":
            raise ValueError("no such op")
        self.applied.append(change)
        self.got.set()

    async def beat(self) -> None:
        """Live for the fleet (as the heartbeat says), for LIVE_FOR seconds."""
        await self.clients[0].hset(KEYS["replicas"], self.feed.member, time.time() * 1000)


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Callable[[str, str], Awaitable[Member]]]:
    members: list[Member] = []
    with redis_server(tmp_path) as redis:

        async def join(replica: str, member: str) -> Member:
            clients = (Redis.from_url(redis.url), Redis.from_url(redis.url))
            said: list[str] = []
            feed = ChangeFeed(
                clients[0],
                clients[1],
                KEYS,
                replica=replica,
                member=member,
                timeout=1.0,
                label=redis.url,
                say=said.append,
            )
            one = Member(feed, clients, said=said)
            one.task = feed.start(one.apply, "0-0")
            await one.beat()
            members.append(one)
            return one

        yield join
        for one in members:
            assert one.task is not None
            one.task.cancel()
            await asyncio.gather(one.task, return_exceptions=True)
            for client in one.clients:
                await client.aclose()


async def test_a_change_is_stored_applied_by_the_others_and_acknowledged(
    fleet: Callable[[str, str], Awaitable[Member]],
) -> None:
    a = await fleet("pod-a", "pod-a")
    b = await fleet("pod-b", "pod-b")
    change = {"op": "add_scenario", "scenario": "slow", "name": "s.yaml", "body": b"x: 1\n"}
    assert await a.feed.publish(change) == []  # b applied it before the call answered
    assert b.applied == [{**change, "from": "pod-a"}]  # its body bytes again
    assert a.applied == []  # its own, read back: skipped
    redis = a.clients[0]
    stored = orjson.loads(await redis.hget(KEYS["scenarios"], "slow"))
    assert stored[1:] == ["eDogMQo=", "s.yaml"]
    acks = {as_text(k): as_text(v) for k, v in (await redis.hgetall(KEYS["applied"])).items()}
    assert acks["pod-b"] == b.feed.last
    # A second change: b acknowledges each in turn, a reads on past its own.
    assert await a.feed.publish({"op": "set_default", "scenario": "slow"}) == []
    assert [c["op"] for c in b.applied] == ["add_scenario", "set_default"]
    assert orjson.loads(await redis.get(KEYS["default"])) == "slow"


async def test_a_change_from_another_worker_of_the_same_replica_is_not_applied_again(
    fleet: Callable[[str, str], Awaitable[Member]],
) -> None:
    """``serve --workers``: a replica's workers have its changes from their supervisor."""
    w0 = await fleet("pod-a", "pod-a/w0")
    w1 = await fleet("pod-a", "pod-a/w1")
    other = await fleet("pod-b", "pod-b")
    assert await w0.feed.publish({"op": "clear_fixtures"}) == []
    assert w1.applied == [] and w0.applied == []
    assert other.applied == [{"op": "clear_fixtures", "from": "pod-a"}]
    assert w1.feed.last == other.feed.last != "0-0"  # both read past it


async def test_a_change_that_does_not_apply_is_said_and_acknowledged(
    fleet: Callable[[str, str], Awaitable[Member]],
) -> None:
    a = await fleet("pod-a", "pod-a")
    b = await fleet("pod-b", "pod-b")
    assert await a.feed.publish({"op": "broken"}) == []  # tried, said, acknowledged
    assert b.said == ["warning: state: a change from the fleet was not applied here: no such op"]
    assert b.applied == []


async def test_a_live_member_that_never_applies_is_named(
    fleet: Callable[[str, str], Awaitable[Member]],
) -> None:
    a = await fleet("pod-a", "pod-a")
    await a.clients[0].hset(KEYS["replicas"], "pod-gone", time.time() * 1000)
    started = time.monotonic()
    assert await a.feed.publish({"op": "reset"}) == ["pod-gone"]
    assert time.monotonic() - started >= APPLY_WITHIN


def test_a_failure_is_said_without_its_password() -> None:
    assert failure_reason(TimeoutError()) == "no answer in time"
    said = failure_reason(ConnectionError("redis://:hunter2@db:6379 refused"))
    assert "hunter2" not in said and said.endswith("@db:6379 refused")
