"""The scenario loader's parts alone (chaosproxy/scenario/loader.py): a YAML document
read safely, every problem located (``_Document``, which scenarios and fixtures share),
and the scenario validated from it (``_Validator``). The loader through its public
functions and the CLI is tests/scenario/test_scenario.py's."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chaosproxy.scenario.errors import Problem
from chaosproxy.scenario.loader import MAX_EXPANDED_NODES, _Document, _Validator


def composed(text: str) -> tuple[bool, list[str]]:
    """Whether ``text`` composes to a root, and its problems as ``LINE: message``."""
    doc = _Document(text, "f.yaml")
    try:
        root = doc.compose()
    finally:
        doc.loader.dispose()
    return root is not None, [f"{p.line}: {p.message}" for p in doc.problems]


def test_a_sound_document_composes_without_a_problem() -> None:
    assert composed("name: a\nfaults:\n  - drop: {nth: 2}\n") == (True, [])


def test_each_safety_check_names_its_line() -> None:
    assert composed("- a\n- b\n") == (
        False,
        ["1: expected a mapping at the top level, found a list"],
    )
    assert composed("") == (False, ["1: empty document: expected a mapping of scenario keys"])
    assert composed("a: 1\nb: 2\na: 3\n") == (True, ["3: duplicate key 'a' (first at line 1)"])
    assert composed(f"seed: {'9' * 101}\n") == (
        False,
        ["1: seed: must be an integer from 0 to 9223372036854775807 (this one has 101 digits)"],
    )
    assert composed('a:\n  b: "x\\ud800y"\n') == (
        False,
        [
            "2: a.b: a lone UTF-16 surrogate \\ud800 (character 2 of the text starting at "
            "column 6): not text; escape a whole pair, or send the character as UTF-8"
        ],
    )
    assert composed("a:\n\tb: 1\n") == (
        False,
        ["2: not valid YAML: a tab in the indentation: YAML indents with spaces only"],
    )


def test_an_alias_bomb_is_refused_before_anything_walks_it() -> None:
    rows = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    rows += [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(5)
    ]
    ok, problems = composed("\n".join(rows) + "\n")
    assert (ok, problems) == (
        False,
        [f"0: aliases expand to more than {MAX_EXPANDED_NODES} nodes (an alias bomb?)"],
    )


def test_a_surrogate_pair_is_joined_in_place() -> None:
    doc = _Document('text: "\\ud83d\\udc4d"\n', "f.yaml")
    root = doc.compose()
    assert root is not None and doc.problems == []
    assert doc.loader.construct_document(root) == {"text": "\N{THUMBS UP SIGN}"}
    doc.loader.dispose()


class Knob(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(ge=1)


def test_a_models_errors_are_located_to_their_lines() -> None:
    doc = _Document("# a knob\nsize: 0\nspeed: 3\n", "k.yaml")
    root = doc.compose()
    assert root is not None
    data = doc.loader.construct_document(root)
    doc.loader.dispose()
    try:
        Knob.model_validate(data)
    except ValidationError as exc:
        doc.report(exc.errors(), Knob, ("knob",), root, data, root_line=2)
    assert doc.problems == [
        Problem("k.yaml", 2, "knob.size: must be >= 1"),
        Problem("k.yaml", 3, "knob.speed: unknown key (allowed: size)"),
    ]


def test_the_validator_shares_its_documents_problems() -> None:
    validator = _Validator("name: x\nfaults:\n  - dorp\n", "s.yaml")
    parsed = validator.run(None)
    assert parsed.scenario is None
    assert validator.problems is validator.doc.problems
    assert parsed.problems == [
        Problem("s.yaml", 3, "faults[0]: unknown fault 'dorp' (did you mean 'drop'?)")
    ]
