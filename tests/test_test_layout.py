"""The suite's own layout (docs/architecture.md, "tests/"; docs/testing.md).

- A test module imports no other test module and no conftest.py: what two test modules
  share lives in tests/support/ (helpers) or tests/clients/ (client programs the tests
  run as processes, which a test may also call in process). A test module imported
  from another was imported twice (pytest imports it by its basename, the other
  module as ``tests.room.test_x``), and its tests were one edit away from running
  twice.
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

#: TEMPORARY. tests/core/test_faults_*.py are engineer FU's (issue 36: they move to
#: tests/core/faults/test_<fault>.py, importing from tests/support/); until that merge
#: they import what they imported before, through three re-exports at the old paths and
#: conftest.py. Delete these entries, the re-exports and conftest.py's block with them:
#: a stale entry fails.
TEMPORARY_IMPORTS: dict[str, set[str]] = {
    "tests/core/test_faults_content.py": {"tests.conftest", "tests.content_streams"},
    "tests/core/test_faults_event.py": {"tests.conftest"},
    "tests/core/test_faults_pipeline.py": {"tests.conftest", "tests.framing_helpers"},
    "tests/core/test_faults_splice.py": {
        "tests.conftest",
        "tests.core.test_faults_event",
        "tests.scripted_upstream",
    },
}
TEMPORARY_FILES = {
    "tests/content_streams.py",
    "tests/framing_helpers.py",
    "tests/scripted_upstream.py",
}


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
    """The names a test module or conftest.py is importable by under pytest's prepend
    import mode (its directory on sys.path): ``test_x``, ``conftest``."""
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
