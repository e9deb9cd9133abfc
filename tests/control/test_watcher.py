"""The scenario files watched (chaosproxy/control/watcher.py): a valid change applied and
said, an invalid one refused with every problem at its FILE:LINE and the previous set
kept, the poll loop itself; through start_proxy, the proxy's own set."""

from __future__ import annotations

import os
from pathlib import Path

from chaosproxy.control.start import start_proxy, watch_scenarios
from chaosproxy.control.watcher import ScenarioWatcher
from chaosproxy.scenario import Scenario, load_scenarios, parse_scenario
from chaosproxy.scenario.selection import Rebased, ScenarioSet
from chaosproxy.server.config import Config
from tests.support.scripted_upstream import until

SLOW = "name: slow\nfaults:\n  - delay: {per_event: 150ms}\n"
FRESH = "name: fresh\nfaults:\n  - drop: {every: 2}\n"
BAD = "name: bad\nfaults:\n  - rechunk: {size: 0}\n"


Said = list[tuple[str, str]]


def put(path: Path, text: str) -> None:
    """Write a file whole, as one change (a poll never sees it half-written)."""
    aside = path.with_name(f".{path.name}.tmp")
    aside.write_text(text)
    os.replace(aside, path)


def watched(
    tmp_path: Path, default: str | None = None
) -> tuple[ScenarioWatcher, ScenarioSet, Said]:
    scenarios = ScenarioSet(load_scenarios([tmp_path]), default, 1)
    said: list[tuple[str, str]] = []
    config = Config(scenarios=(str(tmp_path),), scenarios_poll=0.05)
    watcher = watch_scenarios(config, scenarios, library=False)
    watcher._say = lambda kind, message: said.append((kind, message))
    return watcher, scenarios, said


async def test_a_valid_change_is_applied_and_said(tmp_path: Path) -> None:
    (tmp_path / "slow.yaml").write_text(SLOW)
    watcher, scenarios, said = watched(tmp_path, "slow")
    assert await watcher.check() is False  # nothing changed
    (tmp_path / "fresh.yaml").write_text(FRESH)
    assert await watcher.check() is True
    assert list(scenarios.scenarios) == ["slow", "fresh"]
    (tmp_path / "slow.yaml").unlink()
    assert await watcher.check() is True
    assert list(scenarios.scenarios) == ["fresh"] and scenarios.default is None
    assert said == [
        ("notice", "scenario files reloaded: added or changed fresh"),
        (
            "notice",
            "scenario files reloaded: removed slow; the default 'slow' is gone: requests "
            "that choose none pass through",
        ),
    ]


async def test_an_invalid_change_keeps_the_previous_set_and_says_where(tmp_path: Path) -> None:
    (tmp_path / "slow.yaml").write_text(SLOW)
    watcher, scenarios, said = watched(tmp_path)
    before = dict(scenarios.scenarios)
    (tmp_path / "fresh.yaml").write_text(FRESH)
    (tmp_path / "bad.yaml").write_text(BAD)
    (tmp_path / "slow.yaml").write_text("name: slow\nfaults:\n  - delay: {per_event: soon}\n")
    assert await watcher.check() is False
    assert dict(scenarios.scenarios) == before  # nothing of it applied, the good file neither
    assert said == [
        (
            "warning",
            "scenario files not reloaded, the previous scenarios stay: "
            f"{tmp_path / 'bad.yaml'}:3: faults[0].rechunk.size: must be >= 1",
        ),
        (
            "warning",
            "scenario files not reloaded, the previous scenarios stay: "
            f"{tmp_path / 'slow.yaml'}:3: faults[0].delay.per_event: not a duration: "
            "'soon' (use a number of ms, or 250ms, 2s)",
        ),
    ]
    assert await watcher.check() is False  # the same files: not said again
    assert len(said) == 2 and watcher.refused == 1
    (tmp_path / "bad.yaml").unlink()
    (tmp_path / "slow.yaml").write_text(SLOW)
    assert await watcher.check() is True
    assert list(scenarios.scenarios) == ["slow", "fresh"]


async def test_the_poll_loop_applies_a_change_without_being_asked(tmp_path: Path) -> None:
    put(tmp_path / "slow.yaml", SLOW)
    watcher, scenarios, _ = watched(tmp_path)
    watcher.start()
    try:
        put(tmp_path / "fresh.yaml", FRESH)
        await until(lambda: watcher.applied == 1, limit=10)
        assert "fresh" in scenarios.scenarios
    finally:
        await watcher.stop()


async def test_a_watcher_whose_apply_fails_says_so_and_watches_on(tmp_path: Path) -> None:
    put(tmp_path / "slow.yaml", SLOW)
    calls: list[dict[str, Scenario]] = []

    async def apply(files: dict[str, Scenario]) -> Rebased:
        calls.append(files)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return Rebased(("fresh",), ())

    said: list[tuple[str, str]] = []
    watcher = ScenarioWatcher([tmp_path], 0.01, apply, say=lambda k, m: said.append((k, m)))
    watcher.start()
    try:
        put(tmp_path / "fresh.yaml", FRESH)
        await until(lambda: bool(said), limit=10)
        put(tmp_path / "other.yaml", "name: other\nfaults: []\n")
        await until(lambda: watcher.applied == 1, limit=10)
    finally:
        await watcher.stop()
    assert said == [
        ("warning", "scenario files not reloaded: RuntimeError: a bug"),
        ("notice", "scenario files reloaded: added or changed fresh"),
    ]


async def test_start_proxy_watches_its_scenarios_unless_told_not_to(tmp_path: Path) -> None:
    put(tmp_path / "slow.yaml", SLOW)
    base = Config(listen=("127.0.0.1", 0), admin=None, log=None, scenarios=(str(tmp_path),))
    proxy = await start_proxy(base.replace(scenarios_poll=0.05))
    quiet = await start_proxy(base.replace(scenarios_poll=0.0))
    try:
        assert proxy.watcher is not None and quiet.watcher is None
        assert proxy.watcher.interval == 0.05
        put(tmp_path / "fresh.yaml", FRESH)
        watcher = proxy.watcher
        await until(lambda: watcher.applied == 1, limit=10)
        assert "fresh" in proxy.state.scenarios.scenarios
        assert "slow" in proxy.state.scenarios.scenarios  # (with the built-in library)
        assert "fresh" not in quiet.state.scenarios.scenarios
    finally:
        await proxy.close()
        await quiet.close()


async def test_scenarios_given_apart_from_the_files_stay_through_their_changes(
    tmp_path: Path,
) -> None:
    # ChaosProxy(scenarios=["dir/", Scenario]) gives start_proxy both.
    put(tmp_path / "slow.yaml", SLOW)
    mine = parse_scenario("name: mine\nfaults: []\n", "mine")
    over = parse_scenario("name: slow\nfaults: []\n", "over")  # overrides the file's
    config = Config(
        listen=("127.0.0.1", 0), admin=None, log=None, scenarios=(str(tmp_path),)
    ).replace(scenarios_poll=0.05)
    proxy = await start_proxy(config, scenarios={"slow": over, "mine": mine})
    try:
        put(tmp_path / "fresh.yaml", FRESH)
        watcher = proxy.watcher
        assert watcher is not None
        await until(lambda: watcher.applied == 1, limit=10)
        live = proxy.state.scenarios.scenarios
        assert live["mine"] is mine and live["slow"] is over and "fresh" in live
    finally:
        await proxy.close()
