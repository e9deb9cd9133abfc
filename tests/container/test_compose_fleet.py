"""examples/docker-compose.fleet.yml run for real (docs/fleet.md): Redis, three replicas of
the image the suite builds, and HAProxy round robin in front of them, brought up by
``docker compose up`` and proved through the balancer as a client sees it: requests
spread over the three replicas (the ``replica`` field of their frame-log lines), the
``requests:`` ordinals are the fleet's, an admin change made on one replica is every
replica's before it answers, the journal is the same on each, and a reconnect with
``Last-Event-ID`` that lands on another replica resumes exactly.

Where the public ``redis`` and ``haproxy`` images cannot be pulled, the example runs with
local stand-ins (tests/container/fleet/Dockerfile: Debian's packages on the local
python:3.11-slim), through the example's own ``REDIS_IMAGE`` and ``HAPROXY_IMAGE``: set
in the environment (as .ci/run does, with the stand-ins it built, or with the public
images), they are used as they are; unset, the stand-ins are built here. The project is
taken down (``down -v``) whatever happened, and nothing of it may be left.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.engine import (
    CHAT,
    SESSION,
    Build,
    Engine,
    build,
    compose_runner,
    wait_until,
)
from tests.support.repo import REPO
from tests.support.resume_client import resume_loop

# One worker runs them all (--dist loadgroup): one image build, no two engines' races.
pytestmark = [pytest.mark.container, pytest.mark.xdist_group("container"), pytest.mark.timeout(900)]

COMPOSE = REPO / "examples" / "docker-compose.fleet.yml"
STANDINS = REPO / "tests" / "container" / "fleet"
#: The example's services of the replicas, and the replica id each is given.
REPLICAS = {"chaosproxy-1": "r1", "chaosproxy-2": "r2", "chaosproxy-3": "r3"}
#: The balancer's port in its container (examples/fleet/haproxy.cfg).
BALANCER_PORT = 8080
THIRD = "description: a 429 on the third request\nrequests: [3]\nfaults:\n  - status: {code: 429}\n"
#: A stream cut after its fourth event, its history kept (tests/e2e/test_resume_node.py's
#: scenario): the first connection is cut, the reconnect resumes after event 4.
RESUMED = (
    "description: cut after four events, resumed\n"
    "resume: {policy: resume}\n"
    "requests: [1]\n"
    "faults:\n"
    "  - ids: {retry: 50}\n"
    "  - cut: {after: 4, position: mid_line, how: abort}\n"
)

#: An admin call made inside a replica's container (its admin API listens on loopback
#: there, as the example sets it): argv method, path, body, content type; prints the
#: status and the JSON answer.
ADMIN_CALL = """
import json, sys, urllib.error, urllib.request
method, path, body, kind = sys.argv[1:5]
request = urllib.request.Request(
    "http://127.0.0.1:8478" + path, method=method, data=body.encode() or None,
    headers={"Content-Type": kind} if body else {})
try:
    with urllib.request.urlopen(request, timeout=10) as answer:
        status, data = answer.status, answer.read()
except urllib.error.HTTPError as refused:
    status, data = refused.code, refused.read()
print(json.dumps({"status": status, "body": json.loads(data or b"null")}))
"""


@dataclass
class Images:
    redis: str
    haproxy: str
    #: Those built here (the others named by the environment).
    built: list[str]

    @property
    def pull(self) -> str:
        """Compose's --pull: a stand-in is never pulled; an image named may be."""
        return "never" if len(self.built) == 2 else "missing"


@pytest.fixture(scope="module")
def images(engine: Engine) -> Iterator[Images]:
    """The example's REDIS_IMAGE and HAPROXY_IMAGE: each the environment's when it names
    one, else the stand-in built here (its tag removed at the end, but not its layers:
    the apt layer stays the builder's cache, so the next run builds it in seconds)."""
    named = {kind: os.environ.get(f"{kind.upper()}_IMAGE", "") for kind in ("redis", "haproxy")}
    tags: dict[str, str] = {}
    try:
        for kind in [kind for kind, name in named.items() if not name]:
            tags[kind] = f"chaosproxy-test-{kind}:{SESSION}"
            built = build(engine, STANDINS, tags[kind], target=kind)
            engine.note(f"build of the {kind} stand-in", f"{built.seconds:.1f}s")
        found = {**named, **tags}
        yield Images(found["redis"], found["haproxy"], list(tags))
    finally:
        for tag in tags.values():
            engine.run("rmi", "--no-prune", tag, check=False)


@dataclass
class Fleet:
    engine: Engine
    #: The balancer as the host reaches it (published on loopback).
    url: str
    #: The container of each replica, by its replica id.
    containers: dict[str, str]

    def admin(self, replica: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """An admin call on ``replica`` (its API, inside its container)."""
        if isinstance(body, str):
            text, kind = body, "application/yaml"
        else:
            text, kind = ("" if body is None else json.dumps(body)), "application/json"
        done = self.engine.run(
            "exec", self.containers[replica], "python", "-c", ADMIN_CALL, method, path, text, kind
        )
        answer = json.loads(done.stdout)
        return answer["status"], answer["body"]

    def served(self, request_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The ``request`` frame-log line of each of ``request_ids``, from the replicas'
        output (the image's frame log goes to stdout), once every one is there."""

        def found() -> dict[str, dict[str, Any]] | None:
            lines: dict[str, dict[str, Any]] = {}
            for container in self.containers.values():
                for raw in self.engine.logs(container):
                    if not raw.startswith("{"):
                        continue
                    line = json.loads(raw)
                    if line.get("event") == "request" and line.get("request_id") in request_ids:
                        lines[line["request_id"]] = line
            return lines if len(lines) == len(request_ids) else None

        return wait_until("the requests' lines in the replicas' logs", found, 30, every=0.5)


def post(fleet: Fleet, scenario: str | None = None, **headers: str) -> httpx.Response:
    """One streamed chat request through the balancer, on a connection of its own, with
    ``scenario`` in X-Chaos-Scenario (none: the fleet's default) and ``headers``."""
    if scenario:
        headers["X-Chaos-Scenario"] = scenario
    return httpx.post(
        fleet.url + "/v1/chat/completions",
        json=CHAT,
        headers={"Connection": "close", **headers},
        timeout=30,
    )


@pytest.fixture(scope="module")
def fleet(engine: Engine, image: Build, images: Images) -> Iterator[Fleet]:
    """The example up, built from nothing but its file and the images; down at the end,
    checked to leave nothing."""
    if not engine.compose:
        pytest.skip("no Docker Compose v2 (docker compose): the example needs v2.3.3 or later")
    project = f"chaosproxy-test-{SESSION}-fleet"
    env = {k: v for k, v in engine.env.items() if not k.startswith("CHAOSPROXY_")}
    env.update(
        CHAOS_IMAGE=image.tag,  # the suite's build, never built again by Compose
        REDIS_IMAGE=images.redis,
        HAPROXY_IMAGE=images.haproxy,
        CHAOS_PORT="127.0.0.1:0",  # any free port of the host's loopback
    )

    compose = compose_runner(project, COMPOSE, env)

    try:
        start = time.monotonic()
        up = compose("up", "-d", "--wait", "--no-build", "--pull", images.pull, timeout=300)
        if up.returncode != 0:
            logs = compose("logs", "--no-color", "--tail", "40")
            pytest.fail(f"compose up: {up.stderr[-3000:]}\n{logs.stdout[-4000:]}", pytrace=False)
        containers = {
            replica: compose("ps", "-q", service).stdout.strip()
            for service, replica in REPLICAS.items()
        }
        address = compose("port", "balancer", str(BALANCER_PORT)).stdout.strip()
        host, _, port = address.rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0, address
        running = Fleet(engine, f"http://{address}", containers)

        def answers() -> bool:
            try:
                return post(running, "none").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until("the fleet answering through HAProxy", answers, 30, every=0.2)
        built = f"stand-ins for {', '.join(images.built)}" if images.built else "images named"
        engine.note(f"compose up of the fleet ({built})", f"{time.monotonic() - start:.1f}s")
        yield running
    finally:
        down = compose("down", "--volumes", "--remove-orphans", "--timeout", "10")
    assert down.returncode == 0, down.stderr
    for kind in ("container", "network", "volume"):
        listed = engine.run(
            kind, "ls", *(["-a"] if kind == "container" else []), "-q",
            "--filter", f"label=com.docker.compose.project={project}",
        )  # fmt: skip
        assert listed.stdout == "", f"{kind}s left by the fleet's project: {listed.stdout}"


def rotation(replicas: list[str]) -> bool:
    """Whether ``replicas`` (in the order the requests were sent) follow round robin:
    each next one the next of the three, all three in turn."""
    cycle = replicas[:3]
    return len(set(cycle)) == 3 and all(r == cycle[i % 3] for i, r in enumerate(replicas))


def test_requests_spread_over_the_replicas_and_count_as_the_fleets(fleet: Fleet) -> None:
    """``requests: [3]`` added on r2: the fleet's third request of it gets the 429,
    whichever replica serves it; nine requests, three on each replica in turn, ordinals
    1 to 9 in the order sent; and each replica's journal lists all nine."""
    status, added = fleet.admin("r2", "POST", "/scenarios?name=fleet-third", THIRD)
    assert status == 201, added
    assert added["fleet"] == {"applied": "everywhere", "pending": []}
    answers = [post(fleet, "fleet-third") for _ in range(9)]
    assert [a.status_code for a in answers] == [200, 200, 429, 200, 200, 200, 200, 200, 200]
    assert all(a.headers["X-Chaos-Scenario"] == "fleet-third" for a in answers)
    ids = [a.headers["X-Chaos-Request-Id"] for a in answers]
    lines = fleet.served(ids)
    where = [lines[i]["replica"] for i in ids]
    assert rotation(where) and set(where) == set(REPLICAS.values()), where
    assert [lines[i]["ordinal"] for i in ids] == list(range(1, 10))

    def listed(replica: str) -> list[str] | None:
        _, page = fleet.admin(replica, "GET", "/requests?scenario=fleet-third")
        found = [r["request_id"] for r in page["requests"]]
        return found if len(found) == len(ids) else None

    for replica in REPLICAS.values():  # newest first, on every replica
        journal = wait_until(f"{replica}'s journal", functools.partial(listed, replica), 10)
        assert journal == ids[::-1], replica


def test_an_admin_change_on_one_replica_is_every_replicas_before_it_answers(
    fleet: Fleet,
) -> None:
    """A scenario added on r1 and made the default on r3: the answer says every replica
    has it, and at once (no wait) each replica lists it as its default and serves it;
    ``POST /reset`` on r2 takes it away from all three."""
    status, added = fleet.admin(
        "r1", "POST", "/scenarios?name=fleet-default", "faults:\n  - drop: {kind: delta, nth: 1}\n"
    )
    assert (status, added["fleet"]["pending"]) == (201, [])
    status, answer = fleet.admin("r3", "PUT", "/default", {"scenario": "fleet-default"})
    assert (status, answer["default"]) == (200, "fleet-default")
    assert answer["fleet"] == {"applied": "everywhere", "pending": []}
    for replica in REPLICAS.values():
        _, listing = fleet.admin(replica, "GET", "/scenarios")
        assert listing["default"] == "fleet-default", replica
    answers = [post(fleet) for _ in range(3)]  # no X-Chaos-Scenario: the default's
    assert [a.headers.get("X-Chaos-Scenario") for a in answers] == ["fleet-default"] * 3
    lines = fleet.served([a.headers["X-Chaos-Request-Id"] for a in answers])
    assert {line["replica"] for line in lines.values()} == set(REPLICAS.values())
    assert all(line["scenario"] == "fleet-default" for line in lines.values())

    status, reset = fleet.admin("r2", "POST", "/reset")
    assert (status, reset["fleet"]["pending"]) == (200, [])
    for replica in REPLICAS.values():
        status, _ = fleet.admin(replica, "GET", "/scenarios/fleet-default")
        assert status == 404, replica  # a scenario added at run time: gone everywhere
        _, listing = fleet.admin(replica, "GET", "/scenarios")
        assert listing["default"] is None, replica


def test_a_reconnect_on_another_replica_resumes_exactly(fleet: Fleet) -> None:
    """The suite's resume client (tests/support/resume_client.py) through the balancer: its
    first connection is cut after four events, its reconnect with ``Last-Event-ID``
    goes to the next replica, which resumes after event 4 from the fleet's history (its
    owner may still be reading the upstream), and the reconnect after the end goes to
    the third replica, which answers 204: every event once, in order, as the mock sent
    it."""
    status, added = fleet.admin("r1", "POST", "/scenarios?name=fleet-resume", RESUMED)
    assert (status, added["fleet"]["pending"]) == (201, [])
    reference = [
        line[len("data: ") :]
        for line in post(fleet, "none").text.split("\n")
        if line.startswith("data: ")
    ]

    async def run_client() -> Any:
        async with httpx.AsyncClient(timeout=30) as client:
            return await resume_loop(
                client,
                fleet.url + "/v1/chat/completions",
                json=CHAT,
                headers={"X-Chaos-Scenario": "fleet-resume", "Connection": "close"},
                limit=4,
            )

    run = asyncio.run(run_client())
    assert run.statuses == [200, 200, 204]
    first, second, _ = run.connections
    assert first.end == "error" and second.end == "clean"
    rid = first.ids[0].rpartition(".")[0]
    n = len(reference)
    assert first.ids == [f"{rid}.{i}" for i in range(1, 5)]
    assert second.ids == [f"{rid}.{i}" for i in range(5, n + 1)]
    assert run.datas == reference and run.twice() == []
    ids = [c.request_id for c in run.connections]
    assert all(ids), ids
    lines = fleet.served([i for i in ids if i is not None])
    where = [lines[i]["replica"] for i in ids if i is not None]
    assert len(set(where)) == 3, where  # each connection on another replica


def test_another_credential_gets_nothing_of_a_stream_on_any_replica(fleet: Fleet) -> None:
    """Alice's stream is cut after four events; Mallory presents its last id three
    times in turn, so once to each replica, and gets 204 (an id unknown to her) each
    time; Alice presenting it gets the rest of her stream, every event after it."""
    status, added = fleet.admin("r2", "POST", "/scenarios?name=fleet-tenant", RESUMED)
    assert (status, added["fleet"]["pending"]) == (201, [])
    alice = {"X-Chaos-Scenario": "fleet-tenant", "Authorization": "Bearer alice-key"}

    async def cut() -> Any:
        async with httpx.AsyncClient(timeout=30) as client:
            return await resume_loop(
                client, fleet.url + "/v1/chat/completions", json=CHAT, headers=alice, limit=1
            )

    (first,) = asyncio.run(cut()).connections
    assert first.end == "error" and len(first.ids) == 4
    last = first.ids[-1]
    mallory = {**alice, "Authorization": "Bearer mallory-key", "Last-Event-ID": last}
    stolen = [post(fleet, **mallory) for _ in range(3)]
    assert [(a.status_code, a.content) for a in stolen] == [(204, b"")] * 3
    lines = fleet.served([a.headers["X-Chaos-Request-Id"] for a in stolen])
    assert {line["replica"] for line in lines.values()} == set(REPLICAS.values())
    resumed = post(fleet, **{**alice, "Last-Event-ID": last})
    assert resumed.status_code == 200
    rid = last.rpartition(".")[0]
    ids = [line[4:] for line in resumed.text.split("\n") if line.startswith("id: ")]
    assert ids[0] == f"{rid}.5" and ids == [f"{rid}.{i}" for i in range(5, len(ids) + 5)]
    assert resumed.text.endswith("data: [DONE]\n\n")
