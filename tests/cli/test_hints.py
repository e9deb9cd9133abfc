"""The errors a newcomer makes get the hints the others have: a --scenario typo its
did-you-mean, a tab in a scenario's YAML says so. (A port in use: tests/server/test_net.py;
an unknown @pytest.mark.chaos name: tests/control/test_api.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import one_line_error, run_cli


def test_a_scenario_typo_gets_a_did_you_mean() -> None:
    line = one_line_error(
        run_cli("serve", "--listen", "127.0.0.1:0", "--scenario", "drop-third-delt")
    )
    assert line == (
        "chaosproxy: error: --scenario 'drop-third-delt' is not a loaded scenario (did you "
        "mean 'drop-third-delta'?); chaosproxy scenarios lists them"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("faults:\n\t- drop: {kind: delta}\n", "2: not valid YAML: a tab in the indentation: "
         "YAML indents with spaces only"),
        ("faults:\n  - drop:\n      kind: delta\n  \t  nth: 1\n", "4: not valid YAML: a tab in "
         "the indentation: YAML indents with spaces only"),
        ("faults:\n  - drop: {kind:\tdelta}\n", "2: not valid YAML: a tab at column 17: YAML "
         "wants spaces there"),
    ],
)  # fmt: skip
def test_a_tab_in_yaml_is_said_so(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "tabbed.yaml"
    path.write_text(text)
    done = run_cli("validate", str(path))
    assert (done.returncode, done.stdout) == (2, f"{path}:{problem}\n")


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["serve", "--lissten", ":8081"], "unrecognized arguments: --lissten :8081 (did you mean "
         "--listen?)"),
        (["serve", "--upstreem=http://x"], "(did you mean --upstream?)"),
        (["validate", "--mock-fixture", "x"], "(did you mean --mock-fixtures?)"),
    ],
)  # fmt: skip
def test_an_unknown_flag_gets_the_closest_of_its_command(args: list[str], hint: str) -> None:
    line = one_line_error(run_cli(*args))
    assert line.startswith("chaosproxy: error: unrecognized arguments: ")
    assert line.endswith(hint)


def test_simulate_with_a_typo_gets_a_did_you_mean() -> None:
    done = run_cli("simulate", "duplicate-thrid-delta", stdin=b"")
    assert (done.returncode, done.stderr) == (
        2,
        "chaosproxy: error: no scenario file and no built-in scenario named "
        "'duplicate-thrid-delta' (did you mean 'duplicate-third-delta'?)\n",
    )


def test_a_stall_for_a_while_is_a_duration(tmp_path: Path) -> None:
    path = tmp_path / "stall.yaml"
    path.write_text("faults:\n  - stall: {after: 3, for: 5s}\n")
    done = run_cli("validate", str(path))
    assert (done.returncode, done.stdout) == (
        2,
        f"{path}:2: faults[0].stall.for: unknown key, did you mean 'duration'? (allowed: "
        "after, duration, forever)\n",
    )


def test_a_fixture_file_given_as_a_scenario_is_pointed_to_mock_fixtures() -> None:
    path = "examples/mock-fixtures/agent.yaml"
    done = run_cli("validate", path)
    assert done.returncode == 2
    assert done.stdout.splitlines()[-1] == (
        f"{path}: a mock fixture file? check it with `chaosproxy validate --mock-fixtures "
        f"{path}`, serve it with `serve --mock-fixtures`"
    )
    assert run_cli("validate", "--mock-fixtures", path).stdout == "2 fixtures OK\n"
