"""The proxy's aiohttp application: one handler that gives each request a
:class:`~chaosproxy.core.session.Session` and an :class:`~chaosproxy.server.exchange.Exchange`.

Everything that decides what happens to a request lives in the session (the sans-IO
core); the exchange carries it out, the body pump moves the bytes, and the upstream
client (:mod:`chaosproxy.upstream`, behind its :class:`~chaosproxy.upstream.Upstream`
interface) reaches the upstream.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import AsyncIterator

from aiohttp import web

from chaosproxy.core.session import Session
from chaosproxy.core.tenancy import ANONYMOUS
from chaosproxy.scenario.selection import Choice, UnknownScenario
from chaosproxy.server.exchange import Exchange
from chaosproxy.server.guard import BadTarget, ClientGuard, normalise_path
from chaosproxy.server.net import CLIENT_GUARD
from chaosproxy.server.resume import ResumePlan, plan_for
from chaosproxy.server.routes import Target
from chaosproxy.server.state import STATE, ProxyState
from chaosproxy.server.websocket import WebSocketExchange, is_upgrade
from chaosproxy.upstream import Upstream
from chaosproxy.upstream.factory import pool_for

#: The longest request line (method, target, version) a client may send: longer is 414.
MAX_REQUEST_LINE = 8190
#: The longest header field (name and value): longer is 431, as are more than
#: MAX_HEADERS fields.
MAX_HEADER_FIELD = 65536
MAX_HEADERS = 128


def create_proxy_app(state: ProxyState) -> web.Application:
    config = state.config
    log = state.log.for_request()

    def rejected(status: int, reason: str, peer: str) -> None:
        log.info("rejected", status=status, reason=reason, peer=peer)

    timeout = config.client_timeout
    app = web.Application(
        handler_args={
            "max_line_size": MAX_REQUEST_LINE,
            "max_field_size": MAX_HEADER_FIELD,
            "max_headers": MAX_HEADERS,
            # The guard closes idle keep-alive connections after client_timeout;
            # aiohttp's own timer is only a backstop behind it.
            "keepalive_timeout": 2 * timeout + 1,
        }
    )
    app[STATE] = state
    app[CLIENT_GUARD] = ClientGuard(
        client_timeout=timeout,
        max_connections=config.max_connections,
        reject=rejected,
        max_line_size=MAX_REQUEST_LINE,
    )
    app.cleanup_ctx.append(_upstream_client)
    # Any path at all, newlines (%0A) included: the router must never answer for us.
    app.router.add_route("*", r"/{tail:[\s\S]*}", _handle)
    return app


async def _upstream_client(app: web.Application) -> AsyncIterator[None]:
    """One client per upstream URL (routes to one URL share it), all closed at the end."""
    state = app[STATE]
    targets = list(state.routes.targets.values())
    made: list[Upstream] = []
    try:
        for target in targets:
            if state.upstream_factory is not None:
                target.upstream = state.upstream_factory()
            else:
                target.upstream = pool_for(target.url, state.config, direct=target.direct)
            made.append(target.upstream)
        first = state.routes.first
        state.upstream_url = first.url
        state.upstream = first.upstream  # type: ignore[assignment]
        yield
    finally:
        state.resume.close()  # background readers first: they hold upstream connections
        for upstream in made:
            await upstream.close()


#: Request ids are ``r-<process tag>-<n>``: ordered within a run, and unique across
#: restarts and replicas (a 64-bit tag), so trace files and a log store never mix two.
_PROCESS_TAG = secrets.token_hex(8)
_ids = itertools.count(1)


def _new_process_tag() -> None:
    """A forked process is another process: a tag of its own, ids from 1 (a fork
    server's children, a supervisor's forks, would otherwise write the same ids)."""
    global _PROCESS_TAG, _ids
    _PROCESS_TAG = secrets.token_hex(8)
    _ids = itertools.count(1)


os.register_at_fork(after_in_child=_new_process_tag)


def next_request_id() -> str:
    return f"r-{_PROCESS_TAG}-{next(_ids)}"


def set_process_tag(tag: str) -> None:
    """Use ``tag`` in this process's request ids from now on (``serve --workers N``:
    one tag drawn by the supervisor, and each worker's number, ``3f9aw1``, so that
    ids never collide across workers, as a tag drawn at import did)."""
    global _PROCESS_TAG
    _PROCESS_TAG = tag


async def _handle(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    refusal: str | None = None
    label: str | None = None
    path_qs = request.path_qs
    try:
        # The upstream URL may have a path prefix: ``..`` must never climb above it.
        path_qs = normalise_path(path_qs)
        if state.fleet is None:
            choice = state.scenarios.choose(request.method, path_qs, request.headers)
        else:  # the fleet's counters: one round trip, --state-timeout at most
            choice = await state.scenarios.choose_in_fleet(
                request.method, path_qs, request.headers, state.fleet
            )
    except (UnknownScenario, BadTarget, ValueError) as exc:
        # Answered by the proxy itself, never forwarded; still logged and labelled.
        refusal = str(exc)
        choice = Choice(None, False, 0, secrets.randbelow(2**53), path_qs)
        if state.scenarios.trust_client:  # else the client's header is not ours to show
            label = request.headers.get("X-Chaos-Scenario", "")[:128] or None
    # Routing comes after the scenario's choice: ``/_chaos/NAME/`` is removed first,
    # then the route's prefix; ``match:`` sees the path with the route's prefix.
    routed = state.routes.match(choice.path)
    target: Target | None = None
    path = choice.path
    status = 400
    if routed is not None:
        target, path = routed
    elif refusal is None:
        refusal, status = NO_UPSTREAM, 404
    resume: ResumePlan | None = None
    scenario = choice.scenario
    # Whose the request is: what it may find of earlier requests (docs/reconnection.md).
    # Only a request under a scenario is framed or kept: a passthrough needs none,
    # unless its journal entry is bounded per tenant (a fleet's).
    tenant = ANONYMOUS
    whose = state.whose
    if scenario is not None or whose is not None:
        tenant = state.tenants.of(request.headers.items(), request.query_string)
    if refusal is None and scenario is not None and scenario.resume is not None:
        last_id = request.headers.get("Last-Event-ID")
        if last_id and state.fleet is not None:  # the stream as the fleet has it, here
            await state.resume.refresh(
                scenario.name,
                scenario.resume,
                last_id,
                tenant,
                provider=scenario.provider,
                path=path,
            )
        resume = plan_for(state.resume, scenario.name, scenario.resume, last_id, tenant)
    session = Session(
        next_request_id(),
        scenario=choice.scenario,
        active=choice.active,
        seed=choice.seed,
        path=path,
        label=label,
        max_event_size=state.config.max_event_size,
        streams=state.streams,
        tenant=tenant,
        envelope=state.config.envelope,
    )
    if whose is not None:
        whose(session.request_id, tenant)
    if is_upgrade(request):  # a WebSocket: relayed message by message
        exchange = Exchange(request, state, session, choice, target)
        return await WebSocketExchange(exchange).run(refusal, status)
    exchange = Exchange(request, state, session, choice, target, resume=resume)
    return await exchange.run(refusal, status)


#: The proxy's answer (404) to a request no route matches when there is no fallback.
NO_UPSTREAM = "no upstream for this path"


__all__ = [
    "NO_UPSTREAM",
    "STATE",
    "ProxyState",
    "create_proxy_app",
    "next_request_id",
    "set_process_tag",
]
