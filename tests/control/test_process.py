"""What every command's process shares (chaosproxy/control/process.py): one-line failures
and notices on stderr with credentials masked, a setting read from its ``CHAOSPROXY_*``
variable, the garbage collector settled once the proxy is up, and the start-up line
and notices (addresses as bound, no password, the state, who chooses the faults).
``serve`` run as a process is tests/cli/'s."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaosproxy._build import __version__, build
from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.process import (
    EXIT_USAGE,
    FULL_GC_EVERY,
    _addresses,
    _client_choices,
    _startup_line,
    _startup_notices,
    _state,
    fail,
    from_settings,
    say,
    settle_gc,
)
from chaosproxy.server.config import ConfigError
from tests.support.admin import ADMIN
from tests.support.proxies import ProxyFactory
from tests.support.repo import REPO


def test_a_failure_is_one_line_without_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail("cannot reach http://user:hunter2@upstream.test/v1?api_key=sk-live-1") == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("chaosproxy: error: cannot reach http://user:")
    assert err.count("\n") == 1
    assert "hunter2" not in err and "sk-live-1" not in err


def test_a_notice_says_its_kind_without_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    say("warning", "state at redis://:p4ss@redis.test:6379/0")
    err = capsys.readouterr().err
    assert err.startswith("chaosproxy: warning: state at redis://")
    assert "p4ss" not in err


def test_a_setting_comes_from_its_variable_or_the_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CHAOSPROXY_SEED", raising=False)
    assert from_settings("seed", 42) == 42
    monkeypatch.setenv("CHAOSPROXY_SEED", "7")
    assert from_settings("seed", 42) == 7
    monkeypatch.setenv("CHAOSPROXY_SEED", "seven")
    with pytest.raises(ConfigError, match="CHAOSPROXY_SEED"):
        from_settings("seed")


@pytest.fixture
def gc_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settling_freezes_what_start_up_made_and_spaces_the_full_passes(
    gc_restored: None,
) -> None:
    young, middle, _ = gc.get_threshold()
    kept = [object() for _ in range(10)]  # (alive: moved out of the collector's reach)
    before = gc.get_freeze_count()
    settle_gc()
    assert gc.get_threshold() == (young, middle, FULL_GC_EVERY)
    assert gc.get_freeze_count() > before
    assert kept


def test_the_small_parts_of_the_start_up_line() -> None:
    assert _addresses(["http://127.0.0.1:1"]) == "http://127.0.0.1:1"
    assert _addresses(["http://0.0.0.0:1", "http://[::]:1"]) == (
        "http://0.0.0.0:1 (also http://[::]:1)"
    )
    assert _state(EMBEDDED).startswith("memory (this process alone")
    fleet = EMBEDDED.replace(state="redis://:p4ss@redis.test:6379/0")
    assert _state(fleet).startswith("redis://")
    assert "p4ss" not in _state(fleet) and f"fleet {fleet.fleet} (shared" in _state(fleet)
    assert _client_choices(EMBEDDED) == (
        "clients choose: X-Chaos-Scenario, X-Chaos-Seed, /_chaos/NAME/"
    )
    assert _client_choices(EMBEDDED.replace(trust_client_scenarios=False)).startswith(
        "clients choose: nothing (--trust-client-scenarios no"
    )


async def test_the_start_up_line_of_a_running_proxy(make_proxy: ProxyFactory) -> None:
    config = EMBEDDED.replace(seed=5, admin=ADMIN, admin_token="t0ken")
    proxy = await make_proxy(seed=5, admin=ADMIN, admin_token="t0ken")
    line = _startup_line(config, proxy, names="a, b")
    assert line == (
        f"chaosproxy {__version__} ({build()}) listening on {proxy.url} "
        f"→ mock (built in, {proxy.upstream}); scenarios: a, b; default: passthrough; "
        "seed: 5; clients choose: X-Chaos-Scenario, X-Chaos-Seed, /_chaos/NAME/; "
        f"admin: {proxy.admin_url} (bearer token); replica: {config.replica}; "
        f"state: {_state(config)}"
    )
    assert "t0ken" not in line


def test_a_loopback_admin_beside_a_reachable_proxy_says_how_to_publish_it() -> None:
    proxy: Any = SimpleNamespace(admin_url="http://127.0.0.1:8479")
    reachable = EMBEDDED.replace(listen=("0.0.0.0", 8478), admin=("127.0.0.1", 8479))
    assert _startup_notices(reachable, proxy) == [
        "the admin API is on loopback only (http://127.0.0.1:8479); to publish it, set "
        "CHAOSPROXY_ADMIN=0.0.0.0:8479 and CHAOSPROXY_ADMIN_TOKEN"
    ]
    with_token = reachable.replace(admin_token="t")
    assert _startup_notices(with_token, proxy)[0].endswith("CHAOSPROXY_ADMIN=0.0.0.0:8479")
    assert _startup_notices(EMBEDDED.replace(admin=("127.0.0.1", 8479)), proxy) == []
    assert _startup_notices(reachable.replace(admin=None), proxy) == []


#: A process that holds a connection, then leaves as the stop's exit does: hands the
#: teardown over, then ``os._exit(0)``. A SIGTERM handler that would say so on stdout
#: shows whether the child ever ran it.
HAND_OVER = textwrap.dedent(
    """
    import os, signal, socket, sys
    from chaosproxy.control.process import _hand_over_teardown

    signal.signal(signal.SIGTERM, lambda *_: print("handler ran", flush=True))
    held = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    print("connected", flush=True)
    sys.stdin.readline()
    _hand_over_teardown()
    os.killpg(0, signal.SIGTERM)  # the child's moment: it must not run the handler
    os._exit(0)
    """
)


def test_the_exit_hands_its_sockets_teardown_to_a_child_that_ends_after_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "hand_over.py"
    script.write_text(HAND_OVER)
    with socket.create_server(("127.0.0.1", 0)) as server:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(server.getsockname()[1])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            start_new_session=True,  # (its own group: the SIGTERM to it reaches no one else)
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline() == b"connected\n"
            peer, _ = server.accept()
            proc.stdin.write(b"go\n")
            proc.stdin.close()
            assert proc.wait(10) == 0
            # The connection outlives the process by the child's moment, then ends:
            # end of file, as the process's own exit would have given.
            peer.settimeout(10)
            with peer:
                assert peer.recv(1) == b""
            # stdout's end comes with the child's; it printed nothing.
            assert proc.stdout.read() == b""
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
