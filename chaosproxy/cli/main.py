"""The ``chaosproxy`` command line (README.md, "Commands").

Every ``serve`` flag can also come from ``CHAOSPROXY_<FLAG>`` (``CHAOSPROXY_LISTEN``,
``CHAOSPROXY_LOG_CONTENT=1``…), for containers. Anything wrong with the arguments,
files or scenarios stops start-up with one line on stderr and exit code 2. Nothing
printed shows a URL's password or a credential in a query (``logs.redact_text``).

On SIGTERM or SIGINT, ``serve`` stops accepting, gives the streams in flight
``--grace``, cuts the rest and exits 0 within ``grace + 1 s`` of the signal, always: a
watchdog thread ends the process then, whatever is still cleaning up. A second signal
exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from chaosproxy._build import __version__, build
from chaosproxy.control.process import (
    EXIT_MARGIN,
    EXIT_USAGE,
    _health_check_warning,
    _run,
    _safe,
    _startup_line,
    _startup_notices,
    _Stop,
    fail,
    from_settings,
    say,
    settle_gc,
)
from chaosproxy.core.mock_defaults import DEFAULT_LISTEN
from chaosproxy.core.providers import PROVIDER_NAMES
from chaosproxy.server.config import (
    Config,
    ConfigError,
    add_flags,
    argtype,
    command_settings,
    default,
    from_environment,
    given,
    parse_count,
    parse_seed,
    show_hostport,
)

if TYPE_CHECKING:
    from aiohttp import web


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags: ``--history 3`` would be ``--history-bytes 3`` (three
    bytes), and a flag added later would change what an abbreviation means."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        #: The command parsed, when arguments were left over (what ``_hint`` reads).
        self._command: str | None = None

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._command = getattr(parsed, "command", None)
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_safe(message)}{self._hint(message)}\n")

    def _hint(self, message: str) -> str:
        """For an unknown flag, the closest this command has (``--lissten``:
        ``--listen``)."""
        if not message.startswith("unrecognized arguments: "):
            return ""
        parsers: list[argparse.ArgumentParser] = [self]
        for action in self._actions:  # (the top parser reports its command's extras)
            if isinstance(action, argparse._SubParsersAction) and self._command in action.choices:
                parsers.append(action.choices[self._command])
        flags = [f for p in parsers for action in p._actions for f in action.option_strings]
        for word in message.removeprefix("unrecognized arguments: ").split():
            if word.startswith("--"):
                close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


def config_from(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    """The configuration of ``serve``: its flags over ``CHAOSPROXY_*`` over defaults.
    Raises ConfigError for a bad environment value."""
    return Config(**{**from_environment(environ), **given(args)})


#: The settings ``chaosproxy mock`` takes (as ``serve`` does, some under other names).
MOCK_SETTINGS = ("listen", "mock_tokens", "mock_interval", "mock_fixtures")


#: The settings ``chaosproxy record`` takes (the real upstream as ``--upstream``).
RECORD_SETTINGS = ("listen", "record_upstream", "connect_timeout", "head_timeout", "idle_timeout")


def build_parser() -> argparse.ArgumentParser:
    """The ``chaosproxy`` command's parser: one subparser per command, each added by
    its own function (the tools' by their modules)."""
    parser = _Parser(prog="chaosproxy", description="A fault-injecting proxy for LLM streams.")
    parser.add_argument(
        "--version", action="version", version=f"chaosproxy {__version__} ({build()})"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the proxy")
    add_flags(serve)
    _add_mock(sub)
    _add_replay(sub)
    _add_record(sub)
    _add_scenario_commands(sub)
    _add_simulate(sub)
    _add_report(sub)

    from chaosproxy.tools.explore_options import add_parser as add_explore_parser
    from chaosproxy.tools.matrix import add_parser as add_matrix_parser
    from chaosproxy.tools.schema import add_parser as add_schema_parser

    add_matrix_parser(sub)
    add_explore_parser(sub)
    add_schema_parser(sub)
    return parser


def _add_mock(sub: Any) -> None:
    """``chaosproxy mock``: the built-in mock alone, with its settings."""
    mock = sub.add_parser("mock", help="run the built-in mock LLM upstream alone")
    add_flags(
        mock,
        MOCK_SETTINGS,
        {
            "listen": {
                "help": "address to listen on (default CHAOSPROXY_LISTEN, else "
                f"{show_hostport(DEFAULT_LISTEN)}; port 0 picks a free one)"
            },
            "mock_tokens": {
                "name": "--tokens",
                "parse": parse_count,  # the mock alone may answer with no text
                "help": "text deltas per streamed answer (default CHAOSPROXY_MOCK_TOKENS, else "
                "{default})",
            },
            "mock_interval": {
                "name": "--interval-ms",
                "help": "milliseconds between two events of a stream (default "
                "CHAOSPROXY_MOCK_INTERVAL_MS, else {default})",
            },
            "mock_fixtures": {
                "help": "a fixture file or a directory of them (docs/mock.md, Fixtures); "
                "repeatable; default: CHAOSPROXY_MOCK_FIXTURES"
            },
        },
    )


def _add_replay(sub: Any) -> None:
    """``chaosproxy replay``: a recorded trace served again."""
    replay = sub.add_parser(
        "replay", help="serve a recorded trace (--trace-dir with --log-content) again"
    )
    replay.add_argument(
        "trace", metavar="TRACE", help="a trace file written by serve --trace-dir --log-content"
    )
    add_flags(
        replay,
        ["listen"],
        {
            "listen": {
                "help": "address to listen on (default CHAOSPROXY_LISTEN, else {default}; port "
                "0 picks a free one)"
            }
        },
    )


def _add_record(sub: Any) -> None:
    """``chaosproxy record``: a real upstream's answers recorded as fixtures."""
    record = sub.add_parser(
        "record", help="record a real upstream's streamed answers into a mock fixture file"
    )
    record.add_argument(
        "--out",
        metavar="FILE",
        required=True,
        help="the fixture file each recorded answer is appended to (made when missing)",
    )
    add_flags(
        record,
        RECORD_SETTINGS,
        {
            "listen": {
                "help": "address to listen on (default CHAOSPROXY_LISTEN, else {default}; port "
                "0 picks a free one)"
            },
            "record_upstream": {
                "name": "--upstream",
                "help": "the real upstream's URL (http or https); default: "
                "CHAOSPROXY_RECORD_UPSTREAM",
            },
        },
    )


def _add_scenario_commands(sub: Any) -> None:
    """``chaosproxy scenarios`` and ``validate``: the scenario files listed, checked."""
    scenarios = sub.add_parser(
        "scenarios", help="list the scenarios serve would load: the built-in library, then PATHs"
    )
    scenarios.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="scenario files or directories of *.yaml added to the library (as --scenarios), "
        "after those of CHAOSPROXY_SCENARIOS",
    )

    validate = sub.add_parser("validate", help="check scenario files (and mock fixture files)")
    validate.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="scenario files or directories of *.yaml (each must hold at least one; "
        "default: those of CHAOSPROXY_SCENARIOS)",
    )
    add_flags(
        validate,
        ["mock_fixtures"],
        {
            "mock_fixtures": {
                "help": "a mock fixture file or a directory of them, to check too; repeatable"
            }
        },
    )


def _add_simulate(sub: Any) -> None:
    """``chaosproxy simulate``: a scenario run offline, stdin to stdout."""
    simulate = sub.add_parser(
        "simulate", help="run a scenario offline: upstream bytes on stdin, emitted on stdout"
    )
    simulate.add_argument(
        "scenario",
        metavar="SCENARIO",
        help="the name of a built-in scenario (or of one in CHAOSPROXY_SCENARIOS), or a "
        "scenario file",
    )
    simulate.add_argument(
        "--seed",
        type=argtype(parse_seed),
        default=None,
        metavar="N",
        help="the request's seed (default: the scenario's seed:, else random)",
    )
    simulate.add_argument(
        "--format",
        choices=("sse", "ndjson", "eventstream", "raw"),
        default=None,
        help="how to frame stdin (default: the scenario's format:, else sse)",
    )
    simulate.add_argument(
        "--provider",
        default=None,
        choices=("auto", *PROVIDER_NAMES),
        metavar="PROVIDER",
        help=f"provider profile: auto, {', '.join(PROVIDER_NAMES)} (default: the scenario's)",
    )
    simulate.add_argument(
        "--chunk",
        type=int,
        default=0,
        metavar="N",
        help="feed stdin in reads of N bytes (default: one read)",
    )


def _add_report(sub: Any) -> None:
    """``chaosproxy report``: the HTML report of a frame log or traces."""
    report = sub.add_parser(
        "report", help="write a self-contained HTML report of a frame log or a trace directory"
    )
    report.add_argument(
        "source",
        nargs="?",
        default=None,
        metavar="LOG|TRACE_DIR",
        help="a frame log (--log, JSON lines) or a directory of traces (--trace-dir); "
        "default: the file of CHAOSPROXY_LOG, else CHAOSPROXY_TRACE_DIR",
    )
    report.add_argument(
        "-o",
        "--output",
        default="report.html",
        metavar="FILE",
        help="the HTML file to write (default report.html; - for stdout)",
    )
    report.add_argument(
        "--matrix",
        default=None,
        metavar="MATRIX_JSON",
        help="a matrix.json written by chaosproxy matrix: add its scenario-by-verdict table",
    )
    report.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="draw only the newest N requests (default 500; 0 for all)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = {
        "serve": cmd_serve,
        "mock": cmd_mock,
        "validate": cmd_validate,
        "scenarios": cmd_scenarios,
        "simulate": cmd_simulate,
        "replay": cmd_replay,
        "record": cmd_record,
        "matrix": cmd_matrix,
        "explore": cmd_explore,
        "report": cmd_report,
        "schema": cmd_schema,
    }[args.command]
    try:
        return command(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Whoever read our output stopped (``chaosproxy scenarios | head``): stop quietly,
        # as other command-line tools do. 141 is what a shell reports for a process
        # ended by SIGPIPE.
        from chaosproxy.observe.logs import point_stdout_away

        point_stdout_away()
        return 141


# ---------------------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    from chaosproxy.control.start import StartupError, start_proxy
    from chaosproxy.observe.logs import FrameLog
    from chaosproxy.scenario import ScenarioError, load_fixture_files, load_scenarios
    from chaosproxy.server.memory import IdleReclaimer
    from chaosproxy.upstream.tls import check_upstream_tls

    try:
        config = config_from(args)
    except ConfigError as exc:
        return fail(str(exc))
    quiet_terminal = _terminal_default_level(config, args)
    if quiet_terminal:
        config = config.replace(log_level="requests")
    if config.replica_id is None:  # a served proxy is a replica: the host's name
        config = config.replace(replica_id=config.replica)
    try:
        # Before anything starts, and before the event loop runs: a TLS file that could
        # block (a FIFO) or prompt (an encrypted key) is refused here, in one line.
        check_upstream_tls(config)
    except StartupError as exc:
        return fail(str(exc))
    try:
        scenarios = load_scenarios(list(config.scenarios))
        fixtures = load_fixture_files(list(config.mock_fixtures))
    except ScenarioError as exc:
        # One line per problem, each a complete reason: FILE:LINE: path: message.
        for problem in exc.problems:
            fail(str(problem))
        return EXIT_USAGE
    if config.workers > 1:  # a supervisor and its workers (chaosproxy.workers)
        from chaosproxy.workers.supervisor import serve_workers

        return serve_workers(
            config, scenarios, fixtures, _run, notices=[QUIET_TERMINAL] if quiet_terminal else []
        )
    try:
        log = FrameLog.open(
            config.log, content=config.log_content, fmt=config.log_format, level=config.log_level
        )
    except OSError as exc:
        return fail(f"cannot open log {config.log}: {exc.strerror or exc}")

    async def serve() -> int:
        # Signals are handled from here on: one during start-up stops as cleanly.
        stop = _Stop(config.grace + EXIT_MARGIN, flush=log.flush)
        try:
            proxy = await start_proxy(config, scenarios=scenarios, log=log, fixtures=fixtures)
        except StartupError as exc:
            log.close()
            return fail(str(exc))
        stop.last_words = proxy.last_words
        settle_gc()
        reclaimer = IdleReclaimer(lambda: proxy.in_flight)
        reclaimer.start()
        loaded = len(proxy.state.scenarios.scenarios)
        names = f"{loaded} (the built-in library" + (
            f" and {', '.join(scenarios)})" if scenarios else ")"
        )
        print(_startup_line(config, proxy, names=names), file=sys.stderr)
        notices = _startup_notices(config, proxy)
        if quiet_terminal:
            notices.append(QUIET_TERMINAL)
        for line in notices:
            say("notice", line)
        unreachable = await asyncio.to_thread(_health_check_warning, config, proxy)
        for warning in [*proxy.warnings, *([unreachable] if unreachable else [])]:
            say("warning", warning)
        sys.stderr.flush()
        await stop.wait()
        await reclaimer.stop()
        say("notice", f"{stop.reason}: stopping; streams in flight get {config.grace:g}s")
        try:
            problems = await proxy.close(since=stop.signalled_at)
        except Exception as exc:  # a bug in a cleanup: still one line, still exit 0
            problems = [f"stopping failed: {type(exc).__name__}: {exc}"]
        for problem in problems:
            say("warning", problem)
        log.close()
        stop.written()
        if problems:  # something was abandoned: the interpreter's exit might wait for it
            stop.exit_now()
        return 0

    return _run(serve)


#: Said at start when the log goes to a terminal and no level was given.
QUIET_TERMINAL = (
    "the log is on a terminal: one line per request, no frame lines "
    "(--log-level frames shows every write)"
)


def _terminal_default_level(config: Config, args: argparse.Namespace) -> bool:
    """Whether the log level, given nowhere, becomes ``requests``: the log goes to a
    terminal, where a frame line per write buries everything else."""
    given = "log_level" in vars(args) or bool(os.environ.get("CHAOSPROXY_LOG_LEVEL"))
    return not given and config.log in (None, "-") and _stdout_is_terminal()


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


# ---------------------------------------------------------------------------- mock


def cmd_mock(args: argparse.Namespace) -> int:
    from chaosproxy.control.start import start_mock
    from chaosproxy.mock import MockFixtures
    from chaosproxy.scenario import ScenarioError, load_fixture_files

    try:
        settings = command_settings(args, MOCK_SETTINGS)
        host, port = settings.get("listen", DEFAULT_LISTEN)
        tokens = settings.get("mock_tokens", default("mock_tokens"))
        interval = settings.get("mock_interval", default("mock_interval"))
        paths = list(settings.get("mock_fixtures", ()))
    except ConfigError as exc:
        return fail(str(exc))
    try:
        fixtures = MockFixtures(load_fixture_files(paths))
    except ScenarioError as exc:
        for problem in exc.problems:
            fail(str(problem))
        return EXIT_USAGE
    count = len(fixtures.files)
    loaded = f"; {count} fixture{'' if count == 1 else 's'}" if count else ""
    return _serve_app(
        lambda: start_mock(host, port, tokens=tokens, interval=interval, fixtures=fixtures),
        lambda url: f"chaosproxy mock listening on {url}{loaded}",
    )


# ---------------------------------------------------------------------------- replay


def cmd_replay(args: argparse.Namespace) -> int:
    from chaosproxy.tools.replay import TraceError, describe_trace, load_trace, start_replay

    try:
        host, port = command_settings(args, ["listen"]).get("listen", default("listen"))
    except ConfigError as exc:
        return fail(str(exc))
    try:
        trace = load_trace(args.trace)
    except TraceError as exc:
        return fail(str(exc))
    return _serve_app(
        lambda: start_replay(trace, host, port),
        lambda url: f"chaosproxy replay listening on {url}; {args.trace}: {describe_trace(trace)}",
    )


# ---------------------------------------------------------------------------- record


def cmd_record(args: argparse.Namespace) -> int:
    from chaosproxy.control.recording import AnswerRecorder
    from chaosproxy.core.redact import redact_url
    from chaosproxy.mock.transcript import read_fixture_items
    from chaosproxy.server.net import StartupError
    from chaosproxy.tools.record import start_record

    try:
        settings = command_settings(args, RECORD_SETTINGS)
        host, port = settings.pop("listen", default("listen"))
        if settings.get("record_upstream") is None:
            return fail("record: give the real upstream: --upstream URL")
        config = Config(record_on_miss=args.out, **settings)
        upstream = config.record_upstream
        assert upstream is not None
        out = Path(args.out)
        held = len(read_fixture_items(out))  # never write over what is not a fixture file
    except (ConfigError, ValueError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{args.out}: {exc.strerror or exc}")
    try:
        recorder = AnswerRecorder(upstream, out, config)
    except StartupError as exc:
        return fail(str(exc))
    before = f" ({held} fixture{'' if held == 1 else 's'} already)" if held else ""
    return _serve_app(
        lambda: start_record(recorder, host, port),
        lambda url: (
            f"chaosproxy record listening on {url}; recording {redact_url(upstream)} "
            f"into {out}{before}"
        ),
    )


def _serve_app(
    start: Callable[[], Awaitable[tuple[web.AppRunner, str]]],
    banner: Callable[[str], str],
) -> int:
    """Start an app, print its start-up line, serve until SIGINT/SIGTERM, clean up
    (within the same bound as ``serve``'s, with the default grace)."""
    from chaosproxy.control.start import CLOSE_MARGIN, StartupError
    from chaosproxy.server.net import SHUTDOWN_GRACE

    async def serve() -> int:
        stop = _Stop(SHUTDOWN_GRACE + EXIT_MARGIN)
        try:
            runner, url = await start()
        except StartupError as exc:
            return fail(str(exc))
        print(banner(url), file=sys.stderr, flush=True)
        await stop.wait()
        cleanup = asyncio.ensure_future(runner.cleanup())
        done, _ = await asyncio.wait({cleanup}, timeout=SHUTDOWN_GRACE + CLOSE_MARGIN)
        if not done or cleanup.exception() is not None:
            stop.exit_now("stopping did not finish cleanly; exiting now")
        return 0

    return _run(serve)


# ---------------------------------------------------------------------------- matrix


def cmd_matrix(args: argparse.Namespace) -> int:
    from chaosproxy.tools.matrix import cmd_matrix as run

    return run(args)


def cmd_explore(args: argparse.Namespace) -> int:
    from chaosproxy.tools.explore import cmd_explore as run

    return run(args)


def cmd_schema(args: argparse.Namespace) -> int:
    from chaosproxy.tools.schema import command

    return command(args)


# ---------------------------------------------------------------------------- validate


#: A scenario problem that says the file is a mock fixture file (its top-level key).
_FIXTURES_AS_SCENARIO = re.compile(r"(.+?):\d+: fixtures: unknown key")


def cmd_validate(args: argparse.Namespace) -> int:
    from chaosproxy.scenario import (
        ScenarioError,
        check_paths,
        cross_tenant_warnings,
        load_fixture_files,
    )

    paths = list(args.paths)
    fixture_paths = list(given(args, ["mock_fixtures"]).get("mock_fixtures", ()))
    if not paths and not fixture_paths:  # what the settings name, as in a container
        try:
            paths = list(from_settings("scenarios", ()))
            fixture_paths = list(from_settings("mock_fixtures", ()))
        except ConfigError as exc:
            return fail(str(exc))
    if not paths and not fixture_paths:
        return fail(
            "validate: give scenario files (PATH...) or --mock-fixtures PATH (or set "
            "CHAOSPROXY_SCENARIOS or CHAOSPROXY_MOCK_FIXTURES)"
        )
    scenarios, problems = check_paths(paths) if paths else ({}, [])
    fixtures = 0
    if fixture_paths:
        try:
            fixtures = len(load_fixture_files(fixture_paths))
        except ScenarioError as exc:
            problems += exc.problems
    for problem in problems:
        print(problem)
    for fixture_file in dict.fromkeys(
        m.group(1) for p in problems if (m := _FIXTURES_AS_SCENARIO.match(str(p))) is not None
    ):
        print(
            f"{fixture_file}: a mock fixture file? check it with `chaosproxy validate "
            f"--mock-fixtures {fixture_file}`, serve it with `serve --mock-fixtures`"
        )
    # Valid, but worth a word: a scenario that hands one tenant's text to another.
    for warning in cross_tenant_warnings(scenarios.values()):
        say("warning", warning)
    if problems:
        return EXIT_USAGE
    if paths:
        print(f"{len(scenarios)} scenario{'' if len(scenarios) == 1 else 's'} OK")
    if fixture_paths:
        print(f"{fixtures} fixture{'' if fixtures == 1 else 's'} OK")
    return 0


# ---------------------------------------------------------------------------- scenarios


def cmd_scenarios(args: argparse.Namespace) -> int:
    from chaosproxy.scenario import ScenarioError, load_scenarios, with_library

    try:
        paths = [*from_settings("scenarios", ()), *args.paths]
    except ConfigError as exc:
        return fail(str(exc))
    try:
        scenarios = with_library(load_scenarios(paths))
    except ScenarioError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    width = max((len(name) for name in scenarios), default=0)
    for name, scenario in scenarios.items():
        description = " ".join(scenario.description.split())  # one line each
        print(f"{name:<{width}}  {description}".rstrip())
    return 0


# ---------------------------------------------------------------------------- report


def cmd_report(args: argparse.Namespace) -> int:
    from chaosproxy.tools.report import DEFAULT_LIMIT, ReportError, write_report

    limit = DEFAULT_LIMIT if args.limit is None else args.limit
    if limit < 0:
        return fail(f"--limit must be >= 0, not {limit}")
    if args.source is None:
        try:
            log = from_settings("log")
            args.source = log if log not in (None, "-") else from_settings("trace_dir")
        except ConfigError as exc:
            return fail(str(exc))
        if args.source is None:
            return fail(
                "report: give a frame log or a trace directory (or set CHAOSPROXY_LOG to "
                "a file, or CHAOSPROXY_TRACE_DIR)"
            )
    try:
        matrix = None
        if args.matrix is not None:
            with open(args.matrix, "rb") as stream:
                matrix = json.loads(stream.read())
            if not isinstance(matrix, dict):
                return fail(f"{args.matrix}: not a matrix (a JSON object)")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return fail(f"{args.matrix}: not JSON: {exc}")
    except OSError as exc:
        return fail(_os_message(exc))
    # The page is written as it is made (memory bounded by what it draws): into a
    # temporary file beside the output, renamed once whole, so that a failure leaves
    # no half page (and no file where there was none).
    if args.output == "-":
        try:
            write_report(args.source, sys.stdout, matrix, limit=limit or None)
        except (OSError, ReportError) as exc:
            return fail(_os_message(exc))
        return 0
    out = _LateFile(Path(args.output))
    try:
        write_report(args.source, out, matrix, limit=limit or None)
        out.finish()
    except (OSError, ReportError) as exc:
        out.abandon()
        return fail(_os_message(exc))
    print(f"chaosproxy: wrote {args.output}", file=sys.stderr)
    return 0


class _LateFile:
    """A text file made on its first write, as a hidden ``.NAME.partial`` beside ``path``,
    and renamed to ``path`` by :meth:`finish`: nothing is created before there is
    something to write, and a failure leaves no half page. Errors name ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.partial = path.with_name(f".{path.name}.partial")
        self._stream: TextIO | None = None

    def write(self, text: str) -> int:
        try:
            if self._stream is None:
                self._stream = self.partial.open("w", encoding="utf-8")
            return self._stream.write(text)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def finish(self) -> None:
        if self._stream is None:
            self.write("")
        assert self._stream is not None
        try:
            self._stream.close()
            self.partial.replace(self.path)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def abandon(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self.partial.unlink(missing_ok=True)


def _os_message(exc: Exception) -> str:
    """``PATH: reason`` for an OSError (its errno text), else the exception's own text."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)


# ---------------------------------------------------------------------------- simulate


def cmd_simulate(args: argparse.Namespace) -> int:
    from chaosproxy.scenario import (
        NAME_PATTERN,
        Scenario,
        ScenarioError,
        load_scenario_file,
        load_scenarios,
        with_library,
    )
    from chaosproxy.tools.simulate import simulate

    try:
        library: Mapping[str, Scenario] = {}
        if not Path(args.scenario).is_file():
            library = with_library(load_scenarios(list(from_settings("scenarios", ()))))
    except ConfigError as exc:
        return fail(str(exc))
    except ScenarioError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    if args.scenario in library and not Path(args.scenario).is_file():
        scenario = library[args.scenario]
    elif re.fullmatch(NAME_PATTERN, args.scenario) and not Path(args.scenario).exists():
        close = difflib.get_close_matches(args.scenario, list(library), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return fail(f"no scenario file and no built-in scenario named {args.scenario!r}{hint}")
    else:
        try:
            scenario = load_scenario_file(Path(args.scenario))
        except ScenarioError as exc:
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            return EXIT_USAGE
    data = sys.stdin.buffer.read()
    result = simulate(
        scenario,
        data,
        seed=args.seed,
        fmt=args.format,
        provider=args.provider,
        chunk=args.chunk,
    )
    out = sys.stdout.buffer
    for line in result.log_lines():
        sys.stderr.write(json.dumps(line, ensure_ascii=False) + "\n")
    out.write(result.body)
    out.flush()
    return 0
