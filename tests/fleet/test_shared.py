"""One replica's handle on the fleet's state (chaosproxy/fleet/shared.py) against a real
``redis-server``, two replicas without a proxy: the request number and each scenario's
ordinal counted across them in one round trip, one tenant secret for the fleet, the
current set read at start (an unreachable Redis one line, without its password), and a
Redis that stops answering: this replica's own counters (``local``, said once, counted,
in ``/health`` and the metrics) until a probe reaches it again. Changes and the
journal are test_changes.py's and test_journal.py's beside this one."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from chaosproxy.fleet.shared import SharedState, Startup, StateCollector
from tests.support.fleet_parts import REDIS, RedisServer, redis_server
from tests.support.scripted_upstream import until

pytestmark = [
    pytest.mark.skipif(REDIS is None, reason="needs Debian's redis-server"),
    pytest.mark.xdist_group("fleet"),
]


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
async def replicas(redis: RedisServer) -> AsyncIterator[tuple[SharedState, SharedState]]:
    said: list[str] = []
    one = SharedState(redis.url, "f", "r1", 0.3, say=said.append)
    two = SharedState(redis.url, "f", "r2", 0.3, say=said.append)
    try:
        yield one, two
    finally:
        await one.close()
        await two.close()


async def test_requests_and_ordinals_are_counted_across_replicas(
    replicas: tuple[SharedState, SharedState],
) -> None:
    one, two = replicas
    assert await one.counts("slow") == (1, 1)
    assert await two.counts("slow") == (2, 2)
    assert await one.counts(None) == (3, 0)
    assert await two.counts("other") == (4, 1)
    assert await one.ordinal("slow") == 3
    assert (one.status, one.fallbacks, two.fallbacks) == ("shared", 0, 0)


async def test_one_tenant_secret_for_the_fleet(replicas: tuple[SharedState, SharedState]) -> None:
    one, two = replicas
    secret = await one.tenant_secret()
    assert len(secret) == 32
    assert await two.tenant_secret() == secret
    assert await one.tenant_secret() == secret


async def test_a_replica_starts_from_the_fleets_current_set(
    replicas: tuple[SharedState, SharedState],
) -> None:
    one, _ = replicas

    async def apply(change: dict[str, object]) -> None:
        raise AssertionError(f"nothing changed: {change}")

    assert await one.start(apply) == Startup()
    assert one.health() == {
        "state": "shared",
        "redis": one.label,
        "fleet": "f",
        "replica": "r1",
        "member": "r1",
        "fallbacks": 0,
    }


async def test_an_unreachable_redis_is_one_line_without_its_password() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    shared = SharedState(f"redis://:hunter2@127.0.0.1:{port}/0", "f", "r1", 0.3)

    async def apply(change: dict[str, object]) -> None:
        raise AssertionError(change)

    with pytest.raises(OSError) as caught:
        await shared.start(apply)
    message = str(caught.value)
    assert message.startswith("--state redis://")
    assert "hunter2" not in message and "\n" not in message


async def test_a_redis_that_stops_answering_leaves_the_replica_local_until_it_answers(
    redis: RedisServer,
) -> None:
    said: list[str] = []
    shared = SharedState(redis.url, "f", "r1", 0.3, say=said.append)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(shared))
    try:
        assert await shared.counts(None) == (1, 0)
        redis.pause()
        try:
            assert await shared.counts("s") is None  # no answer in time
            assert await shared.counts("s") is None  # local: not even asked
            assert (shared.status, shared.reason, shared.fallbacks) == (
                "local",
                "no answer in time",
                2,
            )
            assert said == [
                f"warning: state: {shared.label} is not answering (no answer in time): this "
                "replica uses its own counters (state: local) until it answers again"
            ]
            health = shared.health()
            assert (health["state"], health["reason"]) == ("local", "no answer in time")
            assert health["local_for_s"] >= 0
            metrics = generate_latest(registry).decode()
            assert "chaosproxy_state_shared 0.0" in metrics
            assert "chaosproxy_state_fallbacks_total 2.0" in metrics
        finally:
            redis.resume()
        await until(lambda: shared.status == "shared")
        assert shared.reason is None and "reason" not in shared.health()
        assert said[-1].startswith(f"state: {shared.label} answers again after ")
        # 3: the round trip that timed out was still counted once Redis woke (its
        # answer came too late); the one made while local never went out.
        assert await shared.counts(None) == (3, 0)
    finally:
        await shared.close()
