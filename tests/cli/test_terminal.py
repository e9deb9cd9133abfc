"""On a terminal, `serve`'s log is one line per request unless a level is chosen: a
frame line per write buried everything else (some 28 long lines for one 24-token
answer); into a file or a pipe, every line as before."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaosproxy.cli import main as cli
from tests.support.cli import read_until
from tests.support.repo import REPO


def serve_on_a_terminal(*args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """``chaosproxy serve`` with stdout on a pseudo-terminal and one request through it:
    (stderr up to the start-up notices, what the terminal showed)."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chaosproxy",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "off",
            *args,
        ],
        stdout=child,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    os.close(child)
    shown = b""
    try:
        head = read_until(proc, "listening on")
        url = head.split("listening on ")[1].split()[0]
        import httpx

        httpx.post(
            url + "/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
            headers={"X-Chaos-Scenario": "duplicate-third-delta"},
            timeout=10,
        )
        deadline = time.monotonic() + 10
        while b"response_end" not in shown:  # the request's last line, once flushed
            ready, _, _ = select.select([main], [], [], max(deadline - time.monotonic(), 0))
            assert ready, shown
            shown += os.read(main, 65536)
        proc.terminate()
        proc.wait(10)
        assert proc.stderr is not None
        rest = proc.stderr.read()  # what the reads above left in the pipe's buffer too
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)
    return head + rest, shown.decode(errors="replace")


@pytest.mark.slow
def test_on_a_terminal_the_log_is_one_line_per_request() -> None:
    stderr, shown = serve_on_a_terminal()
    assert (
        "chaosproxy: notice: the log is on a terminal: one line per request, no frame lines "
        "(--log-level frames shows every write)"
    ) in stderr
    assert "response_end" in shown and "frame " not in shown
    # Chosen explicitly, by flag or variable: as chosen, and no notice.
    for args, env in [(("--log-level", "frames"), {}), ((), {"CHAOSPROXY_LOG_LEVEL": "frames"})]:
        stderr, shown = serve_on_a_terminal(*args, env=env)
        assert "frame " in shown and "on a terminal" not in stderr


def test_terminal_level_is_only_for_a_log_on_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into a file, or chosen by flag or variable: as before, even with a terminal."""
    monkeypatch.setattr(cli, "_stdout_is_terminal", lambda: True)
    monkeypatch.delenv("CHAOSPROXY_LOG_LEVEL", raising=False)

    def quieted(*argv: str) -> bool:
        args = cli.build_parser().parse_args(["serve", *argv])
        return cli._terminal_default_level(cli.config_from(args, {}), args)

    assert quieted()
    assert not quieted("--log", str(tmp_path / "f.jsonl"))
    assert not quieted("--log-level", "frames")
    monkeypatch.setenv("CHAOSPROXY_LOG_LEVEL", "frames")
    assert not quieted()
    monkeypatch.setattr(cli, "_stdout_is_terminal", lambda: False)
    monkeypatch.delenv("CHAOSPROXY_LOG_LEVEL")
    assert not quieted()
