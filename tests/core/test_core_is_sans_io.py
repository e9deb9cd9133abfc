"""chaosproxy/core stays sans-IO: no event loop, network, logging or clock imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "chaosproxy" / "core"
FORBIDDEN = frozenset(
    {
        "asyncio",
        "aiohttp",
        "structlog",
        "uvloop",
        "time",
        "datetime",
        "socket",
        "selectors",
        "threading",
    }
)


def forbidden_imports(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: module`` for every import of a FORBIDDEN top-level module.

    Covers ``import x.y``, ``from x.y import z`` (absolute only: ``from . import time``
    is a sibling module) and ``importlib.import_module("x")`` / ``__import__("x")``
    with a literal name, wherever they appear (also under ``if TYPE_CHECKING``).
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if called in {"import_module", "__import__"} and isinstance(arg, ast.Constant):
                names = [str(arg.value)]
        found += [
            f"{filename}:{getattr(node, 'lineno', '?')}: {name}"
            for name in names
            if name.split(".", 1)[0] in FORBIDDEN
        ]
    return found


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_core_modules_are_found() -> None:
    names = {p.relative_to(CORE).as_posix() for p in core_modules()}
    assert {"frames.py", "pipeline.py", "framing/__init__.py"} <= names


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.relative_to(CORE).as_posix())
def test_core_module_is_sans_io(path: Path) -> None:
    assert forbidden_imports(path.read_text(encoding="utf-8"), str(path)) == []


@pytest.mark.parametrize(
    "source",
    [
        "import asyncio",
        "import os, time",
        "import asyncio.subprocess as sp",
        "from datetime import datetime",
        "from aiohttp.web import Response",
        "def f():\n    import structlog",
        "if TYPE_CHECKING:\n    from threading import Lock",
        "import importlib\nimportlib.import_module('socket')",
        "__import__('selectors')",
        "from uvloop import install",
    ],
)
def test_checker_flags_violations(source: str) -> None:
    assert len(forbidden_imports(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "import os\nimport random\nimport re",
        "from . import time",
        "from .time import now",
        "import timeit",
        "from chaosproxy.core.actions import Sleep",
        "x = 'import asyncio'",
    ],
)
def test_checker_allows_clean_code(source: str) -> None:
    assert forbidden_imports(source) == []
