"""The supervisor's steps alone (chaosproxy/workers/supervisor.py): what it checks
before a worker is spawned (``_prepare``: the address held, the scenarios, the log)
and the warnings it gives at start. The supervisor at work, with its workers, is
tests/workers/test_workers_live.py's."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from chaosproxy.scenario import load_library, parse_scenario
from chaosproxy.server.config import Config
from chaosproxy.server.net import StartupError
from chaosproxy.workers.counters import SLOTS
from chaosproxy.workers.supervisor import _prepare, _Prepared, _warnings


def config(**changes: object) -> Config:
    return Config().replace(**{"listen": ("127.0.0.1", 0), "workers": 2, **changes})


def test_the_address_is_held_for_the_workers_and_the_library_given() -> None:
    mine = parse_scenario("name: mine\nfaults: [{drop: {nth: 2}}]\n", "mine")
    prepared = _prepare(config(log=None), {"mine": mine})
    try:
        port = prepared.held.getsockname()[1]
        assert port > 0
        assert prepared.held.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        # Another listener without SO_REUSEPORT is refused: the port is the workers'.
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        assert prepared.library == {**load_library(), "mine": mine}
        assert (prepared.log_mode, prepared.log_format, prepared.admin_warning) == (
            "none",
            "json",
            None,
        )
    finally:
        prepared.held.close()


def test_a_start_that_cannot_be_is_refused_before_any_worker(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"^--scenario 'nope' is not a loaded scenario$"):
        _prepare(config(scenario="nope"), {})
    missing = tmp_path / "no" / "such" / "log.jsonl"
    with pytest.raises(StartupError, match=f"^cannot open log {missing}: No such file"):
        _prepare(config(log=str(missing)), {})
    many = {
        f"s{i}": parse_scenario(f"name: s{i}\nfaults: [{{drop: {{nth: 2}}}}]\n", f"s{i}")
        for i in range(SLOTS)
    }
    with pytest.raises(StartupError, match=f"^more than {SLOTS} scenarios: too many"):
        _prepare(config(), many)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError, match=f"^cannot listen on 127.0.0.1:{port}: "):
            _prepare(config(listen=("127.0.0.1", port)), {})


def test_the_warnings_at_start_each_once() -> None:
    crossing = parse_scenario(
        "name: crossing\nfaults: [{splice: {from: previous, after: 2, across_tenants: true}}]\n",
        "crossing",
    )
    with socket.socket() as held:
        prepared = _Prepared({"crossing": crossing}, "none", "json", held, "admin on 0.0.0.0")
        got = _warnings(prepared, {"warnings": ["admin on 0.0.0.0", "a worker's own"]})
    assert got[:2] == ["admin on 0.0.0.0", "a worker's own"]
    assert got[2:] == [
        "crossing: faults[0].splice.across_tenants: true: scenario crossing puts events of "
        "every tenant's streams (other users' text) into its answers"
    ]
