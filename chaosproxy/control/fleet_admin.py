"""The admin's reads in a fleet (``--state redis://…``: docs/fleet.md): ``GET
/requests``, ``GET /requests/{id}`` and ``POST /requests/{id}/verdict`` answered from
the fleet's journal (:class:`chaosproxy.fleet.journal.FleetJournal`), the same on every
replica. Redis away: this replica's own, as without a fleet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from chaosproxy.control import admin as admin_api
from chaosproxy.core.verdict import verdict_line
from chaosproxy.observe.store import recorded_verdict

if TYPE_CHECKING:
    from chaosproxy.fleet.journal import FleetJournal
    from chaosproxy.fleet.shared import SharedState


Routes = dict[tuple[str, str], admin_api.WebHandler]


def _away() -> tuple[type[BaseException], ...]:
    """What a read of the journal raises when Redis is away: the socket's own errors,
    and redis-py's ConnectionError and TimeoutError, which are not OSError (imported
    here, when a fleet's admin answers: a proxy without a fleet never loads redis)."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return (OSError, TimeoutError, RedisConnectionError, RedisTimeoutError)


def fleet_overrides(
    journal: FleetJournal, shared: SharedState, here: Routes | None = None
) -> Routes:
    """The admin routes a fleet's replica answers from the fleet's journal; ``here``
    answers them from this replica alone (default: its request store), with Redis away
    and for the requests it keeps itself (``serve --workers N``: its workers)."""
    own: Routes = {
        ("GET", "/requests"): admin_api._list_requests,
        ("GET", "/requests/{id}"): admin_api._get_request,
        ("POST", "/requests/{id}/verdict"): admin_api._post_verdict,
        **(here or {}),
    }
    own_list = own[("GET", "/requests")]
    own_get = own[("GET", "/requests/{id}")]
    own_verdict = own[("POST", "/requests/{id}/verdict")]

    def local() -> bool:
        return shared.status == "local"

    async def list_requests(request: web.Request) -> web.StreamResponse:
        if local():
            return await own_list(request)
        query = admin_api.listing_query(request)
        if isinstance(query, web.Response):
            return query
        limit, scenario, criteria, page = query
        try:
            cursor = None if page.cursor is None else int(page.cursor.partition(".")[0])
            found, after = await journal.page(limit, scenario, criteria, cursor, page.max_bytes)
        except _away():
            return await own_list(request)
        return admin_api.page_json(found, None if after is None else str(after))

    async def get_request(request: web.Request) -> web.StreamResponse:
        if local():
            return await own_get(request)
        request_id = request.match_info["id"]
        try:
            detail = await journal.detail(request_id)
        except _away():
            return await own_get(request)
        record = request.app[admin_api.ADMIN].requests.get(request_id)
        if record is not None:  # its own: every frame, and the fleet's verdict
            mine = record.detail()
            fleet_verdict = None if detail is None else detail["summary"].get("verdict")
            if fleet_verdict is not None:
                mine["summary"]["verdict"] = fleet_verdict
            detail = mine
        if detail is None:
            return admin_api.not_found(request_id)
        return admin_api.json_response(detail)

    async def post_verdict(request: web.Request) -> web.StreamResponse:
        state = request.app[admin_api.ADMIN]
        if local():
            return await own_verdict(request)
        request_id = request.match_info["id"]
        try:
            kept = await journal.summaries()
        except _away():
            return await own_verdict(request)
        verdict = await admin_api.judge_kept(request, kept)
        if isinstance(verdict, web.Response):
            return verdict
        admin_api.record_verdict(state.log, state.requests, request_id, verdict)
        line: Any = {"event": "verdict", **verdict_line(request_id, verdict)}
        await journal.record_verdict(request_id, recorded_verdict(line))
        return admin_api.json_response(verdict)

    return {
        ("GET", "/requests"): list_requests,
        ("GET", "/requests/{id}"): get_request,
        ("POST", "/requests/{id}/verdict"): post_verdict,
    }


__all__ = ["fleet_overrides"]
