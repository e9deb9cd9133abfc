"""``chaosproxy matrix``: run a client command across the scenario library and judge
each run (docs/verdicts.md).

For each scenario the proxy (in process, in front of the mock or ``--upstream``) gets
it as its default, and ``CMD`` runs in a shell with ``CHAOSPROXY_URL`` (the proxy's
root URL) and ``CHAOSPROXY_SCENARIO`` set. The command protocol: print the final text
on stdout, exit non-zero when the client raised (its stderr says why). A command that
outlives ``--timeout`` is killed, with its whole process group, and is ``hung``. The
verdict is about the last request the command made; the others (retries) are listed.

Writes ``matrix.md``, ``matrix.json``, ``junit.xml`` and ``report.html`` into ``--out``;
the exit status is 1 when any verdict is in ``--fail-on``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

import orjson

from chaosproxy.verdict import FAILING, VERDICTS

if TYPE_CHECKING:
    from chaosproxy.api import ChaosProxy

#: A command that made no request through the proxy cannot be judged on a stream: its
#: verdict is this, and it always fails the gate (the matrix itself is mis-set).
NO_REQUEST = "no_request"

#: How long, after the command ended, the proxy may take to log the end of its requests.
SETTLE = 5.0
#: The most of a command's stderr kept as its error.
ERROR_CHARS = 500

DEFAULT_TIMEOUT = 20.0


@dataclass
class Run:
    """One scenario's run of the command, and its verdict (a ``results`` item of
    ``matrix.json``)."""

    scenario: str
    verdict: str
    integrity: str | None
    reason: str
    #: The request the verdict is about: the command's last one (None: it made none).
    request_id: str | None
    #: Every request the command made, in order (the last is ``request_id``).
    requests: list[str] = field(default_factory=list)
    #: None when the command was killed (timed out).
    exit_code: int | None = None
    duration_ms: float = 0.0
    text_matches: bool | None = None
    #: What the client raised (its stderr's last line), if it did.
    error: str | None = None


@dataclass
class Matrix:
    client: str
    upstream: str
    results: list[Run]
    fail_on: frozenset[str]

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {v: 0 for v in VERDICTS}
        for run in self.results:
            counts[run.verdict] = counts.get(run.verdict, 0) + 1
        return {k: v for k, v in counts.items() if v}

    def failing(self, run: Run) -> bool:
        return run.verdict in self.fail_on or run.verdict == NO_REQUEST

    @property
    def failed(self) -> bool:
        return any(self.failing(run) for run in self.results)

    def as_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "upstream": self.upstream,
            "results": [asdict(run) for run in self.results],
            "counts": self.counts,
            "failed": self.failed,
            "fail_on": sorted(self.fail_on),
        }


# ---------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """What the command did: its exit code (None: killed on time out), its stdout, the
    last line of its stderr."""

    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: float

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None

    @property
    def text(self) -> str | None:
        """The final text: stdout, or None when the command was killed, or raised
        without printing anything."""
        if self.timed_out or (self.exit_code != 0 and not self.stdout):
            return None
        return self.stdout

    @property
    def error(self) -> str | None:
        if self.exit_code in (0, None):
            return None
        from chaosproxy.logs import redact_text

        lines = [line for line in self.stderr.splitlines() if line.strip()]
        last = lines[-1].strip() if lines else ""
        # It goes into the matrix files, which CI publishes: credentials masked.
        return redact_text(last or f"exit status {self.exit_code}")[:ERROR_CHARS]


def run_command(command: str, env: Mapping[str, str], timeout: float) -> Outcome:
    """Run ``command`` in a shell, in its own process group; on time out the whole
    group is killed (SIGKILL), so a client's children never outlive it."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        shell=True,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        code = None
    return Outcome(
        exit_code=code,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )


def _request_ids(lines: Sequence[Mapping[str, Any]], start: int) -> list[str]:
    """The ids of the requests begun in ``lines[start:]``, in the order they began."""
    return [
        line["request_id"]
        for line in lines[start:]
        if line.get("event") == "request" and isinstance(line.get("request_id"), str)
    ]


def run_scenario(
    proxy: ChaosProxy,
    scenario: str,
    command: str,
    *,
    timeout: float,
    environ: Mapping[str, str] | None = None,
) -> Run:
    """One run of ``command`` under ``scenario`` (made the proxy's default), judged."""
    env = dict(os.environ if environ is None else environ)
    env.update(CHAOSPROXY_URL=proxy.url, CHAOSPROXY_SCENARIO=scenario)
    start = len(proxy.lines)
    with proxy.scenario(scenario):
        outcome = run_command(command, env, timeout)
    proxy.requests(settle=SETTLE)  # the requests it made have ended (or SETTLE passed)
    ids = _request_ids(proxy.lines, start)
    base: dict[str, Any] = {
        "scenario": scenario,
        "exit_code": outcome.exit_code,
        "duration_ms": outcome.duration_ms,
        "error": outcome.error,
        "requests": ids,
    }
    if not ids:
        what = "timed out" if outcome.timed_out else f"exited with {outcome.exit_code}"
        detail = f": {outcome.error}" if outcome.error else ""
        return Run(
            verdict=NO_REQUEST,
            integrity=None,
            reason=f"the client made no request through the proxy; it {what}{detail}",
            request_id=None,
            **base,
        )
    last = ids[-1]
    try:
        verdict = proxy.verdict(
            last,
            text=outcome.text,
            error=outcome.error,
            timed_out=outcome.timed_out,
            timeout=SETTLE,
        )
    except KeyError:  # still in flight after SETTLE: judged on what is known
        verdict = {
            "verdict": "hung" if outcome.timed_out else NO_REQUEST,
            "integrity": None,
            "reason": f"request {last} had not ended {SETTLE:g}s after the client did",
            "text_matches": None,
        }
    return Run(
        verdict=verdict["verdict"],
        integrity=verdict["integrity"],
        reason=verdict["reason"],
        request_id=last,
        text_matches=verdict["text_matches"],
        **base,
    )


def run_matrix(
    command: str,
    *,
    upstream: str = "mock",
    scenario_paths: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT,
    fail_on: Iterable[str] = FAILING,
    settings: Mapping[str, Any] | None = None,
    progress: Callable[[Run], None] | None = None,
) -> tuple[Matrix, list[dict[str, Any]]]:
    """Run ``command`` once per scenario (the library's, or only those loaded from
    ``scenario_paths`` when given); returns the matrix and every frame-log line."""
    from chaosproxy.api import ChaosProxy
    from chaosproxy.scenario import load_library, load_scenarios

    names = list(load_scenarios(list(scenario_paths)) if scenario_paths else load_library())
    results: list[Run] = []
    with ChaosProxy(upstream=upstream, scenarios=list(scenario_paths), **(settings or {})) as proxy:
        for name in names:
            run = run_scenario(proxy, name, command, timeout=timeout)
            results.append(run)
            if progress is not None:
                progress(run)
        lines = list(proxy.lines)
    return Matrix(command, upstream, results, frozenset(fail_on)), lines


# ---------------------------------------------------------------------------- writing


def render_markdown(matrix: Matrix) -> str:
    counts = ", ".join(f"{n} {v}" for v, n in matrix.counts.items())
    out = [
        "# chaosproxy matrix",
        "",
        f"- client: `{matrix.client}`",
        f"- upstream: {matrix.upstream}",
        f"- verdicts: {counts or 'none'}",
        f"- gate (`--fail-on {','.join(sorted(matrix.fail_on))}`): "
        + ("**failed**" if matrix.failed else "passed"),
        "",
        "| scenario | verdict | integrity | text | requests | exit | ms | reason |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in matrix.results:
        verdict = f"**{run.verdict}**" if matrix.failing(run) else run.verdict
        text = {True: "same", False: "differs", None: "-"}[run.text_matches]
        exit_code = "killed" if run.exit_code is None else str(run.exit_code)
        reason = run.reason + (f" ({run.error})" if run.error else "")
        out.append(
            f"| `{run.scenario}` | {verdict} | {run.integrity or '-'} | {text} | "
            f"{', '.join(run.requests) or '-'} | {exit_code} | {run.duration_ms:.0f} | "
            f"{_cell(reason)} |"
        )
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_junit(matrix: Matrix) -> str:
    failures = sum(1 for run in matrix.results if matrix.failing(run))
    total = sum(run.duration_ms for run in matrix.results) / 1000
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f"<testsuites><testsuite name={quoteattr('chaosproxy matrix: ' + matrix.client)} "
        f'tests="{len(matrix.results)}" failures="{failures}" errors="0" '
        f'time="{total:.3f}">',
    ]
    for run in matrix.results:
        out.append(
            f'  <testcase classname="chaosproxy.matrix" name={quoteattr(run.scenario)} '
            f'time="{run.duration_ms / 1000:.3f}">'
        )
        details = (
            f"verdict: {run.verdict}\nintegrity: {run.integrity}\nreason: {run.reason}\n"
            f"requests: {', '.join(run.requests) or 'none'}\nexit code: {run.exit_code}\n"
            + (f"error: {run.error}\n" if run.error else "")
        )
        if matrix.failing(run):
            out.append(
                f"    <failure type={quoteattr(run.verdict)} "
                f"message={quoteattr(run.verdict + ': ' + run.reason)}>"
                f"{escape(details)}</failure>"
            )
        out.append(f"    <system-out>{escape(details)}</system-out>")
        out.append("  </testcase>")
    out.append("</testsuite></testsuites>")
    return "\n".join(out) + "\n"


def write_outputs(matrix: Matrix, lines: list[dict[str, Any]], out: Path) -> list[Path]:
    """``matrix.md``, ``matrix.json``, ``junit.xml`` and ``report.html`` in ``out``."""
    from chaosproxy.report import render_report

    out.mkdir(parents=True, exist_ok=True)
    data = matrix.as_json()
    files = {
        "matrix.md": render_markdown(matrix),
        "matrix.json": orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n",
        "junit.xml": render_junit(matrix),
        "report.html": render_report(lines, data, limit=None),  # every request of the run
    }
    written = []
    for name, text in files.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


# ---------------------------------------------------------------------------- the command


def parse_fail_on(value: str) -> frozenset[str]:
    names = frozenset(v.strip() for v in value.split(",") if v.strip())
    unknown = sorted(names - set(VERDICTS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown verdict(s) {', '.join(unknown)}; choose from {', '.join(VERDICTS)}"
        )
    return names


def add_parser(sub: Any) -> None:
    """The ``matrix`` subcommand (cli.py calls this)."""
    from chaosproxy.cli import _argtype
    from chaosproxy.config import parse_duration, parse_number, parse_seed

    matrix = sub.add_parser(
        "matrix",
        help="run a client command against every scenario and judge what it concluded",
        description="Run CMD once per scenario through an in-process proxy and write "
        "matrix.md, matrix.json, junit.xml and report.html (docs/verdicts.md).",
    )
    matrix.add_argument(
        "--client",
        required=True,
        metavar="CMD",
        help="shell command of the client: it reads CHAOSPROXY_URL (and "
        "CHAOSPROXY_SCENARIO), prints its final text on stdout and exits non-zero "
        "when its client raised",
    )
    matrix.add_argument(
        "--upstream",
        default="mock",
        metavar="URL",
        help="upstream URL (default: mock, the built-in mock upstream)",
    )
    matrix.add_argument(
        "--scenarios",
        action="append",
        default=[],
        metavar="DIR",
        help="run only the scenarios loaded from this file or directory (repeatable; "
        "default: the whole built-in library)",
    )
    matrix.add_argument(
        "--out",
        default="chaos-matrix",
        metavar="DIR",
        help="directory for matrix.md, matrix.json, junit.xml and report.html "
        "(default: chaos-matrix)",
    )
    matrix.add_argument(
        "--timeout",
        type=_argtype(parse_duration),
        default=DEFAULT_TIMEOUT,
        metavar="DURATION",
        help="per scenario: a command still running then is killed and judged hung (default 20s)",
    )
    matrix.add_argument(
        "--fail-on",
        type=parse_fail_on,
        default=FAILING,
        metavar="VERDICTS",
        help="comma-separated verdicts that make the exit status 1 and fail their JUnit "
        "test case (default: silent_corruption,false_alarm,hung)",
    )
    matrix.add_argument(
        "--seed",
        type=_argtype(parse_seed),
        default=None,
        metavar="N",
        help="the proxy's seed for every request (default: each scenario's, else random)",
    )
    matrix.add_argument(
        "--mock-interval-ms",
        type=_argtype(parse_number),
        default=None,
        metavar="MS",
        help="milliseconds between the mock upstream's events (default 20)",
    )


def cmd_matrix(args: argparse.Namespace) -> int:
    from chaosproxy.cli import fail
    from chaosproxy.scenario import ScenarioError

    settings: dict[str, Any] = {"seed": args.seed}
    if args.mock_interval_ms is not None:
        settings["mock_interval"] = args.mock_interval_ms / 1000.0

    def progress(run: Run) -> None:
        print(f"{run.scenario}: {run.verdict} ({run.reason})", file=sys.stderr, flush=True)

    try:
        matrix, lines = run_matrix(
            args.client,
            upstream=args.upstream,
            scenario_paths=args.scenarios,
            timeout=args.timeout,
            fail_on=args.fail_on,
            settings=settings,
            progress=progress,
        )
    except ScenarioError as exc:
        for problem in exc.problems:
            fail(str(problem))
        return 2
    except Exception as exc:  # the proxy could not start: one line, never a traceback
        from chaosproxy.logs import describe

        return fail(f"matrix: {describe(exc)}")
    out = Path(args.out)
    written = write_outputs(matrix, lines, out)
    counts = ", ".join(f"{n} {v}" for v, n in matrix.counts.items())
    print(
        f"chaosproxy matrix: {counts}; wrote {', '.join(str(p) for p in written)}"
        + ("; FAILED" if matrix.failed else ""),
        file=sys.stderr,
    )
    return 1 if matrix.failed else 0


__all__ = [
    "NO_REQUEST",
    "Matrix",
    "Outcome",
    "Run",
    "add_parser",
    "cmd_matrix",
    "render_junit",
    "render_markdown",
    "run_command",
    "run_matrix",
    "run_scenario",
    "write_outputs",
]
