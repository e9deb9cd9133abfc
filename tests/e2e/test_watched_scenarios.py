"""``chaosproxy serve --scenarios DIR`` with the directory a Kubernetes ConfigMap volume,
updated in place as the kubelet does (its ``..data`` link swapped), end to end: each
valid update applies without a restart; an invalid one keeps the previous scenarios
and says FILE:LINE on stderr; a scenario added over the admin API stays through file
changes; ``POST /reset`` goes back to what the files say now (docs/scenarios.md,
Watched files)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import pytest

from tests.support.cli import port_in, start_serve, stop_serve
from tests.support.configmap import configmap

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def status(name: str, code: int) -> str:
    return f"name: {name}\nfaults:\n  - status: {{code: {code}}}\n"


async def line_after(stderr: asyncio.StreamReader, prefix: str) -> str:
    """The next stderr line that starts ``prefix`` (10 s at most)."""
    async with asyncio.timeout(10):
        while True:
            line = (await stderr.readline()).decode()
            assert line, "serve ended"
            if line.startswith(prefix):
                return line.rstrip("\n")


NOTICE = re.compile(
    r"chaosproxy: notice: scenario files reloaded: (?:added or changed (?P<changed>[a-z, ]+))?"
    r"(?:; )?(?:removed (?P<removed>[a-z, ]+))?"
    r"(?:nothing to change \(each is as it was, or set at run time\))?"
)


async def reloaded(stderr: asyncio.StreamReader, changed: set[str], removed: set[str]) -> None:
    """Until the notices say that ``changed`` were added or changed and ``removed``
    removed, and nothing else. (The kubelet makes a new key's link, and removes a gone
    one's, just after the swap: a poll in between sees the rest first, in a notice of
    its own.)"""
    seen_changed: set[str] = set()
    seen_removed: set[str] = set()
    while seen_changed != changed or seen_removed != removed:
        line = await line_after(stderr, "chaosproxy: notice: scenario files reloaded")
        found = NOTICE.fullmatch(line)
        assert found, line
        seen_changed |= set(filter(None, (found["changed"] or "").split(", ")))
        seen_removed |= set(filter(None, (found["removed"] or "").split(", ")))
        assert seen_changed <= changed and seen_removed <= removed, line


async def test_a_configmap_update_applies_and_an_invalid_one_keeps_the_last(
    tmp_path: Path,
) -> None:
    mount = tmp_path / "scenarios"
    mount.mkdir()
    configmap(mount, "2026_12_07_18_00_00.1", {"flaky.yaml": status("flaky", 418)})
    proc, first = await start_serve(
        *("--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--scenarios", str(mount)),
        *("--scenarios-poll", "100ms", "--mock-interval-ms", "1"),
    )
    assert proc.stderr is not None
    stderr = proc.stderr
    url = f"http://127.0.0.1:{port_in(first)}"
    found = re.search(r"admin: http://127\.0\.0\.1:(\d+)", first)
    assert found, first
    admin_url = f"http://127.0.0.1:{found.group(1)}"

    async def answer(scenario: str) -> int:
        async with (
            aiohttp.ClientSession() as session,
            session.post(url + CHAT, json=BODY, headers={"X-Chaos-Scenario": scenario}) as r,
        ):
            await r.read()
            return r.status

    try:
        async with aiohttp.ClientSession(admin_url) as admin:
            assert await answer("flaky") == 418
            async with admin.post(
                "/scenarios",
                data=status("mine", 402),
                headers={"Content-Type": "application/yaml"},
            ) as r:
                assert r.status == 201
            # A new version: one key changed, one added.
            configmap(
                mount,
                "2026_12_07_18_01_00.2",
                {"flaky.yaml": status("flaky", 429), "fresh.yaml": status("fresh", 503)},
            )
            await reloaded(stderr, {"flaky", "fresh"}, set())
            assert [await answer(n) for n in ("flaky", "fresh", "mine")] == [429, 503, 402]
            # An invalid version: nothing of it applies, and stderr says where.
            configmap(
                mount,
                "2026_12_07_18_02_00.3",
                {"flaky.yaml": status("flaky", 99), "fresh.yaml": status("fresh", 504)},
            )
            line = await line_after(stderr, "chaosproxy: warning: scenario files not reloaded")
            assert line == (
                "chaosproxy: warning: scenario files not reloaded, the previous scenarios "
                f"stay: {mount / 'flaky.yaml'}:3: faults[0].status.code: must be >= 100"
            )
            assert [await answer(n) for n in ("flaky", "fresh")] == [429, 503]
            # Fixed, and a key removed.
            configmap(mount, "2026_12_07_18_03_00.4", {"flaky.yaml": status("flaky", 418)})
            await reloaded(stderr, {"flaky"}, {"fresh"})
            assert [await answer(n) for n in ("flaky", "fresh", "mine")] == [418, 400, 402]
            # A reset goes back to the files as they are now: the admin's scenario goes.
            async with admin.post("/reset", json={}) as r:
                assert r.status == 200
            assert [await answer(n) for n in ("flaky", "mine")] == [418, 400]
    finally:
        await stop_serve(proc)
    assert proc.returncode == 0
