"""The admin API against a web page in the operator's browser (issue 21, the audit's
cases replayed against the live admin).

The default admin is on loopback with no token. The audit found that any page could
drive it: a ``text/plain`` POST from a foreign ``Origin`` (which a browser sends without
asking first) added a ``hang`` scenario for every request, ``POST /reset`` worked, a
``Host: attacker.example`` (DNS rebinding) was answered, and a 0.99 MB scenario body
was read and parsed whole. Each test sends what the browser (or the page's script)
would send, byte for byte where it matters, and checks the answer and that nothing
changed.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from chaosproxy.control.admin import ADMIN as ADMIN_STATE
from chaosproxy.control.admin import admin_guard
from chaosproxy.control.client import ChaosClient
from chaosproxy.control.start import RunningProxy
from chaosproxy.scenario import MAX_FAULTS
from chaosproxy.server.guard import ClientGuard
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import Script, ScriptedUpstream, until

ADMIN = ("127.0.0.1", 0)
SSE = b"".join(b'data: {"n": %d}\n\n' % i for i in range(4))
#: What the page posts: every request hangs for ever.
EVIL = "name: evil\nfaults:\n  - hang: {}\n"
PAGE = "http://attacker.example"


async def admin(
    proxy: RunningProxy,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, Any]:
    """One admin request with exactly these headers (aiohttp adds none that matter:
    no Origin, no Content-Type when ``body`` is bytes and one is given)."""
    assert proxy.admin_url is not None
    async with (
        aiohttp.ClientSession(skip_auto_headers=["Content-Type"]) as s,
        s.request(method, proxy.admin_url + path, headers=headers or {}, data=body) as resp,
    ):
        raw = await resp.read()
        if resp.content_type == "application/json":
            return resp.status, orjson.loads(raw)
        return resp.status, raw.decode()


def admin_port(proxy: RunningProxy) -> int:
    assert proxy.admin_url is not None
    return int(proxy.admin_url.rsplit(":", 1)[1])


def forbidden(status: int, body: Any) -> str:
    """The refusal's message, once its shape is checked: 403, the admin's JSON error."""
    assert status == 403, body
    assert body["error"]["type"] == "forbidden"
    message: str = body["error"]["message"]
    assert "\n" not in message
    return message


async def scenario_names(proxy: RunningProxy) -> list[str]:
    status, body = await admin(proxy, "GET", "/scenarios")
    assert status == 200
    return [s["name"] for s in body["scenarios"]]


@pytest.fixture
async def sse(upstream: ScriptedUpstream) -> str:
    upstream.route("/v1/stream", Script.events(SSE))
    return upstream.url


async def stream_completes(proxy: RunningProxy, log: LogCapture) -> None:
    """A request through the proxy gets its whole answer and ends (no hang)."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/v1/stream", data=b"{}") as resp,
    ):
        assert await resp.read() == SSE
        request_id = resp.headers["X-Chaos-Request-Id"]
    end = await log.wait_end(request_id)
    assert end["outcome"] == "completed"


# --------------------------------------------------------------------------- CSRF


@pytest.mark.parametrize(
    ("content_type", "origin"),
    [
        ("text/plain;charset=UTF-8", PAGE),  # fetch(url, {method: "POST", body: text})
        ("application/x-www-form-urlencoded", PAGE),  # a <form> posted by the page
        ("multipart/form-data; boundary=x", PAGE),
        ("text/plain", "null"),  # a sandboxed frame, a file:// page
        ("application/yaml", PAGE),  # would be preflighted, and is refused anyway
        ("application/json", PAGE),
    ],
)
async def test_a_web_page_cannot_add_a_scenario(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture, content_type: str, origin: str
) -> None:
    proxy = await make_proxy(upstream=sse, admin=ADMIN)
    before = await scenario_names(proxy)
    headers = {"Origin": origin, "Content-Type": content_type}
    body = orjson.dumps({"name": "evil", "faults": ["hang"]}) if "json" in content_type else None
    status, answer = await admin(
        proxy, "POST", "/scenarios?name=evil", headers=headers, body=body or EVIL.encode()
    )
    assert "CSRF" in forbidden(status, answer)
    assert await scenario_names(proxy) == before
    await stream_completes(proxy, log_capture)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_a_body_a_page_could_send_is_refused_even_without_origin(
    make_proxy: ProxyFactory, content_type: str | None
) -> None:
    """``curl --data-binary`` sends a form type; a ``text/plain`` body is what a page's
    no-cors fetch sends. Neither is a scenario type: the answer says which are."""
    proxy = await make_proxy(admin=ADMIN)
    headers = {"Content-Type": content_type} if content_type else {}
    status, answer = await admin(
        proxy, "POST", "/scenarios", headers=headers, body=b"name: x\nfaults: []\n"
    )
    message = forbidden(status, answer)
    assert "application/json" in message and "application/yaml" in message
    assert "x" not in await scenario_names(proxy)


async def test_a_web_page_cannot_reset_the_admin_or_change_the_default(
    make_proxy: ProxyFactory, sse: str
) -> None:
    proxy = await make_proxy(upstream=sse, admin=ADMIN)
    added = b"name: mine\nfaults:\n  - rechunk: {size: 1}\n"
    status, _ = await admin(
        proxy, "POST", "/scenarios", headers={"Content-Type": "application/yaml"}, body=added
    )
    assert status == 201
    for origin in (PAGE, "null", "http://localhost.attacker.example"):
        # fetch(url, {method: "POST", mode: "no-cors"}): no body, no Content-Type.
        status, answer = await admin(proxy, "POST", "/reset", headers={"Origin": origin})
        forbidden(status, answer)
        status, answer = await admin(
            proxy, "PUT", "/default", headers={"Origin": origin, "Content-Type": "text/plain"},
            body=b'{"scenario": "mine"}',
        )  # fmt: skip
        forbidden(status, answer)
        status, answer = await admin(proxy, "DELETE", "/scenarios/mine", headers={"Origin": origin})
        forbidden(status, answer)
    assert await scenario_names(proxy) == ["mine"]
    _, body = await admin(proxy, "GET", "/scenarios")
    assert body["default"] is None
    # A local page (the operator's own tool on localhost) may, with a JSON body: a browser
    # would have asked first, so this is not a page acting behind the operator's back.
    status, _ = await admin(
        proxy, "PUT", "/default",
        headers={"Origin": "http://localhost:3000", "Content-Type": "application/json"},
        body=b'{"scenario": "mine"}',
    )  # fmt: skip
    assert status == 200
    # And a program, which sends no Origin, resets as before.
    status, body = await admin(proxy, "POST", "/reset")
    assert (status, body) == (200, {"reset": True})


async def test_a_page_cannot_read_the_admin_from_another_origin(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=ADMIN)
    for path in ("/scenarios", "/requests", "/metrics"):
        status, answer = await admin(proxy, "GET", path, headers={"Origin": PAGE})
        forbidden(status, answer)


# --------------------------------------------------------------------------- DNS rebinding


@pytest.mark.parametrize(
    "host", ["attacker.example", "attacker.example:{port}", "127.0.0.1.nip.io:{port}"]
)
async def test_dns_rebinding_a_foreign_host_is_refused(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture, host: str
) -> None:
    """The page's name now resolves to 127.0.0.1: the browser calls the admin
    same-origin (no Origin on a GET, JSON allowed), but its Host is the page's name."""
    proxy = await make_proxy(upstream=sse, admin=ADMIN)
    rebound = {"Host": host.format(port=admin_port(proxy))}
    for method, path in (("GET", "/scenarios"), ("GET", "/requests"), ("GET", "/metrics")):
        status, answer = await admin(proxy, method, path, headers=rebound)
        assert "DNS rebinding" in forbidden(status, answer)
    json = {**rebound, "Content-Type": "application/json"}
    status, answer = await admin(
        proxy, "POST", "/scenarios", headers=json,
        body=orjson.dumps({"name": "evil", "faults": ["hang"]}),
    )  # fmt: skip
    forbidden(status, answer)
    status, answer = await admin(proxy, "POST", "/reset", headers=json, body=b"{}")
    forbidden(status, answer)
    assert await scenario_names(proxy) == []
    await stream_completes(proxy, log_capture)
    # /health stays open, and then says only that the proxy is up.
    status, body = await admin(proxy, "GET", "/health", headers=rebound)
    assert (status, body) == (200, {"status": "ok", "warnings": []})


@pytest.mark.parametrize(
    "host", ["127.0.0.1:{port}", "127.0.0.1", "localhost:{port}", "LOCALHOST", "[::1]:{port}"]
)
async def test_loopback_hosts_are_answered(make_proxy: ProxyFactory, host: str) -> None:
    proxy = await make_proxy(admin=ADMIN)
    headers = {"Host": host.format(port=admin_port(proxy))}
    status, body = await admin(proxy, "GET", "/scenarios", headers=headers)
    assert (status, body) == (200, {"default": None, "scenarios": []})
    status, body = await admin(proxy, "GET", "/health", headers=headers)
    assert status == 200 and "version" in body  # the details: a local caller


# --------------------------------------------------------------------------- with a token


async def test_with_a_token_the_token_guards_but_a_foreign_origin_is_still_refused(
    make_proxy: ProxyFactory,
) -> None:
    token = "s3cret-admin-token"
    proxy = await make_proxy(admin=ADMIN, admin_token=token)
    auth = {"Authorization": f"Bearer {token}"}
    # The page cannot know the token; a page that was given it is still a page.
    status, answer = await admin(proxy, "POST", "/reset", headers={**auth, "Origin": PAGE})
    assert token not in forbidden(status, answer)
    status, _ = await admin(proxy, "POST", "/reset", headers={"Origin": PAGE})
    assert status == 403
    # The token is the guard: a published admin is reached by any name, any body type.
    status, _ = await admin(
        proxy, "GET", "/scenarios", headers={**auth, "Host": "chaos.example:8478"}
    )
    assert status == 200
    status, _ = await admin(
        proxy, "POST", "/scenarios",
        headers={**auth, "Content-Type": "application/x-www-form-urlencoded"},
        body=b"name: curl\nfaults: []\n",
    )  # fmt: skip
    assert status == 201
    status, _ = await admin(proxy, "GET", "/scenarios", headers={"Host": "chaos.example"})
    assert status == 401
    status, _ = await admin(
        proxy, "GET", "/scenarios", headers={**auth, "Origin": "http://localhost:3000"}
    )
    assert status == 200


# --------------------------------------------------------------------------- programs


async def test_programs_keep_working(make_proxy: ProxyFactory) -> None:
    """YAML from a command line, JSON, bodiless calls, and ChaosClient (urllib: a form
    type on an empty POST) are all a program's, with no Origin."""
    proxy = await make_proxy(admin=ADMIN)
    for content_type in ("application/yaml", "text/yaml", "application/x-yaml"):
        status, _ = await admin(
            proxy, "POST", "/scenarios?name=y", headers={"Content-Type": content_type},
            body=b"faults: []\n",
        )  # fmt: skip
        assert status in (200, 201), content_type
    status, _ = await admin(
        proxy, "PUT", "/default", headers={"Content-Type": "application/json; charset=utf-8"},
        body=b'{"scenario": "y"}',
    )  # fmt: skip
    assert status == 200
    status, _ = await admin(proxy, "DELETE", "/scenarios/y")
    assert status == 200
    assert proxy.admin_url is not None
    client = ChaosClient(proxy.admin_url)
    await asyncio.to_thread(client.add_scenario, "faults:\n  - rechunk: {size: 2}\n", "c")
    await asyncio.to_thread(client.use, "c")
    await asyncio.to_thread(client.remove_scenario, "c")
    await asyncio.to_thread(client.add_scenario, {"name": "d", "faults": []})
    await asyncio.to_thread(client.reset)
    assert await scenario_names(proxy) == []


# --------------------------------------------------------------------------- the body bound


async def raw_admin(proxy: RunningProxy, head: bytes, body: bytes = b"") -> bytes:
    """Write ``head`` (and ``body``), then read the admin's whole answer (head and its
    Content-Length of body), without waiting for the connection to close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", admin_port(proxy))
    try:
        writer.write(head + body)
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.readuntil(b"\r\n\r\n")
            length = int(answer.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            return answer + await reader.readexactly(length)
    finally:
        writer.close()


def yaml_of_size(size: int) -> bytes:
    """A valid scenario of about ``size`` bytes (many small faults: slow to validate)."""
    line = b"  - rechunk: {size: 3}\n"
    return b"name: huge\nfaults:\n" + line * (size // len(line))


async def test_a_body_over_256_kib_is_refused_before_it_is_read(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    """The audit's 0.99 MB body held every stream for 24.5 s. Its head alone now gets
    413: the body is never waited for, let alone read and parsed."""
    proxy = await make_proxy(upstream=sse, admin=ADMIN)
    head = (
        b"POST /scenarios HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/yaml\r\n"
        b"Content-Length: %d\r\n\r\n" % len(yaml_of_size(1_014_000))
    )
    answer = await raw_admin(proxy, head)  # the body is never sent
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    body = orjson.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body == {
        "error": {"type": "too_large", "message": "the request body is larger than 256 KiB"},
        "problems": ["body:0: the request body is larger than 256 KiB"],  # as the loader's
    }
    assert await scenario_names(proxy) == []
    await stream_completes(proxy, log_capture)


async def test_a_chunked_body_is_refused_once_it_passes_256_kib(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=ADMIN)
    scenario = yaml_of_size(600_000)
    chunked = b"".join(
        b"%x\r\n%s\r\n" % (len(scenario[i : i + 8192]), scenario[i : i + 8192])
        for i in range(0, len(scenario), 8192)
    )
    head = (
        b"POST /scenarios HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/yaml\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    answer = await raw_admin(proxy, head, chunked + b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b'"too_large"' in answer
    assert await scenario_names(proxy) == []


@pytest.mark.slow
async def test_a_body_just_under_the_bound_is_read_and_judged(make_proxy: ProxyFactory) -> None:
    """Under 256 KiB the body is read whole: 10,869 faults are refused at their list
    (each is asked about every event: docs/scenarios.md, Limits), a long description
    is taken."""
    proxy = await make_proxy(admin=ADMIN)
    scenario = yaml_of_size(250_000)
    assert len(scenario) <= 256 * 1024
    status, body = await admin(
        proxy, "POST", "/scenarios", headers={"Content-Type": "application/yaml"}, body=scenario
    )
    assert (status, body["problems"]) == (
        400,
        [
            f"body:2: faults: at most {MAX_FAULTS} faults per scenario (this one has 10869): "
            "every fault is asked about every event"
        ],
    )
    long = b"name: long\nfaults: [bom]\ndescription: " + b"x" * 250_000 + b"\n"
    status, body = await admin(
        proxy, "POST", "/scenarios", headers={"Content-Type": "application/yaml"}, body=long
    )
    assert status == 201 and len(body["description"]) == 250_000


# --------------------------------------------------------------------------- connections


def _admin_guard(proxy: RunningProxy) -> ClientGuard:
    (guard,) = [
        admin_guard(r.app)
        for r in proxy.runners
        if isinstance(r, web.AppRunner) and ADMIN_STATE in r.app
    ]
    return guard


async def _closed(reader: asyncio.StreamReader) -> bytes:
    """What the admin sends before it closes the connection (b"<reset>": a reset)."""
    try:
        return await reader.read()
    except ConnectionResetError:
        return b"<reset>"


async def test_idle_admin_connections_are_closed_at_the_admin_timeout_and_capped(
    make_proxy: ProxyFactory,
) -> None:
    """The audit: 3,000 idle connections to the admin port were all open 62 s later.
    Bounded here: hundreds of idle connections (and some that sent half a head) are
    closed at ``--admin-client-timeout``; past ``--admin-max-connections`` a connection
    is answered 503 at once; the admin answers throughout and every descriptor is
    given back."""
    timeout, idle, half, cap = 1.0, 300, 20, 320
    proxy = await make_proxy(admin=ADMIN, admin_client_timeout=timeout, admin_max_connections=cap)
    port = admin_port(proxy)
    guard = _admin_guard(proxy)
    fds = len(os.listdir("/proc/self/fd"))
    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    started = time.monotonic()
    for i in range(idle + half):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if i >= idle:
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Par")
        streams.append((reader, writer))
    await until(lambda: guard.open == idle + half)  # (accepted: the loop has seen each)
    opened = time.monotonic() - started
    # Over the cap: a 503 at once, then the close, long before the timeout.
    over = []
    for _ in range(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        async with asyncio.timeout(timeout / 2):
            over.append(await _closed(reader))
        writer.close()
    assert [a.split(b"\r\n", 1)[0] for a in over] == [b"HTTP/1.1 503 Service Unavailable"] * 5
    assert guard.refused == 5
    # The held ones: all closed at the timeout (the half-sent with a 408), none before.
    async with asyncio.timeout(timeout + 10):
        answers = await asyncio.gather(*(_closed(r) for r, _ in streams))
    took = time.monotonic() - started
    for _, writer in streams:
        writer.close()
    assert timeout * 0.9 <= took < opened + timeout + 5
    assert answers[:idle] == [b""] * idle
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers[idle:])
    assert guard.rejected == 5 + idle + half  # (503s, and the 408s and the silent ones)
    # The admin still answers, and holds nothing of them.
    status, body = await admin(proxy, "GET", "/health")
    assert (status, body["status"]) == (200, "ok")
    await until(lambda: not guard.open and len(os.listdir("/proc/self/fd")) <= fds, limit=10)


# --------------------------------------------------------------------------- every answer


#: Bodies a careless or hostile caller sends: not JSON, JSON of every wrong shape, deep,
#: escaped surrogates (a pair, and a lone half), huge numbers, control characters.
HOSTILE_BODIES = [
    b"",
    b"not json",
    b"null",
    b"[]",
    b"[1, 2]",
    b'"text"',
    b"1e999",
    b"{}",
    b'{"scenario": 1}',
    b'{"scenario": ["a"]}',
    b'{"scenario": "\\ud83d\\udc4d"}',
    b'{"scenario": "\\ud83d"}',
    b'{"text": "\\udc4d", "error": 7}',
    b'{"name": "x", "faults": "bom"}',
    b'{"name": "x\\u0000y", "faults": ["bom"]}',
    b'{"name": "x", "faults": [{"rechunk": {"size": 1' + b"0" * 5000 + b"}}]}",
    b'{"name": "x", "faults": ["bom"], "seed": -1}',
    b"[" * 5000 + b"]" * 5000,
    b'{"a": ' + b"[" * 900 + b"]" * 900 + b"}",
    b"{" * 3000,
    b"\xff\xfe\x00",
    b'{"fixtures": [{"text": 1}]}',
    b'{"fixtures": "x"}',
]


async def test_no_admin_call_answers_a_500_whatever_the_body_or_the_query(
    make_proxy: ProxyFactory,
) -> None:
    """Every route, every hostile body: a 4xx (or a 2xx) with a JSON message, never a
    500 nor a traceback; the admin keeps answering."""
    proxy = await make_proxy(admin=ADMIN, library=True)
    calls = [
        ("POST", "/scenarios"),
        ("POST", "/scenarios?name=%FF%00"),
        ("PUT", "/default"),
        ("POST", "/requests/r-1/verdict"),
        ("POST", "/mock/fixtures"),
        ("DELETE", "/scenarios/%00"),
        ("GET", "/requests?limit=-1"),
        ("GET", "/requests?limit=1&model=[&path=%00&contains=%ud800&tool=&scenario=%ff"),
        ("GET", "/requests/%ff%00"),
        ("GET", "/scenarios/%ud83d"),
    ]
    seen: set[int] = set()
    for method, path in calls:
        for body in HOSTILE_BODIES if method in ("POST", "PUT") else [None]:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            status, answer = await admin(proxy, method, path, headers=headers, body=body)
            seen.add(status)
            assert status < 500, (method, path, body[:40] if body else body, answer)
            if status >= 400:
                assert isinstance(answer, dict) and answer["error"]["message"], answer
    assert seen >= {400, 404}
    status, body = await admin(proxy, "GET", "/health")
    assert (status, body["status"]) == (200, "ok")


async def test_a_request_body_nested_900_levels_deep_breaks_no_listing(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    """The audit: such a body made GET /requests (and ?contains=) a 500 RecursionError
    until it left the history, and with --log-content the request itself a 500."""
    deep = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]'
    deep += b', "x": ' + b"[" * 900 + b"]" * 900 + b"}"
    for content in (False, True):
        proxy = await make_proxy(admin=ADMIN, content=content, log_content=content)
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                proxy.url + "/v1/chat/completions",
                data=deep,
                headers={"Content-Type": "application/json"},
            ) as resp,
        ):
            assert resp.status == 200
            await resp.read()
            request_id = resp.headers["X-Chaos-Request-Id"]
        await log_capture.wait_end(request_id)
        for path in ["/requests", f"/requests/{request_id}"]:
            status, body = await admin(proxy, "GET", path)
            assert status == 200, (content, path, body)
        status, body = await admin(proxy, "GET", "/requests?contains=hi")
        if content:  # (a body nested past 64 levels is kept as its hash: no prompt)
            assert status == 200, body
            assert isinstance(body["requests"], list)
        else:  # the prompts are not kept: refused with its reason, never a 500
            assert (status, body["error"]["type"]) == (400, "content_not_kept")
