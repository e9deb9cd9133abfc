"""The admin API through real sockets, and ``chaosproxy serve`` as a process."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from chaosproxy.cli.main import build_parser, config_from
from chaosproxy.control.admin import RequestStore
from chaosproxy.control.client import ChaosClient
from chaosproxy.control.start import RunningProxy, StartupError
from chaosproxy.scenario import ScenarioError, load_library, load_scenarios, parse_scenario
from chaosproxy.server.config import Config
from tests.support.admin import ADMIN, call
from tests.support.cli import chaosproxy_argv, run_cli, serve_until_started, sigterm
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.repo import REPO
from tests.support.scripted_upstream import Script, ScriptedUpstream

SSE = b"".join(b'data: {"n": %d}\n\n' % i for i in range(4))
RECHUNK = "provider: generic\nfaults:\n  - rechunk: {size: %d}\n"


async def get(url: str, **headers: str) -> tuple[aiohttp.ClientResponse, bytes]:
    async with aiohttp.ClientSession() as s, s.post(url, headers=headers, data=b"{}") as resp:
        return resp, await resp.read()


async def streamed(proxy: RunningProxy, log_capture: LogCapture, n: int) -> list[str]:
    """The ids of ``n`` requests for ``/v1/stream`` under scenario ``a``, one after the
    other, each ended."""
    ids = []
    for _ in range(n):
        resp, _ = await get(proxy.url + "/v1/stream", **{"X-Chaos-Scenario": "a"})
        ids.append(resp.headers["X-Chaos-Request-Id"])
        await log_capture.wait_end(ids[-1])
    return ids


@pytest.fixture
async def sse(upstream: ScriptedUpstream) -> str:
    upstream.route("/v1/stream", Script.events(SSE))
    return upstream.url


# --------------------------------------------------------------------------- endpoints


async def test_health_and_the_admin_url(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(scenarios={"a": RECHUNK % 3}, admin=ADMIN)
    assert proxy.admin_url is not None and proxy.admin_url != proxy.url
    status, body, _ = await call(proxy, "GET", "/health")
    assert status == 200
    assert body["status"] == "ok"
    assert (body["scenarios"], body["default"], body["in_flight"]) == (1, None, 0)


async def test_admin_is_off_unless_asked_for(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy()
    assert proxy.admin_url is None


async def test_scenarios_list_add_replace_delete(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(upstream=sse, scenarios={"a": RECHUNK % 3}, default="a", admin=ADMIN)
    status, body, _ = await call(proxy, "GET", "/scenarios")
    assert status == 200
    assert body == {
        "default": "a",
        "scenarios": [parse_scenario(RECHUNK % 3, "<a>", default_name="a").as_dict()],
    }

    yaml_text = "name: small\ndescription: tiny writes\n" + RECHUNK % 2
    status, body, _ = await call(proxy, "POST", "/scenarios", data=yaml_text)
    assert status == 201
    assert body == parse_scenario(yaml_text, "body").as_dict()

    json_text = orjson.dumps(
        {"name": "small", "provider": "generic", "faults": [{"rechunk": {"size": 4}}]}
    )
    status, body, _ = await call(proxy, "POST", "/scenarios", data=json_text)
    assert status == 200  # replaced
    assert body == parse_scenario(json_text, "body").as_dict()
    assert body["faults"][0]["rechunk"]["size"] == 4

    # A scenario added through the API is used by the next request that names it.
    resp, received = await get(proxy.url + "/v1/stream", **{"X-Chaos-Scenario": "small"})
    assert resp.headers["X-Chaos-Scenario"] == "small" and received == SSE
    frames = log_capture.frames(resp.headers["X-Chaos-Request-Id"])
    assert max(f["size"] for f in frames) == 4

    _, body, _ = await call(proxy, "GET", "/scenarios")
    assert [s["name"] for s in body["scenarios"]] == ["a", "small"]

    status, body, _ = await call(proxy, "DELETE", "/scenarios/small")
    assert (status, body) == (200, {"deleted": "small", "default": "a"})
    status, body, _ = await call(proxy, "DELETE", "/scenarios/small")
    assert status == 404 and body["error"]["type"] == "not_found"
    resp, _ = await get(proxy.url + "/v1/stream", **{"X-Chaos-Scenario": "small"})
    assert resp.status == 400

    # Deleting the default leaves no default.
    status, body, _ = await call(proxy, "DELETE", "/scenarios/a")
    assert (status, body) == (200, {"deleted": "a", "default": None})


async def test_an_invalid_scenario_is_refused_with_located_problems(
    make_proxy: ProxyFactory,
) -> None:
    proxy = await make_proxy(admin=ADMIN)
    bad = "name: bad\nfaults:\n  - rechunk: {size: 0}\n  - nosuchfault: {}\n"
    with pytest.raises(ScenarioError) as expected:
        parse_scenario(bad, "body")
    status, body, _ = await call(proxy, "POST", "/scenarios", data=bad)
    assert status == 400
    assert body["error"]["type"] == "invalid_scenario"
    assert body["problems"] == [str(p) for p in expected.value.problems]
    assert len(body["problems"]) == 2
    assert all(re.match(r"body:\d+: ", p) for p in body["problems"])

    # Without a name (and no ?name=) it is a problem too; ?name= supplies one.
    nameless = "faults:\n  - rechunk: {size: 2}\n"
    status, body, _ = await call(proxy, "POST", "/scenarios", data=nameless)
    assert status == 400 and body["problems"]
    status, body, _ = await call(proxy, "POST", "/scenarios?name=given", data=nameless)
    assert status == 201 and body["name"] == "given"

    _, body, _ = await call(proxy, "GET", "/scenarios")
    assert [s["name"] for s in body["scenarios"]] == ["given"]  # nothing else changed


async def test_put_default_validates_and_applies_to_the_next_request(
    make_proxy: ProxyFactory, sse: str
) -> None:
    proxy = await make_proxy(upstream=sse, scenarios={"a": RECHUNK % 3}, admin=ADMIN)
    status, body, _ = await call(proxy, "PUT", "/default", json={"scenario": "nope"})
    assert status == 400 and body["error"]["type"] == "unknown_scenario"
    for bad in (b"not json", b"[]", b'{"name": "a"}', b'{"scenario": 3}'):
        status, body, _ = await call(proxy, "PUT", "/default", data=bad)
        assert status == 400 and body["error"]["type"] == "bad_request", bad

    resp, _ = await get(proxy.url + "/v1/stream")
    assert resp.headers["X-Chaos-Scenario"] == "none"
    status, body, _ = await call(proxy, "PUT", "/default", json={"scenario": "a"})
    assert (status, body) == (200, {"default": "a"})
    resp, _ = await get(proxy.url + "/v1/stream")
    assert resp.headers["X-Chaos-Scenario"] == "a"
    status, body, _ = await call(proxy, "PUT", "/default", json={"scenario": None})
    assert (status, body) == (200, {"default": None})
    resp, _ = await get(proxy.url + "/v1/stream")
    assert resp.headers["X-Chaos-Scenario"] == "none"


@asynccontextmanager
async def gated_upstream(first: bytes, rest: bytes) -> AsyncIterator[tuple[str, asyncio.Event]]:
    """An upstream that sends ``first``, waits for the gate, then sends ``rest``."""
    gate = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(first)
        await gate.wait()
        await resp.write(rest)
        await resp.write_eof()
        gate.clear()  # the next request waits again
        return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", gate
    finally:
        await runner.cleanup()


async def test_changing_the_default_never_touches_a_stream_in_flight(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    split = SSE.index(b"\n\n", SSE.index(b"\n\n") + 2) + 2  # after two whole events
    first, rest = SSE[:split], SSE[split:]
    async with gated_upstream(first, rest) as (url, gate):
        proxy = await make_proxy(
            upstream=url,
            scenarios={"five": RECHUNK % 5, "three": RECHUNK % 3},
            default="five",
            admin=ADMIN,
        )
        async with aiohttp.ClientSession() as s, s.post(proxy.url + "/v1/stream") as resp:
            in_flight = resp.headers["X-Chaos-Request-Id"]
            got = await resp.content.readexactly(len(first))
            status, body, _ = await call(proxy, "GET", f"/requests/{in_flight}")
            assert body["summary"]["state"] == "in_flight"
            assert body["summary"]["bytes"] == len(first)
            assert body["summary"]["frames"] == len(body["frames"]) > 0
            _, health, _ = await call(proxy, "GET", "/health")
            assert health["in_flight"] == 1
            status, _, _ = await call(proxy, "PUT", "/default", json={"scenario": "three"})
            assert status == 200
            gate.set()
            got += await resp.content.read()
        assert got == SSE
        end = await log_capture.wait_end(in_flight)
        assert end["scenario"] == "five"
        frames = log_capture.frames(in_flight)
        after_switch = [f["size"] for f in frames if f["offset"] >= len(first)]
        assert after_switch and max(after_switch) == 5  # still the old faults
        assert list(end["faults_applied"]) == ["rechunk"]

        gate.set()
        resp2, body2 = await get(proxy.url + "/v1/stream")
        assert body2 == SSE and resp2.headers["X-Chaos-Scenario"] == "three"
        next_id = resp2.headers["X-Chaos-Request-Id"]
        assert max(f["size"] for f in log_capture.frames(next_id)) == 3


async def test_requests_recent_and_detail(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(upstream=sse, scenarios={"a": RECHUNK % 6}, admin=ADMIN)
    ids = await streamed(proxy, log_capture, 3)

    status, body, _ = await call(proxy, "GET", "/requests?limit=2")
    assert status == 200
    assert [r["request_id"] for r in body["requests"]] == ids[::-1][:2]
    _, body, _ = await call(proxy, "GET", "/requests")
    assert [r["request_id"] for r in body["requests"]] == ids[::-1]
    summary = body["requests"][0]
    end = log_capture.end(ids[-1])
    request_line = log_capture.for_request(ids[-1])[0]
    expected = {k: v for k, v in {**request_line, **end}.items() if k != "event"}
    sent = summary.pop("request")  # what the client sent (the journal)
    assert summary == {**expected, "state": "done"}
    assert (sent["method"], sent["path"]) == ("POST", "/v1/stream")
    # Without --log-content, no body: its size and hash (docs/mock.md, The request journal)
    assert "body" not in sent and sent["body_omitted_reason"] == "content"
    assert (sent["body_bytes"], sent["body_sha256"]) == (2, hashlib.sha256(b"{}").hexdigest())
    assert body["next"] is None  # (the whole history on one page)
    for bad in ("0", "-1", "x"):
        status, body, _ = await call(proxy, "GET", f"/requests?limit={bad}")
        assert status == 400

    status, body, _ = await call(proxy, "GET", f"/requests/{ids[0]}")
    assert status == 200
    frames = log_capture.frames(ids[0])
    drop = {"event", "request_id", "scenario"}
    assert body["frames"] == [{k: v for k, v in f.items() if k not in drop} for f in frames]
    assert sum(f["size"] for f in body["frames"]) == body["summary"]["bytes"] == len(SSE)
    assert body["actions"] == [] and body["omitted_lines"] == 0

    status, body, _ = await call(proxy, "GET", "/requests/r-nope")
    assert status == 404 and body["error"]["type"] == "not_found"


async def test_request_history_and_frames_are_bounded(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(
        upstream=sse, scenarios={"a": RECHUNK % 4}, admin=ADMIN, history=2, history_frames=3
    )
    ids = await streamed(proxy, log_capture, 3)
    _, body, _ = await call(proxy, "GET", "/requests?limit=100")
    assert [r["request_id"] for r in body["requests"]] == ids[::-1][:2]
    status, _, _ = await call(proxy, "GET", f"/requests/{ids[0]}")
    assert status == 404  # pushed out of the history

    _, body, _ = await call(proxy, "GET", f"/requests/{ids[-1]}")
    total = len(log_capture.frames(ids[-1]))
    assert total > 3
    assert len(body["frames"]) == 3 and body["omitted_lines"] == total - 3
    assert body["summary"]["frames"] == total  # the summary still counts them all


def test_payload_kept_per_request_is_bounded() -> None:
    store = RequestStore(max_content=20)
    store({"event": "request", "request_id": "r-1"})
    for data in ("abcd", "efgh", "ijkl"):
        raw = base64.b64encode(data.encode()).decode()  # 8 characters
        store({"event": "frame", "request_id": "r-1", "size": 4, "data": data, "raw": raw})
    record = store.get("r-1")
    assert record is not None
    frames = record.detail()["frames"]
    assert [f.get("data") for f in frames] == ["abcd", None, None]
    assert [f.get("content_omitted", False) for f in frames] == [False, True, True]
    assert all(f["size"] == 4 for f in frames)
    assert record.view() == {"request_id": "r-1", "state": "in_flight", "bytes": 12, "frames": 3}


async def test_reset_forgets_requests_and_restarts_scenario_ordinals(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    once = "provider: generic\nrequests: [1]\nfaults:\n  - rechunk: {size: 5}\n"
    proxy = await make_proxy(upstream=sse, scenarios={"once": once}, default="once", admin=ADMIN)

    async def ordinal_and_faults() -> tuple[int, bool]:
        resp, _ = await get(proxy.url + "/v1/stream")
        request_id = resp.headers["X-Chaos-Request-Id"]
        end = await log_capture.wait_end(request_id)
        request_line = log_capture.for_request(request_id)[0]
        return request_line["ordinal"], bool(end.get("faults_applied"))

    assert await ordinal_and_faults() == (1, True)
    assert await ordinal_and_faults() == (2, False)
    status, body, _ = await call(proxy, "POST", "/reset")
    assert (status, body) == (200, {"reset": True})
    _, body, _ = await call(proxy, "GET", "/requests")
    assert body == {"requests": [], "next": None}
    assert await ordinal_and_faults() == (1, True)
    _, body, _ = await call(proxy, "GET", "/requests")
    assert len(body["requests"]) == 1


async def test_metrics_endpoint_serves_prometheus_text(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(upstream=sse, admin=ADMIN)
    resp, _ = await get(proxy.url + "/v1/stream")
    await log_capture.wait_end(resp.headers["X-Chaos-Request-Id"])
    status, text, raw = await call(proxy, "GET", "/metrics")
    assert status == 200 and raw.headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = families["chaosproxy_requests"].samples
    assert [(s.labels, s.value) for s in requests if s.name.endswith("_total")] == [
        ({"scenario": "none", "outcome": "completed"}, 1.0)
    ]


async def test_unknown_routes_answer_json(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=ADMIN)
    status, body, _ = await call(proxy, "GET", "/nope")
    assert status == 404 and body["error"]["type"] == "http_error"
    status, body, _ = await call(proxy, "POST", "/health")
    assert status == 405 and body["error"]["type"] == "http_error"


# --------------------------------------------------------------------------- auth

#: Every endpoint but GET /health (anyone may ask whether the proxy is up).
ENDPOINTS = [
    ("GET", "/scenarios"),
    ("POST", "/scenarios"),
    ("DELETE", "/scenarios/a"),
    ("PUT", "/default"),
    ("GET", "/requests"),
    ("GET", "/requests/r-1"),
    ("POST", "/reset"),
    ("GET", "/metrics"),
]


async def test_bearer_token_guards_every_endpoint(make_proxy: ProxyFactory) -> None:
    token = "s3cret-admin-token"
    proxy = await make_proxy(scenarios={"a": RECHUNK % 3}, admin=ADMIN, admin_token=token)
    for method, path in ENDPOINTS:
        for wrong in (None, "wrong", token + "x", token[:-1]):
            status, body, resp = await call(proxy, method, path, token=wrong)
            assert status == 401, (method, path, wrong)
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            assert body["error"]["type"] == "unauthorized"
            assert token not in orjson.dumps(body).decode()
    assert proxy.admin_url is not None
    async with aiohttp.ClientSession() as s:
        for header in (f"Basic {token}", token, f"Bearer{token}"):
            async with s.get(
                proxy.admin_url + "/scenarios", headers={"Authorization": header}
            ) as r:
                assert r.status == 401, header
        async with s.get(
            proxy.admin_url + "/scenarios", headers={"Authorization": f"bearer  {token} "}
        ) as r:
            assert r.status == 200
    status, body, _ = await call(proxy, "GET", "/scenarios", token=token)
    assert status == 200 and body["default"] is None
    status, _, _ = await call(proxy, "PUT", "/default", token=token, json={"scenario": "a"})
    assert status == 200


async def test_health_needs_no_token_and_then_says_only_that_the_proxy_is_up(
    make_proxy: ProxyFactory,
) -> None:
    token = "s3cret-admin-token"
    proxy = await make_proxy(scenarios={"a": RECHUNK % 3}, admin=ADMIN, admin_token=token)
    for wrong in (None, "wrong"):
        status, body, _ = await call(proxy, "GET", "/health", token=wrong)
        assert (status, body) == (200, {"status": "ok", "warnings": []})
    status, body, _ = await call(proxy, "GET", "/health", token=token)
    assert status == 200 and body["status"] == "ok" and body["warnings"] == []
    assert (body["scenarios"], body["default"], body["in_flight"]) == (1, None, 0)
    status, _, _ = await call(proxy, "POST", "/reset")  # the rest still wants it
    assert status == 401


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.1", "example.com"])
async def test_an_admin_off_loopback_without_a_token_refuses_to_start(
    make_proxy: ProxyFactory, host: str
) -> None:
    with pytest.raises(StartupError, match="not on loopback and has no token"):
        await make_proxy(admin=(host, 0))


async def test_an_empty_admin_token_refuses_to_start(make_proxy: ProxyFactory) -> None:
    with pytest.raises(StartupError, match="empty"):
        await make_proxy(admin=ADMIN, admin_token=" ")


async def test_admin_insecure_starts_and_health_warns(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=("0.0.0.0", 0), admin_insecure=True)
    assert proxy.admin_bound[0].startswith("http://0.0.0.0:")
    status, body, _ = await call(proxy, "GET", "/health")
    assert status == 200 and len(body["warnings"]) == 1
    assert "--admin-insecure" in body["warnings"][0]
    assert proxy.warnings == body["warnings"]


async def test_an_admin_off_loopback_with_a_token_starts(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=("0.0.0.0", 0), admin_token="t0k")
    status, body, _ = await call(proxy, "GET", "/health")
    assert (status, body) == (200, {"status": "ok", "warnings": []})
    status, _, _ = await call(proxy, "GET", "/scenarios", token="t0k")
    assert status == 200


async def test_an_admin_port_in_use_stops_start_up(make_proxy: ProxyFactory) -> None:
    first = await make_proxy(admin=ADMIN)
    assert first.admin_url is not None
    port = int(first.admin_url.rsplit(":", 1)[1])
    with pytest.raises(StartupError, match="admin API"):
        await make_proxy(admin=("127.0.0.1", port))


# --------------------------------------------------------------------------- the CLI


async def test_serve_prints_where_it_listens_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CHAOSPROXY_ADMIN_TOKEN": "tok-123"}
    proc = await asyncio.create_subprocess_exec(
        *chaosproxy_argv(), "serve",
        "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--seed", "7",
        "--mock-interval-ms", "0",
        cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None and proc.stdout is not None
    try:
        async with asyncio.timeout(15):
            line = (await proc.stderr.readline()).decode()
        found = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", line)
        admin = re.search(r"admin: (http://127\.0\.0\.1:(\d+)) \(bearer token\)", line)
        assert found and admin, line
        assert int(found.group(2)) != 0 and int(admin.group(2)) != 0
        assert (
            f"scenarios: {len(load_library())} (the built-in library);" in line
            and "seed: 7" in line
            and "tok-123" not in line
        )
        async with aiohttp.ClientSession() as s:
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(found.group(1) + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                received = await resp.read()
                request_id = resp.headers["X-Chaos-Request-Id"]
            headers = {"Authorization": "Bearer tok-123"}
            async with s.get(admin.group(1) + "/health", headers=headers) as resp:
                assert resp.status == 200
        assert received.rstrip().endswith(b"data: [DONE]")
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            stdout, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()
    lines = [orjson.loads(x) for x in stdout.splitlines()]  # a pipe: JSON lines
    ends = [x for x in lines if x["event"] == "response_end" and x["request_id"] == request_id]
    assert len(ends) == 1 and ends[0]["bytes"] == len(received)


def test_admin_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    def config(*argv: str) -> Config:
        return config_from(build_parser().parse_args(["serve", *argv]))

    assert (config().admin, config().admin_token) == (("127.0.0.1", 8478), None)
    assert config("--admin", "off").admin is None
    assert config("--admin", "0.0.0.0:9").admin == ("0.0.0.0", 9)
    monkeypatch.setenv("CHAOSPROXY_ADMIN", "off")
    monkeypatch.setenv("CHAOSPROXY_ADMIN_TOKEN", "t")
    monkeypatch.setenv("CHAOSPROXY_TRACE_DIR", "/tmp/traces")
    assert (config().admin, config().admin_token, config().trace_dir) == (None, "t", "/tmp/traces")
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--admin", "nowhere"])
    assert exc.value.code == 2


# --------------------------------------------------------------------------- parity


async def test_get_one_scenario_in_the_shape_of_its_file(make_proxy: ProxyFactory) -> None:
    slow = "description: slow\nfaults:\n  - delay: {first_byte: 800, per_event: 2s}\n"
    proxy = await make_proxy(scenarios={"slow": slow}, admin=ADMIN)
    status, body, _ = await call(proxy, "GET", "/scenarios/slow")
    assert status == 200
    assert body == {
        "name": "slow",
        "description": "slow",
        "seed": None,
        "provider": "auto",
        "format": "auto",
        "match": None,
        "rate": 1.0,
        "requests": None,
        "resume": None,
        "faults": [
            {
                "delay": {
                    "kind": None,
                    "type": None,
                    "match": None,
                    "nth": None,
                    "every": None,
                    "range": None,
                    "probability": None,
                    "first_byte": "800ms",
                    "per_event": "2s",
                    "jitter": None,
                    "headers": None,
                }
            }
        ],
        "source": "<slow>",
    }
    status, body, _ = await call(proxy, "GET", "/scenarios/nope")
    assert status == 404
    assert body["error"]["message"] == "unknown scenario 'nope'"


#: How a client may encode what it got back: orjson (UTF-8), and Python's json.dumps
#: with its default ASCII escapes (👍 as a surrogate pair, \ud83d\udc4d) and without.
ENCODERS = {
    "orjson": orjson.dumps,
    "json-ascii": lambda v: json.dumps(v).encode(),
    "json-utf8": lambda v: json.dumps(v, ensure_ascii=False).encode(),
}


@pytest.mark.parametrize("encode", ENCODERS.values(), ids=list(ENCODERS))
async def test_every_library_scenario_goes_through_get_post_get_unchanged(
    make_proxy: ProxyFactory, encode: Any
) -> None:
    proxy = await make_proxy(admin=ADMIN, library=True)
    _, listed, _ = await call(proxy, "GET", "/scenarios")
    assert [s["name"] for s in listed["scenarios"]] == sorted(load_library())
    # (emoji-split-in-grapheme's emoji are surrogate pairs in json.dumps's ASCII)
    assert any("\\ud83d" in json.dumps(s) for s in listed["scenarios"])
    for before in listed["scenarios"]:
        status, one, _ = await call(proxy, "GET", f"/scenarios/{before['name']}")
        assert (status, one) == (200, before)
        status, posted, _ = await call(proxy, "POST", "/scenarios", data=encode(before))
        assert status == 200, posted  # replaced, not added
        status, after, _ = await call(proxy, "GET", f"/scenarios/{before['name']}")
        assert status == 200
        assert after == {**before, "source": "body"}  # only the read-only source differs
    _, relisted, _ = await call(proxy, "GET", "/scenarios")
    assert [s["name"] for s in relisted["scenarios"]] == [s["name"] for s in listed["scenarios"]]


@given(
    description=st.text(st.characters(codec="utf-8"), max_size=40),
    data=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",))),
)
@settings(max_examples=150, deadline=None)
def test_any_text_goes_through_json_dumps_and_back(description: str, data: str) -> None:
    """What the admin parses is JSON as JSON means it: any text, however encoded (ASCII
    escapes with surrogate pairs for astral characters, or UTF-8), reads back equal."""
    doc = {
        "name": "t",
        "description": description,
        "faults": [{"inject": {"after": 1, "event": {"data": data}}}],
    }
    for encode in ENCODERS.values():
        if encode is orjson.dumps and not description.isascii():
            continue  # (orjson refuses lone surrogates, which st.characters may draw)
        try:
            body = encode(doc)
        except (TypeError, UnicodeEncodeError):  # a lone surrogate: no UTF-8 for it
            continue
        try:
            shown = parse_scenario(body, "body").as_dict()
        except ScenarioError as exc:  # only a lone surrogate, located
            assert all("lone UTF-16 surrogate" in str(p) for p in exc.problems), exc
            assert any(0xD800 <= ord(c) <= 0xDFFF for c in description)
            continue
        assert shown["description"] == description
        assert shown["faults"][0]["inject"]["event"]["data"] == data


async def test_a_lone_surrogate_is_a_400_naming_where(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(admin=ADMIN, library=False)
    body = b'{"name": "x", "faults": ["bom"], "description": "ok \\ud83d"}'
    status, answer, _ = await call(proxy, "POST", "/scenarios", data=body)
    assert status == 400
    assert answer["problems"] == [
        "body:1: description: a lone UTF-16 surrogate \\ud83d (character 4 of the text "
        "starting at column 49): not text; escape a whole pair, or send the character as "
        "UTF-8"
    ]
    status, answer, _ = await call(proxy, "PUT", "/default", data=b'{"scenario": "a\\udc4d"}')
    assert (status, answer["error"]["message"]) == (
        400,
        'expected a JSON body ({"scenario": NAME or null}); this one is not: '
        "invalid high surrogate in string: line 1 column 16 (char 15)",
    )


async def test_a_duration_posted_back_keeps_its_value(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    slow = "provider: generic\nfaults:\n  - delay: {first_byte: 800}\n"
    proxy = await make_proxy(upstream=sse, scenarios={"slow": slow}, admin=ADMIN)
    _, shown, _ = await call(proxy, "GET", "/scenarios/slow")
    assert shown["faults"][0]["delay"]["first_byte"] == "800ms"
    await call(proxy, "POST", "/scenarios", data=orjson.dumps(shown))
    scenario = proxy.state.scenarios.get("slow")
    assert scenario.faults[0][1].first_byte == 0.8  # type: ignore[attr-defined]


async def test_a_file_may_not_set_source_but_a_post_may_give_it_back(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: x\nfaults: [drop]\n")
    with pytest.raises(ScenarioError) as info:
        load_scenarios([bad])
    assert [str(p) for p in info.value.problems] == [
        f"{bad}:1: source: unknown key (allowed: name, description, seed, provider, format, "
        "match, rate, requests, resume, faults, envelope, mock)"
    ]
    assert parse_scenario("source: x\nfaults: [drop]\n", "body", "a", read_only=True).source == (
        "body"
    )


async def test_reset_goes_back_to_the_state_at_start_up(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(
        upstream=sse,
        scenarios={"a": RECHUNK % 3, "b": RECHUNK % 4},
        default="a",
        admin=ADMIN,
    )
    resp, _ = await get(proxy.url + "/v1/stream")
    await log_capture.wait_end(resp.headers["X-Chaos-Request-Id"])
    _, before, _ = await call(proxy, "GET", "/scenarios")
    await call(proxy, "POST", "/scenarios?name=c", data=RECHUNK % 5)  # added at run time
    await call(proxy, "POST", "/scenarios?name=a", data=RECHUNK % 6)  # replaced
    await call(proxy, "DELETE", "/scenarios/b")  # removed
    await call(proxy, "PUT", "/default", json={"scenario": "c"})
    status, body, _ = await call(proxy, "POST", "/reset")
    assert (status, body) == (200, {"reset": True})
    _, after, _ = await call(proxy, "GET", "/scenarios")
    assert after == before
    assert after["default"] == "a"
    _, requests, _ = await call(proxy, "GET", "/requests")
    assert requests == {"requests": [], "next": None}


async def test_requests_filtered_by_scenario_and_limited(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(
        upstream=sse, scenarios={"a": RECHUNK % 3, "b": RECHUNK % 4}, admin=ADMIN
    )
    ids: dict[str, list[str]] = {"a": [], "b": []}
    for name in ("a", "b", "a", "b", "a"):
        resp, _ = await get(proxy.url + "/v1/stream", **{"X-Chaos-Scenario": name})
        ids[name].append(resp.headers["X-Chaos-Request-Id"])
        await log_capture.wait_end(ids[name][-1])
    _, body, _ = await call(proxy, "GET", "/requests?scenario=a")
    assert [r["request_id"] for r in body["requests"]] == ids["a"][::-1]
    _, body, _ = await call(proxy, "GET", "/requests?scenario=b&limit=1")
    assert [r["request_id"] for r in body["requests"]] == ids["b"][-1:]
    _, body, _ = await call(proxy, "GET", "/requests?scenario=nope")
    assert body == {"requests": [], "next": None}


async def pages(proxy: RunningProxy, query: str) -> list[list[str]]:
    """The request ids of each page of ``GET /requests?QUERY``, following ``next``."""
    out: list[list[str]] = []
    cursor = None
    while True:
        extra = "" if cursor is None else f"&cursor={cursor}"
        status, page, _ = await call(proxy, "GET", f"/requests?{query}{extra}")
        assert status == 200, page
        out.append([r["request_id"] for r in page["requests"]])
        cursor = page["next"]
        if cursor is None:
            return out


async def test_requests_listed_in_pages_by_limit_and_by_bytes(
    make_proxy: ProxyFactory, sse: str, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(
        upstream=sse, scenarios={"a": RECHUNK % 3, "b": RECHUNK % 4}, admin=ADMIN
    )
    ids: dict[str, list[str]] = {"a": [], "b": []}
    every: list[str] = []
    for name in ("a", "b", "a", "b", "a", "b", "a"):
        resp, _ = await get(proxy.url + "/v1/stream", **{"X-Chaos-Scenario": name})
        ids[name].append(resp.headers["X-Chaos-Request-Id"])
        every.insert(0, ids[name][-1])
        await log_capture.wait_end(ids[name][-1])
    assert await pages(proxy, "limit=3") == [every[:3], every[3:6], every[6:]]
    assert await pages(proxy, "limit=7") == [every]
    assert await pages(proxy, "scenario=a&limit=3") == [ids["a"][::-1][:3], ids["a"][:1]]
    # A page of 1 byte still holds one summary: each on its own page.
    assert await pages(proxy, "max_bytes=1") == [[rid] for rid in every]
    # Pages of at most max_bytes of summaries (their JSON, a comma between), as many as
    # fit: what the summaries' own sizes say.
    _, whole, _ = await call(proxy, "GET", "/requests")
    sizes = [len(orjson.dumps(r)) for r in whole["requests"]]
    limit = 2 * max(sizes) + 1
    expected: list[list[str]] = [[]]
    used = 0
    for rid, size in zip(every, sizes, strict=True):
        if expected[-1] and used + size > limit:
            expected.append([])
            used = 0
        expected[-1].append(rid)
        used += size + 1
    assert await pages(proxy, f"max_bytes={limit}") == expected
    assert len(expected) in (3, 4)
    # A page is what is kept now: a request that began since is on no later page.
    _, first, _ = await call(proxy, "GET", "/requests?limit=2")
    resp, _ = await get(proxy.url + "/v1/stream", **{"X-Chaos-Scenario": "a"})
    await log_capture.wait_end(resp.headers["X-Chaos-Request-Id"])
    _, second, _ = await call(proxy, "GET", f"/requests?limit=2&cursor={first['next']}")
    assert [r["request_id"] for r in second["requests"]] == every[2:4]
    for bad in ("cursor=x", "cursor=-1", "cursor=1e3", "max_bytes=0", "max_bytes=x",
                "max_bytes=99999999999", f"max_bytes={16 * 1024 * 1024 + 1}"):  # fmt: skip
        status, body, _ = await call(proxy, "GET", f"/requests?{bad}")
        assert status == 400 and body["error"]["type"] == "bad_request", bad


async def test_the_admin_client_follows_the_pages(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    # Bodies of 400 KB, kept (--log-content): a summary shows each three times (the
    # request line's body, the journal's body and its message), one summary a page.
    proxy = await make_proxy(
        admin=ADMIN, content=True, journal_entry_bytes=512 * 1024, mock_tokens=1
    )
    prompts = [f"{i} " + "x" * 400_000 for i in range(5)]
    sent: list[str] = []
    async with aiohttp.ClientSession() as s:
        for prompt in prompts:
            body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]})
            async with s.post(proxy.url + "/v1/chat/completions", data=body) as resp:
                await resp.read()
                sent.append(resp.headers["X-Chaos-Request-Id"])
            await log_capture.wait_end(sent[-1])
    assert await pages(proxy, "limit=100") == [[rid] for rid in sent[::-1]]
    assert proxy.admin_url is not None
    client = ChaosClient(proxy.admin_url)
    found = await asyncio.to_thread(client.requests)
    assert [r["request_id"] for r in found] == sent  # (oldest first)
    assert [r["request"]["messages"][0]["text"] for r in found] == prompts
    (one,) = await asyncio.to_thread(client.verify, 1, contains="3 xxx")
    assert one["request_id"] == sent[3]


def test_serve_refuses_a_public_admin_without_a_token_in_one_line() -> None:
    result = run_cli("serve", "--listen", "127.0.0.1:0", "--admin", "0.0.0.0:0")
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("chaosproxy: error: the admin API on 0.0.0.0:0 is not on loopback")
    assert "CHAOSPROXY_ADMIN_TOKEN" in lines[0] and "--admin-insecure" in lines[0]
    # The same from the environment, as in a container.
    result = run_cli("serve", "--listen", "127.0.0.1:0", env={"CHAOSPROXY_ADMIN": "0.0.0.0:0"})
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


async def test_start_up_prints_the_addresses_actually_bound() -> None:
    proc, lines = await serve_until_started(
        "--listen", "0.0.0.0:0", "--admin", "0.0.0.0:0", "--admin-token", "t0k"
    )
    try:
        start = lines[0]
        found = re.search(r"listening on http://0\.0\.0\.0:(\d+) ", start)
        admin = re.search(r"admin: http://0\.0\.0\.0:(\d+) \(bearer token\)", start)
        assert found and admin, start
        assert int(found.group(1)) and int(admin.group(1))
        assert "t0k" not in "\n".join(lines)
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"http://127.0.0.1:{admin.group(1)}/health") as resp,  # reachable there
        ):
            assert resp.status == 200
    finally:
        await sigterm(proc)


def dockerfile() -> tuple[dict[str, str], list[str], list[str]]:
    """The image's ENV (the last stage's, but PATH), its CMD, and its HEALTHCHECK's
    command, run by this Python."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    image = text[text.rindex("\nFROM ") :]
    env: dict[str, str] = {}
    cmd: list[str] = []
    health: list[str] = []
    for line in image.splitlines():
        if line.startswith("ENV "):
            env.update(re.findall(r"(\w+)=(\S+)", line))
        elif line.startswith("CMD "):
            cmd = json.loads(line[4:])
        elif line.startswith("HEALTHCHECK "):
            health = json.loads(line[line.index("CMD ") + 4 :])
            assert health[0] == "python", health
            health[0] = sys.executable
    env.pop("PATH")
    return env, cmd, health


def test_the_image_keeps_the_admin_on_loopback() -> None:
    env, cmd, health = dockerfile()
    assert cmd == ["serve"]  # no flag that would override CHAOSPROXY_*
    host, _, port = env["CHAOSPROXY_ADMIN"].rpartition(":")
    assert host == "127.0.0.1" and port == "8478"
    assert env["CHAOSPROXY_LISTEN"] == "0.0.0.0:8080"
    assert "CHAOSPROXY_ADMIN_TOKEN" not in env
    assert health[1:] == ["-m", "chaosproxy.healthcheck"]


async def test_the_image_starts_with_no_configuration_and_its_healthcheck_passes(
    tmp_path: Path,
) -> None:
    env, cmd, health = dockerfile()
    # As the image runs it, but on free ports (hosts kept); /scenarios is an empty mount.
    image = {
        **env,
        "CHAOSPROXY_LISTEN": "0.0.0.0:0",
        "CHAOSPROXY_ADMIN": "127.0.0.1:0",
        "CHAOSPROXY_SCENARIOS": str(tmp_path),
        "CHAOSPROXY_ADMIN_TOKEN": "",
    }
    proc, lines = await serve_until_started(*cmd[1:], env=image)
    try:
        admin = re.search(r"admin: (http://127\.0\.0\.1:(\d+))", lines[0])
        assert admin, lines
        notices = [x for x in lines[1:] if x.startswith("chaosproxy: notice: ")]
        assert len(notices) == 1 and "loopback only" in notices[0], lines
        assert "CHAOSPROXY_ADMIN=0.0.0.0:" in notices[0]
        check = await asyncio.create_subprocess_exec(
            *health, env={**os.environ, "CHAOSPROXY_ADMIN": f"127.0.0.1:{admin.group(2)}"}
        )
        async with asyncio.timeout(10):
            assert await check.wait() == 0
        # Published as the notice says, with a token: /health still needs none.
        check = await asyncio.create_subprocess_exec(
            *health, env={**os.environ, "CHAOSPROXY_ADMIN": f"0.0.0.0:{admin.group(2)}"}
        )
        async with asyncio.timeout(10):
            assert await check.wait() == 0
    finally:
        await sigterm(proc)


async def test_a_handler_that_fails_is_a_json_500_in_one_line_never_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bug in a handler: the caller gets what failed, credentials masked, and the
    connection closed; nothing is printed (aiohttp would log a traceback)."""
    from chaosproxy.control.admin import AdminState, create_admin_app
    from chaosproxy.observe.metrics import Metrics
    from chaosproxy.scenario.selection import ScenarioSet

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("lookup of https://u:hunter2@db/x?key=sk-abc failed\nsecond line")

    state = AdminState(ScenarioSet({}), RequestStore(), Metrics())
    app = create_admin_app(state, overrides={("GET", "/scenarios"): broken})
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/scenarios") as resp:
                assert resp.status == 500
                assert resp.headers["Connection"] == "close"
                assert await resp.json() == {
                    "error": {
                        "type": "internal_error",
                        "message": "GET /scenarios failed: lookup of https://u:***@db/x?key=*** "
                        "failed",
                    }
                }
            async with s.get(f"http://127.0.0.1:{port}/health") as resp:
                assert resp.status == 200  # the admin goes on
    finally:
        await runner.cleanup()
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
