"""The admin API's Python client (chaosproxy/control/client.py) against a live proxy's
admin (its calls in a thread: the client blocks): scenarios added, read, made the
default and removed; a scenario for a block and the default put back after; fixtures
added and cleared; a reset; and its errors: a refused scenario with its problems, a
name that disagrees, a missing or wrong token (never shown), an admin that cannot be
reached. The requests, summaries and verdicts it reads are test_admin.py's and
test_summaries.py's."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from chaosproxy.control.client import ChaosAuthError, ChaosClient, ChaosClientError
from tests.support.admin import ADMIN, call
from tests.support.proxies import ProxyFactory

TOKEN = "s3cret-admin-token"


async def client_of(make_proxy: ProxyFactory) -> ChaosClient:
    proxy = await make_proxy(admin=ADMIN, scenarios={"started": "faults: []\n"})
    assert proxy.admin_url is not None
    return ChaosClient(proxy.admin_url)


async def test_scenarios_added_read_made_the_default_and_removed(make_proxy: ProxyFactory) -> None:
    client = await client_of(make_proxy)

    def work() -> list[Any]:
        seen: list[Any] = []
        seen.append(client.add_scenario("name: dup\nfaults: [{duplicate: {nth: 2}}]\n"))
        seen.append(client.add_scenario({"faults": [{"drop": {"nth": 3}}]}, name="dropper"))
        seen.append(sorted(s["name"] for s in client.scenarios()))
        seen.append(client.get_scenario("dropper")["faults"][0]["drop"]["nth"])
        client.use("dup")
        seen.append(client.default())
        client.remove_scenario("dup")
        seen.append(client.default())
        return seen

    assert await asyncio.to_thread(work) == [
        "dup",
        "dropper",
        ["dropper", "dup", "started"],
        3,
        "dup",
        None,  # (its default gone with it)
    ]


async def test_a_scenario_for_a_block_then_the_default_put_back(make_proxy: ProxyFactory) -> None:
    client = await client_of(make_proxy)

    def work() -> list[Any]:
        client.use("started")
        seen: list[Any] = []
        with client.scenario("faults: [{drop: {nth: 2}}]\n") as name:
            seen.append((name, client.default(), name in {s["name"] for s in client.scenarios()}))
        seen.append((client.default(), sorted(s["name"] for s in client.scenarios())))
        with client.scenario("started") as name:  # a name: used as it is
            seen.append(name)
        return seen

    assert await asyncio.to_thread(work) == [
        ("block-1", "block-1", True),
        ("started", ["started"]),
        "started",
    ]


async def test_fixtures_added_and_cleared_and_a_reset(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=ADMIN, scenarios={"started": "faults: []\n"})
    assert proxy.admin_url is not None
    client = ChaosClient(proxy.admin_url)
    await asyncio.to_thread(client.add_fixture, {"text": "from the client"})
    await asyncio.to_thread(client.add_scenario, "name: later\nfaults: []\n")
    assert (await call(proxy, "GET", "/mock/fixtures"))[1]["fixtures"] == [
        {"text": "from the client", "source": "added"}
    ]
    await asyncio.to_thread(client.clear_fixtures)
    assert (await call(proxy, "GET", "/mock/fixtures"))[1]["fixtures"] == []
    await asyncio.to_thread(client.add_fixture, {"text": "again"})
    await asyncio.to_thread(client.reset)
    assert (await call(proxy, "GET", "/mock/fixtures"))[1]["fixtures"] == []
    assert sorted(s["name"] for s in await asyncio.to_thread(client.scenarios)) == ["started"]


async def test_a_refused_scenario_says_its_problems(make_proxy: ProxyFactory) -> None:
    client = await client_of(make_proxy)
    with pytest.raises(ChaosClientError) as caught:
        await asyncio.to_thread(client.add_scenario, "name: bad\nfaults: [{drop: 3}]\n")
    error = caught.value
    assert error.status == 400
    assert len(error.problems) == 1 and error.problems[0].startswith("body:2: faults[0].drop")
    assert str(error).endswith("\n  " + error.problems[0])
    with pytest.raises(ValueError, match="name 'other' given, but the scenario says name: own"):
        await asyncio.to_thread(client.add_scenario, "name: own\nfaults: []\n", "other")
    with pytest.raises(ChaosClientError) as missing:
        await asyncio.to_thread(client.get_scenario, "no/such")
    assert missing.value.status == 404
    assert "/scenarios/no%2Fsuch: 404: " in str(missing.value)


async def test_a_missing_or_wrong_token_is_said_and_never_shown(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=ADMIN, admin_token=TOKEN)
    assert proxy.admin_url is not None
    for token, why in ((None, "no token was given"), ("wrong-token", "the token was refused")):
        client = ChaosClient(proxy.admin_url, token=token)
        with pytest.raises(ChaosAuthError) as caught:
            await asyncio.to_thread(client.scenarios)
        assert caught.value.status == 401
        assert why in str(caught.value)
        assert "wrong-token" not in str(caught.value) and TOKEN not in str(caught.value)
    right = ChaosClient(proxy.admin_url, token=TOKEN)
    assert await asyncio.to_thread(right.default) is None
    assert repr(right) == f"ChaosClient({proxy.admin_url!r})"


def test_an_admin_that_cannot_be_reached_is_said_so() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    client = ChaosClient(url + "/", timeout=5)
    with pytest.raises(ChaosClientError) as caught:
        client.scenarios()
    assert str(caught.value).startswith(f"cannot reach the chaosproxy admin API at {url}: ")
    assert caught.value.status == 0
