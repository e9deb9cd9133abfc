"""The suite's own layout (docs/architecture.md, "tests/"; docs/testing.md).

- A test module imports no other test module and no conftest.py: what two test modules
  share lives in tests/support/ (helpers) or tests/clients/ (client programs the tests
  run as processes, which a test may also call in process). Under pytest's old
  prepend import mode a test module imported from another was imported twice (pytest
  imported it by its basename, the other module as ``tests.room.test_x``), and its
  tests were one edit away from running twice; the suite now runs in importlib mode
  (``pyproject.toml``: each test module is ``tests.room.test_x``, so two rooms may
  each have their ``test_history.py``), and a test module still shares nothing.
- Every Python file of tests/ is a test module (``test_*.py``), a conftest.py (fixtures
  and hooks), or lives in tests/support/ or tests/clients/.
- Every module of chaosproxy/ with logic has its test file,
  ``tests/<room>/test_<module>.py``; the modules that are still tested only elsewhere
  are listed in :data:`UNTESTED_BY_NAME`, with the files that test them, a list that
  only shrinks.

Parsed with ast, never imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.repo import REPO

TESTS = REPO / "tests"
PACKAGE = REPO / "chaosproxy"
#: The packages a module of tests/ may import from tests.
SHARED = ("tests.support", "tests.clients")

TEMPORARY_IMPORTS: dict[str, set[str]] = {}
TEMPORARY_FILES: set[str] = set()


def suite_files() -> Iterator[Path]:
    for path in sorted(TESTS.rglob("*.py")):
        if "node_modules" not in path.parts:
            yield path


def imported(source: str) -> set[str]:
    """The modules ``source`` imports, anywhere in it (a function's lazy import too):
    ``from a.b import c`` counts as ``a.b.c`` when ``c`` is a module of the suite
    (``from tests.core import test_x``), else as ``a.b``; and the modules its
    ``pytest_plugins`` names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                found.add(dotted if _is_suite_module(dotted) else node.module)
        elif (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            found.update(
                e.value
                for e in node.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    return found


def _is_suite_module(dotted: str) -> bool:
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()


def _basenames() -> set[str]:
    """The names a test module or conftest.py was importable by under pytest's prepend
    import mode (its directory on sys.path): ``test_x``, ``conftest``; an import by
    such a name is refused still (it would find nothing in importlib mode, or another
    room's module of the same name)."""
    return {p.stem for p in suite_files() if p.stem.startswith("test_") or p.stem == "conftest"}


def forbidden(module: str, basenames: set[str]) -> bool:
    """Whether a module of the suite may not import ``module``: one of tests' own but
    not under :data:`SHARED`, or a test module or conftest.py by its basename."""
    if module == "tests" or module.startswith("tests."):
        return not any(module == s or module.startswith(s + ".") for s in SHARED)
    return module.split(".")[0] in basenames


def wrong_imports() -> dict[str, set[str]]:
    basenames = _basenames()
    found: dict[str, set[str]] = {}
    for path in suite_files():
        bad = {m for m in imported(path.read_text(encoding="utf-8")) if forbidden(m, basenames)}
        if bad:
            found[path.relative_to(REPO).as_posix()] = bad
    return found


def test_no_module_of_the_suite_imports_a_test_module_or_conftest() -> None:
    assert wrong_imports() == TEMPORARY_IMPORTS


def test_every_python_file_of_the_suite_is_a_test_a_conftest_or_shared() -> None:
    misplaced = {
        path.relative_to(REPO).as_posix()
        for path in suite_files()
        if not (path.name.startswith("test_") or path.name == "conftest.py")
        and path.relative_to(TESTS).parts[0] not in ("support", "clients")
    }
    assert misplaced == TEMPORARY_FILES


def test_the_shared_modules_are_no_test_modules() -> None:
    """A ``test_*.py`` in tests/support/ or tests/clients/ would be collected, and its
    helpers imported twice."""
    assert [
        p.relative_to(REPO).as_posix()
        for p in suite_files()
        if p.relative_to(TESTS).parts[0] in ("support", "clients") and p.name.startswith("test_")
    ] == []


# ------------------------------------------------------------------- the checker


def test_the_checker_finds_each_way_of_importing_a_test_module() -> None:
    source = (
        "from tests.control.test_admin import call\n"
        "import tests.e2e.test_proxy_e2e\n"
        "from tests.core import test_integrity\n"
        "from tests.conftest import REPO\n"
        "from tests import conftest\n"
        "def lazy():\n"
        "    from test_admin import call\n"
        "import conftest\n"
        "pytest_plugins = ['tests.scripted_upstream']\n"
    )
    basenames = _basenames()
    assert {m for m in imported(source) if forbidden(m, basenames)} == {
        "tests.control.test_admin",
        "tests.e2e.test_proxy_e2e",
        "tests.core.test_integrity",
        "tests.conftest",
        "tests.scripted_upstream",
        "test_admin",
        "conftest",
    }


def test_the_checker_lets_shared_modules_and_the_rest_be_imported() -> None:
    source = (
        "from tests.support.cli import run_cli\n"
        "from tests.support import spawned\n"
        "from tests.clients import chat_client\n"
        "import tests.clients.zygote\n"
        "from chaosproxy.core.session import Session\n"
        "import pytest\n"
        "from . import sibling\n"
        "pytest_plugins = ['pytester', 'tests.support.reaper']\n"
    )
    assert {m for m in imported(source) if forbidden(m, _basenames())} == set()


# ------------------------------------------------------- a test file for each module


#: The modules of chaosproxy/ with logic that have no test file of their own yet (issue
#: 36 found 113 of 152), each with (up to three of) the test files that import it, under
#: tests/ (none: only through the modules that call it). Only shrinks: a new module comes
#: with its test file, and an entry whose module got one (or went) fails until it is
#: deleted.
UNTESTED_BY_NAME: dict[str, tuple[str, ...]] = {
    "chaosproxy/core/body.py": ("core/test_session_parts.py",),
    # the WebSocket faults' shared hooks, tested through each of them
    "chaosproxy/core/faults/_websocket.py": (
        "core/faults/test_fragment.py",
        "core/faults/test_pong.py",
        "core/faults/test_ws_close.py",
    ),
    "chaosproxy/core/head.py": ("core/test_session_parts.py",),
    "chaosproxy/core/lifecycle.py": ("core/test_session_parts.py",),
    "chaosproxy/core/summary.py": ("core/test_session_parts.py",),
    "chaosproxy/mock/openai_realtime.py": (
        "core/providers/test_openai_realtime.py",
        "e2e/test_realtime_ws.py",
    ),
    "chaosproxy/server/exchange.py": (),  # imported by no test
}


def has_logic(source: str) -> bool:
    """Whether a module defines a function, or a class with a method, at its top:
    not only constants, type aliases, records and re-exports."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return True
        if isinstance(node, ast.ClassDef) and any(
            isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body
        ):
            return True
    return False


def own_test_file(module: Path) -> Path:
    """Where the tests of a module of chaosproxy/ live: chaosproxy/ROOM/NAME.py in
    tests/ROOM/test_NAME.py (chaosproxy/core/faults/drop.py in
    tests/core/faults/test_drop.py), a package's __init__.py in its parent's
    test_PACKAGE.py, a leading underscore dropped."""
    relative = module.relative_to(PACKAGE)
    if relative.name == "__init__.py":
        *parents, name = relative.parent.parts or ("chaosproxy",)
        return TESTS.joinpath(*parents, f"test_{name}.py")
    return TESTS.joinpath(*relative.parent.parts, f"test_{relative.stem.lstrip('_')}.py")


def modules_without_a_test_file() -> set[str]:
    return {
        path.relative_to(REPO).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "__main__.py"
        and has_logic(path.read_text(encoding="utf-8"))
        and not own_test_file(path).is_file()
    }


def test_every_module_with_logic_has_its_test_file() -> None:
    missing = modules_without_a_test_file()
    assert {
        "new modules without tests/ROOM/test_NAME.py": sorted(missing - set(UNTESTED_BY_NAME)),
        "listed, but with a test file now (or gone): delete the entry": sorted(
            set(UNTESTED_BY_NAME) - missing
        ),
    } == {
        "new modules without tests/ROOM/test_NAME.py": [],
        "listed, but with a test file now (or gone): delete the entry": [],
    }


def test_the_checker_tells_logic_from_declarations() -> None:
    assert has_logic("def f() -> None: ...\n")
    assert has_logic("class C:\n    def m(self) -> None: ...\n")
    assert not has_logic(
        "from x import y\nLIMIT = 3\nclass Line(TypedDict):\n    seq: int\n"
        "@dataclass\nclass Point:\n    x: int = 0\n"
    )


def test_the_checker_maps_a_module_to_its_test_file() -> None:
    assert {
        name: own_test_file(PACKAGE / name).relative_to(TESTS).as_posix()
        for name in (
            "core/session.py",
            "core/faults/drop.py",
            "core/providers/__init__.py",
            "scenario/__init__.py",
            "_build.py",
            "__init__.py",
        )
    } == {
        "core/session.py": "core/test_session.py",
        "core/faults/drop.py": "core/faults/test_drop.py",
        "core/providers/__init__.py": "core/test_providers.py",
        "scenario/__init__.py": "test_scenario.py",
        "_build.py": "test_build.py",
        "__init__.py": "test_chaosproxy.py",
    }
