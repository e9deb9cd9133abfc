"""No secrets anywhere: credentials a client sends reach the upstream, and nothing else.

Requests carry an ``Authorization`` header, ``x-api-key`` and ``api-key`` headers, a
Gemini-style ``key=`` query parameter and cookies. Every byte the proxy produces — the
frame log file, every trace file, every admin API answer, every error answer (body and
headers) — is searched for them, with and without ``--log-content``. The upstream never
echoes them, so any hit is the proxy's own leak.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import pytest

from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.start import RunningProxy, start_proxy
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import parse_scenario
from tests.support.cli import start_serve
from tests.support.scripted_upstream import (
    Script,
    ScriptedUpstream,
    raw_upstream,
    scripted_upstream,
)

AUTH = "sk-SECRET-AUTHORIZATION-1a2b"
X_API_KEY = "SECRET-X-API-KEY-3c4d"
API_KEY = "SECRET-AZURE-API-KEY-5e6f"
GEMINI_KEY = "AIzaSECRET-GEMINI-KEY-7g8h"
COOKIE = "SECRET-COOKIE-9i0j"
BODY_KEY = "SECRET-BODY-API-KEY-1k2l"
BODY_PASSWORD = "SECRET-BODY-URL-PASSWORD-3m4n"
# Secrets by name (issue 39): headers, body keys and a query parameter whose names say
# credential, assertion, cert, key, secret, token.
AMZ_CREDENTIAL = "SECRET-AMZ-CREDENTIAL-5o6p"
JWT_ASSERTION = "SECRET-JWT-ASSERTION-7q8r"
CLIENT_CERT = "SECRET-CLIENT-CERT-9s0t"
OPENAI_API_KEY = "SECRET-OPENAI-API-KEY-1u2v"
SECRET_KEY = "SECRET-SECRET-KEY-3w4x"
AWS_SECRET = "SECRET-AWS-SECRET-ACCESS-KEY-5y6z"
TOKEN_OBJECT = "SECRET-TOKEN-OBJECT-7a8b"
AUTH_HEADER = "SECRET-AUTH-HEADER-QUERY-9c0d"
# Secrets by shape, in texts whose names say nothing: a message, an ordinary header.
SK_PROJ = "sk-proj-SECRETinAmessage1e2f3g4h"
SK_ANT = "sk-ant-api03-SECRETinAheader5i6j"
AKIA = "AKIAIOSFODNN7SECRET1"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJTRUNSRVQtSldUIn0.c2VjcmV0LXNpZ25hdHVyZQ"
BEARER_IN_TEXT = "SECRET-BEARER-IN-TEXT-7k8l"
SECRETS = (
    AUTH,
    X_API_KEY,
    API_KEY,
    GEMINI_KEY,
    COOKIE,
    BODY_KEY,
    BODY_PASSWORD,
    AMZ_CREDENTIAL,
    JWT_ASSERTION,
    CLIENT_CERT,
    OPENAI_API_KEY,
    SECRET_KEY,
    AWS_SECRET,
    TOKEN_OBJECT,
    AUTH_HEADER,
    SK_PROJ,
    SK_ANT,
    AKIA,
    JWT,
    BEARER_IN_TEXT,
)
#: A request body with credentials in it (the journal keeps bodies, and logs them with
#: --log-content): credential-like keys (a string, an object), a URL with a password
#: and a key= in a text, API keys by their shape in a message; and usage numbers whose
#: names hold "token", which stay.
BODY = orjson.dumps(
    {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": f"see https://me:{BODY_PASSWORD}@host/x?key={GEMINI_KEY}"},
                    {"text": f"my key is {SK_PROJ}, aws {AKIA}, jwt {JWT}"},
                    {"text": f"curl -H 'Authorization: Bearer {BEARER_IN_TEXT}'"},
                ],
            }
        ],
        "api_key": BODY_KEY,
        "openai_api_key": OPENAI_API_KEY,
        "secret_key": SECRET_KEY,
        "aws_secret_access_key": AWS_SECRET,
        "token": {"value": TOKEN_OBJECT, "expires": 3600},
        "max_tokens": 77,
        "token_count": 5,
        "generationConfig": {"maxOutputTokens": 321},
    }
)
#: What of the body must stay as it was (numbers are never credentials).
KEPT = (b'"max_tokens":77', b'"token_count":5', b'"maxOutputTokens":321')

HEADERS = {
    "Authorization": f"Bearer {AUTH}",
    "x-api-key": X_API_KEY,
    "api-key": API_KEY,
    "Cookie": f"session={COOKIE}; theme=dark",
    "X-Amz-Credential": AMZ_CREDENTIAL,
    "X-JWT-Assertion": JWT_ASSERTION,
    "X-Client-Cert": CLIENT_CERT,
    "X-Forwarded-Note": f"relayed for {SK_ANT}",
}
GEMINI_PATH = "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
QUERY = f"?alt=sse&key={GEMINI_KEY}&auth_header=Bearer%20{AUTH_HEADER}"
SSE = b"".join(b'data: {"candidates": [{"content": {"parts": [{"text": "hi %d"}]}}]}\r\n\r\n' % i
               for i in range(4))  # fmt: skip
SCENARIOS = {
    "faulty": "provider: generic\nfaults:\n  - rechunk: {size: 9}\n",
    "cutter": "provider: generic\nfaults:\n  - cut: {after: 2, how: abort}\n",
}
ADMIN_TOKEN = "admin-token-not-a-client-secret"


@dataclass
class Evidence:
    """Every byte the proxy produced, to search."""

    blobs: list[tuple[str, bytes]] = field(default_factory=list)

    def add(self, where: str, data: bytes | str) -> None:
        self.blobs.append((where, data.encode() if isinstance(data, str) else data))

    def add_response(self, where: str, resp: aiohttp.ClientResponse, body: bytes) -> None:
        headers = "\n".join(f"{k}: {v}" for k, v in resp.headers.items())
        self.add(where + " headers", headers)
        self.add(where + " body", body)

    def assert_clean(self) -> None:
        assert self.blobs
        for where, data in self.blobs:
            for secret in SECRETS:
                assert secret.encode() not in data, f"{secret} leaked in {where}"
            lowered = data.lower()
            for secret in SECRETS:  # not even in another case
                assert secret.lower().encode() not in lowered, f"{secret} leaked in {where}"


#: A broken header line: an HTTP client's error may then quote the whole upstream URL,
#: query string and all.
MALFORMED = b"HTTP/1.1 200 OK\r\nBad Header\x01: x\r\n\r\n"


def dead_url() -> str:
    with socket.socket() as sock:  # a port just freed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


class World:
    """Three proxies (a good, a malformed and an unreachable upstream) logging to files
    and traces in one directory, each with a token-guarded admin API."""

    def __init__(self, tmp: Path, content: bool) -> None:
        self.tmp = tmp
        self.content = content
        self.proxies: dict[str, RunningProxy] = {}
        self.logs: list[FrameLog] = []
        self.evidence = Evidence()
        self.upstream: ScriptedUpstream | None = None

    async def start(self, name: str, upstream: str) -> RunningProxy:
        log = FrameLog.open(str(self.tmp / f"{name}.log"), content=self.content)
        self.logs.append(log)
        proxy = await start_proxy(
            EMBEDDED.replace(
                upstream=upstream,
                admin=("127.0.0.1", 0),
                admin_token=ADMIN_TOKEN,
                trace_dir=str(self.tmp / "traces"),
            ),
            scenarios={n: parse_scenario(t, n, default_name=n) for n, t in SCENARIOS.items()},
            log=log,
        )
        self.proxies[name] = proxy
        return proxy

    async def request(
        self, proxy: RunningProxy, path: str, *, where: str, **headers: str
    ) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as s,
            s.post(proxy.url + path, headers={**HEADERS, **headers}, data=BODY) as resp,
        ):
            try:
                body = await resp.read()
            except aiohttp.ClientPayloadError:
                body = b""  # a cut stream
            self.evidence.add_response(where, resp, body)
            return resp.status, resp.headers["X-Chaos-Request-Id"]

    async def close(self) -> None:
        """Every proxy stopped and every log file closed (again, if already)."""
        for proxy in self.proxies.values():
            await proxy.close()
        for log in self.logs:
            log.close()

    async def collect(self) -> None:
        """Admin answers of every proxy, then (after close) every log and trace file."""
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with aiohttp.ClientSession(headers=auth) as s:
            for name, proxy in self.proxies.items():
                assert proxy.admin_url is not None
                paths = ["/health", "/scenarios", "/requests?limit=1000", "/metrics"]
                async with s.get(proxy.admin_url + "/requests?limit=1000") as resp:
                    listed = await resp.json()
                paths += [f"/requests/{r['request_id']}" for r in listed["requests"]]
                assert listed["requests"], name
                for path in paths:
                    async with s.get(proxy.admin_url + path) as resp:
                        assert resp.status == 200, (name, path)
                        self.evidence.add_response(f"admin {name} {path}", resp, await resp.read())
        await self.close()
        for file in sorted(self.tmp.rglob("*")):
            if file.is_file():
                self.evidence.add(str(file.relative_to(self.tmp)), file.read_bytes())


@pytest.fixture(params=[False, True], ids=["no-content", "log-content"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    world = World(tmp_path, content=request.param)
    async with AsyncExitStack() as stack:
        world.upstream = await stack.enter_async_context(scripted_upstream())
        world.upstream.route(GEMINI_PATH, Script.events(SSE, sep=b"\r\n\r\n"))
        yield world
        await world.close()


async def test_no_secret_reaches_logs_traces_admin_or_errors(world: World) -> None:
    upstream = world.upstream
    assert upstream is not None
    good = await world.start("good", upstream.url)
    statuses: list[int] = []
    ids: list[str] = []
    for where, path, extra in [
        ("passthrough", GEMINI_PATH + QUERY, {}),
        ("faulty", GEMINI_PATH + QUERY, {"X-Chaos-Scenario": "faulty"}),
        ("cut", GEMINI_PATH + QUERY, {"X-Chaos-Scenario": "cutter"}),
        ("path prefix", "/_chaos/faulty" + GEMINI_PATH + QUERY, {}),
        ("unknown scenario", "/_chaos/nope" + GEMINI_PATH + QUERY, {}),
        ("bad seed", GEMINI_PATH + QUERY, {"X-Chaos-Seed": "x"}),
    ]:
        status, request_id = await world.request(good, path, where=where, **extra)
        statuses.append(status)
        ids.append(request_id)
    assert statuses == [200, 200, 200, 200, 400, 400]

    # The secrets did cross the proxy, to the upstream: the test would see a leak.
    assert len(upstream.seen) == 4
    for seen in upstream.seen:
        assert seen.path_qs == GEMINI_PATH + QUERY
        assert seen.headers["Authorization"] == f"Bearer {AUTH}"
        assert seen.headers["x-api-key"] == X_API_KEY
        assert seen.headers["api-key"] == API_KEY
        assert COOKIE in seen.headers["Cookie"]
        assert seen.body == BODY  # the body's credentials too

    async with raw_upstream(MALFORMED) as url:
        broken = await world.start("broken", url)
        status, _ = await world.request(broken, GEMINI_PATH + QUERY, where="malformed")
        assert status == 502
    unreachable = await world.start("unreachable", dead_url())
    status, _ = await world.request(unreachable, GEMINI_PATH + QUERY, where="unreachable")
    assert status == 502

    await world.collect()

    # What the search covered, so a silent empty log cannot pass it.
    names = [where for where, _ in world.evidence.blobs]
    assert {"good.log", "broken.log", "unreachable.log"} <= set(names)
    traces = [n for n in names if n.startswith("traces/")]
    assert len(traces) == 8  # 4 streamed + two refused (400) + malformed + unreachable
    log = (world.tmp / "good.log").read_bytes()
    lines = [orjson.loads(x) for x in log.splitlines()]
    paths = [x["path"] for x in lines if x["event"] == "request"]
    masked = GEMINI_PATH + "?alt=sse&key=***&auth_header=***"
    assert paths == [masked] * 4 + ["/_chaos/nope" + masked, masked]  # + the two refused
    frames = [x for x in lines if x["event"] == "frame"]
    assert frames and all(("data" in f) is world.content for f in frames)
    broken_log = (world.tmp / "broken.log").read_bytes()
    assert b"key=***" in broken_log  # the error quoting the URL was there, masked
    # The journal was there: its body, masked, with --log-content only (in the log and
    # the admin); without, its sizes and hashes.
    requests = [x for x in lines if x["event"] == "request" and "body_sha256" in x]
    assert len(requests) == 4 and all(("body" in x) is world.content for x in requests)
    details = [d for w, d in world.evidence.blobs if w.startswith("admin good /requests/r-")]
    journaled = [d for d in details if b'"body_sha256"' in d]
    kept = b'"api_key":"***"' if world.content else b'"body_omitted_reason":"content"'
    assert len(journaled) == 4 and all(kept in d for d in journaled)
    shown = orjson.loads(journaled[0])["summary"]["request"]
    assert {k: shown["headers"][k] for k in ("x-amz-credential", "x-forwarded-note")} == {
        "x-amz-credential": "***",
        "x-forwarded-note": "relayed for sk-***",
    }
    if world.content:  # the body kept, masked by name: its usage numbers stay
        assert all(k in d for d in journaled for k in KEPT)
        assert shown["body"]["token"] == "***"
    world.evidence.assert_clean()


async def test_upstream_error_answer_hides_the_key(tmp_path: Path) -> None:
    world = World(tmp_path, content=False)
    async with raw_upstream(MALFORMED) as url:
        proxy = await world.start("broken", url)
        try:
            status, _ = await world.request(proxy, GEMINI_PATH + QUERY, where="malformed")
        finally:
            await world.close()
    assert status == 502
    world.evidence.assert_clean()


# --------------------------------------------------------------------------- printed URLs

URL_PASSWORD = "SECRET-URL-PASSWORD-k1l2"


async def test_a_semicolon_separated_key_is_masked_in_the_log(tmp_path: Path) -> None:
    world = World(tmp_path, content=False)
    async with scripted_upstream() as upstream:
        upstream.route(GEMINI_PATH, Script.events(SSE, sep=b"\r\n\r\n"))
        proxy = await world.start("semicolon", upstream.url)
        try:
            for where, query in [
                ("semicolon", f"?alt=sse;key={GEMINI_KEY}"),
                ("mixed", f"?key={GEMINI_KEY};alt=sse&access_token={AUTH}"),
            ]:
                status, _ = await world.request(proxy, GEMINI_PATH + query, where=where)
                assert status == 200
            await world.collect()
        finally:
            await world.close()
    lines = [orjson.loads(x) for x in (tmp_path / "semicolon.log").read_bytes().splitlines()]
    assert [x["path"] for x in lines if x["event"] == "request"] == [
        GEMINI_PATH + "?alt=sse;key=***",
        GEMINI_PATH + "?key=***;alt=sse&access_token=***",
    ]
    world.evidence.assert_clean()


async def serve_process(*args: str) -> tuple[int | None, str]:
    """``chaosproxy serve`` until its start-up line (or its exit), then SIGTERM; its
    exit code and everything it wrote on stderr."""
    proc, first = await start_serve(
        "--listen", "127.0.0.1:0", "--admin", "off", "--log", os.devnull, *args
    )
    assert proc.stderr is not None
    if "listening on" in first:
        proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(10):
        rest = (await proc.stderr.read()).decode()
        await proc.wait()
    return proc.returncode, first + rest


@pytest.mark.parametrize(
    "upstream",
    [
        f"http://user:{URL_PASSWORD}@127.0.0.1:9",
        f"https://user:{URL_PASSWORD}@example.com/v1?key={GEMINI_KEY}",
        f"https://user:pa/{URL_PASSWORD}@example.com/v1",  # a raw / in the password
    ],
)
async def test_an_upstream_password_is_never_printed_at_start(upstream: str) -> None:
    code, stderr = await serve_process("--upstream", upstream)
    assert URL_PASSWORD not in stderr and GEMINI_KEY not in stderr, stderr
    if code == 0:
        assert "user:***@" in stderr.splitlines()[0], stderr
    assert "Traceback" not in stderr


async def test_a_bad_upstream_flag_does_not_echo_its_password() -> None:
    code, stderr = await serve_process("--upstream", f"ftp://user:{URL_PASSWORD}@host")
    assert code == 2
    assert URL_PASSWORD not in stderr and "user:***@host" in stderr, stderr


async def test_an_unreachable_upstream_with_a_password_leaks_it_nowhere(tmp_path: Path) -> None:
    world = World(tmp_path, content=True)
    host_port = dead_url().removeprefix("http://")
    proxy = await world.start("password", f"http://user:{URL_PASSWORD}@{host_port}")
    try:
        status, _ = await world.request(proxy, GEMINI_PATH + QUERY, where="unreachable")
        assert status == 502
        await world.collect()
    finally:
        await world.close()
    world.evidence.assert_clean()
    for where, data in world.evidence.blobs:
        assert URL_PASSWORD.encode() not in data, where
