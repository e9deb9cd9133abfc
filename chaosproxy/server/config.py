"""One configuration for the proxy, however it is started.

The command line (``chaosproxy serve``), the ``CHAOSPROXY_*`` environment, the Python
API (:class:`chaosproxy.ChaosProxy`) and the pytest plugin all fill one :class:`Config`.
Each setting is one field; a field with a ``flag`` is also a ``serve`` option and an
environment variable (``--connect-timeout`` ↔ ``CHAOSPROXY_CONNECT_TIMEOUT``), parsed by
the same function either way. Adding a setting is adding a field here.

The options of the other commands that take a setting (``mock --tokens``, ``matrix
--upstream``, ...) are generated from the same fields (:func:`add_flags`), under their
own names or help where they differ; every flag is also a ``ChaosProxy(...)`` argument
(:data:`ARGUMENTS` for the one not named after its field). A default is written once:
the field's, which a help shows as ``{default}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from chaosproxy.core.framing import DEFAULT_MAX_SIZE
from chaosproxy.core.integrity import Envelope
from chaosproxy.core.mock_defaults import DEFAULT_INTERVAL, DEFAULT_TOKENS
from chaosproxy.core.redact import redact_url
from chaosproxy.core.seeds import MAX_SEED, SEED_RANGE, SEED_TEXT, SeedError, parse_seed_text, shown
from chaosproxy.core.tenancy import AnonymousRequests
from chaosproxy.observe.journal import DEFAULT_ENTRY_BYTES
from chaosproxy.observe.logs import LogFormat, LogLevel
from chaosproxy.observe.store import DEFAULT_HISTORY, DEFAULT_MAX_BYTES, DEFAULT_MAX_FRAMES
from chaosproxy.server.routes import (
    MOCK,
    Route,
    RouteError,
    check_url,
    parse_route,
    parse_routes,
    split_environment,
)

HostPort = tuple[str, int]
ENV_PREFIX = "CHAOSPROXY_"


class ConfigError(ValueError):
    """A setting's value is not valid; the message is one line."""


# --------------------------------------------------------------------------- parsers
# Each takes the text of a flag or an environment variable.


def parse_hostport(value: str) -> HostPort:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_upstream(value: str) -> str:
    """One ``--upstream`` value: a URL or ``mock`` (the fallback), or ``PREFIX=URL``
    (docs/gateways.md); normalised (no trailing ``/``)."""
    try:
        return parse_route(value).text
    except RouteError as exc:
        raise ConfigError(str(exc)) from None


def parse_real_upstream(value: str) -> str:
    """A real upstream's URL (``--record-upstream``): http or https, not ``mock``;
    normalised (no trailing ``/``)."""
    if value == MOCK:
        raise ConfigError("expected the real upstream's http(s) URL, not 'mock'")
    try:
        return check_url(value)
    except RouteError as exc:
        raise ConfigError(str(exc)) from None


def parse_admin(value: str) -> HostPort | None:
    return None if value == "off" else parse_hostport(value)


def parse_seed(value: str) -> int:
    """A seed: digits only, from 0 to 2**63 - 1 (``chaosproxy.core.seeds``); thousands of
    digits get this message too, never Python's conversion limit."""
    try:
        return parse_seed_text(value)
    except SeedError:
        raise ConfigError(f"expected {SEED_TEXT}, got {shown(value)}") from None


#: A fleet's or a replica's name: what Redis keys and log fields carry.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")


def parse_state(value: str) -> str:
    """``--state``: ``memory`` (one process), or a Redis URL (``redis://`` or
    ``rediss://``, docs/fleet.md). The message never shows the URL's password."""
    from urllib.parse import urlsplit

    text = value.strip()
    if text == "memory":
        return text
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ConfigError(
            f"expected memory or a Redis URL (redis://HOST:PORT/DB, rediss:// for TLS), "
            f"got {redact_url(text)!r}"
        )
    return text


def parse_secret(value: str) -> str:
    """``--tenant-secret``: at least 16 characters (what a replica derives tenant keys
    from: a guessable one would let a client forge another tenant's)."""
    if len(value) < 16:
        raise ConfigError("expected a secret of at least 16 characters")
    return value


def parse_name(value: str) -> str:
    """``--fleet`` and ``--replica-id``: letters, digits, ``_ . : -``, at most 63."""
    if not _NAME.fullmatch(value):
        raise ConfigError(
            f"expected a name of letters, digits, _ . : - (at most 63, a letter or "
            f"digit first), got {shown(value)}"
        )
    return value


def parse_workers(value: str) -> int:
    """``--workers``: a positive integer, or ``auto`` (the cores this process may use)."""
    if value.strip().lower() == "auto":
        try:
            return len(os.sched_getaffinity(0)) or 1
        except (AttributeError, OSError):
            return os.cpu_count() or 1
    if not value.isdigit() or not 1 <= int(value) <= 1024:
        raise ConfigError(f"expected auto or a number of workers from 1 to 1024, got {value!r}")
    return int(value)


def parse_positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"expected a positive integer, got {value!r}")
    return int(value)


def parse_count(value: str) -> int:
    """A whole number, 0 or more."""
    if not value.isdigit():
        raise ConfigError(f"expected a whole number >= 0, got {value!r}")
    return int(value)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def parse_header_name(value: str) -> str:
    """An HTTP header name (RFC 9110 token), as given."""
    name = value.strip()
    if not _TOKEN.fullmatch(name):
        raise ConfigError(f"expected a header name, got {value!r}")
    return name


def parse_cookie_name(value: str) -> str:
    """A cookie's name (RFC 6265: a token), as given, or ``*`` (every cookie)."""
    name = value.strip()
    if not _TOKEN.fullmatch(name):
        raise ConfigError(f"expected a cookie name, or * for every cookie, got {value!r}")
    return name


def parse_envelope(value: str) -> Envelope:
    try:
        return Envelope.parse(value)
    except ValueError as exc:
        raise ConfigError(f"--envelope: {exc}") from None


def parse_number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"expected a number, got {value!r}") from None
    if not number >= 0:
        raise ConfigError(f"expected a number >= 0, got {value!r}")
    return number


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}


def parse_duration(value: str) -> float:
    """``250ms``, ``2s``, ``1m`` → seconds. A bare number is refused, so nobody takes
    seconds for milliseconds."""
    m = _DURATION.fullmatch(value.strip())
    if m is None:
        raise ConfigError(f"expected a duration with a unit (250ms, 2s, 1m), got {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_duration_or_off(value: str) -> float:
    """A duration, or ``off`` (0: never)."""
    if value.strip().lower() == "off":
        return 0.0
    try:
        return parse_duration(value)
    except ConfigError:
        raise ConfigError(
            f"expected a duration with a unit (250ms, 2s, 1m) or off, got {value!r}"
        ) from None


def parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(f"expected true or false, got {value!r}")


def parse_yes_no(value: str) -> bool:
    """``yes`` or ``no`` (or any other spelling :func:`parse_bool` takes), not empty."""
    try:
        if value.strip():
            return parse_bool(value)
    except ConfigError:
        pass
    raise ConfigError(f"expected yes or no, got {shown(value)}")


_SIZE = re.compile(r"(\d{1,15})\s*([kKmMgG]i?[bB]|[bB])?")
_SIZE_UNITS = {"b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3}
_SIZE_UNITS.update(kb=1000, mb=1000**2, gb=1000**3)


def parse_size(value: str) -> int:
    """A size in bytes, 1 or more: digits, or with a unit (``512KiB``, ``64MiB``,
    ``100kB``), as a scenario's sizes (``resume.max_bytes``) are written."""
    m = _SIZE.fullmatch(value.strip())
    size = int(m.group(1)) * _SIZE_UNITS[(m.group(2) or "b").lower()] if m else 0
    if size < 1:
        raise ConfigError(f"expected a size (bytes, or 512KiB, 64MiB), got {shown(value)}")
    return size


def show_size(size: int) -> str:
    """A size as a flag takes it: ``64KiB``, ``32MiB``, else bytes."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def _text(value: str) -> str:
    return value


# --------------------------------------------------------------------------- fields


def show_hostport(value: HostPort) -> str:
    return f"{value[0]}:{value[1]}"


def show_duration(seconds: float) -> str:
    """A duration as a flag takes it: ``10s``, ``250ms``."""
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000, 6):g}ms"


def show_duration_or_off(seconds: float) -> str:
    return show_duration(seconds) if seconds else "off"


def _show_milliseconds(seconds: float) -> str:
    return f"{round(seconds * 1000, 6):g}"


def _milliseconds(value: Any) -> float:
    """``ChaosProxy(mock_interval_ms=20)``: a number of milliseconds → seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"expected a number of milliseconds >= 0, got {value!r}")
    return value / 1000.0


@dataclass(frozen=True, slots=True)
class Flag:
    """How a field appears on the command line and in the environment."""

    name: str
    #: ``{default}`` in it is the field's default, as ``show`` writes it.
    help: str
    parse: Callable[[str], Any] = _text
    metavar: str | None = None
    #: ``store``: one value; ``append``: repeatable (the environment separates values
    #: with ``os.pathsep``, or as ``split`` does); ``switch``: a flag without a value.
    kind: Literal["store", "append", "switch"] = "store"
    choices: tuple[str, ...] | None = None
    #: How the environment variable of an ``append`` flag is cut into values.
    split: Callable[[str], list[str]] | None = None
    #: How the help text and the docs write the field's default.
    show: Callable[[Any], str] = str
    #: When the flag is not named after its field (``--mock-interval-ms``, field
    #: ``mock_interval``): how a value of the ``ChaosProxy(...)`` argument named after
    #: the flag (``mock_interval_ms=20``) becomes the field's value.
    convert: Callable[[Any], Any] | None = None

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.argument.upper()

    @property
    def argument(self) -> str:
        """The ``ChaosProxy(...)`` keyword named after the flag."""
        return self.name.removeprefix("--").replace("-", "_")


def option(
    name: str, help: str, parse: Callable[[str], Any] = _text, metavar: str | None = None, **kw: Any
) -> dict[str, Flag]:
    """The metadata of a :class:`Config` field that is also a ``serve`` option."""
    return {"flag": Flag(name, help, parse, metavar, **kw)}


@dataclass(frozen=True)
class Config:
    """Every setting of a running proxy. Defaults are those of ``chaosproxy serve``;
    :class:`chaosproxy.ChaosProxy` changes a few (a free port, no admin, no log file)."""

    listen: HostPort = field(
        default=("127.0.0.1", 8080),
        metadata=option(
            "--listen",
            "address to listen on (default {default})",
            parse_hostport,
            "HOST:PORT",
            show=show_hostport,
        ),
    )
    #: The upstreams: one URL (or ``mock``) is the fallback, ``PREFIX=URL`` routes a
    #: path prefix (docs/gateways.md). A plain string is taken as a one-value tuple
    #: (``ChaosProxy(upstream="https://...")``).
    upstream: tuple[str, ...] = field(
        default=(MOCK,),
        metadata=option(
            "--upstream",
            "the upstream's base URL, or mock for the built-in mock LLM (default {default}); "
            "repeatable as PREFIX=URL to route by path prefix (the prefix is removed), a "
            "bare URL being the fallback; CHAOSPROXY_UPSTREAM separates values with "
            "spaces or commas",
            parse_upstream,
            "URL|mock|PREFIX=URL",
            kind="append",
            split=split_environment,
            show=" ".join,
        ),
    )
    scenarios: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "--scenarios",
            "a scenario file or a directory of *.yaml, added to the built-in library (one of "
            "the same name overrides it); repeatable",
            metavar="PATH",
            kind="append",
        ),
    )
    scenarios_poll: float = field(
        default=1.0,
        metadata=option(
            "--scenarios-poll",
            "how often the --scenarios files and directories are checked for changes, "
            "which apply without a restart; off: never (default {default})",
            parse_duration_or_off,
            "DURATION|off",
            show=show_duration_or_off,
        ),
    )
    scenario: str | None = field(
        default=None,
        metadata=option(
            "--scenario",
            "default scenario for requests that select none (default: passthrough)",
            metavar="NAME",
        ),
    )
    admin: HostPort | None = field(
        default=("127.0.0.1", 8478),
        metadata=option(
            "--admin",
            "the admin API's address, or off (default {default})",
            parse_admin,
            "HOST:PORT|off",
            show=show_hostport,
        ),
    )
    admin_token: str | None = field(
        default=None,
        metadata=option(
            "--admin-token",
            "bearer token the admin API requires (better: CHAOSPROXY_ADMIN_TOKEN)",
            metavar="TOKEN",
        ),
    )
    log: str | None = field(
        default="-",
        metadata=option(
            "--log",
            "where the frame log goes: a file, or - for stdout (default {default})",
            metavar="PATH|-",
        ),
    )
    log_format: LogFormat = field(
        default="auto",
        metadata=option(
            "--log-format",
            "auto: pretty on a terminal, JSON lines otherwise",
            choices=("auto", "json", "pretty"),
        ),
    )
    log_level: LogLevel = field(
        default="frames",
        metadata=option(
            "--log-level",
            "frames: every line (default, but requests when the log is a terminal); "
            "requests: every line but frame lines; off: no log (the admin API and metrics "
            "still see every line)",
            choices=("frames", "requests", "off"),
        ),
    )
    log_content: bool = field(
        default=False,
        metadata=option(
            "--log-content", "include payload text in the log", parse_bool, kind="switch"
        ),
    )
    trace_dir: str | None = field(
        default=None,
        metadata=option(
            "--trace-dir", "write one JSONL trace file per request here", metavar="DIR"
        ),
    )
    seed: int | None = field(
        default=None,
        metadata=option("--seed", "base seed (default random; always logged)", parse_seed, "N"),
    )
    #: Whether a client may choose its faults (docs/scenarios.md, Choosing the scenario
    #: for a request): no, in staging, so that only match:, rate: and the default do.
    trust_client_scenarios: bool = field(
        default=True,
        metadata=option(
            "--trust-client-scenarios",
            "yes (default): a client may choose its scenario and seed (X-Chaos-Scenario, "
            "X-Chaos-Seed, a /_chaos/NAME/ path prefix); no: those are ignored, counted, "
            "and only match:, rate: and the default choose (staging)",
            parse_yes_no,
            "yes|no",
        ),
    )
    connect_timeout: float = field(
        default=10.0,
        metadata=option(
            "--connect-timeout",
            "DNS + TCP + TLS to the upstream, at most (default {default})",
            parse_duration,
            "DURATION",
            show=show_duration,
        ),
    )
    upstream_ca: str | None = field(
        default=None,
        metadata=option(
            "--upstream-ca",
            "verify the upstream's TLS certificate against this CA bundle (PEM) instead of "
            "the system store",
            metavar="FILE",
        ),
    )
    upstream_insecure: bool = field(
        default=False,
        metadata=option(
            "--upstream-insecure",
            "do not verify the upstream's TLS certificate (loud warning at start and in /health)",
            parse_bool,
            kind="switch",
        ),
    )
    upstream_cert: str | None = field(
        default=None,
        metadata=option(
            "--upstream-cert",
            "a client certificate (PEM) to present to the upstream; with --upstream-key",
            metavar="FILE",
        ),
    )
    upstream_key: str | None = field(
        default=None,
        metadata=option(
            "--upstream-key",
            "the private key (PEM) of --upstream-cert",
            metavar="FILE",
        ),
    )
    upstream_max_connections: int = field(
        default=4096,
        metadata=option(
            "--upstream-max-connections",
            "connections to each upstream, at most; requests beyond wait for one (default "
            "{default}, as --max-connections)",
            parse_positive_int,
            "N",
        ),
    )
    head_timeout: float = field(
        default=300.0,
        metadata=option(
            "--head-timeout",
            "from the request sent upstream to the upstream's response head, at most; then "
            "504 (default {default})",
            parse_duration,
            "DURATION",
            show=show_duration,
        ),
    )
    idle_timeout: float = field(
        default=300.0,
        metadata=option(
            "--idle-timeout",
            "the longest the upstream may send nothing mid-body; then the client's response "
            "is aborted (default {default})",
            parse_duration,
            "DURATION",
            show=show_duration,
        ),
    )
    hold_timeout: float = field(
        default=300.0,
        metadata=option(
            "--hold-timeout",
            "the longest a fault (stall, hang, delay) may hold a response with nothing sent; "
            "then the response is aborted, outcome cut (default {default})",
            parse_duration,
            "DURATION",
            show=show_duration,
        ),
    )
    client_timeout: float = field(
        default=60.0,
        metadata=option(
            "--client-timeout",
            "a client that has not sent its request head, or a keep-alive connection idle, "
            "this long is closed (default {default})",
            parse_duration,
            "DURATION",
            show=show_duration,
        ),
    )
    grace: float = field(
        default=2.0,
        metadata=option(
            "--grace",
            "on SIGTERM/SIGINT, how long streams in flight may go on before they are cut "
            "(default {default})",
            parse_duration,
            "DURATION",
            show=show_duration,
        ),
    )
    max_connections: int = field(
        default=4096,
        metadata=option(
            "--max-connections",
            "client connections beyond this are answered 503 at once (default {default})",
            parse_positive_int,
            "N",
        ),
    )
    #: The admin port's own client limits (docs/admin-api.md, Limits): its clients are
    #: few (tests, operators), not the proxy's.
    admin_client_timeout: float = field(
        default=60.0,
        metadata=option(
            "--admin-client-timeout",
            "an admin API client that has not sent its request head, or an idle keep-alive "
            "connection to it, this long is closed (default {default})",
            parse_duration,
            "DURATION",
            show=show_duration,
        ),
    )
    admin_max_connections: int = field(
        default=256,
        metadata=option(
            "--admin-max-connections",
            "admin API connections beyond this are answered 503 at once (default {default})",
            parse_positive_int,
            "N",
        ),
    )
    admin_insecure: bool = field(
        default=False,
        metadata=option(
            "--admin-insecure",
            "allow the admin API on a non-loopback address without --admin-token",
            parse_bool,
            kind="switch",
        ),
    )
    mock_tokens: int = field(
        default=DEFAULT_TOKENS,
        metadata=option(
            "--mock-tokens",
            "text deltas per mock answer (default {default})",
            parse_positive_int,
            "N",
        ),
    )
    #: Seconds; its flag (and ``ChaosProxy(mock_interval_ms=...)``) is in milliseconds.
    mock_interval: float = field(
        default=DEFAULT_INTERVAL,
        metadata=option(
            "--mock-interval-ms",
            "milliseconds between the mock's events (default {default})",
            lambda v: parse_number(v) / 1000.0,
            "MS",
            show=_show_milliseconds,
            convert=_milliseconds,
        ),
    )
    #: Mock fixture files and directories (docs/mock.md, Fixtures); a plain string is
    #: taken as a one-value tuple (``ChaosProxy(mock_fixtures="fixtures/")``).
    mock_fixtures: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "--mock-fixtures",
            "a mock fixture file (YAML or JSON) or a directory of them: answers the built-in "
            "mock gives when a request matches, before its corpus; repeatable",
            metavar="PATH",
            kind="append",
        ),
    )
    #: Record-on-miss (docs/mock.md, Recording): a request no fixture matches goes to
    #: ``record_upstream`` once, and its streamed answer is appended to this fixture file
    #: and served from then on. Both or neither (``serve`` refuses to start otherwise).
    record_on_miss: str | None = field(
        default=None,
        metadata=option(
            "--record-on-miss",
            "a fixture file the built-in mock records into: a request no fixture matches "
            "goes to --record-upstream once, and its streamed answer becomes a fixture "
            "(appended to FILE, served from then on); needs --record-upstream",
            metavar="FILE",
        ),
    )
    record_upstream: str | None = field(
        default=None,
        metadata=option(
            "--record-upstream",
            "the real upstream that --record-on-miss asks (an http(s) URL)",
            parse_real_upstream,
            "URL",
        ),
    )
    envelope: Envelope | None = field(
        default=None,
        metadata=option(
            "--envelope",
            "JSON pointers to an application envelope's stream id and sequence number, "
            "checked by the contract monitor when a scenario sets no envelope: of its own "
            "(e.g. stream=/streamId,sequence=/sequence)",
            parse_envelope,
            "stream=PTR,sequence=PTR",
        ),
    )
    tenant_header: str | None = field(
        default=None,
        metadata=option(
            "--tenant-header",
            "a request header whose value is added to the tenant key (the client's "
            "credentials): resume history and splice sources are never shared across "
            "tenants (docs/reconnection.md)",
            parse_header_name,
            "NAME",
        ),
    )
    #: Where what spans requests is kept (docs/fleet.md): ``memory``, this process
    #: alone, or a Redis URL that every replica of a fleet names.
    state: str = field(
        default="memory",
        metadata=option(
            "--state",
            "memory (the default: this process alone) or redis://[user:password@]host:port/db "
            "(rediss:// for TLS): replicas naming one Redis and --fleet share request "
            "numbers, ordinals, seeds and admin changes (docs/fleet.md)",
            parse_state,
            "memory|URL",
        ),
    )
    fleet: str = field(
        default="chaosproxy",
        metadata=option(
            "--fleet",
            "the fleet's name in --state's Redis: fleets with other names share nothing "
            "(default {default})",
            parse_name,
            "NAME",
        ),
    )
    #: This replica's name on every log line and metric; None: the host's name.
    replica_id: str | None = field(
        default=None,
        metadata=option(
            "--replica-id",
            "this replica's name on every log line and metric, and in its seeds under "
            "--state memory (the host name unless given; a pod's name in Kubernetes)",
            parse_name,
            "NAME",
        ),
    )
    #: What tenant keys are derived from, the same on every replica (docs/fleet.md);
    #: None: drawn per process, or the fleet's from Redis. Never shown.
    tenant_secret: str | None = field(
        default=None,
        repr=False,
        metadata=option(
            "--tenant-secret",
            "a secret every replica is given: tenant keys derived from it are the same on "
            "each (with --state redis, the fleet draws one itself; never logged)",
            parse_secret,
            "TEXT",
        ),
    )
    #: This process among its fleet's when it is not the replica itself: a worker of
    #: ``serve --workers N`` (``pod-a/w0``). Set by the supervisor; no flag.
    fleet_member: str | None = field(default=None)
    state_timeout: float = field(
        default=0.05,
        metadata=option(
            "--state-timeout",
            "the longest a request waits for --state's Redis before it uses this "
            "replica's own state (default {default})",
            parse_duration,
            "DURATION",
            show=show_duration,
        ),
    )
    tenant_cookie: str | None = field(
        default=None,
        metadata=option(
            "--tenant-cookie",
            "a cookie whose value is added to the tenant key (a browser's session cookie; "
            "* for the whole Cookie header): cookie users are tenants as keyed users are "
            "(docs/reconnection.md)",
            parse_cookie_name,
            "NAME|*",
        ),
    )
    #: Requests with no credentials, tenant header or tenant cookie: ``apart`` (each
    #: its own tenant for ``splice`` and ``ids: upstream``; its stream's token alone
    #: finds its history) or ``shared`` (one anonymous tenant: the proxies of ``matrix``
    #: and ``explore``, which serve one client). Python API only (docs/reconnection.md).
    anonymous_requests: AnonymousRequests = field(default="apart")
    #: ``serve`` only (docs/operations.md, Workers): processes sharing the port, the
    #: admin in one of them obeyed by all; 1 is one process as ever. The Python API
    #: runs one proxy in its own process whatever this says.
    workers: int = field(
        default=1,
        metadata=option(
            "--workers",
            "processes serving the port (SO_REUSEPORT), each with its own event loop; auto: "
            "one per core (default {default}: one process)",
            parse_workers,
            "N|auto",
        ),
    )
    #: The largest event (or line) the framers hold before refusing a stream.
    max_event_size: int = field(default=DEFAULT_MAX_SIZE)
    #: Recent requests the admin API keeps, and frame lines kept per request.
    history: int = field(default=DEFAULT_HISTORY)
    history_frames: int = field(default=DEFAULT_MAX_FRAMES)
    #: What the admin API's history (the request store and its journal) holds at most,
    #: all requests together; the oldest go first (docs/operations.md, Memory bounds).
    history_bytes: int = field(
        default=DEFAULT_MAX_BYTES,
        metadata=option(
            "--history-bytes",
            "what the admin API's request history (frame lines, journal entries) holds "
            "at most, all requests together: the oldest requests are forgotten first "
            "(default {default})",
            parse_size,
            "SIZE",
            show=show_size,
        ),
    )
    #: What one journal entry keeps at most of what a client sent: header fields, then
    #: the body (with --log-content); a larger body keeps its size and hash only.
    journal_entry_bytes: int = field(
        default=DEFAULT_ENTRY_BYTES,
        metadata=option(
            "--journal-entry-bytes",
            "what the journal keeps at most of one request: its header fields (16KiB at "
            "most, each value cut to 1 KiB), then its body (with --log-content) if it "
            "fits; the rest is counted, not kept (default {default})",
            parse_size,
            "SIZE",
            show=show_size,
        ),
    )

    def __post_init__(self) -> None:
        seed: Any = self.seed
        if seed is not None and not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
            raise ConfigError(f"seed: expected {SEED_RANGE}")  # ChaosProxy(seed=...)
        envelope: Any = self.envelope
        if isinstance(envelope, str):  # ChaosProxy(envelope="stream=/id,...")
            object.__setattr__(self, "envelope", parse_envelope(envelope))
        # ChaosProxy(state=..., fleet=..., replica_id=...): checked as the flags are.
        object.__setattr__(self, "state", parse_state(self.state))
        object.__setattr__(self, "fleet", parse_name(self.fleet))
        if self.replica_id is not None:
            object.__setattr__(self, "replica_id", parse_name(self.replica_id))
        if self.tenant_secret is not None:
            parse_secret(self.tenant_secret)
        if self.tenant_header is not None:  # ChaosProxy(tenant_header="X-User")
            object.__setattr__(self, "tenant_header", parse_header_name(self.tenant_header))
        if self.tenant_cookie is not None:  # ChaosProxy(tenant_cookie="session")
            object.__setattr__(self, "tenant_cookie", parse_cookie_name(self.tenant_cookie))
        if self.anonymous_requests not in ("apart", "shared"):
            raise ConfigError(
                f"anonymous_requests: expected apart or shared, got {self.anonymous_requests!r}"
            )
        fixtures: Any = self.mock_fixtures
        if isinstance(fixtures, str | os.PathLike):  # ChaosProxy(mock_fixtures="dir/")
            fixtures = (fixtures,)
        object.__setattr__(self, "mock_fixtures", tuple(os.fspath(f) for f in fixtures))
        if self.record_upstream is not None:
            object.__setattr__(self, "record_upstream", parse_real_upstream(self.record_upstream))
        value: Any = self.upstream
        values = (value,) if isinstance(value, str) else tuple(value)
        try:
            routes = parse_routes(values)
        except RouteError as exc:
            raise ConfigError(f"--upstream: {exc}") from None
        object.__setattr__(self, "upstream", tuple(r.text for r in routes))

    @property
    def replica(self) -> str:
        """This replica's name: ``--replica-id``, else the host's name (a pod's)."""
        if self.replica_id is not None:
            return self.replica_id
        host = socket.gethostname().split(".", 1)[0]
        return host[:63] if _NAME.fullmatch(host[:63]) else "replica"

    @property
    def shared(self) -> bool:
        """Whether ``--state`` names a Redis that a fleet shares."""
        return self.state != "memory"

    @property
    def routes(self) -> tuple[Route, ...]:
        """The upstreams, parsed (``--upstream``)."""
        return parse_routes(self.upstream)

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes``: field names, or the name of a field's flag
        (``mock_interval_ms=20``, :data:`ARGUMENTS`); unknown names are a TypeError."""
        unknown = set(changes) - NAMES - set(ARGUMENTS)
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        for argument in set(changes) & set(ARGUMENTS):
            name, convert = ARGUMENTS[argument]
            if name in changes:
                raise TypeError(f"give {name} or {argument}, not both")
            changes[name] = convert(changes.pop(argument))
        return dataclasses.replace(self, **changes)


NAMES = frozenset(f.name for f in dataclasses.fields(Config))


def _flag(f: dataclasses.Field[Any], changes: Mapping[str, Any] | None = None) -> Flag:
    flag: Flag = f.metadata["flag"]
    if changes:
        flag = dataclasses.replace(flag, **changes)
    return dataclasses.replace(flag, help=flag.help.format(default=flag.show(f.default)))


def flags() -> list[tuple[str, Flag, Any]]:
    """(field name, flag, default) for every setting that is a ``serve`` option; the
    flag's help tells its default."""
    return [
        (f.name, _flag(f), f.default) for f in dataclasses.fields(Config) if "flag" in f.metadata
    ]


def _arguments() -> dict[str, tuple[str, Callable[[Any], Any]]]:
    found: dict[str, tuple[str, Callable[[Any], Any]]] = {}
    for name, flag, _ in flags():
        if flag.argument != name:
            if flag.convert is None:
                raise TypeError(f"{flag.name} is not named after {name}: give it a convert")
            found[flag.argument] = (name, flag.convert)
    return found


#: The ``ChaosProxy(...)`` arguments named after a flag that is not named after its
#: field: argument → (field, how its value becomes the field's). With the field names,
#: every ``serve`` flag is an argument.
ARGUMENTS = _arguments()

# --------------------------------------------------------------------------- argparse


def argtype(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag's parser as an argparse ``type``: its ConfigError is a usage error."""

    def convert(value: str) -> Any:
        try:
            return parse(value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value").removeprefix("parse_")
    return convert


def add_flags(
    parser: argparse.ArgumentParser,
    names: Iterable[str] | None = None,
    changes: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """The options of the settings ``names`` (fields with a flag; every one, as
    ``serve`` has them, by default), generated from their :class:`Flag`. ``changes``
    replaces attributes of a flag for this command: ``{"mock_tokens": {"name":
    "--tokens", "help": ...}}`` (``{default}`` in a help is the field's default). An
    option not given stays out of the namespace (:func:`given`), so that the
    environment can fill it."""
    fields = {f.name: f for f in dataclasses.fields(Config) if "flag" in f.metadata}
    changes = changes or {}
    unknown = (set(names or ()) | set(changes)) - set(fields)
    if unknown:
        raise TypeError(f"not a setting with a flag: {', '.join(sorted(unknown))}")
    for name in fields if names is None else names:
        flag = _flag(fields[name], changes.get(name))
        common: dict[str, Any] = {"dest": name, "help": flag.help, "default": argparse.SUPPRESS}
        if flag.kind == "switch":
            parser.add_argument(flag.name, action="store_true", **common)
        elif flag.kind == "append":
            parser.add_argument(
                flag.name, action="append", type=argtype(flag.parse), metavar=flag.metavar, **common
            )
        else:
            parser.add_argument(
                flag.name,
                type=argtype(flag.parse),
                metavar=flag.metavar,
                choices=flag.choices,
                **common,
            )


def given(args: argparse.Namespace, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The settings (of ``names``; all by default) given on the command line as options
    of :func:`add_flags`, ready for :class:`Config` (a repeated option is a tuple)."""
    wanted = NAMES if names is None else frozenset(names)
    found = {k: v for k, v in vars(args).items() if k in wanted}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in found.items()}


def command_settings(
    args: argparse.Namespace, names: Iterable[str], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The settings ``names`` of a command: as given on its command line (options of
    :func:`add_flags`), else as their ``CHAOSPROXY_*`` variables give them; those given
    neither way are left out (their defaults are the command's). Raises ConfigError
    for a bad variable."""
    names = tuple(names)
    on_line = given(args, names)
    rest = [n for n in names if n not in on_line]
    return {**from_environment(environ, rest), **on_line}


def default(name: str) -> Any:
    """The default of the setting ``name`` (a :class:`Config` field)."""
    value = Config.__dataclass_fields__[name].default
    if value is dataclasses.MISSING:
        raise TypeError(f"{name} has no default")
    return value


def from_environment(
    environ: Mapping[str, str] | None = None, names: Iterable[str] | None = None
) -> dict[str, Any]:
    """The settings (of ``names``; all by default) the ``CHAOSPROXY_*`` environment
    gives, parsed (ConfigError); the variables of other settings are not read."""
    env = os.environ if environ is None else environ
    wanted = None if names is None else frozenset(names)
    found: dict[str, Any] = {}
    for name, flag, _ in flags():
        if wanted is not None and name not in wanted:
            continue
        raw = env.get(flag.env)
        if raw is None or (raw == "" and flag.kind != "switch"):
            continue
        try:
            if flag.kind == "append":
                parts = flag.split(raw) if flag.split else raw.split(os.pathsep)
                found[name] = tuple(flag.parse(p) for p in parts if p)
            elif flag.kind == "switch":
                found[name] = parse_bool(raw)
            else:
                value = flag.parse(raw)
                if flag.choices is not None and value not in flag.choices:
                    raise ConfigError(f"expected one of {', '.join(flag.choices)}, got {raw!r}")
                found[name] = value
        except ConfigError as exc:
            raise ConfigError(f"{flag.env}: {exc}") from None
    return found


__all__ = [
    "ARGUMENTS",
    "Config",
    "ConfigError",
    "Flag",
    "add_flags",
    "argtype",
    "command_settings",
    "default",
    "flags",
    "from_environment",
    "given",
    "parse_duration",
    "parse_hostport",
]
