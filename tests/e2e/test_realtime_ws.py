"""Realtime clients through the proxy's WebSocket relay in front of the built-in mock
(docs/providers.md, OpenAI Realtime): the ``websockets`` library and the ``openai``
SDK's realtime client each assemble exactly the mock's answer with no scenario, and
under each library scenario do what is recorded here, which the proxy's own summary of
the connection (integrity, faults, outcome) agrees with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import websockets

from chaosproxy.tools.matrix import run_matrix
from tests.support.clean_runs import clean_text, scenario_clean
from tests.support.cli import port_in, start_serve, stop_serve
from tests.support.forks import ForkServer
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.realtime_clients import CLIENTS, mock_text

#: The fixture text of realtime-fragmented-utf8 (scenarios/realtime-fragmented-utf8.yaml).
UTF8_TEXT = "Café crème, 日本語, and 👍🏽 for the realtime stream."


def _ws(url: str) -> str:
    return url.replace("http://", "ws://")


async def _end(log_capture: LogCapture) -> dict[str, Any]:
    """The response_end of the last WebSocket the proxy relayed."""
    (request,) = [line for line in log_capture.lines if line["event"] == "request"][-1:]
    return await log_capture.wait_end(request["request_id"])


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_each_client_assembles_exactly_the_mocks_answer(
    make_proxy: ProxyFactory, log_capture: LogCapture, client: str
) -> None:
    proxy = await make_proxy(library=True)
    seen = await CLIENTS[client](_ws(proxy.url), None, 5.0)
    assert seen.raised is None and seen.done
    assert seen.text == mock_text() != ""
    assert seen.types[0] == "session.created"
    assert "response.output_audio.delta" in seen.types
    end = await _end(log_capture)
    assert (end["status"], end["outcome"]) == (101, "completed")


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_under_a_clean_scenario_the_answer_is_intact_and_every_message_a_frame(
    make_proxy: ProxyFactory, log_capture: LogCapture, client: str
) -> None:
    proxy = await make_proxy(scenarios={"clean": "faults: []\n"})
    seen = await CLIENTS[client](_ws(proxy.url), "clean", 5.0)
    assert seen.text == mock_text() and seen.done
    end = await _end(log_capture)
    assert (end["integrity"], end["provider"], end["format"]) == (
        "intact",
        "openai-realtime",
        "ndjson",
    )
    frames = log_capture.frames(end["request_id"])
    # one frame line a message: session.created, conversation.item.created, the response
    assert len(frames) == len(seen.types)
    assert {f["opcode"] for f in frames} == {"text"}


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_fragmented_utf8_every_client_joins_the_frames(
    make_proxy: ProxyFactory, log_capture: LogCapture, client: str
) -> None:
    proxy = await make_proxy(library=True)
    seen = await CLIENTS[client](_ws(proxy.url), "realtime-fragmented-utf8", 5.0)
    assert (seen.raised, seen.done, seen.text) == (None, True, UTF8_TEXT)
    end = await _end(log_capture)
    assert end["integrity"] == "intact"
    fragmented = [f for f in log_capture.frames(end["request_id"]) if "fragments" in f]
    assert fragmented and all(f["fragments"] == 2 for f in fragmented)
    assert end["faults_applied"]["fragment"] == len(fragmented)


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_close_1011_mid_response_each_client_raises_with_the_code_and_reason(
    make_proxy: ProxyFactory, log_capture: LogCapture, client: str
) -> None:
    proxy = await make_proxy(library=True)
    seen = await CLIENTS[client](_ws(proxy.url), "realtime-close-1011-mid-response", 5.0)
    assert (seen.raised, seen.code, seen.reason) == (
        "ConnectionClosedError",
        1011,
        "internal server error",
    )
    assert not seen.done
    full = mock_text()
    assert full.startswith(seen.text) and seen.text.count(" ") <= 1  # two deltas
    assert seen.types.count("response.output_text.delta") == 2
    end = await _end(log_capture)
    assert (end["outcome"], end["integrity"]) == ("cut", "broken")
    (action,) = [x for x in log_capture.for_request(end["request_id"]) if x["event"] == "action"]
    assert (action["fault"], action["code"], action["reason"]) == (
        "ws_close",
        1011,
        "internal server error",
    )


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_no_close_frame_each_client_sees_1006(
    make_proxy: ProxyFactory, log_capture: LogCapture, client: str
) -> None:
    proxy = await make_proxy(library=True)
    seen = await CLIENTS[client](_ws(proxy.url), "realtime-no-close-frame", 5.0)
    assert (seen.raised, seen.code, seen.done) == ("ConnectionClosedError", 1006, False)
    assert seen.text == mock_text()  # every delta came; response.done did not
    end = await _end(log_capture)
    assert (end["outcome"], end["integrity"]) == ("cut", "broken")


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_duplicated_delta_each_client_shows_the_piece_twice(
    make_proxy: ProxyFactory, log_capture: LogCapture, client: str
) -> None:
    proxy = await make_proxy(library=True)
    seen = await CLIENTS[client](_ws(proxy.url), "realtime-duplicated-delta", 5.0)
    assert seen.raised is None and seen.done
    deltas = [t for t in seen.types if t == "response.output_text.delta"]
    assert len(deltas) == 5  # four tokens, the second twice
    assert seen.text != mock_text() and len(seen.text) > len(mock_text())
    end = await _end(log_capture)
    assert (end["outcome"], end["integrity"]) == ("completed", "altered")


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_missing_done_each_client_waits_until_its_own_timeout(
    make_proxy: ProxyFactory, log_capture: LogCapture, client: str
) -> None:
    proxy = await make_proxy(library=True)
    seen = await CLIENTS[client](_ws(proxy.url), "realtime-missing-done", 1.0)
    assert (seen.raised, seen.done) == ("TimeoutError", False)
    assert seen.text == mock_text()
    assert "response.done" not in seen.types
    end = await _end(log_capture)  # the client closed: the answer it got lacks its end
    assert end["integrity"] != "intact"
    assert end["faults_applied"] == {"drop": 1}


#: What `chaosproxy matrix` judges each realtime client under the library's realtime
#: scenarios (the same for both: the SDK reads through `websockets`); docs/providers.md.
MATRIX = {
    "realtime-fragmented-utf8": "tolerated",
    "realtime-close-1011-mid-response": "detected",
    "realtime-no-close-frame": "detected",
    "realtime-duplicated-delta": "silent_corruption",
    "realtime-missing-done": "detected",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_the_matrix_judges_each_realtime_client_as_it_behaved(
    client: str, tmp_path: Path, python_clients: ForkServer
) -> None:
    record = tmp_path / "record"
    record.mkdir()
    command = python_clients.command("-m", "tests.clients.realtime_client", client)
    matrix, _ = run_matrix(
        f"{python_clients.command('-m', 'tests.clients.record', record)} {command}",
        scenarios=list(MATRIX),
        timeout=10.0,
        settings={"mock_interval": 0.001, "log_content": True},
    )
    assert {r.scenario: r.verdict for r in matrix.results} == MATRIX
    clean = clean_text(command)
    assert clean == mock_text()
    # Each verdict is what the client printed and how it exited (the SSE oracle of
    # tests/support/verdict_oracle.py reads OpenAI Chat streams, not these).
    for run in matrix.results:
        printed = json.loads((record / f"{run.scenario}.json").read_text())[-1]["stdout"]
        own = scenario_clean(run.scenario, clean)
        said = {
            (0, True): "tolerated",
            (0, False): "silent_corruption",
            (1, False): "detected",
        }[(run.exit_code or 0, run.exit_code == 0 and printed == own)]
        assert run.verdict == said, (run.scenario, run.reason, printed)


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_chaosproxy_serve_on_the_embedded_default_answers_each_client(
    client: str,
) -> None:
    """The command itself (a process): `chaosproxy serve` in front of its built-in mock."""
    proc, line = await start_serve("--listen", "127.0.0.1:0", "--admin", "off")
    try:
        url = f"ws://127.0.0.1:{port_in(line)}"
        seen = await CLIENTS[client](url, None, 10.0)
        assert (seen.raised, seen.done, seen.text) == (None, True, mock_text())
        chaos = await CLIENTS[client](url, "realtime-close-1011-mid-response", 10.0)
        assert (chaos.raised, chaos.code) == ("ConnectionClosedError", 1011)
    finally:
        await stop_serve(proc)


async def test_event_faults_act_on_messages_an_injected_error_and_a_stall(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    scenarios = {
        "error": "faults:\n  - inject: {after: start, event: {kind: error}}\n",
        "stall": "faults:\n  - stall: {after: start, duration: 300ms}\n",
    }
    proxy = await make_proxy(scenarios=scenarios)
    seen = await CLIENTS["websockets"](_ws(proxy.url), "error", 5.0)
    at = seen.types.index("response.created")
    assert seen.types[at + 1] == "error"  # the realtime error event, one message
    assert seen.done and seen.text == mock_text()
    end = await _end(log_capture)
    assert end["faults_applied"] == {"inject": 1}

    seen = await CLIENTS["websockets"](_ws(proxy.url), "stall", 5.0)
    assert seen.done and seen.text == mock_text()
    frames = log_capture.frames((await _end(log_capture))["request_id"])
    start = next(i for i, f in enumerate(frames) if "start" in f.get("kinds", ()))
    assert frames[start + 1]["t_ms"] - frames[start]["t_ms"] >= 300


async def test_the_api_key_reaches_the_upstream_and_never_the_log(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(scenarios={"clean": "faults: []\n"})
    secret = "sk-proj-realtimeSECRET0123456789abcdef"
    url = _ws(proxy.url) + f"/v1/realtime?model=gpt-realtime&api_key={secret}"
    headers = {"Authorization": f"Bearer {secret}", "X-Chaos-Scenario": "clean"}
    async with websockets.connect(url, additional_headers=headers) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
    await _end(log_capture)
    assert secret not in json.dumps(log_capture.lines)


async def test_the_proxy_stopping_ends_an_open_websocket_as_shutdown(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy()
    async with websockets.connect(_ws(proxy.url) + "/v1/realtime") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await proxy.close()
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
    assert (await _end(log_capture))["outcome"] == "shutdown"


async def test_the_mock_answers_a_plain_get_of_its_websocket_route_with_a_400(
    make_proxy: ProxyFactory,
) -> None:
    proxy = await make_proxy()
    async with aiohttp.ClientSession() as http, http.get(proxy.url + "/v1/realtime") as response:
        assert response.status == 400
        body = await response.json()
    assert "is a WebSocket" in body["error"]["message"]


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_content_faults_act_on_realtime_deltas_and_keep_the_answer(
    make_proxy: ProxyFactory, log_capture: LogCapture, client: str
) -> None:
    proxy = await make_proxy(scenarios={"cut": "faults:\n  - resegment: {at: codepoints}\n"})
    seen = await CLIENTS[client](_ws(proxy.url), "cut", 5.0)
    assert (seen.raised, seen.done, seen.text) == (None, True, mock_text())
    deltas = seen.types.count("response.output_text.delta")
    assert deltas == len(mock_text())  # a delta a code point
    end = await _end(log_capture)
    assert end["integrity"] == "intact" and "resegment" in end["faults_applied"]


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}


async def _tool_call(url: str, scenario: str) -> tuple[str, str]:
    """The argument fragments a client assembles, and the ``.done`` event's arguments."""
    headers = {"X-Chaos-Scenario": scenario, "X-Mock-Interval-Ms": "0"}
    fragments, done = "", ""
    async with websockets.connect(url + "/v1/realtime", additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"tools": [WEATHER]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        async for message in ws:
            event = json.loads(message)
            if event["type"] == "response.function_call_arguments.delta":
                fragments += event["delta"]
            elif event["type"] == "response.function_call_arguments.done":
                done = event["arguments"]
            elif event["type"] == "response.done":
                break
    return fragments, done


async def test_a_tool_call_streams_its_arguments_and_tool_faults_act_on_them(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    scenarios = {
        "clean": "faults: []\n",
        "split": "faults:\n  - split_tool_args: {at: [keys]}\n",
        "drop": "faults:\n  - drop: {kind: tool_delta, nth: 1}\n",
    }
    proxy = await make_proxy(scenarios=scenarios)
    fragments, done = await _tool_call(_ws(proxy.url), "clean")
    assert fragments == done and "location" in json.loads(done)
    ends = [await _end(log_capture)]
    split, split_done = await _tool_call(_ws(proxy.url), "split")
    assert (split, split_done) == (fragments, done)
    ends.append(await _end(log_capture))
    dropped, _ = await _tool_call(_ws(proxy.url), "drop")
    assert dropped != done and done.endswith(dropped)
    ends.append(await _end(log_capture))
    assert [e["integrity"] for e in ends] == ["intact", "intact", "altered"]
    assert "split_tool_args" in ends[1]["faults_applied"]
