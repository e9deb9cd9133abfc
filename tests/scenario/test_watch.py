"""The scenario files' stamp and reload (chaosproxy/scenario/watch.py): every kind of
change seen, nothing else, and a Kubernetes ConfigMap's update (its ``..data`` link
swapped in one rename) seen as one."""

from __future__ import annotations

import os
from pathlib import Path

from chaosproxy.scenario import Problem, Scenario
from chaosproxy.scenario.watch import ScenarioFiles, stamp
from tests.support.configmap import configmap

SLOW = "name: slow\nfaults:\n  - delay: {per_event: 150ms}\n"
FAST = "name: slow\nfaults:\n  - delay: {per_event: 5ms}\n"
FRESH = "name: fresh\nfaults:\n  - drop: {every: 2}\n"
BAD = "name: bad\nfaults:\n  - rechunk: {size: 0}\n"


def test_every_change_to_a_directory_is_seen_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "slow.yaml").write_text(SLOW)
    files = ScenarioFiles([tmp_path])
    assert files.changed() is False
    (tmp_path / "slow.yaml").write_text(FAST)  # edited in place
    assert files.changed() is True
    assert files.changed() is False  # (seen once)
    (tmp_path / "notes.txt").write_text("not a scenario")
    (tmp_path / "sub").mkdir()
    assert files.changed() is False
    (tmp_path / "fresh.yml").write_text(FRESH)  # added
    assert files.changed() is True
    replaced = tmp_path / ".fresh.tmp"
    replaced.write_text(FRESH)  # the same bytes, written aside and renamed over
    os.replace(replaced, tmp_path / "fresh.yml")
    assert files.changed() is True
    (tmp_path / "slow.yaml").unlink()  # removed
    assert files.changed() is True
    scenarios, problems = files.load()
    assert list(scenarios) == ["fresh"] and problems == []


def test_a_file_named_alone_is_watched_and_its_absence_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(SLOW)
    files = ScenarioFiles([path])
    path.unlink()
    assert files.changed() is True
    assert files.load() == ({}, [Problem(str(path), 0, "no such file or directory")])


def test_an_invalid_file_is_located(tmp_path: Path) -> None:
    (tmp_path / "slow.yaml").write_text(SLOW)
    (tmp_path / "bad.yaml").write_text(BAD)
    scenarios, problems = ScenarioFiles([tmp_path]).load()
    assert list(scenarios) == ["slow"]
    assert [str(p) for p in problems] == [
        f"{tmp_path / 'bad.yaml'}:3: faults[0].rechunk.size: must be >= 1"
    ]


def per_event(scenario: Scenario) -> float:
    name, config = scenario.faults[0]
    assert name == "delay"
    return float(config.per_event)  # type: ignore[attr-defined]


def test_a_configmap_update_is_one_change_with_the_new_contents(tmp_path: Path) -> None:
    configmap(tmp_path, "2026_12_07_18_00_00.1", {"slow.yaml": SLOW})
    files = ScenarioFiles([tmp_path])
    before = stamp([tmp_path])
    assert [name for name, _ in before] == [str(tmp_path), str(tmp_path / "slow.yaml")]
    assert per_event(files.load()[0]["slow"]) == 0.15
    configmap(tmp_path, "2026_12_07_18_01_00.2", {"slow.yaml": FAST, "fresh.yaml": FRESH})
    assert files.changed() is True
    scenarios, problems = files.load()
    assert problems == []
    assert sorted(scenarios) == ["fresh", "slow"]
    assert per_event(scenarios["slow"]) == 0.005
    assert files.changed() is False
    configmap(tmp_path, "2026_12_07_18_02_00.3", {"fresh.yaml": FRESH})  # a key removed
    assert files.changed() is True
    assert list(files.load()[0]) == ["fresh"]
