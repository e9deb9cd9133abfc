"""The rooms of chaosproxy/ and the arrows between them (docs/architecture.md, "The
arrows"): the import graph, built from the sources with ``ast``, has no cycle between
modules nor between rooms, every import follows the table of the docs, and no module
lives outside a room.

Every import counts, wherever it is written: at module level, under ``if
TYPE_CHECKING:`` and inside a function. A ``TYPE_CHECKING`` import is a dependency all
the same (the module cannot be read, or type-checked, without the other one), and an
import inside a function is the usual way a cycle is hidden rather than removed: it
still needs the other module, only later. (The issue's own cycles were of both kinds:
``exchange`` -> ``proxy`` under ``TYPE_CHECKING``, ``cli`` <-> ``matrix`` in functions.)
A literal ``importlib.import_module("chaosproxy.x")`` counts too.

The checks are plain functions of a graph, tested on small made-up graphs first, so
that each of them is seen to fail.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "chaosproxy"
DOC = REPO / "docs" / "architecture.md"
Graph = dict[str, set[str]]


# ------------------------------------------------------------------ the graph


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


IMPORTERS = ("import_module", "__import__")


def dynamic_import(call: ast.Call) -> list[str]:
    """The module ``importlib.import_module("x")`` or ``__import__("x")`` names, when it
    is written as a literal."""
    match call:
        case ast.Call(
            func=ast.Attribute(attr=str(called)) | ast.Name(id=str(called)),
            args=[ast.Constant(value=str(target)), *_],
        ) if called in IMPORTERS:
            return [target]
    return []


def imported(tree: ast.Module, name: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The chaosproxy modules the module ``name`` imports, anywhere in ``tree``: for
    ``from a.b import c`` the module ``a.b.c`` when it is one, else ``a.b``."""
    modules = set(known)
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                for alias in node.names
            ]
        elif isinstance(node, ast.Call):
            targets = dynamic_import(node)
        for target in targets:
            if target == "chaosproxy" or target.startswith("chaosproxy."):
                # ``import a.b.c`` also imports a.b; the deepest known module is the edge.
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target != name:
                    found.add(target)
    return found


def package_graph(package: Path = PACKAGE) -> Graph:
    """chaosproxy's modules, each with the chaosproxy modules it imports."""
    paths = {module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}
    return {
        name: imported(
            ast.parse(path.read_text(encoding="utf-8"), str(path)),
            name,
            path.name == "__init__.py",
            paths,
        )
        for name, path in paths.items()
    }


# ------------------------------------------------------------------ the checks


def room_of(module: str) -> str:
    """``chaosproxy.server.proxy`` -> ``server``; the top modules are rooms of their own."""
    parts = module.split(".")
    if len(parts) == 1:
        return "chaosproxy"
    return parts[1]


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node, or a node importing
    itself (Tarjan's algorithm, iteratively), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted({*graph, *(t for ts in graph.values() for t in ts)})
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def room_graph(graph: Mapping[str, Iterable[str]]) -> Graph:
    rooms: Graph = {}
    for module, targets in graph.items():
        here = room_of(module)
        rooms.setdefault(here, set())
        rooms[here] |= {room_of(t) for t in targets if room_of(t) != here}
    return rooms


def broken_arrows(graph: Mapping[str, Iterable[str]], allowed: Mapping[str, set[str]]) -> list[str]:
    """``a -> b (room -> room)`` for every import the table does not allow."""
    return [
        f"{module} -> {target} ({room_of(module)} -> {room_of(target)})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if room_of(target) != room_of(module)
        and room_of(target) not in allowed.get(room_of(module), set())
    ]


def outside_rooms(modules: Iterable[str], rooms: Iterable[str]) -> list[str]:
    """The modules whose room the table does not know (a module flat at the top of
    chaosproxy/ is a room of its own, so it is one of them)."""
    known = set(rooms)
    return sorted(m for m in modules if room_of(m) not in known)


ROW = re.compile(r"^\|\s*`([\w.]+)`\s*\|(.*)\|\s*$")


def table(text: str) -> dict[str, set[str]]:
    """The rows of the table under "## The arrows": a room and the rooms it may import
    (backticked names; ``—`` for none)."""
    section = text.split("\n## The arrows\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            cells = match.group(2).split("|")
            rows[match.group(1)] = set(re.findall(r"`([\w.]+)`", cells[-1]))
    return rows


# ------------------------------------------------------------------ the checks, failing


def test_imports_are_read_wherever_they_are_written() -> None:
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import chaosproxy.server.net\n"
        "from chaosproxy.core import actions\n"
        "from chaosproxy.core.frames import Frame\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n"
        "    from chaosproxy.server.proxy import ProxyState\n"
        "def later():\n"
        "    from chaosproxy.cli.main import main\n"
        "    importlib.import_module('chaosproxy.tools.report')\n"
    )
    known = {
        "chaosproxy.core.actions",
        "chaosproxy.core.frames",
        "chaosproxy.server.net",
        "chaosproxy.server.proxy",
        "chaosproxy.server.sibling",
        "chaosproxy.server.pump",
        "chaosproxy.cli.main",
        "chaosproxy.tools.report",
    }
    assert imported(ast.parse(source), "chaosproxy.server.pump", False, known) == known - {
        "chaosproxy.server.pump"
    }


def test_a_cycle_is_found_however_it_is_made() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "e"}}) == [
        ["a", "b"],
        ["c", "d"],
    ]
    chain = {f"m{i}": {f"m{i + 1}"} for i in range(5000)}  # deep: no recursion limit
    assert cycles(chain) == []
    assert cycles({**chain, "m5000": {"m0"}}) == [sorted([*chain, "m5000"])]


def test_a_cycle_between_rooms_is_found_without_one_between_modules() -> None:
    graph = {
        "chaosproxy.server.a": {"chaosproxy.observe.b"},
        "chaosproxy.observe.b": set(),
        "chaosproxy.observe.c": {"chaosproxy.server.d"},
        "chaosproxy.server.d": set(),
    }
    assert cycles(graph) == []
    assert cycles(room_graph(graph)) == [["observe", "server"]]


def test_an_arrow_the_table_does_not_allow_is_reported() -> None:
    graph = {
        "chaosproxy.core.a": {"chaosproxy.core.b", "chaosproxy.server.c"},
        "chaosproxy.server.c": {"chaosproxy.core.a"},
        "chaosproxy.core.b": set(),
    }
    allowed = {"core": set(), "server": {"core"}}
    assert broken_arrows(graph, allowed) == [
        "chaosproxy.core.a -> chaosproxy.server.c (core -> server)"
    ]
    assert broken_arrows(graph, {"core": {"server"}, "server": {"core"}}) == []


def test_a_module_outside_the_rooms_is_reported() -> None:
    rooms = ["chaosproxy", "_build", "core", "server"]
    modules = [
        "chaosproxy",
        "chaosproxy._build",
        "chaosproxy.core",
        "chaosproxy.core.frames",
        "chaosproxy.server.proxy",
        "chaosproxy.proxy",  # flat at the top
        "chaosproxy.stray.module",  # a room the table does not know
    ]
    assert outside_rooms(modules, rooms) == ["chaosproxy.proxy", "chaosproxy.stray.module"]


def test_the_table_is_read_from_its_section() -> None:
    text = (
        "# x\n\n## The arrows\n\n| room | may import |\n|---|---|\n"
        "| `core` | — |\n| `server` | `core`, `observe` |\n\n## Next\n\n| `cli` | `core` |\n"
    )
    assert table(text) == {"core": set(), "server": {"core", "observe"}}


# ------------------------------------------------------------------ the package


@pytest.fixture(scope="module")
def graph() -> Graph:
    return package_graph()


@pytest.fixture(scope="module")
def allowed() -> dict[str, set[str]]:
    return table(DOC.read_text(encoding="utf-8"))


def test_the_graph_is_the_package(graph: Graph) -> None:
    assert {"chaosproxy", "chaosproxy.core.session", "chaosproxy.server.proxy"} <= set(graph)
    assert "chaosproxy.core.actions" in graph["chaosproxy.core.session"]


def test_every_room_of_the_package_is_in_the_table(
    graph: Graph, allowed: dict[str, set[str]]
) -> None:
    assert set(allowed) == {room_of(m) for m in graph}
    assert outside_rooms(graph, allowed) == []


def test_no_cycle_between_modules(graph: Graph) -> None:
    assert cycles(graph) == []


def test_no_cycle_between_rooms(graph: Graph) -> None:
    assert cycles(room_graph(graph)) == []


def test_every_import_follows_the_table(graph: Graph, allowed: dict[str, set[str]]) -> None:
    assert broken_arrows(graph, allowed) == []


def test_the_never_arrows(allowed: dict[str, set[str]]) -> None:
    """The table itself says what the architecture promises (docs/architecture.md)."""
    shell = {"server", "control", "observe", "tools", "cli", "workers"}
    assert allowed["core"] == set()
    assert allowed["upstream"] & (shell | {"scenario", "mock"}) == set()
    assert allowed["observe"] & {"server", "control", "tools", "cli", "workers"} == set()
    assert allowed["server"] & {"control", "tools", "cli", "workers"} == set()
    assert allowed["control"] & {"tools", "cli", "workers"} == set()
    assert allowed["tools"] & {"cli", "workers"} == set()
    assert not any("chaosproxy" in rooms or "__main__" in rooms for rooms in allowed.values())
