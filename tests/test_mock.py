"""The built-in mock's package (chaosproxy/mock/__init__.py): each public name loaded
from its module when first named, so that importing one module of the mock does not
load aiohttp and the whole mock; the same objects as the modules'; an unknown name an
AttributeError. The mock at work is tests/mock/'s."""

from __future__ import annotations

import subprocess
import sys

import pytest

import chaosproxy.mock
from chaosproxy.mock import app, common, fixtures
from tests.support.repo import REPO


def test_a_name_is_loaded_from_its_module_when_first_named() -> None:
    code = (
        "import sys\n"
        "import chaosproxy.mock\n"
        "watched = ('aiohttp', 'chaosproxy.mock.app', 'chaosproxy.mock.common')\n"
        "print(sorted(m for m in watched if m in sys.modules))\n"
        "chaosproxy.mock.Knobs\n"
        "print(sorted(m for m in watched if m in sys.modules))\n"
        "chaosproxy.mock.create_mock_app\n"
        "print(sorted(m for m in watched if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[]",
        "['chaosproxy.mock.common']",
        "['aiohttp', 'chaosproxy.mock.app', 'chaosproxy.mock.common']",
    ]


def test_the_names_are_the_modules_own() -> None:
    assert chaosproxy.mock.create_mock_app is app.create_mock_app
    assert chaosproxy.mock.Knobs is common.Knobs
    assert chaosproxy.mock.MockFixtures is fixtures.MockFixtures
    assert chaosproxy.mock.SCENARIO_HEADER == "X-Chaos-Mock-Scenario"
    assert [n for n in chaosproxy.mock.__all__ if not hasattr(chaosproxy.mock, n)] == []


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(
        AttributeError, match=r"^module 'chaosproxy\.mock' has no attribute 'nope'$"
    ):
        chaosproxy.mock.nope  # noqa: B018
