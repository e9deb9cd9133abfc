"""The errors a newcomer makes get the hints the others have: a --scenario typo its
did-you-mean, a tab in a scenario's YAML says so. (A port in use: tests/server/test_listen.py;
an unknown @pytest.mark.chaos name: tests/control/test_api.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import one_line_error
from tests.conftest import run_cli


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
