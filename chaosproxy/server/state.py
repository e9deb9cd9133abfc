"""What every request of one proxy shares (:class:`ProxyState`): its settings and its
live parts, reachable from the aiohttp application as ``app[STATE]``.

Apart from chaosproxy/server/proxy.py, which makes the requests' exchanges, so that an
exchange can know its proxy's state without importing the module that makes it.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from aiohttp import web

from chaosproxy.core.recent import RecentStreams
from chaosproxy.core.tenancy import TenantKeys
from chaosproxy.observe.journal import RequestEntry
from chaosproxy.observe.logs import FrameLog, redact_url
from chaosproxy.scenario.selection import FleetCounterSource, ScenarioSet
from chaosproxy.server.config import Config
from chaosproxy.server.resume import ResumeManager, reader_share
from chaosproxy.server.routes import Route, RouteTable
from chaosproxy.upstream import Upstream


class Running(Protocol):
    """A request between its ``request`` and ``response_end`` lines, as stopping the
    proxy sees it (:class:`~chaosproxy.server.exchange.Exchange`)."""

    def stop(self) -> None:
        """End it now, outcome ``shutdown``."""

    def last_words(self) -> bool:
        """Write its ``response_end`` from the exit's watchdog; whether it wrote one."""


def tenant_keys(config: Config, secret: bytes) -> TenantKeys:
    """The tenant keys of a proxy with these settings, under ``secret`` (drawn once per
    proxy; one for every worker of ``serve --workers N``; the fleet's, from Redis), or
    under ``--tenant-secret`` when it is given (replicas that share no Redis)."""
    if config.tenant_secret is not None:
        secret = hashlib.sha256(
            b"chaosproxy tenant secret\0" + config.tenant_secret.encode()
        ).digest()
    return TenantKeys(secret, config.tenant_header, config.tenant_cookie, config.anonymous_requests)


@dataclass(slots=True)
class ProxyState:
    """What every request of one proxy shares: its settings and its live parts."""

    config: Config
    #: The upstream's base URL (the mock's own when it is ``mock``): the fallback's, or
    #: the first route's when there is no fallback.
    upstream_url: str
    scenarios: ScenarioSet
    log: FrameLog
    #: Builds the upstream client (tests inject a double), once per upstream;
    #: default: ``pool_for(url, config)``.
    upstream_factory: Callable[[], Upstream] | None = None
    #: The client of ``upstream_url``, while the app runs.
    upstream: Upstream = None  # type: ignore[assignment]
    #: Set when the proxy starts stopping: responses it ends are ``shutdown``.
    stopping: bool = False
    #: The requests between their ``request`` and ``response_end`` lines: stopping
    #: ends those still running at once (:meth:`Exchange.stop`).
    exchanges: set[Running] = field(default_factory=set)
    #: Held while a ``response_end`` is written: by the loop, or by the exit's
    #: watchdog thread (:meth:`RunningProxy.last_words`), never both for one request.
    ending: threading.Lock = field(default_factory=threading.Lock)
    #: Which upstream serves which path (``config.upstream``); default: every path to
    #: ``upstream_url``.
    routes: RouteTable = None  # type: ignore[assignment]
    #: Recent framed streams, the sources of the ``splice`` fault (bounded).
    streams: RecentStreams = field(default_factory=RecentStreams)
    #: The kept streams of scenarios with ``resume:`` (docs/reconnection.md).
    resume: ResumeManager = field(default_factory=ResumeManager)
    #: Whose each request is (its credentials, ``--tenant-header``, ``--tenant-cookie``),
    #: under a key drawn once per proxy: what it keeps across requests is kept per tenant.
    tenants: TenantKeys = None  # type: ignore[assignment]
    #: Given each request's journal entry once its request line is logged (the admin
    #: store keeps it); None: not kept.
    journal: Callable[[str, RequestEntry], None] | None = None
    #: The fleet's counters (``--state redis://…``: docs/fleet.md); None: this
    #: process's own (``memory``).
    fleet: FleetCounterSource | None = None
    #: Told each request's tenant as it begins (the fleet's journal bounds what it
    #: keeps per tenant); None: nothing needs it (a passthrough is then not tenanted).
    whose: Callable[[str, str], None] | None = None
    #: The clock the shell reads the times it decides by from (holds, coalesce windows,
    #: the hold timeout, the stop's grace, the frame lines' times; the kept streams'
    #: too, ``resume.clock``, set from it here): the monotonic clock; a test on virtual
    #: time sets both to its event loop's before the first request
    #: (tests/support/playbook.py).
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.resume.clock = self.clock
        self.resume.max_event_size = self.config.max_event_size
        self.resume.max_readers = reader_share(self.config.upstream_max_connections)
        if cast("TenantKeys | None", self.tenants) is None:
            self.tenants = tenant_keys(self.config, secrets.token_bytes(32))
        if cast("RouteTable | None", self.routes) is None:
            self.routes = RouteTable([Route("", self.upstream_url)])

    @property
    def upstream_label(self) -> str:
        """The upstream as it may be shown (no password)."""
        return redact_url(self.upstream_url)


STATE = web.AppKey("state", ProxyState)


__all__ = ["STATE", "ProxyState", "Running", "tenant_keys"]
