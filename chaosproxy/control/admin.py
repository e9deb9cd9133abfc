"""The admin API (docs/admin-api.md): a small JSON API on its own port.

``GET /health``, ``GET /scenarios``, ``GET /scenarios/{name}``, ``POST /scenarios``,
``DELETE /scenarios/{name}``, ``PUT /default``, ``GET /requests?limit=N&scenario=NAME``
(in pages: ``cursor``, ``max_bytes``; built in slices that let the streams go on),
``GET /requests/{id}``, ``POST /requests/{id}/verdict``, ``GET|POST|DELETE
/mock/fixtures``, ``POST /reset``, ``GET /metrics``. With a token, every endpoint
but ``GET /health`` wants ``Authorization: Bearer TOKEN`` (compared in constant time).
Web pages are kept out (:mod:`chaosproxy.control.admin_access`): without a token, only a
request to a loopback ``Host`` is answered and a POST, PUT or DELETE must send JSON (or
YAML, from a program); a foreign ``Origin`` is refused, token or not; a body over
256 KiB is refused (413) before it is read.
``GET /health`` needs none and then says only that the proxy is up, plus any warning;
with the token (or when the admin has none) it adds the details (version, uptime,
scenarios, requests in flight). Where the admin may listen, and with what token,
:mod:`chaosproxy.control.start` decides.

Its state is the proxy's own: the :class:`~chaosproxy.scenario.selection.ScenarioSet` the proxy
chooses from (so a change applies to the next request, never to one in flight), and a
:class:`RequestStore` and :class:`~chaosproxy.observe.metrics.Metrics` that observe the frame
log. Memory is bounded: the store keeps the most recent ``history`` requests, at most
``max_frames`` frame and action lines each, at most ``max_content`` characters of
payload (``--log-content``) per request, and ``--history-bytes`` in all.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import orjson
from aiohttp import web

from chaosproxy._build import __version__, build
from chaosproxy.control.admin_access import MAX_BODY, body_refusal, host_refusal, origin_refusal
from chaosproxy.core.recent import RecentStreams
from chaosproxy.core.records import RequestSummary, RunVerdict, VerdictLine
from chaosproxy.core.redact import redact_text
from chaosproxy.core.verdict import (
    ClientReport,
    VerdictInputError,
    judge_run,
    run_ids,
    run_of,
    verdict_line,
)
from chaosproxy.mock.fixtures import TooManyFixtures
from chaosproxy.observe.journal import ContentNotKept, Criteria, matches
from chaosproxy.observe.logs import FrameLog
from chaosproxy.observe.metrics import CONTENT_TYPE_LATEST, Metrics
from chaosproxy.observe.store import (
    DEFAULT_HISTORY,
    DEFAULT_MAX_CONTENT,
    DEFAULT_MAX_FRAMES,
    RequestRecord,
    RequestStore,
)
from chaosproxy.scenario import ScenarioError, parse_fixtures, parse_scenario
from chaosproxy.scenario.selection import ScenarioSet, UnknownScenario
from chaosproxy.server.guard import ClientGuard
from chaosproxy.server.net import CLIENT_GUARD

if TYPE_CHECKING:
    from chaosproxy.fleet import SharedState
    from chaosproxy.mock.fixtures import MockFixtures
    from chaosproxy.server.resume import ResumeManager

#: ``GET /requests`` without ``limit``.
DEFAULT_LIMIT = 50

#: What anyone may ask without the token: whether the proxy is up (a load balancer's or
#: a container's health check has no token).
PUBLIC = frozenset({"/health"})

#: Where scenario problems from a request body say they are.
BODY_SOURCE = "body"

# --------------------------------------------------------------------------- the app


@dataclass
class AdminState:
    scenarios: ScenarioSet
    requests: RequestStore
    metrics: Metrics
    token: str | None = None
    #: Said by ``GET /health`` (to anyone): an admin open without a token, say.
    warnings: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    #: The proxy's recent framed streams (``splice`` sources), forgotten on reset.
    streams: RecentStreams | None = None
    #: The kept streams of ``resume:`` scenarios, forgotten on reset.
    resume: ResumeManager | None = None
    #: Where a recorded verdict is logged (its observers include ``requests``); None:
    #: straight into ``requests``.
    log: FrameLog | None = None
    #: The host the admin is bound to (``--admin``): off loopback (``--admin-insecure``),
    #: a tokenless admin answers it too (admin_access.host_refusal). None: loopback.
    host: str | None = None
    #: One scenario body parsed at a time, off the event loop.
    parsing: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The built-in mock's fixtures (None: no upstream is the mock).
    fixtures: MockFixtures | None = None
    #: The admin port's client limits (``--admin-client-timeout``,
    #: ``--admin-max-connections``): a client that sends no request head (or an idle
    #: keep-alive connection) that long is closed; connections beyond the cap are
    #: answered 503 at once.
    client_timeout: float = 60.0
    max_connections: int = 256
    #: Told of every change once it is made here, and awaited before the call answers
    #: (``serve --workers N``: every worker makes it too). A change is a dict: ``op``
    #: (add_scenario, remove_scenario, set_default, reset, add_fixtures,
    #: clear_fixtures) and its arguments. What it returns, when a dict, is the
    #: answer's ``fleet`` (``--state redis``: which replicas applied it).
    changed: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
    #: The fleet's shared state (``--state redis://…``): ``/health`` says how it is.
    shared: SharedState | None = None


ADMIN = web.AppKey("admin", AdminState)


#: What the fleet said of the change the request made (the answer's ``fleet``).
_FLEET: ContextVar[dict[str, Any] | None] = ContextVar("chaosproxy_admin_fleet", default=None)


async def _tell(state: AdminState, op: str, **fields: Any) -> None:
    if state.changed is not None:
        said = await state.changed({"op": op, **fields})
        if isinstance(said, dict):
            _FLEET.set(said)


WebHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(body),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _error(status: int, kind: str, message: str, **extra: Any) -> web.Response:
    return _json({"error": {"type": kind, "message": message}, **extra}, status)


def _invalid(kind: str, what: str, exc: ScenarioError) -> web.Response:
    """400 ``kind``: the problems found in the body (``what`` it is); nothing changed."""
    problems = [str(p) for p in exc.problems]
    message = f"{len(problems)} problem(s) in the {what}; nothing changed"
    return _error(400, kind, message, problems=problems)


def _authorized(header: str | None, token: str) -> bool:
    if not header:
        return False
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(
        credentials.strip().encode("utf-8", "surrogateescape"),
        token.encode("utf-8", "surrogateescape"),
    )


#: Where a body is a scenario or fixture document: its refusals are located as the
#: loader's problems are (``body:0: …``, the whole body).
DOCUMENT_PATHS = frozenset({"/scenarios", "/mock/fixtures"})


def _refused(request: web.Request, status: int, kind: str, message: str) -> web.Response:
    extra: dict[str, Any] = {}
    if kind == "too_large" and request.path in DOCUMENT_PATHS:
        extra["problems"] = [f"{BODY_SOURCE}:0: {message}"]
    response = _error(status, kind, message, **extra)
    if request.body_exists:  # unread: never drained, the connection is closed instead
        response.force_close()
    return response


def _page_refusal(request: web.Request, state: AdminState) -> str | None:
    """Why the request may come from a web page the admin must not serve: a foreign
    ``Origin`` (always), a ``Host`` that is not the admin's own (without a token)."""
    refusal = origin_refusal(request.headers.getall("Origin", []))
    if refusal is None and state.token is None:
        refusal = host_refusal(request.host, state.host)
    return refusal


#: What a body over MAX_BODY is told.
TOO_LARGE = f"the request body is larger than {MAX_BODY // 1024} KiB"


@web.middleware
async def _guard(request: web.Request, handler: WebHandler) -> web.StreamResponse:
    """Web pages kept out (Host, Origin, body type), bearer auth (constant-time), the
    body bound, and JSON for every error aiohttp would answer."""
    state = request.app[ADMIN]
    token = state.token
    public = request.method in ("GET", "HEAD") and request.path in PUBLIC
    refusal = None if public else _page_refusal(request, state)
    if refusal is not None:
        return _refused(request, 403, "forbidden", refusal)
    if (
        token is not None
        and not public
        and not _authorized(request.headers.get("Authorization"), token)
    ):
        response = _refused(
            request, 401, "unauthorized", "this admin API wants Authorization: Bearer <token>"
        )
        response.headers["WWW-Authenticate"] = 'Bearer realm="chaosproxy"'
        return response
    length = request.content_length
    if length is not None and length > MAX_BODY:
        return _refused(request, 413, "too_large", TOO_LARGE)
    if token is None:
        refusal = body_refusal(
            request.method,
            request.headers.get("Content-Type"),
            has_body=request.body_exists,
            has_origin="Origin" in request.headers,
        )
        if refusal is not None:
            return _refused(request, 403, "forbidden", refusal)
    try:
        answered = await handler(request)
        fleet = _FLEET.get()
        if fleet is not None and isinstance(answered, web.Response) and answered.body:
            # A change in a fleet: the answer says which replicas applied it.
            answer = orjson.loads(cast(bytes, answered.body))
            if isinstance(answer, dict):
                answered.body = orjson.dumps({**answer, "fleet": fleet})
        return answered
    except web.HTTPRequestEntityTooLarge:  # a chunked body that went over MAX_BODY
        return _refused(request, 413, "too_large", TOO_LARGE)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, "http_error", exc.reason)
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # a bug: one JSON line, never a traceback
        return _internal(request, exc)


def _internal(request: web.Request, exc: BaseException) -> web.Response:
    """The answer to a request a handler failed on (a bug): 500, what failed in one
    line (credentials masked), no traceback; the connection is closed."""
    text = (str(exc).splitlines() or [""])[0] or type(exc).__name__
    message = f"{request.method} {request.path} failed: {redact_text(text)[:300]}"
    response = _error(500, "internal_error", message)
    response.force_close()
    return response


def _json_problem(exc: orjson.JSONDecodeError, wanted: str) -> web.Response:
    """400 for a body that is not JSON, saying where (orjson: ``… line L column C (char
    N)``, a lone surrogate escape included) and what was wanted."""
    return _error(400, "bad_request", f"expected a JSON body ({wanted}); this one is not: {exc}")


def create_admin_app(
    state: AdminState, overrides: dict[tuple[str, str], WebHandler] | None = None
) -> web.Application:
    """The admin app; ``overrides`` answers some routes, by (method, path), otherwise
    (``serve --workers N`` asks its workers about requests and metrics)."""
    # client_max_size: a chunked body is refused as soon as it passes MAX_BODY.
    app = web.Application(
        middlewares=[_guard],
        client_max_size=MAX_BODY,
        # The guard closes idle keep-alive connections after client_timeout; aiohttp's
        # own timer is only a backstop behind it.
        handler_args={"keepalive_timeout": 2 * state.client_timeout + 1},
    )
    app[ADMIN] = state
    # Its connections guarded as the proxy's are (server/guard.py): a head-read and idle
    # timeout, a connection cap. Refusals are counted there, not logged: the frame log
    # is the proxy's traffic.
    app[CLIENT_GUARD] = ClientGuard(
        client_timeout=state.client_timeout,
        max_connections=state.max_connections,
        reject=_not_logged,
    )
    routes: list[tuple[str, str, WebHandler]] = [
        ("GET", "/health", _health),
        ("GET", "/scenarios", _list_scenarios),
        ("GET", "/scenarios/{name}", _get_scenario),
        ("POST", "/scenarios", _add_scenario),
        ("DELETE", "/scenarios/{name}", _delete_scenario),
        ("PUT", "/default", _put_default),
        ("GET", "/requests", _list_requests),
        ("GET", "/requests/{id}", _get_request),
        ("POST", "/requests/{id}/verdict", _post_verdict),
        ("GET", "/mock/fixtures", _list_fixtures),
        ("POST", "/mock/fixtures", _add_fixtures),
        ("DELETE", "/mock/fixtures", _clear_fixtures),
        ("POST", "/reset", _reset),
        ("GET", "/metrics", _metrics),
    ]
    for method, path, handler in routes:
        handler = (overrides or {}).get((method, path), handler)
        app.router.add_route(method, path, handler)
    return app


def _not_logged(status: int, reason: str, peer: str) -> None:
    """An admin connection refused or timed out: the guard counts it (:func:`admin_guard`)."""


def admin_guard(app: web.Application) -> ClientGuard:
    """The guard of an admin app's connections (its counters: ``open``, ``refused``,
    ``rejected``)."""
    return app[CLIENT_GUARD]


async def _health(request: web.Request) -> web.Response:
    state = request.app[ADMIN]
    warnings = list(state.warnings)
    if state.log is not None and state.log.write_error is not None:
        warnings.append(state.log.write_error)
    health: dict[str, Any] = {"status": "ok", "warnings": warnings}
    shared = state.shared
    if shared is not None and shared.status == "local":  # its fleet's Redis is away
        health["status"] = "degraded"
        warnings.append(
            f"state: {shared.label} is not answering ({shared.reason}): this replica "
            "uses its own state"
        )
    if state.token is not None:
        details = _authorized(request.headers.get("Authorization"), state.token)
    else:  # open to anyone, but a web page (or a name not its own) gets no details
        details = _page_refusal(request, state) is None
    if details:
        health.update(
            version=__version__,
            build=build(),
            uptime_s=round(time.monotonic() - state.started, 3),
            scenarios=len(state.scenarios.scenarios),
            default=state.scenarios.default,
            in_flight=state.requests.in_flight(),
        )
        if shared is not None:
            health["fleet"] = shared.health()
    return _json(health)


async def _list_scenarios(request: web.Request) -> web.Response:
    scenarios, default = request.app[ADMIN].scenarios.snapshot()
    return _json({"default": default, "scenarios": [s.as_dict() for s in scenarios.values()]})


async def _get_scenario(request: web.Request) -> web.Response:
    scenarios = request.app[ADMIN].scenarios
    try:
        scenario = scenarios.get(request.match_info["name"])
    except UnknownScenario as exc:
        return _error(404, "not_found", str(exc))
    return _json(scenario.as_dict())


async def _add_scenario(request: web.Request) -> web.Response:
    state = request.app[ADMIN]
    scenarios = state.scenarios
    body = await request.read()
    default_name = request.query.get("name") or None
    try:
        # In a thread, one at a time: a large scenario takes seconds to validate, and
        # the streams go on meanwhile.
        async with state.parsing:
            scenario = await asyncio.to_thread(
                parse_scenario, body, BODY_SOURCE, default_name=default_name, read_only=True
            )
    except ScenarioError as exc:
        return _invalid("invalid_scenario", "scenario", exc)
    replaced = scenario.name in scenarios.scenarios
    scenarios.add(scenario)
    await _tell(state, "add_scenario", body=body, name=default_name, scenario=scenario.name)
    return _json(scenario.as_dict(), 200 if replaced else 201)


async def _delete_scenario(request: web.Request) -> web.Response:
    state = request.app[ADMIN]
    scenarios = state.scenarios
    name = request.match_info["name"]
    try:
        scenarios.remove(name)
    except UnknownScenario as exc:
        return _error(404, "not_found", str(exc))
    await _tell(state, "remove_scenario", scenario=name)
    return _json({"deleted": name, "default": scenarios.default})


async def _put_default(request: web.Request) -> web.Response:
    state = request.app[ADMIN]
    scenarios = state.scenarios
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        return _json_problem(exc, '{"scenario": NAME or null}')
    if not isinstance(body, dict) or "scenario" not in body:
        return _error(400, "bad_request", 'expected a JSON body: {"scenario": NAME or null}')
    name = body["scenario"]
    if name is not None and not isinstance(name, str):
        return _error(400, "bad_request", "scenario must be a name (a string) or null")
    try:
        scenarios.set_default(name)
    except UnknownScenario as exc:
        return _error(400, "unknown_scenario", str(exc))
    await _tell(state, "set_default", scenario=name)
    return _json({"default": scenarios.default})


def recent_query(request: web.Request) -> tuple[int, str | None, Criteria | None] | web.Response:
    """``GET /requests``'s query: (limit, scenario, criteria or None), or the 400."""
    raw = request.query.get("limit")
    limit = DEFAULT_LIMIT
    if raw is not None:
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 9 or int(raw) < 1:
            return _error(400, "bad_request", "limit must be an integer from 1 to 999999999")
        limit = int(raw)
    scenario = request.query.get("scenario")
    query = request.query
    criteria = Criteria(
        model=query.get("model"),
        path=query.get("path"),
        contains=query.get("contains"),
        tool=query.get("tool"),
    )
    return limit, scenario, criteria if criteria.given() else None


#: The most a page of ``GET /requests`` holds (its summaries' JSON) by default, and at
#: most with ``max_bytes=``; a page holds one summary at least, whatever its size.
PAGE_BYTES = 1024 * 1024
MAX_PAGE_BYTES = 16 * 1024 * 1024
#: How long a listing works on the event loop before it pauses as long, for the
#: streams: half the loop's time at most.
SLICE_SECONDS = 0.002


@dataclass(frozen=True, slots=True)
class Page:
    """Where a page of ``GET /requests`` starts and how large it may be."""

    #: The ``next`` of the page before (None: the newest request first): the number of
    #: the last request listed (one process), or when it began (``serve --workers N``).
    cursor: str | None = None
    max_bytes: int = PAGE_BYTES


_CURSOR = re.compile(r"\d{1,18}(\.\d{1,18})?")


def page_query(request: web.Request) -> Page | web.Response:
    """``GET /requests``' ``cursor`` and ``max_bytes``, or the 400."""
    query = request.query
    cursor = query.get("cursor")
    if cursor is not None and not _CURSOR.fullmatch(cursor):
        return _error(400, "bad_request", "cursor must be the next of a page before")
    raw = query.get("max_bytes")
    size = PAGE_BYTES
    if raw is not None:
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw[:9]) <= MAX_PAGE_BYTES:
            return _error(
                400, "bad_request", f"max_bytes must be an integer from 1 to {MAX_PAGE_BYTES}"
            )
        size = int(raw)
    return Page(cursor, size)


async def build_page(
    records: Sequence[RequestRecord],
    limit: int,
    scenario: str | None,
    criteria: Criteria | None,
    max_bytes: int,
) -> tuple[list[tuple[RequestRecord, bytes]], bool]:
    """The records of one page (of ``records``, newest first) with the JSON of their
    summaries, and whether any record is left after it. At most ``limit`` of them and
    ``max_bytes`` of JSON (one at least). Built in slices of :data:`SLICE_SECONDS`, each
    followed by a pause as long, so that no stream waits on a listing for longer."""
    found: list[tuple[RequestRecord, bytes]] = []
    size = 0
    began = time.perf_counter()
    for i, record in enumerate(records):
        if time.perf_counter() - began > SLICE_SECONDS:
            # A pause as long as the slice, not just a turn: a stream's event takes a
            # few turns of the loop (the upstream's read, the fault pipeline, the write),
            # each of which would otherwise wait for a slice of the listing.
            await asyncio.sleep(SLICE_SECONDS)
            began = time.perf_counter()
        if scenario is not None and record.line.get("scenario") != scenario:
            continue
        view = record.view()
        if criteria is not None and not matches(view, criteria):
            continue
        encoded = orjson.dumps(view)
        if found and size + len(encoded) > max_bytes:
            return found, True
        found.append((record, encoded))
        size += len(encoded) + 1
        if len(found) >= limit:
            return found, i + 1 < len(records)
    return found, False


def refuse_contains(store: RequestStore, criteria: Criteria | None) -> None:
    """ContentNotKept when ``criteria`` asks ``contains`` of a journal without prompts."""
    if criteria is not None and criteria.contains is not None and not store.content:
        raise ContentNotKept(criteria.contains)


async def list_page(
    store: RequestStore,
    limit: int,
    scenario: str | None,
    criteria: Criteria | None,
    page: Page,
) -> tuple[list[bytes], int | None]:
    """The JSON of the summaries of one page, newest first, and the cursor of the next
    (None: no more): the number of the last request listed (:func:`build_page`)."""
    refuse_contains(store, criteria)
    before = None if page.cursor is None else int(page.cursor.partition(".")[0])
    found, more = await build_page(
        store.newest_first(before), limit, scenario, criteria, page.max_bytes
    )
    return [encoded for _, encoded in found], (found[-1][0].seq if more else None)


def page_json(found: Sequence[bytes], cursor: str | None) -> web.Response:
    """A page of ``GET /requests``: the summaries' JSON, and ``next``."""
    body = b'{"requests":[' + b",".join(found) + b'],"next":'
    body += b"null}" if cursor is None else orjson.dumps(cursor) + b"}"
    return web.Response(body=body, content_type="application/json")


Listing = tuple[int, str | None, Criteria | None, Page]


def listing_query(request: web.Request) -> Listing | web.Response:
    """``GET /requests``' whole query: (limit, scenario, criteria, page), or the 400
    (a bad value, or ``contains=`` of a journal without prompts)."""
    query = recent_query(request)
    if isinstance(query, web.Response):
        return query
    page = page_query(request)
    if isinstance(page, web.Response):
        return page
    limit, scenario, criteria = query
    try:
        refuse_contains(request.app[ADMIN].requests, criteria)
    except ContentNotKept as exc:
        return content_not_kept(exc)
    return limit, scenario, criteria, page


async def _list_requests(request: web.Request) -> web.Response:
    query = listing_query(request)
    if isinstance(query, web.Response):
        return query
    limit, scenario, criteria, page = query
    found, cursor = await list_page(request.app[ADMIN].requests, limit, scenario, criteria, page)
    return page_json(found, None if cursor is None else str(cursor))


def content_not_kept(exc: ContentNotKept) -> web.Response:
    return _error(400, "content_not_kept", str(exc))


async def _get_request(request: web.Request) -> web.Response:
    store = request.app[ADMIN].requests
    request_id = request.match_info["id"]
    record = store.get(request_id)
    if record is None:
        return _error(404, "not_found", f"no recent request {request_id!r}")
    return _json(record.detail())


async def _post_verdict(request: web.Request) -> web.Response:
    state = request.app[ADMIN]
    request_id = request.match_info["id"]
    record = state.requests.get(request_id)
    if record is None:
        return _error(404, "not_found", f"no recent request {request_id!r}")
    parsed = await verdict_body(request)
    if isinstance(parsed, web.Response):
        return parsed
    report, others = parsed
    for rid in (request_id, *others):
        other = state.requests.get(rid)
        if other is None:
            return _error(404, "not_found", f"no recent request {rid!r}")
        if not other.done:
            return _error(
                409, "in_flight", f"request {rid!r} has not ended yet; ask again when it has"
            )
    verdict = judge_run(state.requests.run(request_id, others), report)
    record_verdict(state.log, state.requests, request_id, verdict)
    return _json(verdict)


async def verdict_body(request: web.Request) -> tuple[ClientReport, list[str]] | web.Response:
    """A verdict's body: (the client's report, the other requests of its run), or the
    400."""
    try:
        body = orjson.loads(await request.read())
        return ClientReport.from_json(body), run_ids(body)
    except orjson.JSONDecodeError as exc:
        return _json_problem(exc, '{"text": ..., "error": null or ...}')
    except VerdictInputError as exc:
        return _error(400, "bad_request", str(exc))


async def judge_kept(
    request: web.Request, kept: Sequence[tuple[str, RequestSummary | None]]
) -> RunVerdict | web.Response:
    """``POST /requests/{id}/verdict`` judged over ``kept`` (every request known, in the
    order they began, with its summary; None while in flight): the verdict, or the
    answer that refuses it (404 for an unknown request, 409 for one in flight, 400 for
    a bad body). For the admins whose requests are kept elsewhere (``serve --workers
    N``, a fleet)."""
    request_id = request.match_info["id"]
    known = {rid: summary is not None for rid, summary in kept}
    if request_id not in known:
        return not_found(request_id)
    parsed = await verdict_body(request)
    if isinstance(parsed, web.Response):
        return parsed
    report, others = parsed
    for rid in (request_id, *others):
        if rid not in known:
            return not_found(rid)
        if not known[rid]:
            return in_flight_answer(rid)
    done = [summary for _, summary in kept if summary is not None]
    return judge_run(run_of(done, request_id, others), report)


def not_found(request_id: str) -> web.Response:
    return _error(404, "not_found", f"no recent request {request_id!r}")


def in_flight_answer(request_id: str) -> web.Response:
    return _error(
        409, "in_flight", f"request {request_id!r} has not ended yet; ask again when it has"
    )


def json_response(body: Any, status: int = 200) -> web.Response:
    return _json(body, status)


def record_verdict(
    log: FrameLog | None, store: RequestStore | None, request_id: str, verdict: RunVerdict
) -> None:
    """Log the ``verdict`` line (the store, traces and ``--log`` see it through the log's
    observers), or, without a log, give it to ``store`` directly."""
    line = verdict_line(request_id, verdict)
    if log is not None:
        log.for_request().info("verdict", **line)
    elif store is not None:
        # (a verdict line but for its ``ts``, which only a log stamps and the store
        # never reads)
        store(cast("VerdictLine", {"event": "verdict", **line}))


#: What a fixture call is told when no upstream is the built-in mock.
NO_MOCK = (
    "no upstream of this proxy is the built-in mock (--upstream mock): "
    "fixtures would answer nothing"
)


def _no_mock() -> web.Response:
    return _error(409, "no_mock", NO_MOCK)


async def _list_fixtures(request: web.Request) -> web.Response:
    fixtures = request.app[ADMIN].fixtures
    if fixtures is None:
        return _no_mock()
    return _json({"fixtures": fixtures.listing()})


async def _add_fixtures(request: web.Request) -> web.Response:
    state = request.app[ADMIN]
    if state.fixtures is None:
        return _no_mock()
    body = await request.read()
    try:
        async with state.parsing:  # (a regex in a match: is compiled here)
            added = await asyncio.to_thread(parse_fixtures, body, BODY_SOURCE)
    except ScenarioError as exc:
        return _invalid("invalid_fixture", "fixtures", exc)
    try:
        state.fixtures.add(added)
    except TooManyFixtures as exc:
        if exc.alone:
            return _error(413, "too_many_fixtures", str(exc))
        return _error(409, "too_many_fixtures", str(exc))
    await _tell(state, "add_fixtures", body=body)
    return _json({"added": [f.as_dict() for f in added]}, 201)


async def _clear_fixtures(request: web.Request) -> web.Response:
    state = request.app[ADMIN]
    fixtures = state.fixtures
    if fixtures is None:
        return _no_mock()
    removed = len(fixtures.added)
    fixtures.clear()
    await _tell(state, "clear_fixtures")
    return _json({"removed": removed})


async def _reset(request: web.Request) -> web.Response:
    state = request.app[ADMIN]
    state.requests.reset()
    if state.fixtures is not None:
        state.fixtures.reset()
    state.scenarios.restore()
    if state.streams is not None:
        state.streams.clear()
    if state.resume is not None:
        state.resume.forget()
    await _tell(state, "reset")
    return _json({"reset": True})


async def _metrics(request: web.Request) -> web.Response:
    metrics = request.app[ADMIN].metrics
    return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})


__all__ = [
    "DEFAULT_HISTORY",
    "DEFAULT_MAX_CONTENT",
    "DEFAULT_MAX_FRAMES",
    "AdminState",
    "Page",
    "RequestRecord",
    "RequestStore",
    "admin_guard",
    "build_page",
    "content_not_kept",
    "create_admin_app",
    "in_flight_answer",
    "json_response",
    "judge_kept",
    "list_page",
    "listing_query",
    "not_found",
    "page_json",
    "page_query",
    "recent_query",
    "record_verdict",
    "refuse_contains",
    "verdict_body",
]
