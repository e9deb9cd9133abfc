"""The ``chaos_proxy`` and ``chaos_proxy_session`` fixtures and the ``chaos`` marker,
registered with pytest by chaosproxy's entry point (docs/python-api.md, The pytest
plugin).

::

    @pytest.mark.chaos("cut-before-terminal-reset")
    def test_my_client_survives_a_cut(chaos_proxy):
        client = OpenAI(base_url=chaos_proxy.url + "/v1", api_key="test")
        ...
        assert chaos_proxy.last()["outcome"] == "cut"

The proxy runs in front of ``--chaos-upstream`` (ini ``chaos_upstream``; default: the
built-in mock) with the built-in scenario library plus ``--chaos-scenarios`` (ini
``chaos_scenarios``), in a background thread, so it serves sync and async tests alike:
one per test (``chaos_proxy``, whose default scenario a ``chaos`` marker sets) or one
for the whole session (``chaos_proxy_session``).

Tearing a fixture down never hangs the test run: streams the test left running get the
default grace (2 s), are then cut (outcome ``shutdown``), and whatever has not stopped
within the grace plus a margin is abandoned (see :class:`~chaosproxy.ChaosProxy`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from chaosproxy.api import ChaosProxy

MARKER = "chaos"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaosproxy")
    group.addoption(
        "--chaos-upstream",
        default=None,
        metavar="URL",
        help="upstream URL for the chaos_proxy fixtures (default: ini chaos_upstream, "
        "else the built-in mock)",
    )
    group.addoption(
        "--chaos-scenarios",
        action="append",
        default=None,
        metavar="PATH",
        help="scenario file or directory added to the built-in library for the "
        "chaos_proxy fixtures (repeatable; default: ini chaos_scenarios)",
    )
    parser.addini(
        "chaos_upstream",
        "upstream URL for the chaos_proxy fixtures (default: mock, the built-in mock)",
        default="mock",
    )
    parser.addini(
        "chaos_scenarios",
        "scenario files or directories added to the built-in library, one per line "
        "(relative to the ini file)",
        type="paths",
        default=[],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(scenario): the default scenario of the chaos_proxy fixture for this test "
        "(a loaded scenario's name, or a scenario as YAML text)",
    )


def _start(config: pytest.Config) -> ChaosProxy:
    from chaosproxy.api import ChaosProxy

    upstream = config.getoption("--chaos-upstream") or config.getini("chaos_upstream")
    paths = config.getoption("--chaos-scenarios") or config.getini("chaos_scenarios")
    return ChaosProxy(upstream=upstream or "mock", scenarios=list(paths))


@pytest.fixture
def chaos_proxy(request: pytest.FixtureRequest) -> Iterator[ChaosProxy]:
    """A chaosproxy for this test, on a free local port; ``@pytest.mark.chaos(NAME)``
    sets its default scenario."""
    marker = request.node.get_closest_marker(MARKER)
    with _start(request.config) as proxy:
        if marker is None:
            yield proxy
            return
        if len(marker.args) != 1 or marker.kwargs:
            raise pytest.UsageError(
                f"@pytest.mark.{MARKER} takes one scenario: a name or YAML text, "
                f"got {marker.args!r} {marker.kwargs!r}"
            )
        with proxy.scenario(marker.args[0]):
            yield proxy


@pytest.fixture(scope="session")
def chaos_proxy_session(pytestconfig: pytest.Config) -> Iterator[ChaosProxy]:
    """One chaosproxy for the whole session (choose scenarios per request, or with
    ``with chaos_proxy_session.scenario(NAME):``)."""
    with _start(pytestconfig) as proxy:
        yield proxy
