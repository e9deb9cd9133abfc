"""The JSON Schemas shipped in the package: the frame log's lines and scenario files."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from chaosproxy.core.records import LINE_KINDS
from chaosproxy.tools.schema import (
    SCHEMA_NAMES,
    SchemaName,
    generate,
    render,
    shipped,
    shipped_path,
)
from tests.support.cli import chaosproxy_argv
from tests.support.repo import LIBRARY, REPO
from tests.support.scenario_cases import ONE_PROBLEM
from tests.support.schema_check import check_jsonschema_with

LIBRARY_FILES = sorted(LIBRARY.glob("*.yaml"))
SCENARIO_FILES = sorted(
    [
        *LIBRARY_FILES,
        *(REPO / "examples" / "scenarios").glob("*.yaml"),
        *(REPO / "examples" / "staging-mix").glob("*.yaml"),
    ]
)


def _validator(name: SchemaName) -> Any:
    schema = shipped(name)
    return jsonschema.validators.validator_for(schema)(schema)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_the_shipped_file_is_what_the_code_generates_now(name: SchemaName) -> None:
    """A change to a record, the scenario model or a fault: ``chaosproxy schema --write``."""
    assert shipped_path(name).read_text(encoding="utf-8") == render(generate(name))
    jsonschema.Draft202012Validator.check_schema(shipped(name))


def test_the_schema_command_prints_the_shipped_files() -> None:
    for name in SCHEMA_NAMES:
        out = subprocess.run(
            [*chaosproxy_argv(), "schema", name],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out == shipped_path(name).read_text(encoding="utf-8")
    bare = subprocess.run([*chaosproxy_argv(), "schema"], cwd=REPO, capture_output=True, text=True)
    assert bare.returncode == 2
    assert bare.stderr == "chaosproxy: error: schema: name one: log or scenario\n"


def test_the_log_schema_knows_every_kind_of_line() -> None:
    mapping = shipped("log")["discriminator"]["mapping"]
    assert sorted(mapping) == sorted(LINE_KINDS)


def test_a_line_of_the_docs_example_validates() -> None:
    check = _validator("log")
    line = {
        "event": "response_end",
        "request_id": "r-7",
        "scenario": "dup",
        "ts": "2026-12-01T15:36:00.123Z",
        "outcome": "cut",
        "status": 200,
        "bytes": 1402,
        "frames": 9,
        "events_in": 8,
        "events_out": 7,
        "faults_applied": {"duplicate": 1, "cut": 1},
        "faults_skipped": [],
        "ttfb_ms": 31.4,
        "max_gap_ms": 20.6,
        "duration_ms": 88.0,
    }
    assert check.is_valid(line)
    assert not check.is_valid({**line, "outcome": "exploded"})
    assert not check.is_valid({k: v for k, v in line.items() if k != "duration_ms"})
    rejected = {"event": "rejected", "ts": line["ts"], "status": 400, "reason": "x", "peer": "p"}
    assert check.is_valid(rejected)
    assert not check.is_valid({**rejected, "request_id": "r-1"})


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_scenario_schema_accepts_every_shipped_and_example_scenario(path: Path) -> None:
    assert list(_validator("scenario").iter_errors(yaml.safe_load(path.read_text()))) == []


def test_the_scenario_files_are_found() -> None:
    assert len(LIBRARY_FILES) >= 35  # the built-in library, from its one home
    assert len(SCENARIO_FILES) >= 40


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"faults": [{"rechunk": {"size": 0}}]}, "size"),  # must be >= 1
        ({"faults": [{"drop": {"nth": 3}, "duplicate": {}}]}, "faults/0"),  # two keys
        ({"faults": ["no_such_fault"]}, "faults/0"),
        ({"faults": [{"drop": {"nht": 3}}]}, "nht"),  # unknown parameter
        ({"faults": [], "colour": "red"}, "colour"),  # unknown key
        ({"faults": [], "rate": 1.5}, "rate"),
        ({"faults": [], "format": "xml"}, "format"),
        ({"faults": [{"delay": {"first_byte": "soon"}}]}, "first_byte"),
        ({"faults": [], "requests": [0]}, "requests"),
        ({"faults": [], "seed": -1}, "seed"),
        ({"name": "drop"}, "faults"),  # required
    ],
)
def test_the_scenario_schema_refuses_what_the_model_refuses(
    document: dict[str, Any], where: str
) -> None:
    from chaosproxy.scenario import ScenarioError, parse_scenario

    errors = list(_validator("scenario").iter_errors(document))
    assert errors, document
    text = " ".join(f"{'/'.join(map(str, e.absolute_path))} {e.message}" for e in errors)
    assert where in text or any(where in str(e) for e in errors)
    with pytest.raises(ScenarioError):
        parse_scenario(yaml.safe_dump({"name": "x", **document}), source="s.yaml")


def test_durations_take_a_number_of_ms_or_a_unit() -> None:
    check = _validator("scenario")
    for given in (250, 2.5, "250ms", "2s", "1m", "1.5s"):
        assert check.is_valid({"faults": [{"delay": {"first_byte": given}}]}), given
    for given in (-1, "2h", "soon", True):
        assert not check.is_valid({"faults": [{"delay": {"first_byte": given}}]}), given


@pytest.mark.parametrize(("text", "problems"), ONE_PROBLEM, ids=lambda v: str(v)[:40])
def test_the_scenario_schema_refuses_every_file_validate_refuses(
    text: str, problems: list[str]
) -> None:
    """Each of the loader's refusals (tests/support/scenario_cases.py), as an editor sees it."""
    document = yaml.safe_load(text)
    assert not _validator("scenario").is_valid(document), (text, problems)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("faults:\n  - drop: {nht: 3}", "$.faults[0].drop: Additional properties are not "
         "allowed ('nht' was unexpected)"),
        ("faults:\n  - rechunk: {size: 0}", "$.faults[0].rechunk.size: 0 is less than the "
         "minimum of 1"),
        ("faults:\n  - drop: {kind: [delta, text]}", "$.faults[0].drop.kind[1]: 'text' is not "
         "one of ['start', 'delta', 'tool_delta', 'usage', 'ping', 'error', 'terminal', "
         "'other']"),
        ("provider: openai\nfaults: []", "$.provider: 'openai' is not one of ['auto', "
         "'openai-chat', 'openai-responses', 'openai-realtime', 'anthropic', 'gemini', "
         "'ollama', 'bedrock', 'generic']"),
        ("name: none\nfaults: []", "$.name: 'none' should not be valid under {'const': 'none'}"),
    ],
)  # fmt: skip
def test_check_jsonschema_names_the_bad_parameter_first(
    tmp_path: Path, text: str, said: str
) -> None:
    """check-jsonschema's default output (what CI and pre-commit show) leads with the
    parameter that is wrong, not with the list of fault names or "is not of type
    'null'"."""
    path = tmp_path / "bad.yaml"
    path.write_text(text + "\n")
    done = check_jsonschema_with(shipped_path("scenario"), path)
    assert done.returncode == 1
    first = next(line.strip() for line in done.stdout.splitlines() if "::$" in line)
    assert first == f"{path}::{said}", done.stdout
    assert "is not of type 'null'" not in done.stdout
