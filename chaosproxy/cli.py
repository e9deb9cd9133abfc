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
import contextlib
import gc
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from chaosproxy import __version__
from chaosproxy._build import build
from chaosproxy.config import (
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
from chaosproxy.core.providers import PROVIDER_NAMES
from chaosproxy.mock.defaults import DEFAULT_LISTEN

if TYPE_CHECKING:
    from aiohttp import web

    from chaosproxy.server import RunningProxy

EXIT_USAGE = 2
#: After the signal, ``serve`` exits within ``grace + EXIT_MARGIN`` seconds whatever
#: happens: the watchdog fires just after the stop's own deadline (``grace +
#: CLOSE_MARGIN``), which reports what it abandoned. docs/operations.md, "Shutdown",
#: promises ``grace + 1 s``: the rest is for the last words (the ends of requests a
#: stuck loop never cut, LAST_WORDS at most) and for the kernel to tear down a process
#: with hundreds of connections on a busy machine (0.1 to 0.4 s measured beside two
#: processes spinning the CPU).
EXIT_MARGIN = 0.6


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_safe(message)}\n")


def _safe(text: str) -> str:
    """``text`` as it may be printed: no URL password, no query credential."""
    from chaosproxy.logs import redact_text

    return redact_text(text)


def config_from(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    """The configuration of ``serve``: its flags over ``CHAOSPROXY_*`` over defaults.
    Raises ConfigError for a bad environment value."""
    return Config(**{**from_environment(environ), **given(args)})


#: The settings ``chaosproxy mock`` takes (as ``serve`` does, some under other names).
MOCK_SETTINGS = ("listen", "mock_tokens", "mock_interval", "mock_fixtures")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="chaosproxy", description="A fault-injecting proxy for LLM streams.")
    parser.add_argument(
        "--version", action="version", version=f"chaosproxy {__version__} ({build()})"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the proxy")
    add_flags(serve)

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
        choices=("sse", "ndjson", "raw"),
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

    from chaosproxy.explore import add_parser as add_explore_parser
    from chaosproxy.matrix import add_parser as add_matrix_parser

    add_matrix_parser(sub)
    add_explore_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = {
        "serve": cmd_serve,
        "mock": cmd_mock,
        "validate": cmd_validate,
        "scenarios": cmd_scenarios,
        "simulate": cmd_simulate,
        "replay": cmd_replay,
        "matrix": cmd_matrix,
        "explore": cmd_explore,
        "report": cmd_report,
    }[args.command]
    try:
        return command(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Whoever read our output stopped (``chaosproxy scenarios | head``): stop quietly,
        # as other command-line tools do. 141 is what a shell reports for a process
        # ended by SIGPIPE.
        from chaosproxy.logs import point_stdout_away

        point_stdout_away()
        return 141


def fail(message: str) -> int:
    print(f"chaosproxy: error: {_safe(message)}", file=sys.stderr)
    return EXIT_USAGE


def say(kind: str, message: str) -> None:
    """One line on stderr (``notice``, ``warning``), credentials masked."""
    with contextlib.suppress(OSError, ValueError):
        print(f"chaosproxy: {kind}: {_safe(message)}", file=sys.stderr, flush=True)


def from_settings(name: str, fallback: Any = None) -> Any:
    """A setting a subcommand reads from the environment (docs/operations.md, "Settings
    for every command"): as its ``CHAOSPROXY_*`` variable gives it, else ``fallback``.
    Raises ConfigError for a bad variable."""
    return from_environment(names=[name]).get(name, fallback)


# ---------------------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    from chaosproxy.logs import FrameLog
    from chaosproxy.memory import IdleReclaimer
    from chaosproxy.scenario import ScenarioError, load_fixture_files, load_scenarios
    from chaosproxy.server import StartupError, start_proxy
    from chaosproxy.upstream.tls import check_upstream_tls

    try:
        config = config_from(args)
    except ConfigError as exc:
        return fail(str(exc))
    quiet_terminal = _terminal_default_level(config, args)
    if quiet_terminal:
        config = config.replace(log_level="requests")
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


#: After start-up, a full garbage-collector pass comes at most every this many
#: second-generation passes (Python's default: 10). See :func:`settle_gc`.
FULL_GC_EVERY = 100


def settle_gc() -> None:
    """Once the proxy is up: collect start-up's garbage, then move everything left
    (modules, scenario models, the app: some 50,000 objects) out of the garbage
    collector's reach (``gc.freeze``), so that none of its passes during the streams
    walks them again; and let a full pass (over every object alive: at 2,000 streams,
    each stream's connection, request and session) come at most every
    ``FULL_GC_EVERY`` second-generation passes instead of 10: each one held the event
    loop for 50-300 ms (docs/benchmark.md). Younger garbage is collected as before.
    Only for ``serve``, which owns its process."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_GC_EVERY)


def _startup_line(config: Config, proxy: RunningProxy, *, names: str) -> str:
    """``chaosproxy V listening on URL → UPSTREAM; …; admin: URL``, with the addresses
    as actually bound (``0.0.0.0`` stays ``0.0.0.0``) and no password. With routes,
    UPSTREAM is ``/anthropic: URL, /openai: URL, other paths: URL|404``."""
    from chaosproxy.logs import redact_url
    from chaosproxy.routes import MOCK

    def shown(configured: str, url: str) -> str:
        return f"mock (built in, {url})" if configured == MOCK else redact_url(url)

    urls = proxy.upstreams
    parts = [
        f"{route.prefix or 'other paths'}: {shown(route.url, urls[route.prefix])}"
        for route in sorted(config.routes, key=lambda r: (not r.prefix, -len(r.prefix)))
    ]
    if len(parts) == 1 and not config.routes[0].prefix:
        upstream = shown(config.routes[0].url, proxy.upstream)
    else:  # longest prefix first, then the fallback (or that there is none)
        if all(route.prefix for route in config.routes):
            parts.append("other paths: 404")
        upstream = ", ".join(parts)
    admin = "off"
    if proxy.admin_url is not None:
        admin = _addresses(proxy.admin_bound or [proxy.admin_url])
        admin += " (bearer token)" if config.admin_token else ""
    extras = f"; traces: {config.trace_dir}" if config.trace_dir else ""
    return (
        f"chaosproxy {__version__} ({build()}) listening on "
        f"{_addresses(proxy.bound or [proxy.url])} "
        f"→ {upstream}; scenarios: {names}; default: {config.scenario or 'passthrough'}; "
        f"seed: {config.seed if config.seed is not None else 'random'}; "
        f"{_client_choices(config)}; admin: {admin}{extras}"
    )


def _client_choices(config: Config) -> str:
    """Whether clients choose their faults (``--trust-client-scenarios``)."""
    if config.trust_client_scenarios:
        return "clients choose: X-Chaos-Scenario, X-Chaos-Seed, /_chaos/NAME/"
    return (
        "clients choose: nothing (--trust-client-scenarios no: X-Chaos-Scenario, "
        "X-Chaos-Seed and /_chaos/NAME/ are ignored)"
    )


def _addresses(urls: Sequence[str]) -> str:
    first, *others = urls
    return first + (f" (also {', '.join(others)})" if others else "")


def _startup_notices(config: Config, proxy: RunningProxy) -> list[str]:
    from chaosproxy.server import is_loopback

    if config.admin is None or not is_loopback(config.admin[0]):
        return []
    if is_loopback(config.listen[0]):
        return []
    # Reachable proxy, loopback admin: a container's default. Say how to publish it.
    token = "" if config.admin_token else " and CHAOSPROXY_ADMIN_TOKEN"
    return [
        f"the admin API is on loopback only ({proxy.admin_url}); to publish it, set "
        f"CHAOSPROXY_ADMIN=0.0.0.0:{config.admin[1]}{token}"
    ]


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


def _health_check_warning(config: Config, proxy: RunningProxy) -> str | None:
    """A warning when the container's health check (chaosproxy.healthcheck, as the
    image's HEALTHCHECK runs it) cannot reach what it asks: the admin API's ``/health``
    (asked here as the check asks it), or with the admin off the proxy's port (whose
    address is only looked up: a connection to the proxy would count as a client, and
    could take a place under --max-connections). Blocking: run it in a thread."""
    from chaosproxy import healthcheck

    if config.admin is not None and proxy.admin_url is not None:
        what, (host, _), url = "the admin API", config.admin, proxy.admin_url
    else:
        what, (host, _), url = "the proxy", config.listen, proxy.url
    port = int(url.rsplit(":", 1)[1])
    try:
        if config.admin is not None and proxy.admin_url is not None:
            healthcheck.probe_health(host, port, timeout=1.0)
        else:
            dialled, _ = healthcheck.target(host, port)
            if not healthcheck.has_address(dialled):
                shown = f"[{dialled}]" if ":" in dialled else dialled
                raise healthcheck.Unhealthy(f"{shown}:{port}: not an address of this host")
    except healthcheck.Unhealthy as exc:
        shown = f"[{host}]" if ":" in host else host
        hint = ""
        if host == "::":
            hint = f"; [::] listens on IPv6 only: 0.0.0.0:{port} takes IPv4"
        return (
            f"{what} listens on {shown}:{port}, but the container's health check cannot "
            f"reach it there ({exc}){hint}"
        )
    return None


class _Stop:
    """Waits for SIGTERM or SIGINT; from the first one, a watchdog thread ends the
    process (exit 0) ``deadline`` seconds after the signal's arrival, whatever the
    event loop is doing; a second signal ends it at once. ``flush`` (the frame log's)
    runs before that exit.

    The signals are caught with a plain handler, not the loop's: Python runs it as soon
    as the main thread runs Python code (between two bytecodes), where a loop busy with
    hundreds of streams would see its own handler only after its current iteration,
    half a second later. So :attr:`signalled_at`, from which the grace and the watchdog
    count, is when the signal arrived."""

    def __init__(self, deadline: float, *, flush: Callable[[], None] | None = None) -> None:
        self.deadline = deadline
        self.reason = ""
        #: ``time.monotonic()`` when the first signal arrived (0.0 before).
        self.signalled_at = 0.0
        #: Runs before an exit that does not wait (the ends of requests still running).
        self.last_words: Callable[[], object] | None = None
        self._flush = flush
        self._event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._armed = threading.Event()
        threading.Thread(target=self._watch, name="chaosproxy-watchdog", daemon=True).start()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, OSError):  # not the main thread
                signal.signal(sig, self._signalled)

    async def wait(self) -> None:
        await self._event.wait()

    def _signalled(self, signum: int, _: object) -> None:
        name = signal.Signals(signum).name
        if self.reason:
            self.exit_now(f"second {name}: exiting now")
            return
        self.reason = name
        self.signalled_at = time.monotonic()
        self._armed.set()
        with contextlib.suppress(RuntimeError):  # the loop has closed: exiting anyway
            self._loop.call_soon_threadsafe(self._event.set)

    def written(self) -> None:
        """Everything is written and the log closed: an exit from now on (the watchdog,
        during the interpreter's own) has nothing more to write."""
        self.last_words = self._flush = None

    def _watch(self) -> None:
        self._armed.wait()
        late = self.signalled_at + self.deadline - time.monotonic()
        if late > 0:
            time.sleep(late)
        self.exit_now("shutdown overran its deadline; exiting now")

    def exit_now(self, why: str | None = None) -> None:
        """Flush what can be flushed and end the process with 0, without waiting for
        anything (threads, tasks, the interpreter's own clean-up)."""
        if why is not None:
            with contextlib.suppress(Exception):  # (stderr busy in the code interrupted)
                say("warning", why)
        if self.last_words is not None:
            with contextlib.suppress(Exception):
                self.last_words()
        if self._flush is not None:
            with contextlib.suppress(Exception):
                self._flush()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)


def _run(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.run(main())
    result: int = uvloop.run(main())
    return result


# ---------------------------------------------------------------------------- mock


def cmd_mock(args: argparse.Namespace) -> int:
    from chaosproxy.mock import MockFixtures
    from chaosproxy.scenario import ScenarioError, load_fixture_files
    from chaosproxy.server import start_mock

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
    from chaosproxy.replay import TraceError, describe_trace, load_trace, start_replay

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


def _serve_app(
    start: Callable[[], Awaitable[tuple[web.AppRunner, str]]],
    banner: Callable[[str], str],
) -> int:
    """Start an app, print its start-up line, serve until SIGINT/SIGTERM, clean up
    (within the same bound as ``serve``'s, with the default grace)."""
    from chaosproxy.net import SHUTDOWN_GRACE
    from chaosproxy.server import CLOSE_MARGIN, StartupError

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
    from chaosproxy.matrix import cmd_matrix as run

    return run(args)


def cmd_explore(args: argparse.Namespace) -> int:
    from chaosproxy.explore import cmd_explore as run

    return run(args)


# ---------------------------------------------------------------------------- validate


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
    from chaosproxy.report import DEFAULT_LIMIT, ReportError, write_report

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
    from chaosproxy.simulate import simulate

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
        return fail(f"no scenario file and no built-in scenario named {args.scenario!r}")
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
