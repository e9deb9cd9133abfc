"""One configuration for the proxy, however it is started.

The command line (``chaosproxy serve``), the ``CHAOSPROXY_*`` environment, the Python
API (:class:`chaosproxy.ChaosProxy`) and the pytest plugin all fill one :class:`Config`.
Each setting is one field; a field with a ``flag`` is also a ``serve`` option and an
environment variable (``--connect-timeout`` ↔ ``CHAOSPROXY_CONNECT_TIMEOUT``), parsed by
the same function either way. Adding a setting is adding a field here.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from chaosproxy.core.framing import DEFAULT_MAX_SIZE
from chaosproxy.core.integrity import Envelope
from chaosproxy.core.seeds import MAX_SEED, SEED_RANGE, SEED_TEXT, SeedError, parse_seed_text, shown
from chaosproxy.observe.logs import LogFormat, LogLevel
from chaosproxy.server.routes import Route, RouteError, parse_route, parse_routes, split_environment

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


def parse_admin(value: str) -> HostPort | None:
    return None if value == "off" else parse_hostport(value)


def parse_seed(value: str) -> int:
    """A seed: digits only, from 0 to 2**63 - 1 (``chaosproxy.core.seeds``); thousands of
    digits get this message too, never Python's conversion limit."""
    try:
        return parse_seed_text(value)
    except SeedError:
        raise ConfigError(f"expected {SEED_TEXT}, got {shown(value)}") from None


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


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def parse_header_name(value: str) -> str:
    """An HTTP header name (RFC 9110 token), as given."""
    name = value.strip()
    if not _TOKEN.fullmatch(name):
        raise ConfigError(f"expected a header name, got {value!r}")
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


def _text(value: str) -> str:
    return value


# --------------------------------------------------------------------------- fields


@dataclass(frozen=True, slots=True)
class Flag:
    """How a field appears on the command line and in the environment."""

    name: str
    help: str
    parse: Callable[[str], Any] = _text
    metavar: str | None = None
    #: ``store``: one value; ``append``: repeatable (the environment separates values
    #: with ``os.pathsep``, or as ``split`` does); ``switch``: a flag without a value.
    kind: Literal["store", "append", "switch"] = "store"
    choices: tuple[str, ...] | None = None
    #: How the environment variable of an ``append`` flag is cut into values.
    split: Callable[[str], list[str]] | None = None

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.removeprefix("--").upper().replace("-", "_")


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
            "--listen", "address to listen on (default 127.0.0.1:8080)", parse_hostport, "HOST:PORT"
        ),
    )
    #: The upstreams: one URL (or ``mock``) is the fallback, ``PREFIX=URL`` routes a
    #: path prefix (docs/gateways.md). A plain string is taken as a one-value tuple
    #: (``ChaosProxy(upstream="https://...")``).
    upstream: tuple[str, ...] = field(
        default=("mock",),
        metadata=option(
            "--upstream",
            "the upstream's base URL, or mock for the built-in mock LLM (default mock); "
            "repeatable as PREFIX=URL to route by path prefix (the prefix is removed), a "
            "bare URL being the fallback; CHAOSPROXY_UPSTREAM separates values with "
            "spaces or commas",
            parse_upstream,
            "URL|mock|PREFIX=URL",
            kind="append",
            split=split_environment,
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
            "the admin API's address, or off (default 127.0.0.1:8478)",
            parse_admin,
            "HOST:PORT|off",
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
            "where the frame log goes: a file, or - for stdout (default -)",
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
            "DNS + TCP + TLS to the upstream, at most (default 10s)",
            parse_duration,
            "DURATION",
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
            "connections to each upstream, at most; requests beyond wait for one (default 4096, "
            "as --max-connections)",
            parse_positive_int,
            "N",
        ),
    )
    head_timeout: float = field(
        default=300.0,
        metadata=option(
            "--head-timeout",
            "from the request sent upstream to the upstream's response head, at most; then "
            "504 (default 300s)",
            parse_duration,
            "DURATION",
        ),
    )
    idle_timeout: float = field(
        default=300.0,
        metadata=option(
            "--idle-timeout",
            "the longest the upstream may send nothing mid-body; then the client's response "
            "is aborted (default 300s)",
            parse_duration,
            "DURATION",
        ),
    )
    hold_timeout: float = field(
        default=300.0,
        metadata=option(
            "--hold-timeout",
            "the longest a fault (stall, hang, delay) may hold a response with nothing sent; "
            "then the response is aborted, outcome cut (default 300s)",
            parse_duration,
            "DURATION",
        ),
    )
    client_timeout: float = field(
        default=60.0,
        metadata=option(
            "--client-timeout",
            "a client that has not sent its request head, or a keep-alive connection idle, "
            "this long is closed (default 60s)",
            parse_duration,
            "DURATION",
        ),
    )
    grace: float = field(
        default=2.0,
        metadata=option(
            "--grace",
            "on SIGTERM/SIGINT, how long streams in flight may go on before they are cut "
            "(default 2s)",
            parse_duration,
            "DURATION",
        ),
    )
    max_connections: int = field(
        default=4096,
        metadata=option(
            "--max-connections",
            "client connections beyond this are answered 503 at once (default 4096)",
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
        default=24,
        metadata=option(
            "--mock-tokens", "text deltas per mock answer (default 24)", parse_positive_int, "N"
        ),
    )
    mock_interval: float = field(
        default=0.02,
        metadata=option(
            "--mock-interval-ms",
            "milliseconds between the mock's events (default 20)",
            lambda v: parse_number(v) / 1000.0,
            "MS",
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
    #: ``serve`` only (docs/operations.md, Workers): processes sharing the port, the
    #: admin in one of them obeyed by all; 1 is one process as ever. The Python API
    #: runs one proxy in its own process whatever this says.
    workers: int = field(
        default=1,
        metadata=option(
            "--workers",
            "processes serving the port (SO_REUSEPORT), each with its own event loop; auto: "
            "one per core (default 1: one process)",
            parse_workers,
            "N|auto",
        ),
    )
    #: The largest event (or line) the framers hold before refusing a stream.
    max_event_size: int = field(default=DEFAULT_MAX_SIZE)
    #: Recent requests the admin API keeps, and frame lines kept per request.
    history: int = field(default=256)
    history_frames: int = field(default=1000)
    #: The largest request body the journal keeps (parsed, in ``proxy.requests()`` and
    #: the admin API) per request; a larger one keeps its summary only.
    history_body_bytes: int = field(default=256 * 1024)

    def __post_init__(self) -> None:
        seed: Any = self.seed
        if seed is not None and not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
            raise ConfigError(f"seed: expected {SEED_RANGE}")  # ChaosProxy(seed=...)
        envelope: Any = self.envelope
        if isinstance(envelope, str):  # ChaosProxy(envelope="stream=/id,...")
            object.__setattr__(self, "envelope", parse_envelope(envelope))
        if self.tenant_header is not None:  # ChaosProxy(tenant_header="X-User")
            object.__setattr__(self, "tenant_header", parse_header_name(self.tenant_header))
        fixtures: Any = self.mock_fixtures
        if isinstance(fixtures, str | os.PathLike):  # ChaosProxy(mock_fixtures="dir/")
            fixtures = (fixtures,)
        object.__setattr__(self, "mock_fixtures", tuple(os.fspath(f) for f in fixtures))
        value: Any = self.upstream
        values = (value,) if isinstance(value, str) else tuple(value)
        try:
            routes = parse_routes(values)
        except RouteError as exc:
            raise ConfigError(f"--upstream: {exc}") from None
        object.__setattr__(self, "upstream", tuple(r.text for r in routes))

    @property
    def routes(self) -> tuple[Route, ...]:
        """The upstreams, parsed (``--upstream``)."""
        return parse_routes(self.upstream)

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes`` (field names); unknown names are a TypeError."""
        unknown = set(changes) - NAMES
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)


NAMES = frozenset(f.name for f in dataclasses.fields(Config))


def flags() -> list[tuple[str, Flag, Any]]:
    """(field name, flag, default) for every setting that is a ``serve`` option."""
    return [
        (f.name, f.metadata["flag"], f.default)
        for f in dataclasses.fields(Config)
        if "flag" in f.metadata
    ]


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings the ``CHAOSPROXY_*`` environment gives, parsed (ConfigError)."""
    env = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for name, flag, _ in flags():
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
    "Config",
    "ConfigError",
    "Flag",
    "flags",
    "from_environment",
    "parse_duration",
    "parse_hostport",
]
