"""``check-jsonschema`` run on files (skipped, saying why, where it is not installed)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest


def need_module(module: str, package: str) -> None:
    """Skip the test, saying how to install it, where ``module`` cannot be imported."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{package} is not installed (pip install -e '.[test]' installs it)")


def check_jsonschema(schema: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    """``check-jsonschema --builtin-schema SCHEMA PATHS``, its default output."""
    return _check_jsonschema("--builtin-schema", schema, *paths)


def check_jsonschema_with(schema: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    """``check-jsonschema --schemafile SCHEMA PATHS``, its default output."""
    return _check_jsonschema("--schemafile", str(schema), *paths)


def _check_jsonschema(*args: str | Path) -> subprocess.CompletedProcess[str]:
    need_module("check_jsonschema", "check-jsonschema")
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
