"""Fixtures, the journal and the request-direction faults through the live proxy and its
built-in mock, with exact expectations: the admin's ``/mock/fixtures``, a scenario's
``mock:`` list, faults on a fixture's stream (integrity, answer, verdicts), what each
``request`` line and the admin keep of what the client sent, ``request_delay`` and
``request_cut`` as the log tells them, and the command line (``serve``, ``mock``,
``validate`` with fixture files)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from chaosproxy.control.start import RunningProxy
from chaosproxy.mock import MOCK_REQUESTS
from tests.support.admin import ADMIN, call
from tests.support.cli import run_cli
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.repo import REPO

CHAT = "/v1/chat/completions"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
PARALLEL = (
    "tool_calls:\n"
    "  - {name: get_weather, arguments: {city: Paris}}\n"
    "  - {name: get_weather, arguments: {city: Tokyo}}\n"
)


def chat_body(text: str = "What's the weather in Paris?", **extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": text}],
        "tools": [WEATHER_TOOL],
        "stream": True,
        **extra,
    }


async def post(
    proxy: RunningProxy, body: dict[str, Any] | bytes, path: str = CHAT, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + path, data=data, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


def chat_text(body: bytes) -> str:
    out = ""
    for block in body.decode().split("\n\n"):
        if block.startswith("data: {"):
            for choice in json.loads(block[6:])["choices"]:
                out += choice["delta"].get("content") or ""
    return out


def calls(body: bytes) -> dict[int, str]:
    args: dict[int, str] = {}
    for block in body.decode().split("\n\n"):
        if block.startswith("data: {"):
            for choice in json.loads(block[6:])["choices"]:
                for call_ in choice["delta"].get("tool_calls") or []:
                    index = call_["index"]
                    args[index] = args.get(index, "") + call_["function"]["arguments"]
    return args


def mock_requests(proxy: RunningProxy) -> int:
    app = getattr(proxy.runners[0], "app", None)
    assert app is not None and MOCK_REQUESTS in app
    return sum(app[MOCK_REQUESTS].values())


# --------------------------------------------------------------------------- the admin


async def test_the_admin_adds_lists_clears_and_resets_fixtures(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(admin=ADMIN, mock_tokens=4)
    text = "name: sunny\nmatch: {message: weather}\ntext: It is sunny.\n"
    status, body, _ = await call(proxy, "POST", "/mock/fixtures", data=text)
    assert (status, body) == (
        201,
        {"added": [{"name": "sunny", "match": {"message": "weather"}, "text": "It is sunny."}]},
    )
    status, body, _ = await call(proxy, "POST", "/mock/fixtures", data="tex: hi\n")
    assert status == 400
    assert body["error"]["type"] == "invalid_fixture"
    assert body["problems"] == [
        "body:1: tex: unknown key, did you mean 'text'? (allowed: name, match, text, "
        "tool_calls, finish, usage, error, tokens_per_event, interval, times)"
    ]
    status, body, _ = await call(proxy, "GET", "/mock/fixtures")
    assert (status, [f["source"] for f in body["fixtures"]]) == (200, ["added"])

    status, headers, stream = await post(proxy, chat_body())
    assert (status, headers["X-Mock-Fixture"], chat_text(stream)) == (200, "sunny", "It is sunny.")
    assert calls(stream) == {}  # a fixture's answer: no corpus tool call

    status, body, _ = await call(proxy, "DELETE", "/mock/fixtures")
    assert (status, body) == (200, {"removed": 1})
    _, headers, stream = await post(proxy, chat_body())
    assert "X-Mock-Fixture" not in headers and json.loads(calls(stream)[0])  # the corpus's
    await call(proxy, "POST", "/mock/fixtures", data=text)
    await call(proxy, "POST", "/reset")
    _, body, _ = await call(proxy, "GET", "/mock/fixtures")
    assert body == {"fixtures": []}


async def test_without_the_mock_the_fixture_calls_say_why(
    make_proxy: ProxyFactory, upstream: Any
) -> None:
    proxy = await make_proxy(upstream=upstream.url, admin=ADMIN)
    for method in ("GET", "POST", "DELETE"):
        status, body, _ = await call(proxy, method, "/mock/fixtures", data="text: hi\n")
        assert status == 409 and body["error"]["type"] == "no_mock"


async def test_a_scenarios_fixtures_answer_its_requests_first(
    make_proxy: ProxyFactory, tmp_path: Path
) -> None:
    files = tmp_path / "fixtures.yaml"
    files.write_text("fixtures:\n  - text: from a file\n")
    scenario = "faults: []\nmock:\n  - text: from the scenario\n    match: {model: gpt-4o}\n"
    proxy = await make_proxy(scenarios={"mocked": scenario}, mock_fixtures=str(files))
    _, headers, body = await post(proxy, chat_body(), **{"X-Chaos-Scenario": "mocked"})
    assert (chat_text(body), headers["X-Mock-Fixture"]) == (
        "from the scenario",
        "scenario mocked mock[0]",
    )
    _, headers, body = await post(
        proxy, chat_body(model="gpt-4o-mini"), **{"X-Chaos-Scenario": "mocked"}
    )
    assert chat_text(body) == "from a file"  # its match: fails: the next source
    # A client cannot name the scenario's fixtures itself: X-Chaos-* never reaches the mock.
    _, _, body = await post(proxy, chat_body(), **{"X-Chaos-Mock-Scenario": "mocked"})
    assert chat_text(body) == "from a file"


async def test_an_http_error_fixture_then_the_answer(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(mock_fixtures=str(REPO / "examples" / "mock-fixtures"))
    status, headers, body = await post(proxy, chat_body("Are you busy?"))
    assert status == 429 and headers["Retry-After"] == "1"
    assert json.loads(body) == {
        "error": {
            "message": "Rate limit reached for requests",
            "type": "invalid_request_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    status, headers, body = await post(proxy, chat_body("Are you busy?"))
    assert (status, headers["X-Mock-Fixture"]) == (200, "after-the-wait")
    assert chat_text(body) == "Thanks for waiting. Here is your answer."


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize(
    ("fault", "paris", "integrity", "defect"),
    [
        (None, '{"city":"Paris"}', "intact", None),
        ("duplicate", '{"city":"ParisParis"}', "altered", "duplicate"),
        ("drop", '{"city":""}', "altered", "a gap in the events"),
        ("reorder", '{"city":""}Paris', "altered", "reorder"),  # 'Paris' and '"}' swapped
    ],
)
async def test_faults_apply_to_a_fixtures_tool_call_delta(
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    fault: str | None,
    paris: str,
    integrity: str,
    defect: str | None,
) -> None:
    selector = "{kind: tool_delta, match: Paris}"
    faults = f"  - {fault}: {selector}\n" if fault else "  - rechunk: {size: 7}\n"
    if fault == "reorder":
        faults = "  - reorder: {kind: tool_delta, match: Paris, window: 2}\n"
    proxy = await make_proxy(
        scenarios={"s": "faults:\n" + faults + "mock:\n  - " + PARALLEL.replace("\n", "\n    ")},
        admin=ADMIN,
    )
    _, headers, body = await post(proxy, chat_body(), **{"X-Chaos-Scenario": "s"})
    assert calls(body) == {0: paris, 1: '{"city":"Tokyo"}'}
    end = await log_capture.wait_end(headers["X-Chaos-Request-Id"])
    assert (end["integrity"], end["answer"]["defect"], end["answer"]["sound"]) == (
        integrity,
        defect,
        defect is None,
    )
    assert end["answer"]["text_sha256"]["clean"] == hashlib.sha256(b"").hexdigest()
    # The verdicts the rules say, for a client that accepts (no text), or that raises.
    rid = headers["X-Chaos-Request-Id"]
    _, accepted, _ = await call(proxy, "POST", f"/requests/{rid}/verdict", json={"text": ""})
    _, raised, _ = await call(
        proxy, "POST", f"/requests/{rid}/verdict", json={"text": "", "error": "JSONDecodeError"}
    )
    if fault is None:
        assert (accepted["verdict"], raised["verdict"]) == ("tolerated", "false_alarm")
    else:
        assert (accepted["verdict"], raised["verdict"]) == ("silent_corruption", "detected")


# --------------------------------------------------------------------------- the journal


@pytest.mark.parametrize("content", [False, True], ids=["without-content", "log-content"])
async def test_each_request_line_says_what_the_client_sent(
    make_proxy: ProxyFactory, log_capture: LogCapture, content: bool
) -> None:
    proxy = await make_proxy(admin=ADMIN, mock_tokens=3, content=content)
    body = orjson.dumps(chat_body(api_key="sk-in-the-body"))
    _, headers, _ = await post(proxy, body, Authorization="Bearer sk-header")
    rid = headers["X-Chaos-Request-Id"]
    await log_capture.wait_end(rid)
    line = log_capture.for_request(rid)[0]
    assert line["event"] == "request"
    assert {k: line[k] for k in ("model", "messages", "tools", "body_bytes", "body_sha256")} == {
        "model": "gpt-4o",
        "messages": 1,
        "tools": ["get_weather"],
        "body_bytes": len(body),
        "body_sha256": hashlib.sha256(body).hexdigest(),
    }
    assert ("body" in line) is content  # only with --log-content

    _, detail, _ = await call(proxy, "GET", f"/requests/{rid}")
    sent = detail["summary"]["request"]
    assert sent["headers"]["authorization"] == "***"
    assert sent["tools"] == ["get_weather"] and sent["model"] == "gpt-4o"
    assert "sk-" not in json.dumps(detail)
    question = "What's the weather in Paris?"
    if content:
        assert sent["messages"] == [{"role": "user", "text": question}]
        assert sent["body"]["api_key"] == "***"
    else:  # the prompt's length and hash only, no body
        digest = hashlib.sha256(question.encode()).hexdigest()
        assert sent["messages"] == [{"role": "user", "chars": len(question), "sha256": digest}]
        assert "body" not in sent and sent["body_omitted_reason"] == "content"
        assert "Paris" not in json.dumps(detail)

    await post(proxy, chat_body("Hello", model="claude-3"), path="/v1/chat/completions")
    for query, found in [
        ("model=gpt-4o", 1),
        ("model=*", 2),
        ("tool=get_weather", 2),
        ("contains=weather", 2),  # (get_weather: in the tools of both)
        ("contains=Paris", 1),
        ("contains=Hello&model=claude-3", 1),
        ("path=/v1/messages", 0),
    ]:
        status, listed, _ = await call(proxy, "GET", f"/requests?{query}")
        if content or "contains=" not in query:
            assert len(listed["requests"]) == found, query
        else:  # nothing to search: refused, saying how to keep the prompts
            assert status == 400, query
            assert listed["error"]["type"] == "content_not_kept"
            assert "--log-content" in listed["error"]["message"]


async def test_with_log_content_the_body_is_logged_masked(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(content=True, mock_tokens=2, journal_entry_bytes=10)
    body = chat_body("See https://user:pw@example.com/x?key=abc", api_key="sk-secret")
    _, headers, _ = await post(proxy, body)
    line = log_capture.for_request(headers["X-Chaos-Request-Id"])[0]
    assert json.loads(line["body"]) == {
        **body,
        "messages": [{"role": "user", "content": "See https://user:***@example.com/x?key=***"}],
        "api_key": "***",
    }
    store = proxy.requests.get(headers["X-Chaos-Request-Id"])
    assert store is not None and store.request is not None
    assert store.request.as_dict()["body_omitted"] is True  # over journal_entry_bytes


# --------------------------------------------------------------------------- request faults


async def test_request_delay_holds_the_request_then_forwards_it(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(
        scenarios={"slow-upload": "faults:\n  - request_delay: {duration: 300ms}\n"},
        mock_tokens=2,
    )
    status, headers, _ = await post(proxy, chat_body(), **{"X-Chaos-Scenario": "slow-upload"})
    assert status == 200
    rid = headers["X-Chaos-Request-Id"]
    end = await log_capture.wait_end(rid)
    lines = log_capture.for_request(rid)
    assert [x["event"] for x in lines[:2]] == ["request", "action"]
    assert {k: lines[1][k] for k in ("action", "seconds", "fault")} == {
        "action": "request_delay",
        "seconds": 0.3,
        "fault": "request_delay",
    }
    assert lines[0]["model"] == "gpt-4o"  # the body was read after the hold
    assert end["outcome"] == "completed" and end["faults_applied"] == {"request_delay": 1}
    assert end["ttfb_ms"] >= 300


@pytest.mark.parametrize("how", ["close", "reset"])
async def test_request_cut_ends_the_upload_and_the_upstream_never_sees_it(
    make_proxy: ProxyFactory, log_capture: LogCapture, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    proxy = await make_proxy(
        scenarios={"cut": f"faults:\n  - request_cut: {{after_bytes: 1000, how: {how}}}\n"}
    )
    # 8 MiB, streamed: the client is still writing when the proxy ends the connection.
    big = b'{"messages": [], "pad": "' + b"x" * (8 * 2**20) + b'"}'

    async def chunks() -> Any:
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    with pytest.raises(aiohttp.ClientError):
        async with (
            aiohttp.ClientSession() as s,
            s.post(proxy.url + CHAT, data=chunks(), headers={"X-Chaos-Scenario": "cut"}) as r,
        ):
            await r.read()
    assert len(log_capture.lines) > 0
    rid = log_capture.lines[0]["request_id"]
    end = await log_capture.wait_end(rid)
    request, action = log_capture.for_request(rid)[:2]
    assert request["event"] == "request" and "body_sha256" not in request
    assert {k: action[k] for k in ("action", "how", "after_bytes", "received")} == {
        "action": "request_cut",
        "how": how,
        "after_bytes": 1000,
        "received": 1000,
    }
    assert {k: end[k] for k in ("outcome", "stage", "status", "bytes")} == {
        "outcome": "cut",
        "stage": "request",
        "status": 0,
        "bytes": 0,
    }
    assert mock_requests(proxy) == 0
    assert not [r for r in caplog.records if r.name.startswith("aiohttp")]  # no traceback


# --------------------------------------------------------------------------- the CLI


def test_serve_and_validate_refuse_a_bad_fixture_file_with_its_lines(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("fixtures:\n  - text: hi\n    tokens_per_evnt: 2\n")
    problem = (
        f"{bad}:3: fixtures[0].tokens_per_evnt: unknown key, did you mean 'tokens_per_event'?"
        " (allowed: name, match, text, tool_calls, finish, usage, error, tokens_per_event, "
        "interval, times)"
    )
    serve = run_cli("serve", "--admin", "off", "--mock-fixtures", str(bad))
    assert serve.returncode == 2 and serve.stderr == f"chaosproxy: error: {problem}\n"
    mock = run_cli("mock", "--listen", "127.0.0.1:0", "--mock-fixtures", str(bad))
    assert mock.returncode == 2 and mock.stderr == f"chaosproxy: error: {problem}\n"
    validate = run_cli("validate", "--mock-fixtures", str(bad))
    assert (validate.returncode, validate.stdout) == (2, problem + "\n")
    good = run_cli("validate", "--mock-fixtures", "examples/mock-fixtures", "examples/scenarios")
    assert (good.returncode, good.stdout) == (0, "1 scenario OK\n7 fixtures OK\n")
    nothing = run_cli("validate")
    assert nothing.returncode == 2 and "--mock-fixtures" in nothing.stderr


async def test_chaosproxy_mock_serves_its_fixture_files() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CHAOSPROXY_MOCK_FIXTURES": "examples/mock-fixtures",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chaosproxy",
        "mock",
        "--listen",
        "127.0.0.1:0",
        cwd=REPO,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        async with asyncio.timeout(30):
            banner = (await process.stderr.readline()).decode()
        assert banner.endswith("; 7 fixtures\n"), banner
        url = banner.split(" listening on ")[1].split(";")[0]
        async with aiohttp.ClientSession() as s, s.post(url + CHAT, json=chat_body()) as resp:
            assert resp.headers["X-Mock-Fixture"] == "weather-call"
            assert {i: json.loads(a) for i, a in calls(await resp.read()).items()} == {
                0: {"city": "Paris"}
            }
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()


async def test_fixtures_added_over_the_admin_are_bounded_in_number(
    make_proxy: ProxyFactory,
) -> None:
    """At most MAX_ADDED fixtures are held: one body with more is 413, a body that would
    pass the bound is 409; either way nothing of it is added, and a DELETE makes room."""
    from chaosproxy.mock.fixtures import MAX_ADDED

    proxy = await make_proxy(admin=ADMIN, mock_tokens=4)

    def fixtures(n: int, tag: str) -> bytes:
        return orjson.dumps({"fixtures": [{"name": f"{tag}{i}", "text": "x"} for i in range(n)]})

    status, body, _ = await call(proxy, "POST", "/mock/fixtures", data=fixtures(MAX_ADDED + 1, "a"))
    assert (status, body["error"]) == (
        413,
        {
            "type": "too_many_fixtures",
            "message": f"{MAX_ADDED + 1} fixtures at once: a mock holds at most {MAX_ADDED} "
            "fixtures added at run time; nothing was added",
        },
    )
    status, body, _ = await call(proxy, "POST", "/mock/fixtures", data=fixtures(MAX_ADDED - 1, "b"))
    assert (status, len(body["added"])) == (201, MAX_ADDED - 1)
    status, body, _ = await call(proxy, "POST", "/mock/fixtures", data=fixtures(2, "c"))
    assert (status, body["error"]) == (
        409,
        {
            "type": "too_many_fixtures",
            "message": f"a mock holds at most {MAX_ADDED} fixtures added at run time; it holds "
            f"{MAX_ADDED - 1} and these are 2: nothing was added (remove them first: "
            "DELETE /mock/fixtures, proxy.clear_fixtures())",
        },
    )
    _, listed, _ = await call(proxy, "GET", "/mock/fixtures")
    assert [f["name"] for f in listed["fixtures"]] == [f"b{i}" for i in range(MAX_ADDED - 1)]
    status, body, _ = await call(proxy, "POST", "/mock/fixtures", data=fixtures(1, "d"))
    assert status == 201  # exactly at the bound
    assert (await call(proxy, "DELETE", "/mock/fixtures"))[1] == {"removed": MAX_ADDED}
    status, _, _ = await call(proxy, "POST", "/mock/fixtures", data=fixtures(2, "e"))
    assert status == 201
