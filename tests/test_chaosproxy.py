"""The package itself (chaosproxy/__init__.py): ``import chaosproxy`` stays cheap (the
facade and the client are loaded when first named), names it does not have are an
AttributeError, ``dir()`` lists its public names, and a module that moved into a room
is still found under its old name, by ``import`` (the same module object) and by
``python -m`` (the container's health check). Each runs in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import chaosproxy
from chaosproxy.control import healthcheck
from tests.support.repo import REPO


def python(
    code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *(["-c", code] if code else []), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def test_importing_the_package_loads_neither_the_facade_nor_aiohttp() -> None:
    result = python(
        "import sys, chaosproxy\n"
        "heavy = ('aiohttp', 'chaosproxy.control.api', 'chaosproxy.control.client')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "chaosproxy.ChaosProxy\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[]",
        "['aiohttp', 'chaosproxy.control.api']",  # (the client: when it is named)
    ]


def test_the_public_names() -> None:
    from chaosproxy.control.api import ChaosProxy
    from chaosproxy.control.client import ChaosClient

    assert chaosproxy.ChaosProxy is ChaosProxy
    assert chaosproxy.ChaosClient is ChaosClient
    assert {"ChaosClient", "ChaosProxy", "__version__"} <= set(dir(chaosproxy))
    with pytest.raises(AttributeError, match=r"^module 'chaosproxy' has no attribute 'Proxy'$"):
        chaosproxy.Proxy  # noqa: B018


def test_a_moved_module_is_the_same_module_under_its_old_name() -> None:
    import chaosproxy.healthcheck as old  # type: ignore[import-not-found]

    assert old is healthcheck


def test_a_moved_module_runs_under_its_old_name() -> None:
    result = python(
        "",
        "-m",
        "chaosproxy.healthcheck",
        env={"CHAOSPROXY_ADMIN": "off", "CHAOSPROXY_LISTEN": "off"},
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        1,
        "",
        "unhealthy: CHAOSPROXY_LISTEN is off: the proxy has no address\n",
    )
