"""Scenario files: loading, validation with located errors (docs/scenarios.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, get_args

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from chaosproxy.core import faults as fault_pkg
from chaosproxy.core.faults.base import (
    Duration,
    Fault,
    FaultConfig,
    SelectorConfig,
    format_duration,
    parse_scenario_duration,
)
from chaosproxy.core.providers import PROVIDER_NAMES
from chaosproxy.scenario import (
    MAX_FAULTS,
    MAX_FILE_BYTES,
    MatchRule,
    Problem,
    Scenario,
    ScenarioError,
    load_scenario_file,
    load_scenarios,
    parse_scenario,
    validate_paths,
)
from tests.support.scenario_cases import ONE_PROBLEM


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_scenario_file(path)
    assert str(info.value) == "\n".join(str(p) for p in info.value.problems)
    return [str(p) for p in info.value.problems]


def problems_in(text: str, source: str = "s.yaml") -> list[str]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, source, default_name="s")
    return [str(p) for p in info.value.problems]


# --------------------------------------------------------------------------- valid files


def test_the_design_example_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "example.yaml",
        """\
name: duplicate-third-delta      # default: the file's stem
description: A replaying gateway sends the third text delta twice.
seed: 42
provider: openai-chat
format: sse
match: {method: post, path: "/v1/chat/*", headers: {X-Tenant: "team-*"}}
requests: [1, 3]
faults:
  - duplicate: {kind: delta, nth: 3}
  - rechunk: {size: 7}
""",
    )
    s = load_scenario_file(path)
    registry = fault_pkg.registry()
    assert s.name == "duplicate-third-delta"
    assert s.description == "A replaying gateway sends the third text delta twice."
    assert s.seed == 42
    assert (s.provider, s.format) == ("openai-chat", "sse")
    assert s.match == MatchRule(method="POST", path="/v1/chat/*", headers={"x-tenant": "team-*"})
    assert s.requests == frozenset({1, 3})
    assert s.faults == (
        ("duplicate", registry["duplicate"].Config.model_validate({"kind": "delta", "nth": 3})),
        ("rechunk", registry["rechunk"].Config.model_validate({"size": 7})),
    )
    assert s.source == str(path)
    assert s.needs_framing  # duplicate is an event fault


def test_defaults_and_name_from_the_file_stem(tmp_path: Path) -> None:
    s = load_scenario_file(write(tmp_path, "first-fail.yml", "faults:\n  - rechunk: {size: 1}\n"))
    assert s == Scenario(
        name="first-fail",
        faults=(("rechunk", fault_pkg.registry()["rechunk"].Config.model_validate({"size": 1})),),
        source=str(tmp_path / "first-fail.yml"),
    )
    assert (s.description, s.seed, s.provider, s.format) == ("", None, "auto", "auto")
    assert s.match is None and s.requests is None
    assert not s.needs_framing


def test_faults_without_parameters_in_every_spelling() -> None:
    s = parse_scenario("faults:\n  - bom\n  - bom: {}\n  - bom:\n  - hang: null\n", "x", "x")
    bom = fault_pkg.registry()["bom"].Config()
    hang = fault_pkg.registry()["hang"].Config()
    assert s.faults == (("bom", bom), ("bom", bom), ("bom", bom), ("hang", hang))


def test_an_empty_fault_list_is_a_passthrough_scenario() -> None:
    s = parse_scenario("faults: []", "x", "x")
    assert s.faults == () and not s.needs_framing


@pytest.mark.parametrize(
    ("written", "seconds"),
    [('"250ms"', 0.25), ('"2s"', 2.0), ("500", 0.5), ("0", 0.0), ('"1.5s"', 1.5)],
)
def test_durations(written: str, seconds: float) -> None:
    s = parse_scenario(f"faults:\n  - delay: {{first_byte: {written}}}\n", "x", "x")
    config = s.faults[0][1]
    assert isinstance(config, fault_pkg.registry()["delay"].Config)
    assert config.model_dump()["first_byte"] == seconds


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("800", "800ms"),
        ('"0.8s"', "800ms"),
        ('"2s"', "2s"),
        ('"2000ms"', "2s"),
        ("0.5", "0.5ms"),
        ('"1m"', "60s"),
        ("0", "0ms"),
        ('"1.25s"', "1250ms"),
    ],
)
def test_durations_are_shown_with_a_unit_and_read_back_the_same(written: str, shown: str) -> None:
    s = parse_scenario(f"faults:\n  - delay: {{first_byte: {written}}}\n", "x", "x")
    view = s.as_dict()
    assert view["faults"][0]["delay"]["first_byte"] == shown
    again = parse_scenario(orjson.dumps(view), "body", read_only=True)
    assert again.faults == s.faults


@given(st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False))
def test_every_duration_is_shown_as_text_that_reads_back_exactly(seconds: float) -> None:
    assert parse_scenario_duration(format_duration(seconds)) == seconds


def _is_duration(annotation: object) -> bool:
    """Whether a field's annotation is (or holds) the Duration type."""
    if annotation == Duration:
        return True
    metadata = getattr(annotation, "__metadata__", ())
    if any(getattr(m, "func", None) is parse_scenario_duration for m in metadata):
        return True
    return any(_is_duration(arg) for arg in get_args(annotation))


def test_every_duration_field_of_every_fault_is_shown_with_a_unit() -> None:
    found = []
    for name, cls in fault_pkg.registry().items():
        for field, info in cls.Config.model_fields.items():
            # (A required field's Annotated metadata is moved to info.metadata.)
            held = any(getattr(m, "func", None) is parse_scenario_duration for m in info.metadata)
            if held or _is_duration(info.annotation):
                found.append(f"{name}.{field}")
                values: dict[str, Any] = {field: 1.5}
                config = cls.Config.model_construct(**values)
                assert config.model_dump(mode="json")[field] == "1500ms", (name, field)
    assert sorted(found) == [
        "coalesce.window",
        "delay.first_byte",
        "delay.headers",
        "delay.jitter",
        "delay.per_event",
        "pong.delay",
        "request_delay.duration",
        "stall.duration",
    ]


def test_json_text_is_accepted() -> None:
    doc = {
        "name": "from-json",
        "seed": 7,
        "match": {"path": "/v1/messages"},
        "faults": [{"drop": {"kind": "delta", "nth": [2, 4]}}, "bom"],
    }
    s = parse_scenario(json.dumps(doc).encode(), "<admin>")
    assert (s.name, s.seed, s.source) == ("from-json", 7, "<admin>")
    assert s.match == MatchRule(path="/v1/messages")
    assert [name for name, _ in s.faults] == ["drop", "bom"]


def test_json_indented_with_tabs() -> None:
    doc = {"name": "tabs", "faults": [{"rechunk": {"size": 0}}], "description": "a\tb"}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(json.dumps(doc, indent="\t"), "<admin>")
    assert str(info.value) == "<admin>:6: faults[0].rechunk.size: must be >= 1"
    doc["faults"] = []
    assert parse_scenario(json.dumps(doc, indent="\t"), "<admin>").description == "a\tb"


def test_small_aliases_are_allowed() -> None:
    text = "faults:\n  - drop: &third {kind: delta, nth: 3}\n  - duplicate: *third\n"
    s = parse_scenario(text, "x", "x")
    registry = fault_pkg.registry()
    assert s.faults == (
        ("drop", registry["drop"].Config.model_validate({"kind": "delta", "nth": 3})),
        ("duplicate", registry["duplicate"].Config.model_validate({"kind": "delta", "nth": 3})),
    )


def test_merge_keys_work_as_in_safe_load() -> None:
    text = "faults:\n  - duplicate:\n      <<: {kind: delta, nth: 3}\n      nth: 4\n"
    s = parse_scenario(text, "x", "x")
    assert s.faults[0][1] == fault_pkg.registry()["duplicate"].Config.model_validate(
        {"kind": "delta", "nth": 4}
    )


def test_as_dict_is_json() -> None:
    s = parse_scenario(
        "seed: 3\nrequests: [2, 1]\nmatch: {method: get}\nfaults: [{rechunk: {size: 2}}]",
        "x",
        "x",
    )
    view = orjson.loads(orjson.dumps(s.as_dict()))
    assert view["requests"] == [1, 2]
    assert view["match"] == {"method": "GET", "path": None, "headers": {}}
    assert view["faults"] == [{"rechunk": s.faults[0][1].model_dump(mode="json")}]


# --------------------------------------------------------------------------- problems


def test_every_problem_of_a_file_at_once_with_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "bad.yaml",
        """\
name: bad
seed: -1
provider: openai
format: rawr
colour: red
match: {method: POST, pathh: /x}
requests: [0, 2]
faults:
  - dorp: {}
  - rechunk: {size: 0}
  - drop: {nth: [0, a], match: "("}
  - status:
      code: 600
      headerz: {}
  - duplicate: {kind: delta, tims: 2}
""",
    )
    f = str(path)
    assert problems_of(path) == [
        f"{f}:2: seed: must be >= 0",
        f"{f}:3: provider: must be one of: auto, {', '.join(PROVIDER_NAMES)}",
        f"{f}:4: format: must be one of: auto, sse, ndjson, eventstream, raw",
        f"{f}:5: colour: unknown key (allowed: name, description, seed, provider, format,"
        " match, rate, requests, resume, faults, envelope, mock)",
        f"{f}:6: match.pathh: unknown key, did you mean 'path'? (allowed: method, path, headers)",
        f"{f}:7: requests[0]: must be >= 1",
        f"{f}:9: faults[0]: unknown fault 'dorp' (did you mean 'drop'?)",
        f"{f}:10: faults[1].rechunk.size: must be >= 1",
        f"{f}:11: faults[2].drop.match: not a valid regular expression:"
        " missing ), unterminated subpattern at position 0",
        f"{f}:11: faults[2].drop.nth[0]: must be >= 1",
        f"{f}:11: faults[2].drop.nth[1]: must be an integer",
        f"{f}:13: faults[3].status.code: must be <= 599",
        f"{f}:14: faults[3].status.headerz: unknown key, did you mean 'headers'?"
        " (allowed: code, headers, body)",
        f"{f}:15: faults[4].duplicate.tims: unknown key, did you mean 'times'?"
        f" (allowed: {', '.join(fault_pkg.registry()['duplicate'].Config.model_fields)})",
    ]


@pytest.mark.parametrize(("text", "expected"), ONE_PROBLEM)
def test_one_problem(text: str, expected: list[str]) -> None:
    assert problems_in(text) == expected


def test_the_line_of_a_nested_value() -> None:
    text = "faults:\n  - bom\n  - rechunk:\n      sizes:\n        - 3\n        - 0\n"
    assert problems_in(text) == ["s.yaml:6: faults[1].rechunk.sizes[1]: must be >= 1"]


def test_unknown_fault_without_a_close_name_lists_the_known_ones() -> None:
    known = ", ".join(sorted(fault_pkg.registry()))
    assert problems_in("faults:\n  - zzzzzz: {}") == [
        f"s.yaml:2: faults[0]: unknown fault 'zzzzzz'; known faults: {known}"
    ]


def test_event_faults_on_a_raw_stream() -> None:
    text = "format: raw\nfaults:\n  - rechunk: {size: 3}\n  - drop: {kind: delta}\n  - bom\n"
    assert problems_in(text) == [
        "s.yaml:4: faults[1].drop: needs sse or ndjson framing; it cannot apply with format: raw",
        "s.yaml:5: faults[2].bom: needs sse or ndjson framing; it cannot apply with format: raw",
    ]
    # The same faults are fine once the body is framed.
    assert parse_scenario(text.replace("raw", "sse"), "s", "s").needs_framing


def test_parameters_at_the_wrong_indentation() -> None:
    text = "faults:\n  - drop:\n    kind: delta\n"
    assert problems_in(text) == [
        "s.yaml:2: faults[0]: one fault per item, found keys: drop, kind"
        " (indent the parameters under 'drop'?)"
    ]


def test_duplicate_keys_are_reported() -> None:
    text = "seed: 1\nfaults:\n  - rechunk: {size: 2, size: 3}\nseed: 2\n"
    assert problems_in(text) == [
        "s.yaml:3: duplicate key 'size' (first at line 3)",
        "s.yaml:4: duplicate key 'seed' (first at line 1)",
    ]


def test_bad_names() -> None:
    assert problems_in("name: 'has space'\nfaults: []") == [
        "s.yaml:1: name: must be 1-128 letters, digits, '.', '_' or '-',"
        " starting with a letter or digit"
    ]
    with pytest.raises(ScenarioError) as info:
        parse_scenario("faults: []", "<admin>")
    assert str(info.value) == "<admin>:1: name: required"


def test_source_is_not_a_key_a_document_can_set() -> None:
    allowed = (
        "(allowed: name, description, seed, provider, format, match, rate, requests, resume,"
        " faults, envelope, mock)"
    )
    # Refused like any unknown key, and listed in the document's order among them.
    assert problems_in("{bogus: 1, source: x, seed: -1, faults: []}") == [
        "s.yaml:1: seed: must be >= 0",
        f"s.yaml:1: bogus: unknown key {allowed}",
        f"s.yaml:1: source: unknown key {allowed}",
    ]
    assert problems_in("source: x\nbogus: 1\nfaults: []\n") == [
        f"s.yaml:1: source: unknown key {allowed}",
        f"s.yaml:2: bogus: unknown key {allowed}",
    ]


def test_null_name_and_description_mean_not_given() -> None:
    s = parse_scenario("name:\ndescription:\nfaults: []\n", "x", "from-stem")
    assert (s.name, s.description) == ("from-stem", "")
    assert problems_in("name: null\nseed: -1\nfaults: []\n") == ["s.yaml:2: seed: must be >= 0"]


def test_a_scenario_is_an_immutable_value() -> None:
    s = parse_scenario("name: a\nmatch: {method: get}\nfaults: [bom]\n", "x")
    with pytest.raises(ValidationError):
        s.name = "b"
    assert s == parse_scenario("name: a\nmatch: {method: GET}\nfaults: [bom]\n", "x")
    assert s != parse_scenario("name: a\nmatch: {method: GET}\nfaults: [bom]\n", "y")
    rule = MatchRule(method="get", headers={"X-A": "b"})
    assert rule == MatchRule(method="GET", headers={"x-a": "b"})


def test_a_file_stem_that_is_no_name(tmp_path: Path) -> None:
    path = write(tmp_path, "my scenario.yaml", "\n\nfaults: []\n")
    assert problems_of(path) == [
        f"{path}:3: name: 'my scenario' (from the file name) must be 1-128 letters, digits,"
        " '.', '_' or '-', starting with a letter or digit; set name:"
    ]
    write(tmp_path, "my scenario.yaml", "name: mine\nfaults: []\n")
    assert load_scenario_file(path).name == "mine"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "name: a\nfaults: [drop\n",
            "s.yaml:3: not valid YAML: while parsing a flow sequence,"
            " expected ',' or ']', but got '<stream end>'",
        ),
        ("name: a\nseed: 1: 2\n", "s.yaml:2: not valid YAML: mapping values are not allowed here"),
        (
            "a: 1\n---\nb: 2\n",
            "s.yaml:2: not valid YAML: expected a single document in the"
            " stream, but found another document",
        ),
        (
            "faults: []\nx: !!python/object:os.system {}\n",
            "s.yaml:2: not valid YAML: could not"
            " determine a constructor for the tag 'tag:yaml.org,2002:python/object:os.system'",
        ),
        ("faults: []\nx: \x01\n", "s.yaml:2: not valid YAML: special characters are not allowed"),
        ("- drop\n- bom\n", "s.yaml:1: expected a mapping at the top level, found a list"),
        (
            "\n# nothing\njust text\n",
            "s.yaml:3: expected a mapping at the top level, found a single value",
        ),
        ("", "s.yaml:1: empty document: expected a mapping of scenario keys"),
        ("[" * 100, "s.yaml:1: not valid YAML: nested more than 64 levels deep"),
        (
            "x:\n" + "".join(" " * i + "- \n" for i in range(70)),
            "s.yaml:65: not valid YAML: nested more than 64 levels deep",
        ),
    ],
)
def test_not_a_scenario_document(text: str, expected: str) -> None:
    assert problems_in(text) == [expected]


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"faults: []\ndescription: caf\xe9\n")
    assert problems_of(path) == [f"{path}:2: not UTF-8 text"]


def test_files_over_one_mebibyte_are_refused(tmp_path: Path) -> None:
    body = b"faults: []\n"
    padding = b"#" * (MAX_FILE_BYTES - len(body) - 1) + b"\n"
    exact = tmp_path / "exact.yaml"
    exact.write_bytes(body + padding)
    assert exact.stat().st_size == MAX_FILE_BYTES
    assert load_scenario_file(exact).name == "exact"
    big = tmp_path / "big.yaml"
    big.write_bytes(body + b"#" + padding)
    assert problems_of(big) == [f"{big}:0: file is larger than 1 MiB"]
    assert problems_in((body + b"#" + padding).decode()) == ["s.yaml:0: file is larger than 1 MiB"]


def test_alias_bombs_are_refused(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, cur in zip("abcde", "bcdef", strict=True):
        lines.append(f"{cur}: &{cur} [{', '.join([f'*{prev}'] * 10)}]")
    path = write(tmp_path, "lol.yaml", "\n".join(lines) + "\nfaults: []\n")
    assert len(path.read_bytes()) < 500
    assert problems_of(path) == [
        f"{path}:0: aliases expand to more than 100000 nodes (an alias bomb?)"
    ]


def test_recursive_aliases_are_refused() -> None:
    assert problems_in("faults: []\nx: &x [1, *x]\n") == [
        "s.yaml:2: recursive alias: a node contains itself"
    ]


# --------------------------------------------------------------------------- many files


def test_a_directory_is_a_library(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    write(lib, "b.yaml", "faults: []\n")
    write(lib, "a.yml", "match: {path: /x}\nfaults: []\n")
    write(lib, "c.yaml", "name: zzz\nfaults: []\n")
    write(lib, "notes.txt", "not a scenario")
    write(lib, "d.json", "{}")
    (lib / "sub").mkdir()
    write(lib / "sub", "e.yaml", "faults: []\n")
    extra = write(tmp_path, "extra.yaml", "faults: []\n")
    loaded = load_scenarios([lib, extra, lib / "b.yaml"])  # b.yaml twice: loaded once
    assert list(loaded) == ["a", "b", "zzz", "extra"]
    assert loaded["a"].source == str(lib / "a.yml")
    assert validate_paths([lib, extra]) == []


def test_problems_of_all_files_are_collected(tmp_path: Path) -> None:
    write(tmp_path, "1.yaml", "name: same\nfaults: []\n")
    write(tmp_path, "2.yaml", "faults:\n  - rechunk: {size: 0}\n")
    write(tmp_path, "3.yaml", "# the same name again\nname: same\nfaults: []\n")
    write(tmp_path, "4.yaml", "seed: -2\nfaults: []\n")
    missing = tmp_path / "missing.yaml"
    d = str(tmp_path)
    expected = [
        Problem(f"{d}/2.yaml", 2, "faults[0].rechunk.size: must be >= 1"),
        Problem(f"{d}/3.yaml", 2, f"name: duplicate scenario name 'same' (also in {d}/1.yaml:1)"),
        Problem(f"{d}/4.yaml", 1, "seed: must be >= 0"),
        Problem(str(missing), 0, "no such file or directory"),
    ]
    assert validate_paths([tmp_path, missing]) == expected
    with pytest.raises(ScenarioError) as info:
        load_scenarios([tmp_path, missing])
    assert info.value.problems == expected
    assert str(info.value).splitlines() == [str(p) for p in expected]


def test_a_duplicate_name_without_a_name_key(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    first = write(tmp_path, "same.yaml", "faults: []\n")
    second = write(tmp_path / "x", "same.yaml", "\nfaults: []\n")
    assert validate_paths([first, second]) == [
        Problem(str(second), 2, f"name: duplicate scenario name 'same' (also in {first}:1)")
    ]


def test_unreadable_paths(tmp_path: Path) -> None:
    assert validate_paths([tmp_path / "nope"]) == [
        Problem(str(tmp_path / "nope"), 0, "no such file or directory")
    ]
    with pytest.raises(ScenarioError) as info:
        load_scenario_file(tmp_path)
    assert str(info.value) == f"{tmp_path}:0: not a regular file"


def test_a_file_this_user_may_not_read_names_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mount owned by another user (the image runs as uid 10001): the problem says
    whose read was refused. (Root reads anything: the refusal is made here.)"""
    path = write(tmp_path, "a.yaml", "faults: []\n")

    def refused(self: Path, *args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", refused)
    who = f"uid {os.getuid()}, gid {os.getgid()}"
    assert validate_paths([path]) == [
        Problem(str(path), 0, f"cannot read: permission denied (this process runs as {who})")
    ]


def test_problem_and_error_strings() -> None:
    p = Problem("a.yaml", 3, "seed: must be >= 0")
    assert str(p) == "a.yaml:3: seed: must be >= 0"
    err = ScenarioError([p, Problem("b.yaml", 0, "no such file or directory")])
    assert str(err) == "a.yaml:3: seed: must be >= 0\nb.yaml:0: no such file or directory"


# --------------------------------------------------------------------------- match rules


def test_match_rule() -> None:
    rule = MatchRule(method="POST", path="/v1/*", headers={"x-tenant": "team-?"})
    hdrs = {"X-Tenant": "team-a", "Accept": "text/event-stream"}
    assert rule.matches("post", "/v1/chat/completions", hdrs)
    assert rule.matches("POST", "/v1/chat/completions?stream=true", hdrs)
    assert not rule.matches("GET", "/v1/chat/completions", hdrs)
    assert not rule.matches("POST", "/api/chat", hdrs)
    assert not rule.matches("POST", "/v1/x", {"x-tenant": "team-ab"})
    assert not rule.matches("POST", "/v1/x", {})
    assert MatchRule().matches("DELETE", "/anything", {})
    assert not MatchRule(path="/V1/*").matches("GET", "/v1/x", {})  # paths are case-sensitive


def test_match_rule_with_a_multidict() -> None:
    from multidict import CIMultiDict

    rule = MatchRule(headers={"x-tenant": "b"})
    assert rule.matches("GET", "/", CIMultiDict([("X-Tenant", "a"), ("x-tenant", "b")]))
    assert not rule.matches("GET", "/", CIMultiDict([("X-Tenant", "a")]))


# --------------------------------------------------------------------------- fake faults


class _Inner(BaseModel):
    model_config = {"extra": "forbid", "frozen": True}
    event: str | None = None
    data: str | None = None


class _NestedConfig(FaultConfig):
    event: _Inner | None = None
    wait: Duration = 0.0
    count: Annotated[int, Field(ge=1, le=10)] = 1


class _NestedFault(Fault):
    name: ClassVar[str] = "nested"
    Config: ClassVar[type[FaultConfig]] = _NestedConfig
    stage: ClassVar = "transport"


class _EventFault(Fault):
    name: ClassVar[str] = "evt"
    Config: ClassVar[type[FaultConfig]] = SelectorConfig
    stage: ClassVar = "event"


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes: dict[str, type[Fault]] = {"nested": _NestedFault, "evt": _EventFault}
    monkeypatch.setattr(fault_pkg, "registry", lambda: fakes)


@pytest.mark.usefixtures("fake_registry")
def test_the_registry_is_read_at_call_time() -> None:
    text = "faults:\n  - nested:\n      event: {evnt: x}\n      count: 11\n  - evt: {kind: delta}\n"
    assert problems_in(text) == [
        "s.yaml:3: faults[0].nested.event.evnt: unknown key, did you mean 'event'?"
        " (allowed: event, data)",
        "s.yaml:4: faults[0].nested.count: must be <= 10",
    ]
    s = parse_scenario("faults: [{nested: {wait: 2s}}, evt]", "x", "x")
    assert s.faults == (
        ("nested", _NestedConfig.model_validate({"wait": "2s"})),
        ("evt", SelectorConfig()),
    )
    assert s.needs_framing
    assert problems_in("faults: [drop]") == [
        "s.yaml:1: faults[0]: unknown fault 'drop'; known faults: evt, nested"
    ]


# --------------------------------------------------------------------------- JSON escapes


def test_escaped_surrogate_pairs_are_joined_as_json_means_them() -> None:
    """Python's json.dumps writes 👍 as \\ud83d\\udc4d; YAML would decode each half alone."""
    doc = {"name": "thumbs", "description": "ok 👍 then 𝄞 — é", "faults": ["bom"]}
    for ascii_only in (True, False):
        text = json.dumps(doc, ensure_ascii=ascii_only)
        assert ("\\ud83d\\udc4d" in text) is ascii_only
        s = parse_scenario(text, "<admin>")
        assert s.description == "ok 👍 then 𝄞 — é"
        assert orjson.loads(orjson.dumps(s.as_dict()))["description"] == doc["description"]


def test_a_surrogate_pair_in_a_key_and_in_a_yaml_double_quoted_string() -> None:
    text = (
        "name: x\n"
        'faults: [{inject: {after: 1, event: {data: {"\\ud83d\\udc4d": "\\ud83d\\ude00"}}}}]\n'
    )
    ((_, config),) = parse_scenario(text, "s.yaml").faults
    assert config.model_dump()["event"]["data"] == {"👍": "😀"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"name": "x", "faults": ["bom"], "description": "ab\\ud83d c"}',
            "s.yaml:1: description: a lone UTF-16 surrogate \\ud83d (character 3 of the text "
            "starting at column 49): not text; escape a whole pair, or send the character "
            "as UTF-8",
        ),
        (
            'name: x\nfaults: [bom]\ndescription: "\\ud83d\\udc4d \\udc4d"\n',
            "s.yaml:3: description: a lone UTF-16 surrogate \\udc4d (character 3 of the text "
            "starting at column 14): not text; escape a whole pair, or send the character "
            "as UTF-8",
        ),
        (
            'name: x\nfaults:\n  - inject: {after: 1, event: {data: {"\\udc4d": 1}}}\n',
            "s.yaml:3: faults[0].inject.event.data: a lone UTF-16 surrogate \\udc4d (character "
            "1 of the text starting at column 39): not text; escape a whole pair, or send "
            "the character as UTF-8",
        ),
    ],
)
def test_a_lone_surrogate_is_a_located_problem(text: str, expected: str) -> None:
    assert problems_in(text) == [expected]


# --------------------------------------------------------------------------- size limits


def test_more_faults_than_the_limit_are_refused_at_the_list(tmp_path: Path) -> None:
    faults = "".join(f"  - drop: {{nth: {i + 1}}}\n" for i in range(10_000))
    path = write(tmp_path, "many.yaml", f"name: many\ndescription: d\nfaults:\n{faults}")
    assert problems_of(path) == [
        f"{path}:3: faults: at most {MAX_FAULTS} faults per scenario (this one has 10000): "
        "every fault is asked about every event"
    ]
    # As JSON, on one line, from the admin API's source.
    body = json.dumps({"name": "many", "faults": ["bom"] * (MAX_FAULTS + 1)})
    with pytest.raises(ScenarioError) as info:
        parse_scenario(body, "body")
    assert [str(p) for p in info.value.problems] == [
        f"body:1: faults: at most {MAX_FAULTS} faults per scenario (this one has "
        f"{MAX_FAULTS + 1}): every fault is asked about every event"
    ]


def test_as_many_faults_as_the_limit_load() -> None:
    body = json.dumps({"name": "full", "faults": ["bom"] * MAX_FAULTS})
    assert len(parse_scenario(body, "body").faults) == MAX_FAULTS
