"""The mock's I/O shell: routes, knobs, and paced writes on the wire.

The provider modules render a request into a list of writes; this module sends them one
``await write()`` each, with ``asyncio.sleep(interval)`` between two writes, so a client
really sees the tokens arrive one by one.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web

from chaosproxy.core.llm_request import read_request
from chaosproxy.core.mock_defaults import DEFAULT_INTERVAL, DEFAULT_TOKENS
from chaosproxy.mock import anthropic, bedrock, gemini, ollama, openai_chat, openai_responses
from chaosproxy.mock.common import (
    CREATED_BASE,
    ErrorBody,
    JsonObject,
    Knobs,
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

MODELS = ("gpt-4o-mini", "gpt-4o", "claude-sonnet-4-5", "gemini-2.0-flash", "llama3.2")

Render = Callable[[bytes, JsonObject, Knobs, Fixture | None], MockResponse]

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
    app.router.add_post(
        "/v1/chat/completions", _provider(openai_chat.respond, openai_chat.error_body)
    )
    app.router.add_get("/v1/chat/completions", _chat_for_eventsource)
    app.router.add_post(
        "/v1/responses", _provider(openai_responses.respond, openai_chat.error_body)
    )
    app.router.add_post("/v1/messages", _provider(anthropic.respond, anthropic.error_body))
    app.router.add_post(r"/{version:v1beta|v1alpha|v1}/models/{target}", _gemini)
    app.router.add_post("/api/chat", _ollama("chat"))
    app.router.add_post("/api/generate", _ollama("generate"))
    app.router.add_post(
        "/model/{model}/{action:converse-stream|invoke-with-response-stream}", _bedrock
    )
    app.router.add_route("*", "/{tail:.*}", _not_found)
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


_POST_PATHS = frozenset(
    {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/chat", "/api/generate"}
)


async def _not_found(request: web.Request) -> web.Response:
    if request.path in _POST_PATHS:
        message = f"Method {request.method} not allowed on {request.path}; use POST"
        return _json(openai_chat.error_body(405, message), status=405)
    message = f"Unknown path: {request.method} {request.path}"
    return _json(openai_chat.error_body(404, message), status=404)


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


def _provider(
    render: Render, error_body: ErrorBody
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await _answer(request, render, error_body)

    return handler


async def _chat_for_eventsource(request: web.Request) -> web.StreamResponse:
    """``GET /v1/chat/completions?q=TEXT&model=NAME``: the streamed chat answer to one
    user message, for a browser's ``EventSource``, which can only GET (and so cannot
    send a body)."""
    payload: JsonObject = {
        "model": request.query.get("model", MODELS[0]),
        "stream": True,
        "messages": [{"role": "user", "content": request.query.get("q", "hi")}],
    }
    try:
        chosen = _choose(request, payload, "/v1/chat/completions")
        if chosen is not None and _is_http_error(chosen.fixture):
            return _http_error(chosen, openai_chat.error_body)
        fixture = chosen.fixture if chosen is not None else None
        knobs = _knobs(request, fixture)
        reply = openai_chat.respond(orjson.dumps(payload), payload, knobs, fixture)
    except MockRequestError as exc:
        return _json(openai_chat.error_body(400, str(exc)), status=400)
    return await _stream(request, reply, knobs.interval, chosen.label if chosen else None)


async def _gemini(request: web.Request) -> web.StreamResponse:
    model, _, action = request.match_info["target"].rpartition(":")
    if not model or action not in {"generateContent", "streamGenerateContent"}:
        message = f"Unknown path: {request.method} {request.path}"
        return _json(gemini.error_body(404, message), status=404)
    alt = request.query.get("alt")

    def render(
        body: bytes, payload: JsonObject, knobs: Knobs, fixture: Fixture | None
    ) -> MockResponse:
        return gemini.respond(
            body, payload, knobs, model=model, action=action, alt=alt, fixture=fixture
        )

    return await _answer(request, render, gemini.error_body)


def _ollama(endpoint: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    def render(
        body: bytes, payload: JsonObject, knobs: Knobs, fixture: Fixture | None
    ) -> MockResponse:
        return ollama.respond(body, payload, knobs, endpoint=endpoint, fixture=fixture)

    return _provider(render, ollama.error_body)


async def _bedrock(request: web.Request) -> web.StreamResponse:
    model = request.match_info["model"]  # (decoded: botocore sends ``:`` as ``%3A``)
    action = request.match_info["action"]

    def render(
        body: bytes, payload: JsonObject, knobs: Knobs, fixture: Fixture | None
    ) -> MockResponse:
        return bedrock.respond(body, payload, knobs, model=model, action=action, fixture=fixture)

    return await _answer(request, render, bedrock.error_body)
