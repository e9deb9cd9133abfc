"""A fleet that behaves as one proxy (docs/fleet.md): three replicas of ``chaosproxy
serve`` naming one real ``redis-server``, behind a real HAProxy that sends each request
to the next replica, pass the tests one process passes: ``requests:`` ordinals, derived
seeds, admin changes, a late replica; and a Redis that stalls (SIGSTOP) never stalls a
stream past ``--state-timeout``. Under ``--state memory`` replicas repeat nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from chaosproxy.scenario.selection import derive_seed
from tests.support.fleet_parts import (
    RedisServer,
    Replica,
    eventually,
    free_port,
    haproxy,
    needs_haproxy,
    needs_redis,
    redis_server,
    replicas,
    start_replica,
)

pytestmark = [needs_redis, needs_haproxy, pytest.mark.slow, pytest.mark.xdist_group("fleet")]

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
NAMES = ["r1", "r2", "r3"]
SEED = 77
THIRD = "name: third\nrequests: [3]\nfaults:\n  - status: {code: 429}\n"


async def post_chat(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes, float]:
    """One streamed chat request on a connection of its own: status, headers (names in
    lower case: HAProxy sends them so), body, and
    the seconds to its response head."""
    began = time.monotonic()
    async with session.post(
        url + CHAT, json=BODY, headers={"Connection": "close", **(headers or {})}
    ) as r:
        head = time.monotonic() - began
        headers_seen = {k.lower(): v for k, v in r.headers.items()}
        return r.status, headers_seen, await r.read(), head


def lines(replica: Replica, event: str) -> list[dict[str, Any]]:
    return [
        line
        for raw in replica.log.read_bytes().splitlines()
        if (line := orjson.loads(raw)).get("event") == event
    ]


async def admin(
    session: aiohttp.ClientSession, replica: Replica, method: str, path: str, **kw: Any
) -> tuple[int, Any]:
    async with session.request(method, replica.admin + path, **kw) as r:
        return r.status, await r.json()


async def test_a_fleet_counts_ordinals_and_seeds_as_one_process(tmp_path: Path) -> None:
    with redis_server(tmp_path) as redis:
        async with replicas(
            tmp_path, NAMES, "--state", redis.url, "--seed", str(SEED), "--mock-interval-ms", "1"
        ) as fleet:
            with haproxy(tmp_path, [r.port for r in fleet]) as balancer:
                async with aiohttp.ClientSession() as session:
                    status, added = await admin(
                        session, fleet[1], "POST", "/scenarios", data=THIRD,
                        headers={"Content-Type": "application/yaml"},
                    )  # fmt: skip
                    assert status == 201
                    # Answered once every live replica applied it.
                    assert added["fleet"] == {"applied": "everywhere", "pending": []}
                    answers = [
                        await post_chat(session, balancer, {"X-Chaos-Scenario": "third"})
                        for _ in range(9)
                    ]
    statuses = [a[0] for a in answers]
    assert statuses == [200, 200, 429, 200, 200, 200, 200, 200, 200]
    served = {a[1]["x-chaos-request-id"].split("-")[1] for a in answers}
    assert len(served) == 3  # every replica answered some: the balancer spread them
    # The fleet's ordinals 1..9, each once, wherever it was served; the seeds derived
    # from the fleet's request numbers: the same split as one process.
    requests = [line for r in fleet for line in lines(r, "request")]
    assert sorted(line["ordinal"] for line in requests) == list(range(1, 10))
    assert {line["replica"] for line in requests} == set(NAMES)
    assert {int(a[1]["x-chaos-seed"]) for a in answers} == {
        derive_seed(SEED, n) for n in range(1, 10)
    }
    assert all("fleet_state" not in line for r in fleet for line in lines(r, "response_end"))


async def test_an_admin_change_on_one_replica_applies_to_all_before_it_answers(
    tmp_path: Path,
) -> None:
    with redis_server(tmp_path) as redis:
        async with (
            replicas(tmp_path, NAMES, "--state", redis.url) as fleet,
            aiohttp.ClientSession() as session,
        ):
            status, _ = await admin(
                    session, fleet[0], "POST", "/scenarios", data=THIRD,
                    headers={"Content-Type": "application/yaml"},
                )  # fmt: skip
            assert status == 201
            status, answer = await admin(
                session, fleet[2], "PUT", "/default", json={"scenario": "third"}
            )
            assert (status, answer["fleet"]["pending"]) == (200, [])
            for replica in fleet:  # at once, with no wait: already applied
                _, listing = await admin(session, replica, "GET", "/scenarios")
                assert listing["default"] == "third", replica.name
                assert "third" in {s["name"] for s in listing["scenarios"]}
            # A replica that starts later loads the current set.
            late = await start_replica("r4", tmp_path, "--state", redis.url)
            try:
                _, listing = await admin(session, late, "GET", "/scenarios")
                assert listing["default"] == "third"
                assert listing["scenarios"][-1]["requests"] == [3]
                status, removed = await admin(session, late, "DELETE", "/scenarios/third")
                assert status == 200
                assert removed["fleet"]["pending"] == []
                for replica in fleet:
                    status, _ = await admin(session, replica, "GET", "/scenarios/third")
                    assert status == 404, replica.name
                # POST /reset on one re-arms every replica: ordinals from 1 again.
                await admin(session, fleet[1], "POST", "/scenarios", data=THIRD,
                                headers={"Content-Type": "application/yaml"})  # fmt: skip
                for replica in fleet:
                    await post_chat(session, replica.url, {"X-Chaos-Scenario": "third"})
                status, reset = await admin(session, fleet[0], "POST", "/reset")
                assert (status, reset["fleet"]["pending"]) == (200, [])
                for replica in fleet:
                    status, _ = await admin(session, replica, "GET", "/scenarios/third")
                    assert status == 404, replica.name  # a runtime scenario: gone
                assert redis.command("GET", "chaosproxy:chaosproxy:requests") == ""
            finally:
                from tests.support.cli import stop_serve

                await stop_serve(late.process)


async def test_replicas_under_memory_repeat_no_seed(tmp_path: Path) -> None:
    """The same ``--seed`` on every replica (a Deployment's environment) and no Redis:
    each replica's derived seeds are salted with its name, so none repeats another's."""
    async with (
        replicas(tmp_path, NAMES, "--seed", str(SEED)) as fleet,
        aiohttp.ClientSession() as session,
    ):
        seeds = {
            replica.name: [
                int((await post_chat(session, replica.url))[1]["x-chaos-seed"]) for _ in range(3)
            ]
            for replica in fleet
        }
    for name, drawn in seeds.items():
        assert drawn == [derive_seed(SEED, n, name) for n in (1, 2, 3)]
    assert len({s for drawn in seeds.values() for s in drawn}) == 9


async def test_a_stalled_redis_never_stalls_a_stream(tmp_path: Path) -> None:
    """Redis SIGSTOPped with streams in flight and new requests arriving: the streams
    go on, each new request waits ``--state-timeout`` at most and is served with this
    replica's own counters (``fleet_state: local``), ``/health`` says ``degraded``;
    SIGCONT, and the replicas share again."""
    with redis_server(tmp_path) as redis:
        async with replicas(
            tmp_path, NAMES, "--state", redis.url, "--state-timeout", "50ms",
            "--mock-interval-ms", "20",
        ) as fleet:  # fmt: skip
            with haproxy(tmp_path, [r.port for r in fleet]) as balancer:
                async with aiohttp.ClientSession() as session:
                    in_flight = [
                        asyncio.create_task(post_chat(session, balancer)) for _ in range(3)
                    ]
                    await asyncio.sleep(0)  # (they are sent; Redis stops under them)
                    redis.pause()
                    try:
                        during = [await post_chat(session, balancer) for _ in range(6)]
                        _, health = await admin(session, fleet[0], "GET", "/health")
                    finally:
                        redis.resume()
                    done = await asyncio.gather(*in_flight)
                    shared_again = await _until_shared(session, fleet)
    assert [a[0] for a in done + during] == [200] * 9
    assert all(a[2].endswith(b"data: [DONE]\n\n") for a in done + during)
    # Each new request waited for Redis 50 ms at most (then none at all: the state
    # stays local until a probe reaches Redis); the head came well within a second.
    assert max(a[3] for a in during) < 1.0, [round(a[3], 3) for a in during]
    assert health["status"] == "degraded"
    assert health["fleet"]["state"] == "local"
    local = [line for r in fleet for line in lines(r, "response_end") if line.get("fleet_state")]
    assert len(local) >= 6  # every request numbered during the stop said so
    assert shared_again
    assert any("shared again" in "".join(r.stderr) for r in fleet)


async def _until_shared(session: aiohttp.ClientSession, fleet: list[Replica]) -> bool:
    """Whether every replica's ``/health`` says its state is shared again (its probe
    backs off to 2 s at most), within 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = [(await admin(session, r, "GET", "/health"))[1]["fleet"]["state"] for r in fleet]
        if states == ["shared"] * len(fleet):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_redis_memory_is_bounded_by_the_history_limits(tmp_path: Path) -> None:
    """What the fleet keeps in Redis of its streams is what each owner's history keeps
    (``streams`` per scenario): 40 streams of a scenario that keeps 4 leave the keys of
    4 in Redis, whatever replica served them."""
    kept = "name: kept\nresume: {policy: resume, streams: 4}\nfaults:\n  - ids: {retry: 50}\n"
    with redis_server(tmp_path) as redis:
        async with (
            replicas(tmp_path, NAMES, "--state", redis.url, "--mock-interval-ms", "0") as fleet,
            aiohttp.ClientSession() as session,
        ):
            await admin(session, fleet[0], "POST", "/scenarios", data=kept,
                        headers={"Content-Type": "application/yaml"})  # fmt: skip
            for i in range(40):
                replica = fleet[i % 3]
                status, _, body, _ = await post_chat(
                    session, replica.url, {"X-Chaos-Scenario": "kept"}
                )
                assert status == 200 and body.endswith(b"data: [DONE]\n\n")
            streams = await _settled_key_count(redis, "chaosproxy:chaosproxy:h:kept:*")
            used = int(redis.command("MEMORY", "USAGE", "chaosproxy:chaosproxy:changes") or 0)
    # Each replica keeps its last 4 (events, end state, connections: three keys each).
    assert streams == 3 * 4 * 3
    assert used < 64 * 1024  # the changes stream: one entry


async def _settled_key_count(redis: RedisServer, pattern: str) -> int:
    """How many keys match ``pattern`` once the mirrors' writes have landed (the same
    count twice, 50 ms apart, within 5 s)."""
    last = -1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        count = len([k for k in redis.command("--scan", "--pattern", pattern).split() if k])
        if count == last:
            return count
        last = count
        await asyncio.sleep(0.05)
    return last


async def test_redis_restarted_empty_mid_run(tmp_path: Path) -> None:
    """Redis killed and started again on its port, empty, with streams in flight: the
    streams complete, requests meanwhile are served (local), the replicas share again,
    and an admin change made after the restart reaches all of them."""
    port = free_port()
    with redis_server(tmp_path, port) as first:
        async with (
            replicas(tmp_path, NAMES, "--state", first.url, "--mock-interval-ms", "20") as fleet,
            aiohttp.ClientSession() as session,
        ):
            in_flight = [asyncio.create_task(post_chat(session, r.url)) for r in fleet]
            await asyncio.sleep(0)
            first.stop()
            during = [await post_chat(session, r.url) for r in fleet]
            with redis_server(tmp_path, port):
                done = await asyncio.gather(*in_flight)
                assert await _until_shared(session, fleet)
                # Every replica has said it is live to the new Redis (a beat a second).
                assert await eventually(lambda: redis_replicas(port) == 3)
                status, added = await admin(
                    session, fleet[2], "POST", "/scenarios", data=THIRD,
                    headers={"Content-Type": "application/yaml"},
                )  # fmt: skip
                assert (status, added["fleet"]["pending"]) == (201, [])
                statuses = [
                    (await post_chat(session, r.url, {"X-Chaos-Scenario": "third"}))[0]
                    for r in fleet
                ]
    assert [a[0] for a in done + during] == [200] * 6
    assert all(a[2].endswith(b"data: [DONE]\n\n") for a in done + during)
    assert statuses == [200, 200, 429]  # the fleet's counts, from 1 after the restart


def redis_replicas(port: int) -> int:
    """How many replicas the fleet's Redis on ``port`` knows (their heartbeats)."""
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "HLEN", "chaosproxy:chaosproxy:replicas"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.strip() or 0)


async def test_a_replica_with_workers_is_one_member_of_its_fleet(tmp_path: Path) -> None:
    """``serve --workers 2`` beside a one-process replica: each worker counts with the
    fleet and applies the other replica's changes; a change on the supervisor's admin
    reaches its workers (its own channel) and the other replica (the fleet) before it
    answers."""
    fourth = "name: fourth\nrequests: [4]\nfaults:\n  - status: {code: 418}\n"
    with redis_server(tmp_path) as redis:
        async with (
            replicas(tmp_path, ["pool"], "--state", redis.url, "--workers", "2") as pooled,
            replicas(tmp_path, ["single"], "--state", redis.url) as single,
            aiohttp.ClientSession() as session,
        ):
            members = set(redis.command("HKEYS", "chaosproxy:chaosproxy:replicas").split())
            status, on_single = await admin(
                session, single[0], "POST", "/scenarios", data=THIRD,
                headers={"Content-Type": "application/yaml"},
            )  # fmt: skip
            status2, on_pool = await admin(
                session, pooled[0], "POST", "/scenarios", data=fourth,
                headers={"Content-Type": "application/yaml"},
            )  # fmt: skip
            third, fourths = [], []
            for i in range(6):
                where = (pooled[0], single[0])[i % 2]
                third.append(
                    (await post_chat(session, where.url, {"X-Chaos-Scenario": "third"}))[0]
                )
            for i in range(6):
                where = (pooled[0], single[0])[i % 2]
                fourths.append(
                    (await post_chat(session, where.url, {"X-Chaos-Scenario": "fourth"}))[0]
                )
            _, listing = await admin(session, pooled[0], "GET", "/scenarios")
    assert members == {"pool", "pool/w0", "pool/w1", "single"}
    assert (status, on_single["fleet"]["pending"]) == (201, [])
    assert (status2, on_pool["fleet"]["pending"]) == (201, [])
    assert third == [200, 200, 429, 200, 200, 200]
    assert fourths == [200, 200, 200, 418, 200, 200]
    assert {"third", "fourth"} <= {s["name"] for s in listing["scenarios"]}


async def test_every_replica_answers_for_the_whole_journal(tmp_path: Path) -> None:
    """Requests served by three replicas (and a fourth with two workers): ``verify``,
    ``requests``, ``last``, ``summary``, ``frames`` and a verdict give the same answer
    through every replica's admin (ChaosClient, as a test drives a sidecar)."""
    from chaosproxy import ChaosClient

    with redis_server(tmp_path) as redis:
        async with (
            replicas(tmp_path, NAMES, "--state", redis.url, "--mock-interval-ms", "1") as fleet,
            replicas(
                tmp_path,
                ["pool"],
                "--state",
                redis.url,
                "--workers",
                "2",
                "--mock-interval-ms",
                "1",
            ) as pooled,  # fmt: skip
            aiohttp.ClientSession() as session,
        ):
            members = [*fleet, *pooled]
            served = []
            for i in range(8):
                where = members[i % 4]
                answer = await post_chat(
                    session, where.url, {"X-Chaos-Scenario": "duplicate-third-delta"}
                )
                served.append(answer[1]["x-chaos-request-id"])
            clients = [ChaosClient(m.admin) for m in members]

            def seen() -> bool:
                return all(len(c.requests()) == 8 for c in clients)

            assert await eventually(seen)
            views = [await asyncio.to_thread(_view, client, served) for client in clients]
            first = served[1]  # served by r2
            verdict = await asyncio.to_thread(
                clients[3].verdict, first, text="an answer with a delta twice"
            )
            recorded = [
                await asyncio.to_thread(lambda c=c: c.summary(first).get("verdict"))
                for c in clients
            ]
    assert all(v == views[0] for v in views), views
    ids, last, outcome, frames = views[0]
    assert ids == served
    assert last == served[-1]
    assert outcome == "completed" and frames > 20
    assert verdict["verdict"] in ("detected", "silent_corruption", "tolerated")
    assert all(r is not None and r["verdict"] == verdict["verdict"] for r in recorded), recorded


def _view(client: Any, served: list[str]) -> tuple[list[str], str, str, int]:
    """What one replica's admin says of the fleet's requests."""
    client.verify(count=8, scenario="duplicate-third-delta")
    ids = [r["request_id"] for r in client.requests()]
    summary = client.summary(served[2])
    return ids, client.last()["request_id"], summary["outcome"], len(client.frames(served[2]))


async def test_the_fleets_journal_counts_each_request_against_its_tenant(
    tmp_path: Path,
) -> None:
    """Every replica, and each worker of a replica with workers, files each request of
    the fleet's journal under its tenant (its API key; a request with none under the
    anonymous ``stranger``): what the journal's bound per tenant counts
    (tests/fleet/test_journal.py has the bounds)."""
    import redis as redis_client

    with redis_server(tmp_path) as redis:
        async with (
            replicas(tmp_path, NAMES, "--state", redis.url, "--mock-interval-ms", "1") as fleet,
            replicas(tmp_path, ["pool"], "--state", redis.url, "--workers", "2",
                     "--mock-interval-ms", "1") as pooled,
            aiohttp.ClientSession() as session,
        ):  # fmt: skip
            members = [*fleet, *pooled]
            served: dict[str, list[str]] = {"quiet": [], "busy": [], "none": []}
            for i in range(12):
                who = ("busy", "busy", "quiet", "none")[i % 4]
                key = {} if who == "none" else {"Authorization": f"Bearer sk-{who}-tenant"}
                answer = await post_chat(session, members[i % 4].url, key)
                served[who].append(answer[1]["x-chaos-request-id"])
            owners_key = "chaosproxy:chaosproxy:journal:owners"
            client = redis_client.Redis.from_url(redis.url, decode_responses=True)

            def filed() -> bool:
                return client.hlen(owners_key) == 12

            assert await eventually(filed)
            owners = client.hgetall(owners_key)
            held = dict(client.zrange("chaosproxy:chaosproxy:journal:held", 0, -1, withscores=True))
            client.close()
    tenants = {who: {owners[i] for i in ids} for who, ids in served.items()}
    assert tenants["none"] == {"stranger"}
    assert len(tenants["busy"]) == len(tenants["quiet"]) == 1
    assert tenants["busy"] != tenants["quiet"]
    assert all(t.startswith("t-") for t in (*tenants["busy"], *tenants["quiet"]))
    assert set(held) == set().union(*tenants.values())
