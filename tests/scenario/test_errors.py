"""Scenario problems and pydantic's errors phrased (chaosproxy/scenario/errors.py): each
error kind as its short message, an unknown key with the key meant and those allowed
(read through the model: aliases, unions, lists, excluded fields), the branches of a
union merged into one message or the branch that got furthest, and a problem as
``FILE:LINE: message``. The loader's whole path, from YAML, is test_loader.py's."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import ErrorDetails

from chaosproxy.scenario.errors import Located, Problem, ScenarioError, dotted, phrase_errors


class Stall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    duration: float = 0.0
    forever: bool = False


class Rechunk(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    size: int = 1
    from_: int = Field(0, alias="from")
    hidden: int = Field(0, exclude=True)


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stall: Stall | None = None
    rechunk: Annotated[Rechunk | None, Field(default=None)]


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    faults: list[Fault] = []
    mode: Literal["a", "b"] = "a"


def err(kind: str, msg: str = "", **ctx: Any) -> ErrorDetails:
    details: ErrorDetails = {"type": kind, "loc": (), "msg": msg, "input": None}
    if ctx:
        details["ctx"] = ctx
    return details


def phrased(*located: Located) -> list[tuple[int, str, str]]:
    return [(line, dotted(path), m) for line, path, m in phrase_errors(list(located), Doc)]


def at(error: ErrorDetails, *path: str | int, line: int = 3) -> Located:
    return Located(error, line, path, None)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (err("int_parsing"), "must be an integer"),
        (err("bool_type"), "must be true or false"),
        (err("dict_type"), "must be a mapping"),
        (err("literal_error", expected="'a' or 'b'"), "must be one of: a, b"),
        (err("enum", expected="'x', 'y' or 'z'"), "must be one of: x, y, z"),
        (err("greater_than_equal", ge=1), "must be >= 1"),
        (err("greater_than", gt=0.0), "must be > 0"),
        (err("less_than_equal", le=2.5), "must be <= 2.5"),
        (err("less_than", lt=10), "must be < 10"),
        (err("too_short", min_length=1), "must not be empty"),
        (err("too_short", min_length=3), "must have at least 3 items"),
        (err("too_long", max_length=4), "must have at most 4 items"),
        (err("string_too_short", min_length=1), "must not be empty"),
        (err("string_too_short", min_length=2), "must be at least 2 characters"),
        (err("string_too_long", max_length=64), "must be at most 64 characters"),
        (err("string_pattern_mismatch", pattern="^[a-z]+$"), "must match ^[a-z]+$"),
        (err("multiple_of", multiple_of=2.0), "must be a multiple of 2"),
        (
            err("value_error", "Value error, nth and every exclude each other"),
            "nth and every exclude each other",
        ),
        (err("assertion_error", "Assertion failed, odd"), "odd"),
        (err("something_new", "Something new happened"), "Something new happened"),
    ],
)
def test_each_error_kind_is_a_short_message(error: ErrorDetails, message: str) -> None:
    assert phrased(at(error, "faults", 0, "rechunk", "size")) == [
        (3, "faults[0].rechunk.size", message)
    ]


def test_a_missing_key_is_required_and_a_missing_item_too_few() -> None:
    assert phrased(at(err("missing"), "name", line=1), at(err("missing"), "faults", 2)) == [
        (1, "name", "required"),
        (3, "faults", "too few items (expected at least 3)"),
    ]


def test_an_unknown_key_names_the_key_meant_and_those_allowed() -> None:
    assert phrased(
        at(err("extra_forbidden"), "faults", 0, "stall", "for"),
        at(err("extra_forbidden"), "faults", 1, "stall", "durration"),
        at(err("extra_forbidden"), "faults", 1, "rechunk", "zzz"),
        at(err("extra_forbidden"), "nmae"),
        at(err("extra_forbidden"), "faults", 0, "nope", "x"),
    ) == [
        (
            3,
            "faults[0].stall.for",
            "unknown key, did you mean 'duration'? (allowed: duration, forever)",
        ),
        (
            3,
            "faults[1].stall.durration",
            "unknown key, did you mean 'duration'? (allowed: duration, forever)",
        ),
        # an alias is the key a document writes; an excluded field is none
        (3, "faults[1].rechunk.zzz", "unknown key (allowed: size, from)"),
        (3, "nmae", "unknown key, did you mean 'name'? (allowed: name, faults, mode)"),
        (3, "faults[0].nope.x", "unknown key"),  # under no known model: no list
    ]


def test_the_branches_of_a_union_that_all_failed_on_the_type_are_one_message() -> None:
    assert phrased(
        Located(err("int_type"), 4, ("faults", 0, "rechunk", "size"), (4, "int")),
        Located(err("list_type"), 4, ("faults", 0, "rechunk", "size"), (4, "list[int]")),
        Located(err("tuple_type"), 4, ("faults", 0, "rechunk", "size"), (4, "tuple")),
    ) == [(4, "faults[0].rechunk.size", "must be an integer or a list")]


def test_a_branch_that_got_further_is_reported_alone() -> None:
    assert phrased(
        Located(err("int_type"), 4, ("faults", 0, "rechunk", "size"), (4, "int")),
        Located(
            err("greater_than_equal", ge=1), 5, ("faults", 0, "rechunk", "size", 0), (4, "list")
        ),
        Located(err("too_long", max_length=2), 4, ("faults", 0, "rechunk", "size"), (4, "list")),
    ) == [
        (5, "faults[0].rechunk.size[0]", "must be >= 1"),
        (4, "faults[0].rechunk.size", "must have at most 2 items"),
    ]


def test_unions_at_two_points_and_plain_errors_keep_their_order_without_repeats() -> None:
    assert phrased(
        at(err("missing"), "name", line=1),
        Located(err("int_type"), 2, ("faults", 0, "a"), (3, "int")),
        Located(err("string_type"), 2, ("faults", 0, "a"), (3, "str")),
        at(err("missing"), "name", line=1),  # the same problem twice: said once
        Located(err("bool_type"), 6, ("faults", 1, "b"), (3, "bool")),
        Located(err("none_required"), 6, ("faults", 1, "b"), (3, "none")),
    ) == [
        (1, "name", "required"),
        (2, "faults[0].a", "must be an integer or a string"),
        (6, "faults[1].b", "must be true or false or null"),
    ]


def test_a_path_is_written_as_a_scenario_author_reads_it() -> None:
    assert dotted(("faults", 1, "rechunk", "size")) == "faults[1].rechunk.size"
    assert dotted((0, "x")) == "[0].x"
    assert dotted(()) == ""


def test_a_scenario_error_is_one_located_line_per_problem() -> None:
    problems = [
        Problem("scenarios/dup.yaml", 7, "faults[1].rechunk.size: must be >= 1"),
        Problem("scenarios/dup.yaml", 0, "not a mapping"),
    ]
    error = ScenarioError(problems)
    assert str(error) == (
        "scenarios/dup.yaml:7: faults[1].rechunk.size: must be >= 1\n"
        "scenarios/dup.yaml:0: not a mapping"
    )
    assert error.args == (str(error),)
    assert error.problems == problems
    problems.clear()  # its own list
    assert len(error.problems) == 2
