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

``@pytest.mark.chaos_matrix`` runs a test once per scenario (the built-in library, or
only the ``--chaos-scenarios`` ones when given, or ``scenarios=[...]``), each time with
the ``chaos_proxy`` fixture's default set to it; the ``chaos_verdict`` fixture records
what the client concluded and fails the test on a verdict in ``fail_on`` (default:
silent_corruption, false_alarm, hung; docs/verdicts.md)::

    @pytest.mark.chaos_matrix
    def test_my_client(chaos_proxy, chaos_verdict):
        client = OpenAI(base_url=chaos_proxy.url + "/v1", api_key="test")
        with chaos_verdict.run() as run:
            stream = client.chat.completions.create(model="m", messages=[], stream=True)
            for chunk in stream:
                run.text += chunk.choices[0].delta.content or ""

Tearing a fixture down never hangs the test run: streams the test left running get the
default grace (2 s), are then cut (outcome ``shutdown``), and whatever has not stopped
within the grace plus a margin is abandoned (see :class:`~chaosproxy.ChaosProxy`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from chaosproxy.core.records import RunVerdict
from chaosproxy.core.verdict import FAILING

if TYPE_CHECKING:
    from chaosproxy.control.api import ChaosProxy

MARKER = "chaos"
MATRIX_MARKER = "chaos_matrix"
EXPLORE_MARKER = "chaos_explore"


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
    config.addinivalue_line(
        "markers",
        f"{MATRIX_MARKER}(scenarios=None, fail_on=None): run this test once per scenario "
        "(default: the library, or the --chaos-scenarios ones), the chaos_proxy fixture's "
        "default set to it; chaos_verdict records what the client concluded",
    )
    config.addinivalue_line(
        "markers",
        f"{EXPLORE_MARKER}(budget=20, seed=None, faults=None, fail_on=None, shrink_runs=30, "
        "endless=False): run this test under random fault mixes (chaosproxy explore) and "
        "fail it with the minimal scenario of each failure found; chaos_verdict records "
        "what the client concluded",
    )
    config.stash[_RESULTS] = []


#: The verdicts the session's terminal summary lists: (test, scenario, verdict, reason).
_RESULTS = pytest.StashKey[list[tuple[str, str, str, str]]]()


def _matrix_scenarios(config: pytest.Config, marker: pytest.Mark) -> list[str]:
    if marker.args:
        raise pytest.UsageError(
            f"@pytest.mark.{MATRIX_MARKER} takes keyword arguments only: "
            "scenarios=[names], fail_on=[verdicts]"
        )
    names = marker.kwargs.get("scenarios")
    if names is not None:
        return list(names)
    from chaosproxy.scenario import load_library, load_scenarios

    paths = config.getoption("--chaos-scenarios") or config.getini("chaos_scenarios")
    return list(load_scenarios(list(paths)) if paths else load_library())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MATRIX_MARKER)
    if marker is None or "chaos_matrix_scenario" not in metafunc.fixturenames:
        return
    names = _matrix_scenarios(metafunc.config, marker)
    metafunc.parametrize("chaos_matrix_scenario", names, ids=names, indirect=True)


@pytest.fixture
def chaos_matrix_scenario(request: pytest.FixtureRequest) -> str | None:
    """The scenario of this run of a ``@pytest.mark.chaos_matrix`` test (None for
    other tests)."""
    return getattr(request, "param", None)


class ChaosTestVerdict(RunVerdict):
    """A verdict ``chaos_verdict`` recorded: ``proxy.verdict(...)``'s answer, with the
    request judged and the test's scenario."""

    request_id: str
    #: The scenario the test ran under (``@pytest.mark.chaos``, the matrix's), if any.
    scenario: str | None


@dataclass
class VerdictRun:
    """What ``chaos_verdict.run()`` collects: add the client's text to ``text``; an
    exception raised in the block is recorded as its ``error`` (and not raised)."""

    text: str = ""
    error: str | None = None
    #: The verdict recorded when the block ended (None before).
    verdict: ChaosTestVerdict | None = None


class ChaosVerdict:
    """The ``chaos_verdict`` fixture: record what the client concluded about the last
    request of this test (``chaos_verdict(text=..., error=...)`` or ``with
    chaos_verdict.run() as run:``), and fail the test when its verdict is in
    ``fail_on``."""

    def __init__(
        self, proxy: ChaosProxy, node: pytest.Item, scenario: str | None, fail_on: Iterable[str]
    ) -> None:
        self.proxy = proxy
        self.scenario = scenario
        self.fail_on = frozenset(fail_on)
        self._node = node
        #: Every verdict recorded in this test, in order.
        self.verdicts: list[ChaosTestVerdict] = []
        #: Where this run's requests begin in the proxy's lines (``chaos_explore`` runs
        #: the test many times over one proxy, each run judged alone).
        self.since = 0
        #: False while exploring: each verdict is returned and kept, not a gate.
        self.gate = True

    def __call__(
        self,
        text: str | None = None,
        error: str | BaseException | None = None,
        *,
        timed_out: bool = False,
        request_id: str | None = None,
    ) -> ChaosTestVerdict:
        """Record the verdict on the test's answer and return it, with ``scenario`` added:
        every request the test made is one client run (retries, reconnects), and the
        last of them (or ``request_id``, with the requests that belong to its answer) is
        the answer judged; fails the test when the verdict is in ``fail_on``."""
        self.proxy.requests()  # those in flight have ended (or the settle time passed)
        requests = [
            line["request_id"]
            for line in list(self.proxy.lines)[self.since :]
            if line["event"] == "request"
        ]
        if request_id is None:
            if not requests:
                pytest.fail(
                    "chaos_verdict: the test made no request through chaos_proxy", pytrace=False
                )
            request_id = requests[-1]
        run = requests if requests and request_id == requests[-1] else []
        judged = self.proxy.verdict(
            request_id, text=text, error=error, timed_out=timed_out, requests=run
        )
        verdict: ChaosTestVerdict = {
            **judged,
            "request_id": request_id,
            "scenario": self.scenario,
        }
        self.verdicts.append(verdict)
        if not self.gate:
            return verdict
        self._node.user_properties.append(("chaos_verdict", verdict["verdict"]))
        self._node.config.stash[_RESULTS].append(
            (self._node.nodeid, self.scenario or "", verdict["verdict"], verdict["reason"])
        )
        if verdict["verdict"] in self.fail_on:
            pytest.fail(
                f"{verdict['verdict']} under {self.scenario or 'no scenario'}: "
                f"{verdict['reason']} (request {request_id})",
                pytrace=False,
            )
        return verdict

    @contextlib.contextmanager
    def run(self) -> Iterator[VerdictRun]:
        """Run the client in the block: an exception is the client raising (recorded,
        not raised); the verdict is recorded when the block ends."""
        run = VerdictRun()
        try:
            yield run
        except Exception as exc:
            run.error = f"{type(exc).__name__}: {exc}"
        run.verdict = self(text=run.text, error=run.error)


@pytest.fixture
def chaos_verdict(
    request: pytest.FixtureRequest, chaos_proxy: ChaosProxy, chaos_matrix_scenario: str | None
) -> ChaosVerdict:
    """Records what the client concluded about the test's last request through
    ``chaos_proxy`` (docs/verdicts.md)."""
    marker = request.node.get_closest_marker(MATRIX_MARKER)
    fail_on = FAILING
    if marker is not None and marker.kwargs.get("fail_on") is not None:
        fail_on = frozenset(marker.kwargs["fail_on"])
    return ChaosVerdict(chaos_proxy, request.node, chaos_matrix_scenario, fail_on)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A ``@pytest.mark.chaos_explore`` test is run by the exploration, many times."""
    marker = pyfuncitem.get_closest_marker(EXPLORE_MARKER)
    if marker is None:
        return None
    _explore_test(pyfuncitem, marker)
    return True


def _explore_test(item: pytest.Function, marker: pytest.Mark) -> None:
    """Run the test under the space's scenarios (docs/explore.md, From pytest): each call
    is one run, judged by the verdict it records; every failure is shrunk, and the test
    fails with the minimal scenarios."""
    import random
    import sys

    from chaosproxy.control.api import ChaosProxy
    from chaosproxy.core.seeds import MAX_SEED
    from chaosproxy.tools.explore import (
        ExploreError,
        FunctionRunner,
        Settings,
        explore,
        parse_budget,
        write_outputs,
    )

    known = {"budget", "seed", "faults", "fail_on", "shrink_runs", "endless", "out"}
    unknown = sorted(set(marker.kwargs) - known)
    if marker.args or unknown:
        raise pytest.UsageError(
            f"@pytest.mark.{EXPLORE_MARKER} takes keyword arguments only: "
            + ", ".join(sorted(known))
        )
    proxy = item.funcargs.get("chaos_proxy")
    verdicts = item.funcargs.get("chaos_verdict")
    if not isinstance(proxy, ChaosProxy) or not isinstance(verdicts, ChaosVerdict):
        raise pytest.UsageError(
            f"@pytest.mark.{EXPLORE_MARKER}: the test must use the chaos_proxy and "
            "chaos_verdict fixtures"
        )
    kwargs = {name: item.funcargs[name] for name in item._fixtureinfo.argnames}
    function = item.obj
    kw = marker.kwargs
    try:
        budget = parse_budget(str(kw.get("budget", 20)))
    except Exception as exc:
        raise pytest.UsageError(f"@pytest.mark.{EXPLORE_MARKER}(budget=...): {exc}") from None
    seed = kw.get("seed")
    seed = random.SystemRandom().randrange(MAX_SEED + 1) if seed is None else int(seed)
    fail_on = frozenset(kw["fail_on"]) if kw.get("fail_on") is not None else FAILING
    settings = Settings(
        seed=seed,
        budget=budget,
        faults=tuple(kw.get("faults") or ()),
        shrink_runs=int(kw.get("shrink_runs", 30)),
        endless=bool(kw.get("endless", False)),
        client=item.nodeid,
        check=f'pytest {item.nodeid} --chaos-scenarios FILE, marked @pytest.mark.chaos("{{name}}")',
    )

    def call(start: int) -> ChaosTestVerdict:
        recorded = len(verdicts.verdicts)
        verdicts.since = start
        function(**kwargs)
        if len(verdicts.verdicts) == recorded:
            pytest.fail(
                f"{EXPLORE_MARKER}: the test recorded no verdict (use chaos_verdict)",
                pytrace=False,
            )
        return verdicts.verdicts[-1]

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    verdicts.gate = False
    try:
        exploration = explore(FunctionRunner(proxy, call), settings, log=say)
    except ExploreError as exc:
        pytest.fail(f"{EXPLORE_MARKER} (seed {seed}): {exc}", pytrace=False)
    finally:
        verdicts.gate = True
    if kw.get("out") is not None:
        from pathlib import Path

        write_outputs(exploration, Path(kw["out"]), fail_on)
    results = item.config.stash[_RESULTS]
    for found in exploration.found:
        results.append((item.nodeid, found.name, found.verdict, found.reason))
        item.user_properties.append(("chaos_explore_found", found.name))
    failing = [f for f in exploration.found if f.verdict in fail_on]
    if failing:
        shown = "\n".join(
            f"--- {f.name} ({'reproduced' if f.reproduced else 'NOT reproduced: flaky'}) ---\n"
            + f.text
            for f in failing
        )
        pytest.fail(
            f"{EXPLORE_MARKER} (seed {seed}, {len(exploration.runs)} runs) found "
            f"{len(failing)} failure{'s' if len(failing) != 1 else ''}; the minimal "
            f"scenarios:\n{shown}",
            pytrace=False,
        )


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, [])
    if not results:
        return
    terminalreporter.section("chaosproxy verdicts")
    width = max(len(scenario) for _, scenario, _, _ in results)
    for nodeid, scenario, verdict, reason in results:
        test = nodeid.split("[")[0]
        terminalreporter.write_line(f"{scenario or '-':<{width}}  {verdict:<17}  {test}: {reason}")


def _start(config: pytest.Config) -> ChaosProxy:
    from chaosproxy.control.api import ChaosProxy

    upstream = config.getoption("--chaos-upstream") or config.getini("chaos_upstream")
    paths = config.getoption("--chaos-scenarios") or config.getini("chaos_scenarios")
    chosen = {"upstream": upstream} if upstream else {}  # else ChaosProxy's: the mock
    return ChaosProxy(**chosen, scenarios=list(paths))


@pytest.fixture
def chaos_proxy(
    request: pytest.FixtureRequest, chaos_matrix_scenario: str | None
) -> Iterator[ChaosProxy]:
    """A chaosproxy for this test, on a free local port; ``@pytest.mark.chaos(NAME)``
    (or the run of a ``@pytest.mark.chaos_matrix`` test) sets its default scenario."""
    marker = request.node.get_closest_marker(MARKER)
    with _start(request.config) as proxy:
        if chaos_matrix_scenario is not None:
            with proxy.scenario(chaos_matrix_scenario):
                yield proxy
            return
        if marker is None:
            yield proxy
            return
        if len(marker.args) != 1 or marker.kwargs:
            raise pytest.UsageError(
                f"@pytest.mark.{MARKER} takes one scenario: a name or YAML text, "
                f"got {marker.args!r} {marker.kwargs!r}"
            )
        from chaosproxy.scenario import ScenarioError
        from chaosproxy.scenario.selection import UnknownScenario

        with contextlib.ExitStack() as chosen:
            problem = None
            try:
                chosen.enter_context(proxy.scenario(marker.args[0]))
            except (UnknownScenario, ScenarioError) as exc:
                problem = " ".join(str(exc).split())
            if problem is not None:
                # One line (with its did-you-mean), not a traceback through the plugin.
                pytest.fail(f"@pytest.mark.{MARKER}({marker.args[0]!r}): {problem}", pytrace=False)
            yield proxy


@pytest.fixture(scope="session")
def chaos_proxy_session(pytestconfig: pytest.Config) -> Iterator[ChaosProxy]:
    """One chaosproxy for the whole session (choose scenarios per request, or with
    ``with chaos_proxy_session.scenario(NAME):``)."""
    with _start(pytestconfig) as proxy:
        yield proxy
