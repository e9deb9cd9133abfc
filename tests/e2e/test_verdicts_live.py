"""Verdicts through the live proxy: ``ChaosProxy.verdict``, ``POST /requests/{id}/verdict``
and ``ChaosClient.verdict``, with httpx streaming OpenAI Chat answers from the mock."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaosproxy import ChaosClient, ChaosProxy
from chaosproxy.control.client import ChaosAuthError, ChaosClientError

TOKEN = "s3cret-admin-token"
BODY = {
    "model": "gpt-4o-mini",
    "stream": True,
    "messages": [{"role": "user", "content": "Plan my week, please."}],
}


def chat_text(lines: Iterator[str], *, to_the_end: bool = True) -> str:
    """The text of an OpenAI Chat stream up to its ``[DONE]``; the body is read to its
    end (so the client never leaves before the proxy's last write) unless
    ``to_the_end`` is False."""
    parts: list[str] = []
    done = False
    for line in lines:
        if done or not line.startswith("data: "):
            continue
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            if not to_the_end:
                break
            done = True
            continue
        for choice in json.loads(data)["choices"]:
            parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


def stream(proxy: ChaosProxy, scenario: str) -> tuple[str, str]:
    """One streamed answer under ``scenario``: its request id and its text."""
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json=BODY,
        headers={"X-Chaos-Scenario": scenario},
        timeout=10,
    ) as response:
        return response.headers["X-Chaos-Request-Id"], chat_text(response.iter_lines())


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosProxy]:
    traces = tmp_path_factory.mktemp("traces")
    with ChaosProxy(
        mock_interval=0.001, admin=("127.0.0.1", 0), admin_token=TOKEN, trace_dir=traces
    ) as running:
        yield running


@pytest.fixture
def client(proxy: ChaosProxy) -> ChaosClient:
    assert proxy.admin_url is not None
    return ChaosClient(proxy.admin_url, token=TOKEN)


def admin(
    proxy: ChaosProxy, method: str, path: str, body: bytes | None, token: str | None = TOKEN
) -> tuple[int, Any]:
    assert proxy.admin_url is not None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(
        proxy.admin_url + path, data=body, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def verdict_lines(proxy: ChaosProxy, request_id: str) -> list[dict[str, Any]]:
    return [
        line
        for line in proxy.lines
        if line["event"] == "verdict" and line["request_id"] == request_id
    ]


def test_the_right_text_of_an_intact_stream_is_tolerated(proxy: ChaosProxy) -> None:
    request_id, text = stream(proxy, "one-byte-per-read")
    verdict = proxy.verdict(request_id, text=text)
    assert verdict == {
        "verdict": "tolerated",
        "integrity": "intact",
        "content": "intact",
        "reason": "the client accepted the clean answer",
        "text_matches": True,
        "requests": [request_id],
    }
    # Kept with the request, and logged (one line, without the text).
    assert proxy.summary(request_id)["verdict"] == {
        **verdict,
        "ts": proxy.summary(request_id)["verdict"]["ts"],
    }
    (line,) = verdict_lines(proxy, request_id)
    assert {k: line[k] for k in verdict} == verdict
    assert text not in json.dumps(line)


def test_a_dropped_delta_accepted_is_silent_corruption(proxy: ChaosProxy) -> None:
    request_id, text = stream(proxy, "drop-third-delta")
    _, whole = stream(proxy, "one-event-per-read")
    assert text != whole and len(text) < len(whole)
    verdict = proxy.verdict(request_id, text=text)
    assert (verdict["verdict"], verdict["integrity"], verdict["text_matches"]) == (
        "silent_corruption",
        "altered",
        False,
    )
    # Reporting the error instead: the client noticed.
    again = proxy.verdict(request_id, error=ValueError("a gap in the stream"))
    assert (again["verdict"], again["integrity"]) == ("detected", "altered")
    assert proxy.summary(request_id)["verdict"]["verdict"] == "detected"  # the last one


def test_an_error_on_an_intact_stream_is_a_false_alarm_and_a_time_out_hung(
    proxy: ChaosProxy,
) -> None:
    request_id, _ = stream(proxy, "keepalive-comments")
    assert proxy.verdict(request_id, error="SSEError")["verdict"] == "false_alarm"
    assert proxy.verdict(request_id, timed_out=True)["verdict"] == "hung"


def test_a_verdict_on_an_unknown_request_is_a_key_error(proxy: ChaosProxy) -> None:
    with pytest.raises(KeyError):
        proxy.verdict("r-nope", text="", timeout=0)


def test_the_admin_api_records_and_shows_verdicts(proxy: ChaosProxy, client: ChaosClient) -> None:
    request_id, text = stream(proxy, "reverse-two-deltas")
    verdict = client.verdict(request_id, text=text)
    assert (verdict["verdict"], verdict["integrity"], verdict["text_matches"]) == (
        "silent_corruption",
        "altered",
        False,
    )
    status, detail = admin(proxy, "GET", f"/requests/{request_id}", None)
    assert status == 200
    shown = detail["summary"]["verdict"]
    assert {k: shown[k] for k in verdict} == verdict
    assert client.summary(request_id)["verdict"]["verdict"] == "silent_corruption"
    # The verdict line went through the frame log: ChaosProxy.lines sees it too.
    assert len(verdict_lines(proxy, request_id)) == 1


def test_the_admin_api_refuses_bad_verdicts(proxy: ChaosProxy, client: ChaosClient) -> None:
    request_id, _ = stream(proxy, "one-event-per-read")
    path = f"/requests/{request_id}/verdict"
    assert admin(proxy, "POST", path, b'{"text": ""}', token=None)[0] == 401
    assert admin(proxy, "POST", path, b'{"text": ""}', token="wrong")[0] == 401
    status, body = admin(proxy, "POST", "/requests/r-unknown/verdict", b'{"text": ""}')
    assert (status, body["error"]["type"]) == (404, "not_found")
    for bad, message in [
        (b"not json", "expected a JSON body"),
        (b"[1]", "expected a JSON object"),
        (b'{"text": 1}', "text must be a string or null"),
        (b'{"timed_out": 1}', "timed_out must be true or false"),
    ]:
        status, body = admin(proxy, "POST", path, bad)
        assert (status, body["error"]["type"]) == (400, "bad_request")
        assert message in body["error"]["message"]
    assert verdict_lines(proxy, request_id) == []  # nothing recorded
    with pytest.raises(KeyError):
        client.verdict("r-unknown", text="", timeout=0)
    assert proxy.admin_url is not None
    with pytest.raises(ChaosAuthError):
        ChaosClient(proxy.admin_url).verdict(request_id, text="")


def test_a_request_in_flight_gets_its_verdict_once_it_has_ended(
    proxy: ChaosProxy, client: ChaosClient
) -> None:
    # hang-after-last-event: everything is sent, the body never ends; the client stops
    # at [DONE] and closes the stream itself.
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json=BODY,
        headers={"X-Chaos-Scenario": "hang-after-last-event"},
        timeout=10,
    ) as response:
        request_id = response.headers["X-Chaos-Request-Id"]
        lines = response.iter_lines()  # held: closing it would close the response
        text = chat_text(lines, to_the_end=False)  # the body never ends
        status, body = admin(proxy, "POST", f"/requests/{request_id}/verdict", b"{}")
        assert (status, body["error"]["type"]) == (409, "in_flight")
        with pytest.raises(ChaosClientError) as raised:
            client.verdict(request_id, text=text, timeout=0)
        assert raised.value.status == 409
    verdict = client.verdict(request_id, text=text)
    assert verdict["verdict"] == "tolerated"
    assert verdict["text_matches"] is True


def test_the_trace_of_a_request_ends_with_its_verdict(proxy: ChaosProxy) -> None:
    request_id, text = stream(proxy, "duplicate-third-delta")
    proxy.verdict(request_id, text=text)
    traces = Path(proxy.config.trace_dir or "")
    (trace,) = traces.glob(f"{request_id}.jsonl")
    last = json.loads(trace.read_text().splitlines()[-1])
    assert (last["event"], last["verdict"]) == ("verdict", "silent_corruption")


async def test_a_verdict_from_async_code() -> None:
    from tests.support.scripted_upstream import until

    async with ChaosProxy(mock_interval=0.001) as proxy, httpx.AsyncClient() as http:
        response = await http.post(
            proxy.url + "/v1/chat/completions",
            json=BODY,
            headers={"X-Chaos-Scenario": "duplicate-third-delta"},
        )
        request_id = response.headers["X-Chaos-Request-Id"]
        text = chat_text(iter(response.text.splitlines()))
        # On the proxy's own loop nothing may block: wait for the end without blocking.
        await until(lambda: any(s["request_id"] == request_id for s in proxy.requests(settle=0)))
        verdict = proxy.verdict(request_id, text=text)
    assert (verdict["verdict"], verdict["integrity"]) == ("silent_corruption", "altered")
    assert proxy.lines[-1]["event"] == "verdict"


def chat_event(text: str) -> bytes:
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


@pytest.mark.parametrize("end", ["hold", "eof"])
async def test_a_client_that_stops_at_the_first_of_two_terminals_is_tolerated_either_way(
    end: str,
) -> None:
    """``terminal-event-twice``: the client stops at the first of the two terminals it
    is sent, with the right text. Whether the upstream holds its body open after its
    ``[DONE]`` (the client leaves first: ``client_gone``) or ends it (the proxy ends
    first: ``completed``), the answer up to its first terminal event was the clean one,
    so the verdict is the same: what came after it does not change it (the race
    ``test_matrix_library`` once lost)."""
    from tests.support.scripted_upstream import Script, scripted_upstream, until

    body = chat_event("Hello, ") + chat_event("world") + b"data: [DONE]\n\n"
    async with scripted_upstream() as upstream:
        upstream.route("/v1/chat/completions", Script.events(body, end=end))
        async with (
            ChaosProxy(upstream.url, scenario="terminal-event-twice") as proxy,
            httpx.AsyncClient() as http,
            http.stream("POST", proxy.url + "/v1/chat/completions", json=BODY) as response,
        ):
            request_id = response.headers["X-Chaos-Request-Id"]
            lines = []
            async for line in response.aiter_lines():
                lines.append(line)
                if line == "data: [DONE]":
                    break
            await response.aclose()
            await until(
                lambda: any(s["request_id"] == request_id for s in proxy.requests(settle=0))
            )
            summary = proxy.summary(request_id)
            verdict = proxy.verdict(request_id, text=chat_text(iter(lines), to_the_end=False))
    if end == "hold":
        assert (summary["outcome"], summary["integrity"]) == ("client_gone", "broken")
    assert summary["answer"]["content"] == "intact"
    assert (verdict["verdict"], verdict["text_matches"]) == ("tolerated", True)
