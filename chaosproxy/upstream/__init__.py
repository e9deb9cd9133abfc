"""chaosproxy's HTTP/1.1 client for the upstream: a keep-alive pool of raw asyncio
protocols that parse responses with httptools and push each read's body to a sink.

Its own client rather than aiohttp's because it is the hot path: no future or task per
body read (see :mod:`.connection`). What the proxy needs of it is :mod:`.interface`;
:mod:`.testing` is this client over in-memory sockets, scripted, for tests.
"""

from chaosproxy.upstream.errors import (
    UpstreamClosed,
    UpstreamConnectError,
    UpstreamError,
    UpstreamHeadTimeout,
    UpstreamIdleTimeout,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from chaosproxy.upstream.interface import Reply, Upstream
from chaosproxy.upstream.pool import PoolStats, UpstreamPool
from chaosproxy.upstream.response import BodySink, UpstreamResponse

__all__ = [
    "BodySink",
    "PoolStats",
    "Reply",
    "Upstream",
    "UpstreamClosed",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamHeadTimeout",
    "UpstreamIdleTimeout",
    "UpstreamPool",
    "UpstreamProtocolError",
    "UpstreamResponse",
    "UpstreamTimeout",
]
