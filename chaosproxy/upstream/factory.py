"""The upstream client the proxy uses for one upstream URL, built from the settings."""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

from chaosproxy.upstream.pool import UpstreamPool
from chaosproxy.upstream.tls import TlsSettings, has_tls_files, tls_context


class PoolSettings(TlsSettings, Protocol):
    """The plain values a pool is made of, named as the settings name them (the server's
    ``Config`` has them)."""

    @property
    def connect_timeout(self) -> float: ...
    @property
    def upstream_max_connections(self) -> int: ...


def pool_for(url: str, config: PoolSettings, *, direct: bool = False) -> UpstreamPool:
    """A keep-alive pool to ``url`` with the upstream settings of ``config``; ``direct``
    (the built-in mock, on loopback) never goes through a forward proxy.

    Raises :class:`~chaosproxy.upstream.errors.StartupError` (one line) for TLS settings that cannot
    work, whatever the URL's scheme (a mistake is said at start, not at the first https
    request). An http URL without TLS files builds no context (loading the system store
    is some 20 ms of CPU a pool, for nothing)."""
    https = urlsplit(url).scheme == "https"
    context = tls_context(config) if https or has_tls_files(config) else None
    ssl_context = context if https else None
    pool = UpstreamPool(
        url,
        connect_timeout=config.connect_timeout,
        ssl_context=ssl_context,
        max_connections=config.upstream_max_connections,
    )
    if direct:
        pool.connect_directly()
    return pool
