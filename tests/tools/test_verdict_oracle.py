"""Verdicts that tell the truth, checked against an oracle (tests/support/verdict_oracle.py):
for every client of the project's tests, every verdict ``chaosproxy matrix`` gives
equals what the rules give from what that client printed, its exit status and its
clean answer, and from the bytes the proxy logged as sent, re-parsed apart from the
proxy's own accounting.

- the reconnecting clients (npm ``eventsource`` and Chromium's ``EventSource``, each
  naive, de-duplicating by id, and lenient) over the six resume scenarios;
- a client with a bug (it raises on the fifth event of any stream) and a careful
  client that stops at the first ``[DONE]`` over the whole library;
- the same verdict on every one of ten runs of the scenarios whose verdict used to
  depend on which side closed first.

The Python and Node SDK clients are checked the same way in tests/tools/test_matrix_library.py.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from chaosproxy.control.api import ChaosProxy
from chaosproxy.scenario import load_library, parse_scenario
from chaosproxy.tools.matrix import ONE_CLIENT, Matrix, run_matrix, run_one
from tests.clients.chromium_eventsource import SHARED as CHROMIUM_SHARED
from tests.support.browser import require_chromium, shared_chromium
from tests.support.clean_runs import FAST, clean_text, scenario_clean
from tests.support.forks import ForkServer
from tests.support.repo import REPO
from tests.support.verdict_oracle import expected

#: Every test runs a client process per scenario, some the whole library, some ten times.
pytestmark = pytest.mark.slow

RESUME = [
    "resume-after-mid-utf8-cut",
    "replay-last-after-id-cut",
    "restart-after-cut-before-terminal",
    "new-stream-after-reset",
    "history-expired",
    "unsupported-after-cut",
]
#: A client: a shell command, or the arguments of a Python one (``python ARGS...``), run
#: forked from tests/clients/zygote.py's server (the ``python_clients`` fixture).
Client = str | tuple[str, ...]
NODE_ES = f"node {REPO / 'tests' / 'node' / 'eventsource-matrix.mjs'}"
CHROMIUM_ES = ("-m", "tests.clients.chromium_eventsource")
RAISING = ("-m", "tests.clients.raising_client")
CAREFUL = (str(REPO / "examples" / "clients" / "httpx_sse_client.py"),)


def judged(
    client: Client,
    scenarios: Sequence[str],
    tmp_path: Path,
    python_clients: ForkServer,
    *,
    runs: int = 1,
    clean_from: Client | None = None,
) -> list[tuple[str, str, str]]:
    """Run the matrix ``runs`` times; (scenario, the matrix's verdict, the oracle's) of
    every run. The clean answer is what ``clean_from`` (default: the client itself)
    prints with no scenario."""

    def shell(client: Client) -> str:
        return client if isinstance(client, str) else python_clients.command(*client)

    command = shell(client)
    clean = clean_text(shell(clean_from or client))
    out: list[tuple[str, str, str]] = []
    for n in range(runs):
        record = tmp_path / f"record-{n}"
        record.mkdir()
        matrix: Matrix
        matrix, lines = run_matrix(
            f"{python_clients.command('-m', 'tests.clients.record', record)} {command}",
            scenarios=scenarios,
            timeout=30,
            jobs=2,
            settings={**FAST, "log_content": True},
        )
        for run in matrix.results:
            printed: dict[str, Any] = json.loads((record / f"{run.scenario}.json").read_text())[-1]
            oracle = expected(
                run.requests,
                lines,
                exit_code=run.exit_code,
                printed=printed["stdout"] if run.exit_code is not None else None,
                clean=scenario_clean(run.scenario, clean),
            )
            out.append((run.scenario, run.verdict, oracle))
    return out


def disagreements(results: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [r for r in results if r[1] != r[2]]


@pytest.mark.node
@pytest.mark.parametrize("mode", ["naive", "dedup", "lenient"])
def test_npm_eventsource_over_the_resume_scenarios(
    mode: str, tmp_path: Path, python_clients: ForkServer
) -> None:
    results = judged(f"{NODE_ES} {mode}", RESUME, tmp_path, python_clients)
    assert disagreements(results) == []
    verdicts = {scenario: verdict for scenario, verdict, _ in results}
    # What the rules mean for each way of reading a reconnect (a fixed expectation
    # beside the oracle: the three readings must differ where the servers do).
    assert verdicts["resume-after-mid-utf8-cut"] == "tolerated"
    assert verdicts["new-stream-after-reset"] == "silent_corruption"  # joins generations
    if mode == "dedup":
        assert verdicts["replay-last-after-id-cut"] == "tolerated"
        assert verdicts["restart-after-cut-before-terminal"] == "tolerated"
    else:
        assert verdicts["replay-last-after-id-cut"] == "silent_corruption"
        assert verdicts["restart-after-cut-before-terminal"] == "silent_corruption"
    after_204 = "silent_corruption" if mode == "lenient" else "detected"
    assert verdicts["history-expired"] == verdicts["unsupported-after-cut"] == after_204


@pytest.fixture(scope="module")
def chromium() -> Iterator[str]:
    """One Chromium for the module's browser runs, each page in a context of its own."""
    require_chromium()
    with shared_chromium(disable_web_security=True) as devtools:
        yield devtools


@pytest.mark.browser
@pytest.mark.parametrize("mode", ["naive", "dedup", "lenient"])
def test_chromium_eventsource_over_the_resume_scenarios(
    mode: str,
    tmp_path: Path,
    python_clients: ForkServer,
    chromium: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CHROMIUM_SHARED, chromium)
    results = judged((*CHROMIUM_ES, mode), RESUME, tmp_path, python_clients)
    assert disagreements(results) == []
    verdicts = {scenario: verdict for scenario, verdict, _ in results}
    assert verdicts["resume-after-mid-utf8-cut"] == "tolerated"
    dedup = "tolerated" if mode == "dedup" else "silent_corruption"
    assert verdicts["restart-after-cut-before-terminal"] == dedup
    after_204 = "silent_corruption" if mode == "lenient" else "detected"
    assert verdicts["unsupported-after-cut"] == after_204


def test_a_client_that_raises_on_a_clean_stream_fails_the_gate(
    tmp_path: Path, python_clients: ForkServer
) -> None:
    # (Its clean answer: the careful client's, which sends the same request.)
    results = judged(RAISING, list(load_library()), tmp_path, python_clients, clean_from=CAREFUL)
    assert disagreements(results) == []
    verdicts = {scenario: verdict for scenario, verdict, _ in results}
    # Clean up to its fifth event, whatever the chunking or timing: a false alarm.
    for scenario in ("one-event-per-read", "hostile-boundaries", "stall-mid-stream"):
        assert verdicts[scenario] == "false_alarm", scenario
    # The same answer in other valid events (content faults keep a stream sound), but
    # not running snapshots, which the provider's delta events do not mean.
    for scenario in ("emoji-split-in-grapheme", "empty-deltas", "two-tool-calls-interleaved"):
        assert verdicts[scenario] == "false_alarm", scenario
    assert verdicts["cumulative-snapshots"] == "detected"


# The careful client (CAREFUL: it stops at the first terminal event) over the whole
# library: tests/tools/test_matrix_library.py's ``httpx-sse`` case runs the same command over
# the same library, and checks every verdict against this oracle and against
# docs/verdicts.md's table (`delta-after-done` and `terminal-event-twice`: tolerated).


RACY = ["one-event-per-read", "hostile-boundaries", "stall-mid-stream", "terminal-event-twice"]


@pytest.mark.parametrize(
    ("client", "scenarios"),
    [
        (RAISING, RACY),
        (CAREFUL, ["delta-after-done", "terminal-event-twice", "hang-after-last-event"]),
        pytest.param(
            f"{NODE_ES} naive", ["wrong-content-type", "one-event-per-read"], marks=pytest.mark.node
        ),
    ],
    ids=["raising", "careful", "eventsource"],
)
def test_the_same_client_gets_the_same_verdict_every_time(
    client: Client, scenarios: list[str], tmp_path: Path, python_clients: ForkServer
) -> None:
    clean_from = CAREFUL if client == RAISING else None
    results = judged(client, scenarios, tmp_path, python_clients, runs=10, clean_from=clean_from)
    assert disagreements(results) == []
    for scenario in scenarios:
        assert len({v for s, v, _ in results if s == scenario}) == 1, scenario


#: A cut one event after the one the raising client gives up on (its fifth).
RESET_AFTER_SIXTH = """
name: reset-after-sixth-event
faults: [{cut: {after: 6, how: reset}}]
"""


def test_a_client_that_gives_up_one_event_before_a_cut_never_flips(
    python_clients: ForkServer,
) -> None:
    """200 real runs, two at a time, of a client that gives up on the fifth event of a
    clean stream (reporting the text it had), against a reset after the sixth: every
    one ``false_alarm``, whichever side of the race the cut landed. Half the runs the
    client raises at once (its disconnect mostly reaches the proxy before the sixth
    event: ``client_gone``), half it takes 60 ms to raise, three of the mock's
    intervals (the proxy has written the sixth event and reset the connection first:
    ``cut``, the order that said ``detected`` once in 190 runs at load)."""
    runs = 200
    scenario = parse_scenario(RESET_AFTER_SIXTH, "<test>")
    seen: list[tuple[str, str, str | None]] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def job(linger: str) -> None:
        command = python_clients.command(*RAISING, linger)
        try:
            with (
                ChaosProxy(**ONE_CLIENT, mock_interval=0.02) as proxy,
                proxy.scenario(RESET_AFTER_SIXTH),  # (loaded: each run makes it the default)
            ):
                for _ in range(runs // 2):
                    run = run_one(proxy, scenario, command, timeout=30)
                    (end,) = [
                        line
                        for line in proxy.lines
                        if line.get("request_id") == run.request_id
                        and line["event"] == "response_end"
                    ]
                    with lock:
                        seen.append((run.verdict, end["outcome"], run.error))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=job, args=(linger,)) for linger in ("0", "0.06")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(seen) == runs
    assert [v for v in seen if v[0] != "false_alarm"] == []
    assert {error for _, _, error in seen} == {"ClientBug: a bug on event 5"}
    # Both sides of the race were met (each of them at least once in a hundred tries).
    outcomes = Counter(outcome for _, outcome, _ in seen)
    assert set(outcomes) == {"client_gone", "cut"}, outcomes
