"""Which modules the wheel compiles and which way a process runs them
(chaosproxy/_build.py): the compiled list names modules of the package, none a package's
``__init__`` and none twice; a module is compiled when it was loaded from an extension
module; ``CHAOSPROXY_PURE=1`` runs every one from its source; and the file imports
nothing of the package (``setup.py`` runs it without the dependencies). The compiled
build itself is test_compiled.py's."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from chaosproxy import _build
from chaosproxy._build import COMPILED, PURE_ENV, is_compiled
from tests.support.repo import REPO


def test_the_compiled_modules_are_modules_of_the_package_each_once() -> None:
    assert len(set(COMPILED)) == len(COMPILED)
    for name in COMPILED:
        path = REPO.joinpath(*name.split("."))
        assert path.with_suffix(".py").is_file(), name  # a module, not a package
        assert name.startswith("chaosproxy.")


def test_a_module_is_compiled_when_it_was_loaded_from_an_extension_module() -> None:
    assert is_compiled("select") is True  # (CPython's own, a shared library)
    assert is_compiled("json") is False
    assert is_compiled("chaosproxy._build") is False
    assert is_compiled("sys") is False  # built in: no file


def test_pure_runs_every_module_from_its_source() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from chaosproxy._build import COMPILED, build, is_compiled\n"
            "print(build(), sum(is_compiled(m) for m in COMPILED))",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, PURE_ENV: "1"},
        timeout=120,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "pure 0\n"), result.stderr


def test_the_file_imports_nothing_of_the_package() -> None:
    source = (REPO / "chaosproxy" / "_build.py").read_text(encoding="utf-8")
    imported = {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
    }
    assert imported == {"__future__", "importlib", "importlib.machinery", "typing"}
    assert _build.__version__.count(".") == 2
