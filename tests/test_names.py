"""One meaning per name: no two modules of chaosproxy define a public class, function or
type alias of the same name, unless the name is a role that several modules play the
same way (each mock provider's ``respond``). Importing a name from where it is defined
(a re-export) is not a definition, so ``from x import Name`` anywhere is fine.

Constants (ALL_CAPS) are left out: ``CONTENT_TYPE`` or ``DEFAULT_MODEL`` is each
module's own, read with its module's name."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import chaosproxy

PACKAGE = Path(chaosproxy.__file__).parent

#: Names that several modules define on purpose, each module playing the same role:
#: name → (a pattern the defining modules' dotted names match, why).
ROLES: dict[str, tuple[str, str]] = {
    **{
        name: (r"\.mock\.\w+$", "each mock provider module renders its own format")
        for name in ("respond", "serve", "error_body", "error_event", "stream_events")
    },
    "add_parser": (
        r"\.(matrix|explore_options|schema)$",
        "a subcommand module adds its own subcommand",
    ),
    "write_outputs": (r"\.(matrix|explore)$", "a subcommand module writes its own files"),
    "cmd_matrix": (r"\.(cli\.main|matrix)$", "cli's is the lazy entry to matrix's"),
    "cmd_explore": (r"\.(cli\.main|explore)$", "cli's is the lazy entry to explore's"),
    "main": (r"\.(cli\.main|healthcheck)$", "each is a program's entry point"),
}


def _is_public(name: str) -> bool:
    return not name.startswith("_") and not name.isupper()


def definitions(source: str) -> list[str]:
    """The public names a module's top level defines: classes, functions and other
    assignments (type aliases) that are not ALL_CAPS constants; imports are not."""
    found: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append(node.name)
        elif isinstance(node, ast.Assign):
            found.extend(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append(node.target.id)
    return [name for name in found if _is_public(name) and name != "__all__"]


def clashes(
    modules: Iterable[tuple[str, str]], roles: Mapping[str, tuple[str, str]]
) -> dict[str, list[str]]:
    """Names defined by more than one of ``modules`` ((dotted name, source) pairs), with
    the modules that define them, except a role's name defined only by modules that
    match its pattern."""
    where: dict[str, list[str]] = defaultdict(list)
    for module, source in modules:
        for name in dict.fromkeys(definitions(source)):
            where[name].append(module)
    found: dict[str, list[str]] = {}
    for name, defined_in in where.items():
        if len(defined_in) < 2:
            continue
        role = roles.get(name)
        if role is not None and all(re.search(role[0], m) for m in defined_in):
            continue
        found[name] = sorted(defined_in)
    return found


def package_modules() -> list[tuple[str, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out.append((".".join(parts), path.read_text(encoding="utf-8")))
    return out


def test_every_public_name_has_one_meaning() -> None:
    assert clashes(package_modules(), ROLES) == {}


def test_each_role_is_still_played_by_several_modules() -> None:
    """A role whose name only one module defines any more is a stale entry."""
    where: dict[str, list[str]] = defaultdict(list)
    for module, source in package_modules():
        for name in definitions(source):
            where[name].append(module)
    assert {name: len(where[name]) >= 2 for name in ROLES} == dict.fromkeys(ROLES, True)


def test_the_names_issue_25_found_twice_are_defined_once() -> None:
    defined: dict[str, list[str]] = defaultdict(list)
    for module, source in package_modules():
        for name in definitions(source):
            defined[name].append(module)
    assert {n: len(defined[n]) for n in ("parse_duration", "Format", "Anchor", "Outcome")} == {
        "parse_duration": 1,
        "Format": 1,
        "Anchor": 1,
        "Outcome": 1,
    }
    assert defined["Format"] == ["chaosproxy.core.frames"]
    assert defined["Anchor"] == ["chaosproxy.core.faults.anchor"]
    assert defined["Outcome"] == ["chaosproxy.core.records"]


# ---------------------------------------------------------------------- the checker


def test_the_checker_finds_a_name_defined_twice() -> None:
    a = "class Answer:\n    pass\n\ndef describe(x): ...\n"
    b = "Answer = int\n\ndef describe(y): ...\n_private = 1\n"
    assert clashes([("p.a", a), ("p.b", b)], {}) == {
        "Answer": ["p.a", "p.b"],
        "describe": ["p.a", "p.b"],
    }


def test_the_checker_allows_re_exports_constants_and_private_names() -> None:
    a = "class Answer: ...\nLIMIT = 1\n_helper = 2\n__all__ = ['Answer']\n"
    b = "from p.a import Answer\nLIMIT = 2\n_helper = 3\n__all__ = ['Answer']\n"
    assert clashes([("p.a", a), ("p.b", b)], {}) == {}


def test_the_checker_allows_a_role_only_where_its_pattern_matches() -> None:
    source = "def respond(): ...\n"
    roles = {"respond": (r"\.mock\.\w+$", "")}
    assert clashes([("p.mock.a", source), ("p.mock.b", source)], roles) == {}
    assert clashes([("p.mock.a", source), ("p.other", source)], roles) == {
        "respond": ["p.mock.a", "p.other"]
    }


def test_the_checker_reads_annotated_aliases_and_async_functions() -> None:
    a = "Format: TypeAlias = str\nasync def run(): ...\n"
    b = "class Format: ...\nrun = None\n"
    both = ["p.a", "p.b"]
    assert clashes([("p.a", a), ("p.b", b)], {}) == {"Format": both, "run": both}
