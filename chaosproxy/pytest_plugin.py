"""The ``chaos_proxy`` fixture, registered with pytest by chaosproxy's entry point.

::

    def test_my_client_survives_a_cut(chaos_proxy):
        client = OpenAI(base_url=chaos_proxy.url + "/v1", api_key="test")
        ...  # headers={"X-Chaos-Scenario": "cut-before-terminal-reset"}

The proxy runs in front of ``--chaos-upstream`` (default: the built-in mock) with the
scenarios of ``--chaos-scenarios`` (default: ``./scenarios`` when it exists), one proxy
per test, in a background thread, so it serves sync and async tests alike.

Tearing the fixture down never hangs the test run: streams the test left running get
the default grace (2 s), are then cut (outcome ``shutdown``), and whatever has not
stopped within the grace plus a margin is abandoned (see :class:`~chaosproxy.ChaosProxy`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from chaosproxy.api import ChaosProxy


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaosproxy")
    group.addoption(
        "--chaos-upstream",
        default="mock",
        help="upstream URL for the chaos_proxy fixture (default: the built-in mock)",
    )
    group.addoption(
        "--chaos-scenarios",
        action="append",
        default=None,
        help="scenario file or directory for the chaos_proxy fixture (repeatable)",
    )


@pytest.fixture
def chaos_proxy(request: pytest.FixtureRequest) -> Iterator[ChaosProxy]:
    """A chaosproxy in front of the configured upstream, on a free local port."""
    from chaosproxy.api import ChaosProxy

    config = request.config
    paths = config.getoption("--chaos-scenarios") or (
        ["scenarios"] if Path("scenarios").is_dir() else []
    )
    with ChaosProxy(upstream=config.getoption("--chaos-upstream"), scenarios=paths) as proxy:
        yield proxy
