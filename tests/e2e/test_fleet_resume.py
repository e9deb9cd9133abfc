"""Reconnection across a fleet (docs/fleet.md): npm ``eventsource`` through HAProxy,
which sends each request to the next of three replicas sharing one real
``redis-server``. Its reconnect always lands on another replica than the one that
served (and still reads) the cut stream, and it gets exactly what one process would
give it under every policy: the same ids, the same events, the final 204. Another
tenant presenting the id gets nothing on any replica, and the verdicts' answer counts
every connection of the generation, wherever each was served.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.support.fleet_parts import haproxy, needs_haproxy, needs_redis, redis_server, replicas
from tests.support.node import NodeRunner
from tests.support.resume import NODE_CHAT, NODE_SKIP, POLICIES, check, mock_reference, scenario

pytestmark = [
    needs_redis,
    needs_haproxy,
    pytest.mark.node,
    pytest.mark.slow,
    pytest.mark.skipif(NODE_SKIP is not None, reason=NODE_SKIP or ""),
    pytest.mark.xdist_group("fleet"),
]

NAMES = ["r1", "r2", "r3"]
CUT = "{after: 4, position: mid_line, how: abort}"


async def eventsource_run(node: NodeRunner, url: str, name: str) -> dict[str, Any]:
    """tests/node/eventsource-resume.mjs against ``url`` under scenario ``name``, as
    :func:`tests.e2e.test_resume_node.eventsource` runs it against one proxy."""
    settings = {
        "CHAOS_URL": url,
        "CHAOS_SCENARIO": name,
        "CHAOS_PATH": "/v1/chat/completions",
        "CHAOS_METHOD": "POST",
        "CHAOS_OPENS": "6",
        "CHAOS_TIMEOUT_MS": "15000",
    }
    run: dict[str, Any] = await asyncio.to_thread(node.run, "eventsource-resume", settings, 45)
    assert run["error"] is None and not run["hung"], run
    return run


@dataclass
class Balancer:
    """What the Node runner asks of a proxy: its URL (here, HAProxy's)."""

    url: str


async def test_eventsource_resumes_on_another_replica_under_every_policy(
    tmp_path: Path, node_runner: NodeRunner
) -> None:
    with redis_server(tmp_path) as redis:
        async with replicas(
            tmp_path, NAMES, "--state", redis.url, "--mock-interval-ms", "5"
        ) as fleet:
            with haproxy(tmp_path, [r.port for r in fleet]) as url:
                async with aiohttp.ClientSession() as session:
                    for policy in POLICIES:  # added on one replica: the fleet's
                        async with session.post(
                            fleet[0].admin + "/scenarios",
                            params={"name": f"s-{policy}"},
                            data=scenario(policy, CUT),
                            headers={"Content-Type": "application/yaml"},
                        ) as r:
                            assert r.status == 201, await r.text()
                reference = await mock_reference(Balancer(url), NODE_CHAT)  # type: ignore[arg-type]
                runs = {}
                for policy in POLICIES:
                    runs[policy] = await eventsource_run(node_runner, url, f"s-{policy}")
    for policy, run in runs.items():
        check(run, policy, reference, 4)
    # Every request of a run was served by the next replica: a reconnect never came
    # back to the replica that kept its stream.
    served: dict[str, list[str]] = {}
    for replica in fleet:
        for raw in replica.log.read_bytes().splitlines():
            line = orjson.loads(raw)
            if line.get("event") == "request" and (line.get("scenario") or "").startswith("s-"):
                served.setdefault(line["scenario"], []).append(line["replica"])
    for name, where in served.items():
        assert all(a != b for a, b in itertools.pairwise(where)), (name, where)
    resumed = [
        line
        for replica in fleet
        for raw in replica.log.read_bytes().splitlines()
        if (line := orjson.loads(raw)).get("event") == "response_end"
        and line.get("scenario") == "s-resume"
        and line.get("answer")
    ]
    # The generation's answer, as the last connection's replica judged it: every
    # connection counted (the cut one elsewhere), the content intact.
    last = max(resumed, key=lambda line: line["answer"]["connections"])
    assert last["answer"]["connections"] == 2
    assert last["answer"]["content"] == "intact"


async def test_another_tenant_gets_nothing_of_a_stream_on_any_replica(tmp_path: Path) -> None:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with redis_server(tmp_path) as redis:
        async with (
            replicas(tmp_path, NAMES, "--state", redis.url, "--mock-interval-ms", "5") as fleet,
            aiohttp.ClientSession() as session,
        ):
            async with session.post(
                fleet[0].admin + "/scenarios",
                params={"name": "s"},
                data=scenario("resume", "{after: 3, how: abort}"),
                headers={"Content-Type": "application/yaml"},
            ) as r:
                assert r.status == 201
            alice = {"X-Chaos-Scenario": "s", "Authorization": "Bearer alice"}
            got = b""
            with pytest.raises(aiohttp.ClientPayloadError):
                async with session.post(
                    fleet[0].url + "/v1/chat/completions", json=body, headers=alice
                ) as r:
                    async for chunk in r.content.iter_any():
                        got += chunk
            last = re.findall(rb"^id: (\S+)", got, re.M)[-1].decode()
            answers = {}
            for replica in fleet:
                for who in ("mallory", "alice"):
                    headers = {**alice, "Authorization": f"Bearer {who}", "Last-Event-ID": last}
                    async with session.post(
                        replica.url + "/v1/chat/completions", json=body, headers=headers
                    ) as r:
                        answers[(replica.name, who)] = (r.status, await r.read())
    for name in NAMES:
        status, data = answers[(name, "mallory")]
        assert (status, data) == (204, b""), name  # the id is unknown to her everywhere
        status, data = answers[(name, "alice")]
        assert status == 200 and data.endswith(b"data: [DONE]\n\n"), name
        assert re.findall(rb"^id: (\S+)", data, re.M)[0].decode() == last.rsplit(".", 1)[0] + ".4"
