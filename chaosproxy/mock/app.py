"""The mock's I/O shell: routes, knobs, and paced writes on the wire.

The routes are the providers' own: each provider declares its ``mock_routes`` and the
mock module that renders them (``mock``; chaosproxy/core/providers/base.py), and
:func:`create_mock_app` serves every registered provider's. The provider modules render
a request into a list of writes (:class:`~chaosproxy.mock.common.MockCall` says what
they give); this module sends them one ``await write()`` each, with
``asyncio.sleep(interval)`` between two writes, so a client really sees the tokens
arrive one by one.
"""

from __future__ import annotations

import asyncio
import importlib
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from types import ModuleType
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from chaosproxy.core.llm_request import read_request
from chaosproxy.core.mock_defaults import DEFAULT_INTERVAL, DEFAULT_TOKENS
from chaosproxy.core.providers import MockRoute, declarations
from chaosproxy.mock import openai_chat
from chaosproxy.mock.common import (
    CREATED_BASE,
    MODELS,
    ErrorBody,
    JsonObject,
    Knobs,
    MockCall,
    MockRequestError,
    MockResponse,
    compact,
)
from chaosproxy.mock.fixtures import FIXTURE_HEADER, SCENARIO_HEADER, Chosen, MockFixtures
from chaosproxy.scenario.fixtures import Fixture

#: Requests the mock received, by path (without the query string).
MOCK_REQUESTS = web.AppKey("mock_requests", Counter[str])
#: The app's default knobs; ``X-Mock-Tokens``/``X-Mock-Interval-Ms`` override per request.
MOCK_KNOBS = web.AppKey("mock_knobs", Knobs)
#: The fixtures the app answers with (docs/mock.md, Fixtures).
MOCK_FIXTURES = web.AppKey("mock_fixtures", MockFixtures)

TOKENS_HEADER = "X-Mock-Tokens"
INTERVAL_HEADER = "X-Mock-Interval-Ms"
MAX_TOKENS = 100_000
MAX_INTERVAL_MS = 60_000.0
MAX_BODY = 64 * 1024 * 1024

Render = Callable[[bytes, JsonObject, Knobs, Fixture | None], MockResponse]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: What answers a request no fixture matches instead of the corpus (record-on-miss:
#: the real upstream, once; docs/mock.md, Recording): the request and its body read.
MissHandler = Callable[[web.Request, bytes], Awaitable[web.StreamResponse]]
#: The app's miss handler, when it has one.
MOCK_MISS: web.AppKey[MissHandler] = web.AppKey("mock_miss")


def create_mock_app(
    tokens: int = DEFAULT_TOKENS,
    interval: float = DEFAULT_INTERVAL,
    fixtures: MockFixtures | None = None,
    miss: MissHandler | None = None,
) -> web.Application:
    """The mock LLM upstream as an aiohttp application.

    ``tokens`` is the number of text tokens (delta events) per answer, ``interval`` the
    seconds between two events on the wire; ``fixtures`` what it answers with before
    its corpus (docs/mock.md, Fixtures); ``miss`` what answers a request no fixture
    matches instead of the corpus (record-on-miss).
    """
    if tokens < 0 or not 0 <= interval <= MAX_INTERVAL_MS / 1000:
        raise ValueError("tokens must be >= 0 and interval between 0 and 60 seconds")
    # Real prompts (long histories, images) can exceed aiohttp's 1 MiB default.
    app = web.Application(middlewares=[_count_requests], client_max_size=MAX_BODY)
    app[MOCK_REQUESTS] = Counter()
    app[MOCK_KNOBS] = Knobs(tokens=tokens, interval=interval)
    app[MOCK_FIXTURES] = fixtures if fixtures is not None else MockFixtures()
    if miss is not None:
        app[MOCK_MISS] = miss
    app.router.add_get("/health", _health)
    app.router.add_get("/v1/models", _models)
    post_paths: set[str] = set()
    for provider in declarations():
        if provider.mock is None:
            continue
        module = importlib.import_module(provider.mock)
        for route in provider.mock_routes:
            app.router.add_route(route.method, route.path, _route(module, route))
            if route.method == "POST" and "{" not in route.path:
                post_paths.add(route.path)
    app.router.add_route("*", "/{tail:.*}", _not_found(frozenset(post_paths)))
    return app


async def run_mock(
    host: str,
    port: int,
    *,
    tokens: int,
    interval: float,
    fixtures: MockFixtures | None = None,
) -> None:
    """Serve the mock on ``host:port`` until cancelled."""
    runner = web.AppRunner(create_mock_app(tokens=tokens, interval=interval, fixtures=fixtures))
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@web.middleware
async def _count_requests(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    request.app[MOCK_REQUESTS][request.path] += 1
    return await handler(request)


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=compact(obj), status=status, content_type="application/json")


async def _health(request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def _models(request: web.Request) -> web.Response:
    return _json(
        {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "created": CREATED_BASE, "owned_by": "chaosproxy"}
                for m in MODELS
            ],
        }
    )


def _not_found(post_paths: frozenset[str]) -> Handler:
    """What answers a path no route serves: a 405 for another method on a provider's
    POST path, a 404 otherwise (OpenAI's error envelope: the mock's own)."""

    async def handler(request: web.Request) -> web.Response:
        if request.path in post_paths:
            message = f"Method {request.method} not allowed on {request.path}; use POST"
            return _json(openai_chat.error_body(405, message), status=405)
        message = f"Unknown path: {request.method} {request.path}"
        return _json(openai_chat.error_body(404, message), status=404)

    return handler


def _knobs(request: web.Request, fixture: Fixture | None = None) -> Knobs:
    """The app's knobs with this request's header overrides (a fixture's ``interval``
    comes between the two)."""
    knobs = request.app[MOCK_KNOBS]
    tokens, interval = knobs.tokens, knobs.interval
    if fixture is not None and fixture.interval is not None:
        interval = fixture.interval
    raw_tokens = request.headers.get(TOKENS_HEADER)
    if raw_tokens is not None:
        try:
            tokens = int(raw_tokens)
        except ValueError:
            tokens = -1
        if not 0 <= tokens <= MAX_TOKENS:
            raise MockRequestError(f"{TOKENS_HEADER} must be an integer from 0 to {MAX_TOKENS}")
    raw_interval = request.headers.get(INTERVAL_HEADER)
    if raw_interval is not None:
        try:
            millis = float(raw_interval)
        except ValueError:
            millis = math.nan
        if not 0 <= millis <= MAX_INTERVAL_MS:  # also rejects nan
            raise MockRequestError(f"{INTERVAL_HEADER} must be a number from 0 to 60000")
        interval = millis / 1000
    return Knobs(tokens=tokens, interval=interval)


def _choose(request: web.Request, payload: JsonObject, path: str) -> Chosen | None:
    """The fixture that answers this request, if any."""
    return request.app[MOCK_FIXTURES].choose(
        path,
        read_request(path, payload),
        request.headers,
        scenario=request.headers.get(SCENARIO_HEADER),
    )


async def _answer(
    request: web.Request, render: Render, error_body: ErrorBody
) -> web.StreamResponse:
    """Parse the request, choose a fixture, render it (or the corpus), and send the
    reply paced by the interval."""
    chosen: Chosen | None = None
    try:
        _knobs(request)  # a bad knob header is a 400 before anything else
        body = await request.read()
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise MockRequestError(f"The request body is not valid JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise MockRequestError("The request body must be a JSON object")
        chosen = _choose(request, payload, request.path_qs)
        miss: MissHandler | None = request.app.get(MOCK_MISS)
        if chosen is None and miss is not None:
            return await miss(request, body)
        if chosen is not None and _is_http_error(chosen.fixture):
            return _http_error(chosen, error_body)
        fixture = chosen.fixture if chosen is not None else None
        knobs = _knobs(request, fixture)
        reply = render(body, payload, knobs, fixture)
    except MockRequestError as exc:
        return _json(error_body(400, str(exc), None), status=400)
    label = chosen.label if chosen is not None else None
    if not reply.streamed:
        response = web.Response(body=b"".join(reply.chunks), status=reply.status)
        response.headers["Content-Type"] = reply.content_type
        if label is not None:
            response.headers[FIXTURE_HEADER] = _header_text(label)
        return response
    return await _stream(request, reply, knobs.interval, label)


def _is_http_error(fixture: Fixture) -> bool:
    return fixture.error is not None and fixture.error.status is not None


def _header_text(text: str) -> str:
    """``text`` as a header value may carry it (ASCII, no control characters)."""
    return "".join(c if c.isascii() and c.isprintable() else "?" for c in text)[:200]


#: What an HTTP error fixture says when it gives no message.
_STATUS_MESSAGES = {
    429: "Rate limit reached for requests",
    500: "The server had an error while processing your request. Sorry about that!",
    503: "The service is temporarily unavailable",
    529: "Overloaded",
}


def _http_error(chosen: Chosen, error_body: ErrorBody) -> web.Response:
    """A fixture's ``error: {status}``: the status, the provider's error body (or the
    fixture's own ``body``) and the fixture's headers."""
    error = chosen.fixture.error
    assert error is not None and error.status is not None
    status = error.status
    headers = {k: str(v) for k, v in error.headers.items()}
    headers[FIXTURE_HEADER] = _header_text(chosen.label)
    if isinstance(error.body, str):
        data = error.body.encode()
        content_type = "text/plain; charset=utf-8"
    else:
        if error.body is not None:
            obj: Any = error.body
        else:
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = f"HTTP {status}"
            message = error.message or _STATUS_MESSAGES.get(status, phrase)
            obj = error_body(status, message, error.type)
        data = compact(obj)
        content_type = "application/json"
    if not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = content_type
    return web.Response(body=data, status=status, headers=headers)


async def _stream(
    request: web.Request, reply: MockResponse, interval: float, fixture: str | None = None
) -> web.StreamResponse:
    headers = {"Content-Type": reply.content_type, "Cache-Control": "no-cache"}
    if fixture is not None:
        headers[FIXTURE_HEADER] = _header_text(fixture)
    response = web.StreamResponse(status=reply.status, headers=headers)
    try:
        await response.prepare(request)
        for index, chunk in enumerate(reply.chunks):
            if index and interval > 0:
                await asyncio.sleep(interval)
            transport = request.transport
            if transport is None or transport.is_closing():
                break  # the client went away: stop quietly
            await response.write(chunk)
    except ConnectionError:
        pass  # the client went away mid-write: nothing to report
    return response


def _route(module: ModuleType, route: MockRoute) -> Handler:
    """The handler of one of a provider's mock routes, rendered by its mock ``module``
    (:class:`~chaosproxy.mock.common.MockCall`)."""
    serve: Callable[[MockCall], MockResponse] = module.serve
    error_body: ErrorBody = module.error_body
    unknown: Callable[[dict[str, str]], bool] | None = getattr(module, "unknown", None)
    fixed = dict(route.params)

    def params(request: web.Request) -> dict[str, str]:
        return {**request.match_info, **fixed}

    if route.websocket:
        return _websocket(module, route)
    if route.method == "GET":
        query_payload: Callable[[Any], JsonObject] = module.query_payload

        async def get(request: web.Request) -> web.StreamResponse:
            payload = query_payload(request.query)
            return await _answer_query(request, payload, route.path, error_body, serve, params)

        return get

    async def post(request: web.Request) -> web.StreamResponse:
        found = params(request)
        if unknown is not None and unknown(found):
            message = f"Unknown path: {request.method} {request.path}"
            return _json(error_body(404, message, None), status=404)

        def render(
            body: bytes, payload: JsonObject, knobs: Knobs, fixture: Fixture | None
        ) -> MockResponse:
            return serve(MockCall(body, payload, knobs, fixture, found, request.query))

        return await _answer(request, render, error_body)

    return post


def _websocket(module: ModuleType, route: MockRoute) -> Handler:
    """A provider's WebSocket route (OpenAI Realtime): the module's ``Conversation``
    answers each client event, and each response it asks for is ``serve``'s, one message
    an event, paced by the interval; fixtures match the conversation as a request."""
    serve: Callable[[MockCall], MockResponse] = module.serve
    error_body: ErrorBody = module.error_body

    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            _knobs(request)  # a bad knob header is a 400 before the upgrade
        except MockRequestError as exc:
            return _json(error_body(400, str(exc), None), status=400)
        ws = web.WebSocketResponse()
        if not ws.can_prepare(request).ok:
            message = f"{route.path} is a WebSocket: connect with an Upgrade: websocket GET"
            return _json(error_body(400, message, None), status=400)
        await ws.prepare(request)
        conversation = module.Conversation(request.query.get("model"))
        await ws.send_str(conversation.created().decode())
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                continue
            replies, payload = conversation.receive(msg.data)
            for reply in replies:
                await ws.send_str(reply.decode())
            if payload is not None:
                await _realtime_response(request, ws, payload, serve, route.path)
        return ws

    return handler


async def _realtime_response(
    request: web.Request,
    ws: web.WebSocketResponse,
    payload: JsonObject,
    serve: Callable[[MockCall], MockResponse],
    path: str,
) -> None:
    body = orjson.dumps(payload)
    chosen = _choose(request, payload, path)
    fixture = chosen.fixture if chosen is not None else None
    knobs = _knobs(request, fixture)
    reply = serve(MockCall(body, payload, knobs, fixture, {}, request.query))
    for index, chunk in enumerate(reply.chunks):
        if index and knobs.interval > 0:
            await asyncio.sleep(knobs.interval)
        if ws.closed:
            return  # the client went away: stop quietly
        await ws.send_str(chunk.decode())


async def _answer_query(
    request: web.Request,
    payload: JsonObject,
    path: str,
    error_body: ErrorBody,
    serve: Callable[[MockCall], MockResponse],
    params: Callable[[web.Request], dict[str, str]],
) -> web.StreamResponse:
    """The streamed answer to a ``GET`` route, whose query stands for its body."""
    try:
        chosen = _choose(request, payload, path)
        if chosen is not None and _is_http_error(chosen.fixture):
            return _http_error(chosen, error_body)
        fixture = chosen.fixture if chosen is not None else None
        knobs = _knobs(request, fixture)
        call = MockCall(
            orjson.dumps(payload), payload, knobs, fixture, params(request), request.query
        )
        reply = serve(call)
    except MockRequestError as exc:
        return _json(error_body(400, str(exc), None), status=400)
    return await _stream(request, reply, knobs.interval, chosen.label if chosen else None)
