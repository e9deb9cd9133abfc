"""What every command's process shares, below the command line itself: one-line
failures and notices on stderr (credentials masked), settings read from the
environment (the argparse types of the settings are ``server/config.py``'s ``argtype``);
and running a proxy as this process (the event loop, the signals and the exit deadline,
the garbage collector settled, the start-up lines and the health check's warning),
for ``serve`` and for each of ``serve --workers``'s processes.

Here, not in chaosproxy/cli/, so that the matrix, explore and the workers can use it
while the command line uses them (docs/architecture.md, The arrows).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from chaosproxy._build import __version__, build
from chaosproxy.server.config import Config, from_environment

if TYPE_CHECKING:
    from chaosproxy.control.start import RunningProxy


EXIT_USAGE = 2


#: After the signal, ``serve`` exits within ``grace + EXIT_MARGIN`` seconds whatever
#: happens: the watchdog fires just after the stop's own deadline (``grace +
#: CLOSE_MARGIN``), which reports what it abandoned. docs/operations.md, "Shutdown",
#: promises ``grace + 1 s``: the rest is for what a busy machine makes of the exit's
#: own steps. Measured at load 20 on two cores (20 processes spinning the CPU, 210
#: streams flooding the proxy; docs/operations.md, "Shutdown"): the watchdog thread
#: woke 0.05-0.12 s late (the GIL, from a main thread the scheduler runs a tenth of
#: the time), the last words took up to 0.27 s where they were given 0.15 (each GIL
#: hand-over back to the main thread another wait), and the kernel's teardown of the
#: process (420 sockets with megabytes queued) 0.38-0.78 s from ``os._exit`` to the
#: parent seeing the exit. At 0.5, that was 2.14-2.78 s from the signal for grace 1 s;
#: now (the GIL kept, the teardown handed over) 1.46-2.54 s, 15 runs of 19 within 2.0.
EXIT_MARGIN = 0.3
#: While the process exits, the GIL's switch interval: the thread exiting keeps the GIL
#: until it blocks itself, instead of handing it back to the main thread every 5 ms
#: (Python's default), each hand-over a wait for the scheduler on a loaded machine.
EXITING_SWITCH_INTERVAL = 1.0


def _safe(text: str) -> str:
    """``text`` as it may be printed: no URL password, no query credential."""
    from chaosproxy.observe.logs import redact_text

    return redact_text(text)


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
    from chaosproxy.observe.logs import redact_url
    from chaosproxy.server.routes import MOCK

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
        f"{_client_choices(config)}; admin: {admin}{extras}; replica: {config.replica}; "
        f"state: {_state(config)}"
    )


def _state(config: Config) -> str:
    """Where what spans requests is kept (``--state``: docs/fleet.md)."""
    from chaosproxy.observe.logs import redact_url

    if not config.shared:
        return "memory (this process alone: replicas behind a balancer share nothing)"
    return f"{redact_url(config.state)}, fleet {config.fleet} (shared by its replicas)"


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
    from chaosproxy.control.start import is_loopback

    notices: list[str] = []
    if config.record_on_miss is not None and config.record_upstream is not None:
        notices.append(
            f"the mock records what no fixture matches: asked of {config.record_upstream} "
            f"once, appended to {config.record_on_miss} (docs/mock.md, Recording)"
        )
    if config.admin is None or not is_loopback(config.admin[0]):
        return notices
    if is_loopback(config.listen[0]):
        return notices
    # Reachable proxy, loopback admin: a container's default. Say how to publish it.
    token = "" if config.admin_token else " and CHAOSPROXY_ADMIN_TOKEN"
    return [
        *notices,
        f"the admin API is on loopback only ({proxy.admin_url}); to publish it, set "
        f"CHAOSPROXY_ADMIN=0.0.0.0:{config.admin[1]}{token}",
    ]


def _health_check_warning(config: Config, proxy: RunningProxy) -> str | None:
    """A warning when the container's health check (chaosproxy.healthcheck, as the
    image's HEALTHCHECK runs it) cannot reach what it asks: the admin API's ``/health``
    (asked here as the check asks it), or with the admin off the proxy's port (whose
    address is only looked up: a connection to the proxy would count as a client, and
    could take a place under --max-connections). Blocking: run it in a thread."""
    from chaosproxy.control import healthcheck

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
        sys.setswitchinterval(EXITING_SWITCH_INTERVAL)
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
        _hand_over_teardown()
        os._exit(0)


def _hand_over_teardown() -> None:
    """Leave the kernel's teardown of this process's sockets and memory to a child that
    outlives it by a moment, so that the process itself ends at once.

    The exit of a process with hundreds of connections (megabytes queued in each) is
    work for the kernel, done before its parent sees it end: 0.13 s on an idle
    two-core machine, up to 0.78 s beside 20 processes spinning the CPU. A child forked
    here shares every socket and page with it (copy-on-write: no copy made), so the
    process's own exit only drops its references, and the child, which does nothing
    but wait for the end of a pipe only this process holds open, drops the last ones
    when it follows (the connections end then, as they would have). No fork (no
    memory, no process left): the process does the teardown itself, as before."""
    try:
        # (The child inherits this thread's mask: a SIGINT to the process group in its
        # moment must not run the stop's handler there, which would write again.)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        done, alive = os.pipe()
        child = os.fork()
    except OSError:
        return
    if child == 0:
        os.close(alive)
        with contextlib.suppress(BaseException):
            os.read(done, 1)  # end of file: the parent has exited
        os._exit(0)
    os.close(done)


def _run(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.run(main())
    result: int = uvloop.run(main())
    return result
