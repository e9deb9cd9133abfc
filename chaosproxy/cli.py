"""The ``chaosproxy`` command line (DESIGN.md section 2).

Every ``serve`` flag can also come from ``CHAOSPROXY_<FLAG>`` (``CHAOSPROXY_LISTEN``,
``CHAOSPROXY_LOG_CONTENT=1``…), for containers. Anything wrong with the arguments,
files or scenarios stops start-up with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from chaosproxy import __version__
from chaosproxy.core.providers import PROVIDER_NAMES

if TYPE_CHECKING:
    from aiohttp import web

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _env(flag: str, default: Any = None) -> Any:
    return os.environ.get("CHAOSPROXY_" + flag.upper().replace("-", "_"), default)


def _env_bool(flag: str) -> bool:
    return str(_env(flag, "")).lower() in {"1", "true", "yes", "on"}


def _env_list(flag: str) -> list[str] | None:
    value = _env(flag)
    if not value:
        return None
    return [p for p in value.split(os.pathsep) if p]


def parse_hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def parse_upstream(value: str) -> str:
    if value == "mock":
        return value
    if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1]) == 0:
        raise argparse.ArgumentTypeError(f"expected an http(s) URL or 'mock', got {value!r}")
    return value.rstrip("/")


def parse_admin(value: str) -> tuple[str, int] | None:
    if value == "off":
        return None
    return parse_hostport(value)


def parse_seed(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value!r}")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="chaosproxy", description="A fault-injecting proxy for LLM streams.")
    parser.add_argument("--version", action="version", version=f"chaosproxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--listen", type=parse_hostport, default=_env("listen", "127.0.0.1:8080"))
    serve.add_argument("--upstream", type=parse_upstream, default=_env("upstream", "mock"))
    serve.add_argument(
        "--scenarios",
        action="append",
        metavar="PATH",
        default=None,
        help="a scenario file or a directory of *.yaml (repeatable; default ./scenarios)",
    )
    serve.add_argument("--scenario", metavar="NAME", default=_env("scenario"))
    serve.add_argument(
        "--admin",
        type=parse_admin,
        metavar="HOST:PORT|off",
        default=_env("admin", "127.0.0.1:8474"),
        help="the admin API's address, or off (default 127.0.0.1:8474)",
    )
    serve.add_argument(
        "--admin-token",
        metavar="TOKEN",
        default=_env("admin_token"),
        help="bearer token the admin API requires (better: CHAOSPROXY_ADMIN_TOKEN)",
    )
    serve.add_argument("--log", metavar="PATH|-", default=_env("log", "-"))
    serve.add_argument(
        "--log-format",
        choices=("auto", "json", "pretty"),
        default=_env("log_format", "auto"),
        help="auto: pretty on a terminal, JSON lines otherwise",
    )
    serve.add_argument("--log-content", action="store_true", default=_env_bool("log_content"))
    serve.add_argument("--trace-dir", metavar="DIR", default=_env("trace_dir"))
    serve.add_argument("--seed", type=parse_seed, default=_env("seed"))
    # String defaults go through ``type`` too, so a bad environment value is a usage error.
    serve.add_argument("--mock-tokens", type=int, default=_env("mock_tokens", "24"))
    serve.add_argument("--mock-interval-ms", type=float, default=_env("mock_interval_ms", "20"))

    mock = sub.add_parser("mock", help="run the built-in mock LLM upstream alone")
    mock.add_argument("--listen", type=parse_hostport, default="127.0.0.1:8000")
    mock.add_argument("--tokens", type=int, default=24)
    mock.add_argument("--interval-ms", type=float, default=20.0)

    replay = sub.add_parser(
        "replay", help="serve a recorded trace (--trace-dir with --log-content) again"
    )
    replay.add_argument("trace", metavar="TRACE")
    replay.add_argument("--listen", type=parse_hostport, default="127.0.0.1:8080")

    validate = sub.add_parser("validate", help="check scenario files")
    validate.add_argument("paths", nargs="+", metavar="PATH")

    simulate = sub.add_parser(
        "simulate", help="run a scenario offline: upstream bytes on stdin, emitted on stdout"
    )
    simulate.add_argument("scenario", metavar="SCENARIO")
    simulate.add_argument("--seed", type=parse_seed, default=None)
    simulate.add_argument("--format", choices=("sse", "ndjson", "raw"), default=None)
    simulate.add_argument(
        "--provider", default=None, choices=("auto", *PROVIDER_NAMES), metavar="PROVIDER"
    )
    simulate.add_argument(
        "--chunk",
        type=int,
        default=0,
        metavar="N",
        help="feed stdin in reads of N bytes (default: one read)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = {
        "serve": cmd_serve,
        "mock": cmd_mock,
        "validate": cmd_validate,
        "simulate": cmd_simulate,
        "replay": cmd_replay,
    }[args.command]
    try:
        return command(args)
    except KeyboardInterrupt:
        return 130


def fail(message: str) -> int:
    print(f"chaosproxy: error: {message}", file=sys.stderr)
    return EXIT_USAGE


# ---------------------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    from chaosproxy.logs import FrameLog
    from chaosproxy.scenario import ScenarioError, load_scenarios
    from chaosproxy.server import ProxyOptions, StartupError, default_scenario_paths, start_proxy

    paths = args.scenarios or _env_list("scenarios") or default_scenario_paths()
    try:
        scenarios = load_scenarios(paths)
    except ScenarioError as exc:
        # One line per problem, each a complete reason: FILE:LINE: path: message.
        for problem in exc.problems:
            fail(str(problem))
        return EXIT_USAGE
    try:
        log = FrameLog.open(args.log, content=args.log_content, fmt=args.log_format)
    except OSError as exc:
        return fail(f"cannot open log {args.log}: {exc.strerror or exc}")
    host, port = args.listen
    options = ProxyOptions(
        listen_host=host,
        listen_port=port,
        upstream=args.upstream,
        scenarios=scenarios,
        default_scenario=args.scenario,
        log=log,
        seed=args.seed,
        mock_tokens=args.mock_tokens,
        mock_interval=args.mock_interval_ms / 1000.0,
        admin=args.admin,
        admin_token=args.admin_token or None,
        trace_dir=args.trace_dir or None,
    )

    async def serve() -> int:
        try:
            proxy = await start_proxy(options)
        except StartupError as exc:
            log.close()
            return fail(str(exc))
        names = ", ".join(scenarios) or "none"
        upstream = (
            f"mock (built in, {proxy.upstream})" if args.upstream == "mock" else proxy.upstream
        )
        admin = "off"
        if proxy.admin_url is not None:
            admin = proxy.admin_url + (" (bearer token)" if options.admin_token else "")
        extras = f"; traces: {args.trace_dir}" if args.trace_dir else ""
        print(
            f"chaosproxy {__version__} listening on {proxy.url} → {upstream}; "
            f"scenarios: {names}; default: {args.scenario or 'passthrough'}; "
            f"seed: {args.seed if args.seed is not None else 'random'}; "
            f"admin: {admin}{extras}",
            file=sys.stderr,
            flush=True,
        )
        try:
            await _until_signalled()
        finally:
            await proxy.close()
            log.close()
        return 0

    return _run(serve)


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # non-POSIX
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _run(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.run(main())
    result: int = uvloop.run(main())
    return result


# ---------------------------------------------------------------------------- mock


def cmd_mock(args: argparse.Namespace) -> int:
    from chaosproxy.server import start_mock

    host, port = args.listen
    interval = args.interval_ms / 1000.0
    return _serve_app(
        lambda: start_mock(host, port, tokens=args.tokens, interval=interval),
        lambda url: f"chaosproxy mock listening on {url}",
    )


# ---------------------------------------------------------------------------- replay


def cmd_replay(args: argparse.Namespace) -> int:
    from chaosproxy.replay import TraceError, describe, load_trace, start_replay

    try:
        trace = load_trace(args.trace)
    except TraceError as exc:
        return fail(str(exc))
    host, port = args.listen
    return _serve_app(
        lambda: start_replay(trace, host, port),
        lambda url: f"chaosproxy replay listening on {url}; {args.trace}: {describe(trace)}",
    )


def _serve_app(
    start: Callable[[], Awaitable[tuple[web.AppRunner, str]]],
    banner: Callable[[str], str],
) -> int:
    """Start an app, print its start-up line, serve until SIGINT/SIGTERM, clean up."""
    from chaosproxy.server import StartupError

    async def serve() -> int:
        try:
            runner, url = await start()
        except StartupError as exc:
            return fail(str(exc))
        print(banner(url), file=sys.stderr, flush=True)
        try:
            await _until_signalled()
        finally:
            await runner.cleanup()
        return 0

    return _run(serve)


# ---------------------------------------------------------------------------- validate


def cmd_validate(args: argparse.Namespace) -> int:
    from chaosproxy.scenario import validate_paths

    problems = validate_paths(args.paths)
    for problem in problems:
        print(problem)
    return EXIT_USAGE if problems else 0


# ---------------------------------------------------------------------------- simulate


def cmd_simulate(args: argparse.Namespace) -> int:
    from chaosproxy.scenario import ScenarioError, load_scenario_file
    from chaosproxy.simulate import simulate

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
