"""The command line as a user meets it (chaosproxy/cli/main.py): exit codes and one-line
reasons."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaosproxy.cli.main import build_parser
from chaosproxy.scenario import load_library
from tests.support.cli import chaosproxy_argv, one_line_error, run_cli
from tests.support.ports import busy_port, refused_port
from tests.support.repo import LIBRARY, REPO


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["serve", "--listen", "nonsense"], "expected HOST:PORT"),
        (["serve", "--upstream", "ftp://x"], "expected an http(s) URL or 'mock'"),
        (["serve", "--seed", "-3"], "expected a decimal integer from 0 to 9223372036854775807"),
        (["serve", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["serve", "--scenarios", "/nonexistent/scenarios"], "/nonexistent/scenarios"),
        (
            ["serve", "--scenario", "nope", "--listen", "127.0.0.1:0"],
            "--scenario 'nope' is not a loaded scenario",
        ),
        (
            ["serve", "--log", "/nonexistent/dir/frames.jsonl", "--listen", "127.0.0.1:0"],
            "cannot open log /nonexistent/dir/frames.jsonl",
        ),
    ],
)
def test_bad_input_stops_startup_with_one_line(args: list[str], reason: str) -> None:
    assert reason in one_line_error(run_cli(*args))


@pytest.mark.parametrize(
    ("variable", "value"),
    [("CHAOSPROXY_LISTEN", "still-nonsense"), ("CHAOSPROXY_MOCK_TOKENS", "many")],
)
def test_environment_variables_are_flags_too(variable: str, value: str) -> None:
    line = one_line_error(run_cli("serve", env={variable: value}))
    assert value in line


def test_a_port_in_use_is_one_line() -> None:
    with busy_port() as port:
        line = one_line_error(run_cli("serve", "--listen", f"127.0.0.1:{port}", "--admin", "off"))
    assert f"cannot listen on 127.0.0.1:{port}" in line
    assert "address already in use" in line


def test_an_invalid_scenario_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  - rechunk: {size: 0}\n")
    line = one_line_error(run_cli("serve", "--scenarios", str(bad), "--listen", "127.0.0.1:0"))
    assert line == f"chaosproxy: error: {bad}:2: faults[0].rechunk.size: must be >= 1"
    validate = run_cli("validate", str(bad))
    assert validate.returncode == 2
    assert validate.stdout == f"{bad}:2: faults[0].rechunk.size: must be >= 1\n"


def test_a_scenario_of_10000_faults_is_refused_at_its_faults_line(tmp_path: Path) -> None:
    """Issue 39: 11,352 faults cost one request 24 s of CPU. Refused where it is loaded,
    with its line, by validate and by serve alike."""
    many = tmp_path / "many.yaml"
    many.write_text("description: many\nfaults:\n" + "  - drop: {nth: 1}\n" * 10_000)
    expected = (
        f"{many}:2: faults: at most 32 faults per scenario (this one has 10000): "
        "every fault is asked about every event"
    )
    validate = run_cli("validate", str(many))
    assert (validate.returncode, validate.stdout) == (2, expected + "\n")
    serve = run_cli("serve", "--scenarios", str(many), "--listen", "127.0.0.1:0")
    assert one_line_error(serve) == f"chaosproxy: error: {expected}"


def test_validate_accepts_the_library() -> None:
    result = run_cli("validate", str(LIBRARY))
    count = len(list(LIBRARY.glob("*.yaml")))
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{count} scenarios OK\n", "")


def test_validate_counts_one_scenario(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text("faults: [drop]\n")
    result = run_cli("validate", str(tmp_path / "one.yaml"))
    assert (result.returncode, result.stdout, result.stderr) == (0, "1 scenario OK\n", "")


CROSS = "name: leaky\nfaults:\n  - splice: {from: concurrent, after: 1, across_tenants: true}\n"


def test_validate_warns_about_a_splice_across_tenants(tmp_path: Path) -> None:
    """Valid (exit 0, counted), but one warning line says it hands one tenant's text to
    another."""
    (tmp_path / "leaky.yaml").write_text(CROSS)
    (tmp_path / "fine.yaml").write_text("faults:\n  - splice: {from: previous, after: 1}\n")
    result = run_cli("validate", str(tmp_path))
    assert (result.returncode, result.stdout) == (0, "2 scenarios OK\n")
    assert result.stderr == (
        f"chaosproxy: warning: {tmp_path / 'leaky.yaml'}: faults[0].splice.across_tenants: "
        "true: scenario leaky puts events of every tenant's streams (other users' text) "
        "into its answers\n"
    )


async def test_serve_warns_at_start_about_a_splice_across_tenants(tmp_path: Path) -> None:
    from tests.support.cli import serve_until_started, sigterm

    (tmp_path / "leaky.yaml").write_text(CROSS)
    proc, lines = await serve_until_started(
        "--listen", "127.0.0.1:0", "--admin", "off", "--scenarios", str(tmp_path)
    )
    try:
        assert "listening on" in lines[0]
        warnings = [ln for ln in lines[1:] if ln.startswith("chaosproxy: warning: ")]
        assert len(warnings) == 1 and "faults[0].splice.across_tenants: true" in warnings[0]
        assert "scenario leaky" in warnings[0]
    finally:
        await sigterm(proc)


def test_validate_refuses_a_path_without_scenarios(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a scenario\n")
    (tmp_path / "one.yaml").write_text("faults: [drop]\n")
    result = run_cli("validate", str(tmp_path / "one.yaml"), str(tmp_path / "empty"))
    assert (result.returncode, result.stdout) == (2, f"{tmp_path / 'empty'}:0: no scenarios here\n")


def test_validate_still_refuses_a_duplicate_among_the_users_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: same\nfaults: [drop]\n")
    (tmp_path / "b.yaml").write_text("name: same\nfaults: [drop]\n")
    result = run_cli("validate", str(tmp_path))
    assert result.returncode == 2
    assert result.stdout == (
        f"{tmp_path / 'b.yaml'}:1: name: duplicate scenario name 'same' "
        f"(also in {tmp_path / 'a.yaml'}:1)\n"
    )


def test_scenarios_lists_the_library_from_any_directory(tmp_path: Path) -> None:
    result = run_cli("scenarios", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    library = load_library()
    names = [line.split("  ", 1)[0].rstrip() for line in result.stdout.splitlines()]
    assert names == list(library)
    first = result.stdout.splitlines()[0]
    name = names[0]
    assert first.split(None, 1)[1] == " ".join(library[name].description.split())


def test_scenarios_adds_paths_and_a_same_name_file_overrides_the_library(
    tmp_path: Path,
) -> None:
    (tmp_path / "drop-third-delta.yaml").write_text("description: mine\nfaults: [drop]\n")
    (tmp_path / "extra.yaml").write_text("description: an extra one\nfaults: [drop]\n")
    result = run_cli("scenarios", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert len(lines) == len(load_library()) + 1
    assert (lines["drop-third-delta"], lines["extra"]) == ("mine", "an extra one")
    assert list(lines)[-1] == "extra"


def test_scenarios_reports_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  - rechunk: {size: 0}\n")
    result = run_cli("scenarios", str(bad))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"{bad}:2: faults[0].rechunk.size: must be >= 1\n"


SSE = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n'


def test_simulate_takes_a_builtin_name_from_any_directory(tmp_path: Path) -> None:
    result = run_cli("simulate", "duplicate-third-delta", "--seed", "1", stdin=SSE, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == SSE.decode()  # one delta: no third one to duplicate
    by_file = run_cli(
        "simulate", str(LIBRARY / "duplicate-third-delta.yaml"), "--seed", "1", stdin=SSE
    )
    assert (by_file.stdout, by_file.stderr) == (result.stdout, result.stderr)


def test_simulate_an_unknown_name_is_one_line() -> None:
    line = one_line_error(run_cli("simulate", "no-such-scenario"))
    assert line == (
        "chaosproxy: error: no scenario file and no built-in scenario named 'no-such-scenario'"
    )


COMMANDS = sorted(
    next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
)


def test_every_command_is_checked() -> None:
    assert {"matrix", "report", "serve", "simulate", "validate"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help_text(command: str) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
        command
    ]
    missing = [
        a.option_strings or [a.dest]
        for a in sub._actions
        if not isinstance(a, argparse._HelpAction) and not a.help
    ]
    assert missing == []


def test_a_reader_that_stops_early_ends_the_command_quietly() -> None:
    """``chaosproxy scenarios | head -1``: the reader goes away; the command stops
    without a traceback and with the shell's SIGPIPE status. The pipe holds one page
    and the listing is longer, so the write breaks whether it comes before or after the
    reader's end."""
    import fcntl

    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [*chaosproxy_argv(), "scenarios"],
        stdout=write,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    os.close(write)
    os.close(read)  # the reader is gone: the listing's write breaks the pipe
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 141, err.decode()
    assert err == b""


def test_the_parser_is_built_without_the_fault_space() -> None:
    """``chaosproxy --help`` (and every command's start) builds explore's options from
    tools/explore_options.py: the fault space, every fault's model and the shrinker's
    search are loaded when explore runs (or reads --faults), not before."""
    code = (
        "import sys; from chaosproxy.cli.main import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m in ("
        "'chaosproxy.tools.fault_space', 'chaosproxy.tools.explore')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout == "[]\n"
    assert build_parser().parse_args(["explore", "--client", "true"]).shrink_runs == 30


@pytest.mark.parametrize("args", [["serve", "--history", "3"], ["serve", "--max-conn", "4"]])
def test_a_flag_is_never_abbreviated(args: list[str]) -> None:
    """``--history`` is not ``--history-bytes`` (three bytes of history), and a prefix
    of a flag is no flag: one line, exit 2."""
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(args)
    assert stopped.value.code == 2
    result = run_cli(*args)
    assert result.returncode == 2
    assert f"unrecognized arguments: {' '.join(args[1:])}" in result.stderr


# --------------------------------------------------------------------------- --state


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state", "mysql://x"], "argument --state: expected memory or a Redis URL"),
        (["--state", "redis://user:hunter2@"], "got 'redis://user:***@'"),
        (["--replica-id", "a b"], "argument --replica-id: expected a name of letters"),
        (["--fleet", ""], "argument --fleet: expected a name of letters"),
    ],
)
def test_fleet_flags_refuse_bad_values_in_one_line(args: list[str], message: str) -> None:
    result = run_cli("serve", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "hunter2" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # usage, then the one line


def test_a_replica_whose_redis_cannot_be_reached_does_not_start() -> None:
    with refused_port() as port:
        result = run_cli(
            "serve", "--listen", "127.0.0.1:0", "--admin", "off",
            "--state", f"redis://:secret@127.0.0.1:{port}/0",
        )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith(f"chaosproxy: error: --state redis://:***@127.0.0.1:{port}/0: ")
    assert "secret" not in result.stderr
