"""Several upstreams behind one proxy, chosen by path prefix (docs/gateways.md).

``--upstream`` is repeatable. Each value is either a bare URL (or ``mock``), the
*fallback* (at most one), or ``PREFIX=URL``: a request whose path is ``PREFIX`` or
starts with ``PREFIX/`` goes to ``URL``, with the prefix removed. The longest matching
prefix wins; a request no prefix matches goes to the fallback, and without one the
proxy answers it itself (404). Prefixes match whole segments, case-sensitively, as the
client wrote them (after the proxy's ``.``/``..`` resolution and the removal of a
``/_chaos/NAME/`` prefix): ``/anthropic`` matches ``/anthropic`` and
``/anthropic/v1/messages``, not ``/anthropical``.

This module is the parsing and the matching only (no I/O): :mod:`chaosproxy.server.config`
checks the values with it, :mod:`chaosproxy.server.proxy` routes each request with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from chaosproxy.observe.logs import redact_url

if TYPE_CHECKING:
    from chaosproxy.upstream import Upstream

#: The built-in mock LLM as an upstream.
MOCK = "mock"
#: Separates the values of ``CHAOSPROXY_UPSTREAM``: whitespace or commas (a URL holds
#: neither unencoded; ``os.pathsep`` would cut ``https://...`` at its colon).
ENV_SEPARATORS = " \t\r\n,"


class RouteError(ValueError):
    """An ``--upstream`` value (or the set of them) is not valid; one line."""


@dataclass(frozen=True, slots=True)
class Route:
    """One ``--upstream`` value: a prefix (``""`` for the fallback) and its URL."""

    prefix: str
    #: The upstream's base URL (no trailing ``/``), or ``mock``.
    url: str

    @property
    def text(self) -> str:
        """The value as it is written on the command line, normalised."""
        return f"{self.prefix}={self.url}" if self.prefix else self.url


def check_url(value: str) -> str:
    """An upstream URL (http or https, a host, an optional path; no query, fragment),
    or ``mock``; returned without a trailing ``/``."""
    if value == MOCK:
        return value
    shown = _shown(value)
    if not value.startswith(("http://", "https://")):
        raise RouteError(f"expected an http(s) URL or 'mock', got {shown}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        raise RouteError(f"expected an http(s) URL or 'mock', got {shown}") from None
    if not parts.hostname:
        raise RouteError(f"expected an http(s) URL or 'mock', got {shown}")
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise RouteError(f"an upstream URL cannot have a query or a fragment, got {shown}")
    if any(c.isspace() for c in value):
        raise RouteError(f"an upstream URL cannot contain whitespace, got {shown}")
    return value.rstrip("/")


def check_prefix(prefix: str) -> str:
    """A route prefix: ``/`` then whole segments; returned without a trailing ``/``."""
    if not prefix.startswith("/"):
        raise RouteError(f"a route prefix must start with /, got {prefix!r}")
    trimmed = prefix.rstrip("/")
    if not trimmed:
        raise RouteError(
            "the route prefix / matches every path: give that upstream as a bare URL (the fallback)"
        )
    if any(c.isspace() or c in "?#=" for c in trimmed):
        raise RouteError(f"a route prefix cannot contain whitespace, ?, # or =, got {prefix!r}")
    segments = trimmed[1:].split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise RouteError(f"a route prefix cannot have empty, . or .. segments, got {prefix!r}")
    if segments[0] == "_chaos":
        raise RouteError(
            f"a route prefix cannot start with /_chaos (the scenario prefix), got {prefix!r}"
        )
    return trimmed


def parse_route(value: str) -> Route:
    """One ``--upstream`` value: ``URL``, ``mock`` or ``PREFIX=URL``."""
    if value == MOCK or value.startswith(("http://", "https://")):
        return Route("", check_url(value))
    prefix, sep, url = value.partition("=")
    if not sep:
        raise RouteError(f"expected an http(s) URL or 'mock' (or PREFIX=URL), got {_shown(value)}")
    return Route(check_prefix(prefix), check_url(url))


def parse_routes(values: Iterable[str]) -> tuple[Route, ...]:
    """Every ``--upstream`` value, checked together: at most one fallback, no prefix
    twice, at least one value."""
    routes = tuple(parse_route(v) for v in values)
    if not routes:
        raise RouteError("no upstream: give a URL, mock, or PREFIX=URL")
    fallbacks = [r for r in routes if not r.prefix]
    if len(fallbacks) > 1:
        urls = " and ".join(_shown(r.url) for r in fallbacks)
        raise RouteError(
            f"two fallback upstreams ({urls}): give every upstream but one a PREFIX=URL"
        )
    seen: set[str] = set()
    for route in routes:
        if route.prefix in seen:
            raise RouteError(f"the route prefix {route.prefix} is given twice")
        seen.add(route.prefix)
    return routes


def split_environment(value: str) -> list[str]:
    """``CHAOSPROXY_UPSTREAM``'s values: separated by whitespace or commas."""
    for sep in ENV_SEPARATORS[1:]:
        value = value.replace(sep, " ")
    return value.split()


def host_label(url: str) -> str:
    """``host`` or ``host:port`` of ``url`` as written (never its user, password or
    path): how the ``request`` log line names an upstream."""
    if url == MOCK:
        return MOCK
    parts = urlsplit(url)
    host = parts.hostname or "?"
    host = f"[{host}]" if ":" in host else host
    try:
        port = parts.port
    except ValueError:
        port = None
    return host if port is None else f"{host}:{port}"


def _shown(value: str) -> str:
    return repr(redact_url(value))


# --------------------------------------------------------------------------- at run time


@dataclass(slots=True)
class Target:
    """One upstream while the proxy runs: its base URL (the mock's own for ``mock``)
    and, once the app has started, its client."""

    url: str
    #: ``host[:port]``, for the log.
    label: str
    #: The built-in mock, on loopback: reached directly, never through a forward proxy.
    direct: bool = False
    upstream: Upstream | None = field(default=None, repr=False)


class RouteTable:
    """The routes of a running proxy: which :class:`Target` serves a path, and the
    path to forward to it. Several routes to one URL share one target (one pool)."""

    def __init__(self, routes: Iterable[Route], resolve: dict[str, str] | None = None) -> None:
        """``resolve`` maps a configured URL (``mock``) to the URL to reach it by."""
        resolve = resolve or {}
        self.targets: dict[str, Target] = {}
        self.fallback: Target | None = None
        prefixed: list[tuple[str, Target]] = []
        for route in routes:
            url = resolve.get(route.url, route.url)
            target = self.targets.get(url)
            if target is None:
                target = Target(url, host_label(url), direct=route.url == MOCK)
                self.targets[url] = target
            if route.prefix:
                prefixed.append((route.prefix, target))
            else:
                self.fallback = target
        #: Longest prefix first: the first that matches is the longest.
        self.prefixed = sorted(prefixed, key=lambda p: len(p[0]), reverse=True)

    def match(self, path_qs: str) -> tuple[Target, str] | None:
        """(target, path and query to forward) for ``path_qs``; None when no route
        matches and there is no fallback."""
        path = path_qs.split("?", 1)[0]
        for prefix, target in self.prefixed:
            if path == prefix or path.startswith(prefix + "/"):
                rest = path_qs[len(prefix) :]
                return target, rest if rest.startswith("/") else "/" + rest
        if self.fallback is not None:
            return self.fallback, path_qs
        return None

    @property
    def first(self) -> Target:
        """The fallback, else the first target: the proxy's upstream when one is asked
        for (``ProxyState.upstream``)."""
        return self.fallback or next(iter(self.targets.values()))


__all__ = [
    "ENV_SEPARATORS",
    "MOCK",
    "Route",
    "RouteError",
    "RouteTable",
    "Target",
    "check_prefix",
    "check_url",
    "host_label",
    "parse_route",
    "parse_routes",
    "split_environment",
]
