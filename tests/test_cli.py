"""The command line as a user meets it: exit codes and one-line reasons."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def run(
    *args: str, env: dict[str, str] | None = None, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaosproxy", *args],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["serve", "--listen", "nonsense"], "expected HOST:PORT"),
        (["serve", "--upstream", "ftp://x"], "expected an http(s) URL or 'mock'"),
        (["serve", "--seed", "-3"], "expected a non-negative integer"),
        (["serve", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["serve", "--scenarios", "/nonexistent/scenarios"], "/nonexistent/scenarios"),
        (
            ["serve", "--scenarios", "scenarios", "--scenario", "nope", "--listen", "127.0.0.1:0"],
            "--scenario 'nope' is not a loaded scenario",
        ),
        (
            ["serve", "--log", "/nonexistent/dir/frames.jsonl", "--listen", "127.0.0.1:0"],
            "cannot open log /nonexistent/dir/frames.jsonl",
        ),
    ],
)
def test_bad_input_stops_startup_with_one_line(args: list[str], reason: str) -> None:
    assert reason in one_line_error(run(*args))


@pytest.mark.parametrize(
    ("variable", "value"),
    [("CHAOSPROXY_LISTEN", "still-nonsense"), ("CHAOSPROXY_MOCK_TOKENS", "many")],
)
def test_environment_variables_are_flags_too(variable: str, value: str) -> None:
    line = one_line_error(run("serve", env={variable: value}))
    assert value in line


def test_a_port_in_use_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        line = one_line_error(run("serve", "--listen", f"127.0.0.1:{port}", "--admin", "off"))
    assert f"cannot listen on 127.0.0.1:{port}" in line
    assert "address already in use" in line


def test_an_invalid_scenario_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  - rechunk: {size: 0}\n")
    line = one_line_error(run("serve", "--scenarios", str(bad), "--listen", "127.0.0.1:0"))
    assert line == f"chaosproxy: error: {bad}:2: faults[0].rechunk.size: must be >= 1"
    validate = run("validate", str(bad))
    assert validate.returncode == 2
    assert validate.stdout == f"{bad}:2: faults[0].rechunk.size: must be >= 1\n"


def test_validate_accepts_the_library() -> None:
    result = run("validate", "scenarios")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
