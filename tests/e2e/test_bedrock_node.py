"""The AWS SDK for JavaScript's ``@aws-sdk/client-bedrock-runtime`` (tests/node/bedrock.mjs)
through ``chaosproxy serve`` in front of the built-in mock: ConverseStreamCommand (text,
and a forced tool call) and InvokeModelWithResponseStreamCommand each assemble exactly
the mock's answer to the body the SDK sent; under the Bedrock library scenarios and the
cuts, what the SDK does, asserted exactly (docs/providers.md, "What boto3 and the JS SDK do");
``chaosproxy matrix`` judges it (tests/node/bedrock-matrix.mjs) as it behaved; under
tool-args-fragmented it joins the toolUse input; and its SigV4-signed request reaches
the upstream as signed (docs/providers.md, "SigV4 and Host"), no credential logged.

Skipped when ``node`` or the package is absent (``.ci/run`` installs it with ``npm ci
--prefix tests/node``).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

from chaosproxy.mock import bedrock, create_mock_app
from chaosproxy.mock.common import Knobs
from chaosproxy.tools.matrix import run_matrix
from tests.support.cli import port_in, start_serve, stop_serve
from tests.support.node import NodeRunner
from tests.support.repo import LIBRARY, REPO
from tests.support.sigv4 import signature_holds

NODE_DIR = REPO / "tests" / "node"
PACKAGE = NODE_DIR / "node_modules" / "@aws-sdk" / "client-bedrock-runtime"
TOKENS = 7
MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
#: bedrock.mjs's dummy credentials.
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
DEADLINE_MS = 8000
ACTIONS = {"converse": "converse-stream", "converse-tool": "converse-stream"}
#: Faults beside the library's, as tests/e2e/test_bedrock_boto3.py has them.
CUTS = {
    "bad-prelude-crc": "corrupt: {kind: delta, nth: 3, mode: prelude_crc}",
    "drop": "drop: {kind: delta, nth: 3}",
    "duplicate": "duplicate: {kind: terminal}",
    "hostile": "rechunk: {boundaries: hostile}",
    "close": "cut: {before: terminal, how: close}",
    "abort": "cut: {before: terminal, how: abort}",
    "truncated": "cut: {after_bytes: 130, how: close}",  # inside the 2nd message
}


def _why_skip() -> str | None:
    if shutil.which("node") is None:
        return "`node` is not on PATH (the Node client tests need Node >= 20)"
    if not PACKAGE.is_dir():
        return (
            "tests/node/node_modules/@aws-sdk/client-bedrock-runtime is absent: "
            "run `npm ci --prefix tests/node`"
        )
    return None


_SKIP = _why_skip()
pytestmark = [pytest.mark.node, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

Run = dict[str, Any]


def write_cuts(tmp_path: Path) -> Path:
    library = tmp_path / "cuts"
    library.mkdir()
    for name, fault in CUTS.items():
        (library / f"{name}.yaml").write_text(f"name: {name}\nfaults:\n  - {fault}\n")
    return library


@asynccontextmanager
async def serving(tmp_path: Path, upstream: str, *args: str) -> AsyncIterator[str]:
    """``chaosproxy serve`` in front of ``upstream``, with the library and the cuts:
    its URL."""
    proc, line = await start_serve(
        "--listen", "127.0.0.1:0", "--admin", "off", "--upstream", upstream,
        "--mock-tokens", str(TOKENS), "--mock-interval-ms", "0",
        "--scenarios", str(LIBRARY), "--scenarios", str(write_cuts(tmp_path)),
        "--log", str(tmp_path / "frames.jsonl"), *args,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port_in(line)}"
    finally:
        await stop_serve(proc)


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[str]:
    """``chaosproxy serve`` in front of the built-in mock."""
    async with serving(tmp_path, "mock") as url:
        yield url


async def run(node: NodeRunner, url: str, op: str, scenario: str = "none", **more: str) -> Run:
    settings = {
        "CHAOS_URL": url,
        "CHAOS_SCENARIO": scenario,
        "CHAOS_BEDROCK_OP": op,
        "CHAOS_TIMEOUT_MS": str(DEADLINE_MS),
        "CHAOS_SDK_TIMEOUT_MS": str(DEADLINE_MS),
        **more,
    }
    record: Run = await asyncio.to_thread(
        node.run, "bedrock", settings, timeout=DEADLINE_MS / 1000 + 30
    )
    assert (record["client"], record["scenario"], record["op"]) == ("bedrock", scenario, op)
    return record


def mock_messages(record: Run) -> list[tuple[dict[str, Any], bytes, bytes]]:
    """The built-in mock's answer to the body the SDK sent: each message's headers,
    payload and raw bytes (as botocore decodes them)."""
    body = record["body"].encode()
    action = ACTIONS.get(record["op"], "invoke-with-response-stream")
    reply = bedrock.respond(body, json.loads(body), Knobs(TOKENS, 0.0), model=MODEL, action=action)
    raw = b"".join(reply.chunks)
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    messages, offset = [], 0
    for message in buffer:
        size = struct.unpack_from(">I", raw, offset)[0]
        messages.append((message.headers, message.payload, raw[offset : offset + size]))
        offset += size
    assert offset == len(raw)
    return messages


def expected_events(record: Run) -> tuple[list[str], str, list[dict[str, str]], str]:
    """What the client prints for the mock's whole answer: its events, text, tool calls
    and stop reason, made from the mock's messages by the client's rules (bedrock.mjs)."""
    events, text, tools, stop = [], "", [], ""
    for headers, payload, _ in mock_messages(record):
        event = json.loads(payload)
        if record["op"] == "invoke":
            chunk = json.loads(base64.b64decode(event["bytes"]))
            delta = chunk.get("delta", {})
            if chunk["type"] == "content_block_delta" and delta.get("type") == "text_delta":
                events.append(f"text:{delta['text']}")
                text += delta["text"]
            else:
                events.append(chunk["type"])
            stop = delta.get("stop_reason") or stop
            continue
        name = headers[":event-type"]
        if name == "contentBlockStart":
            use = event["start"]["toolUse"]
            tools.append({"id": use["toolUseId"], "name": use["name"], "input": ""})
            events.append(f"toolUse:{use['name']}")
        elif name == "contentBlockDelta" and "text" in event["delta"]:
            events.append(f"text:{event['delta']['text']}")
            text += event["delta"]["text"]
        elif name == "contentBlockDelta":
            events.append(f"tool:{event['delta']['toolUse']['input']}")
            tools[-1]["input"] += event["delta"]["toolUse"]["input"]
        elif name == "messageStop":
            stop = event["stopReason"]
            events.append(f"messageStop:{stop}")
        else:
            events.append(name)
    return events, text, tools, stop


def clean(record: Run) -> None:
    assert (record["error"], record["ended"], record["hung"]) == (None, True, False), record


@pytest.mark.parametrize("op", ["converse", "converse-tool", "invoke"])
async def test_the_js_sdk_assembles_exactly_the_mocks_answer(
    node_runner: NodeRunner, proxy: str, op: str
) -> None:
    record = await run(node_runner, proxy, op)
    clean(record)
    events, text, tools, stop = expected_events(record)
    assert (record["events"], record["text"], record["tools"], record["stop"]) == (
        events,
        text,
        tools,
        stop,
    )
    if op == "converse-tool":
        ((tool,),) = [record["tools"]]
        assert tool["name"] == "get_weather" and json.loads(tool["input"])["city"]
        assert (record["text"], record["stop"]) == ("", "tool_use")
    else:
        assert len([e for e in events if e.startswith("text:")]) == TOKENS and text
        assert record["stop"] == "end_turn"


def without_error(record: Run) -> tuple[Any, ...]:
    return (record["events"], record["text"], record["ended"], record["hung"])


def joined(events: list[str]) -> str:
    """The text of these events (their text deltas, joined)."""
    return "".join(e[5:] for e in events if e.startswith("text:"))


@pytest.mark.parametrize("op", ["converse", "invoke"])
async def test_what_the_js_sdk_does_under_each_bedrock_fault(
    node_runner: NodeRunner, proxy: str, op: str
) -> None:
    ok = await run(node_runner, proxy, op)
    clean(ok)
    events = ok["events"]
    three = 3 if op == "converse" else 4  # (Invoke's stream has content_block_start)
    seen = {
        s: await run(node_runner, proxy, op, s)
        for s in [
            "bedrock-split-prelude",
            "bedrock-bad-crc",
            "bedrock-throttling-mid-stream",
            *CUTS,
        ]
    }
    # Every prelude split across reads: the SDK's decoder buffers; nothing changes.
    split = seen["bedrock-split-prelude"]
    clean(split)
    assert (split["events"], split["text"], split["stop"]) == (events, ok["text"], ok["stop"])
    # The third text delta's message CRC inverted: a plain Error from the decoder, no
    # $fault, after the messages before it.
    bad = seen["bedrock-bad-crc"]
    _, _, raw = mock_messages(ok)[three]
    (true_crc,) = struct.unpack(">I", raw[-4:])
    message = f"The message checksum ({true_crc}) did not match the expected value of "
    assert bad["error"] == {"name": "Error", "message": message + str(true_crc ^ 0xFFFFFFFF)}
    assert without_error(bad) == (events[:three], joined(events[:three]), False, False)
    assert bad["fault"] is None
    # The prelude's CRC inverted there: the same decoder, its prelude check.
    prelude = seen["bad-prelude-crc"]
    (true_prelude,) = struct.unpack(">I", raw[8:12])
    message = (
        f"The prelude checksum specified in the message ({true_prelude ^ 0xFFFFFFFF}) "
        f"does not match the calculated CRC32 checksum ({true_prelude})"
    )
    assert prelude["error"] == {"name": "Error", "message": message}
    assert without_error(prelude) == (events[:three], joined(events[:three]), False, False)
    # The third text delta dropped, the terminal event twice, hostile reads: no error.
    for name, edited in (
        ("drop", events[:three] + events[three + 1 :]),
        ("duplicate", [*events, events[-1]]),
        ("hostile", events),
    ):
        clean(seen[name])
        assert (seen[name]["events"], seen[name]["text"]) == (edited, joined(edited)), name
    # A throttlingException message after the third event: the modelled exception,
    # ThrottlingException, $fault "client", after the events before it.
    throttled = seen["bedrock-throttling-mid-stream"]
    assert throttled["error"] == {
        "name": "ThrottlingException",
        "message": "Too many requests, please wait before trying again.",
    }
    assert throttled["fault"] == "client"
    assert without_error(throttled) == (events[:3], joined(events[:3]), False, False)
    # A clean close before the terminal event: nothing visible, the last event missing.
    close = seen["close"]
    clean(close)
    assert (close["events"], close["text"], close["stop"]) == (events[:-1], ok["text"], "end_turn")
    # An abort there: Node's own "aborted" (ECONNRESET), no $fault.
    abort = seen["abort"]
    assert abort["error"] == {"name": "Error", "message": "aborted", "code": "ECONNRESET"}
    assert without_error(abort) == (events[:-1], ok["text"], False, False)
    # A message truncated at the end of the body: unlike botocore, the SDK says so.
    truncated = seen["truncated"]
    truncation = "Truncated event message received."
    if op == "invoke":
        truncation += (
            "\n  Deserialization error: to see the raw response, inspect the hidden field "
            "{error}.$response on this object."
        )
    assert truncated["error"] == {"name": "Error", "message": truncation}
    assert without_error(truncated) == (events[:1] if op == "converse" else [], "", False, False)


@pytest.mark.parametrize("operation", ["converse", "invoke"])
def test_chaosproxy_matrix_judges_the_js_sdk_as_it_behaved(tmp_path: Path, operation: str) -> None:
    """Each verdict follows from what the SDK did (the test above): it threw on the bad
    CRCs, the exception, the abort and the truncated message (detected); it ended
    normally with the right text but no terminal event after a clean cut, and with a
    wrong text after a drop (silent corruption); split preludes, hostile reads and a
    duplicated terminal event changed nothing it was sent (tolerated)."""
    library = write_cuts(tmp_path)
    for name in ("bedrock-split-prelude", "bedrock-bad-crc", "bedrock-throttling-mid-stream"):
        shutil.copy(LIBRARY / f"{name}.yaml", library)
    command = f"cd {NODE_DIR} && node --no-warnings bedrock-matrix.mjs {operation}"
    matrix, _ = run_matrix(command, scenarios=[str(library)], timeout=30)
    verdicts = {r.scenario: r.verdict for r in matrix.results}
    assert verdicts == {
        "bedrock-split-prelude": "tolerated",
        "hostile": "tolerated",
        "duplicate": "tolerated",
        "bedrock-bad-crc": "detected",
        "bad-prelude-crc": "detected",
        "bedrock-throttling-mid-stream": "detected",
        "abort": "detected",
        "truncated": "detected",
        "close": "silent_corruption",
        "drop": "silent_corruption",
    }
    errors = {r.scenario: (r.error or "").split(":", 1)[0] for r in matrix.results}
    assert errors["bedrock-bad-crc"] == errors["bad-prelude-crc"] == "Error ($fault none)"
    assert errors["bedrock-throttling-mid-stream"] == "ThrottlingException ($fault client)"
    assert errors["abort"] == "Error ($fault none)"
    assert errors["truncated"] == "Error ($fault none)"


# ------------------------------------------------------------------------ SigV4 and Host


@dataclass
class Received:
    """What the upstream received: each request's raw path, headers and body."""

    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
async def recorded_upstream() -> AsyncIterator[tuple[str, Received]]:
    """The mock as an upstream of our own, keeping each request as it arrived."""
    received = Received()
    app = create_mock_app(tokens=TOKENS, interval=0.0)

    @web.middleware
    async def keep(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        body = await request.read()
        received.requests.append((request.raw_path, dict(request.headers), body))
        return await handler(request)

    app.middlewares.append(keep)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}", received
    finally:
        await runner.cleanup()


async def test_the_js_sdks_signed_request_passes_untouched_and_no_credential_is_logged(
    node_runner: NodeRunner, tmp_path: Path, recorded_upstream: tuple[str, Received]
) -> None:
    """The request reaches the upstream as the SDK signed it (path with %3A, body, the
    signed headers), without X-Chaos-Scenario; its signature, for the proxy's Host,
    no longer holds there; signed for the upstream and sent to the proxy
    (CHAOS_BEDROCK_SIGN_FOR) it holds. A first request straight to the upstream shows the
    check itself accepts what the SDK signs. Nothing secret reaches the frame log."""
    url, received = recorded_upstream
    credentials = Credentials(ACCESS_KEY, SECRET_KEY)
    direct = await run(node_runner, url, "converse")
    clean(direct)
    async with serving(tmp_path, url, "--log-content", "--log-level", "frames") as proxy_url:
        at_proxy = await run(node_runner, proxy_url, "converse", "bedrock-split-prelude")
        for_upstream = await run(
            node_runner, proxy_url, "converse", "bedrock-split-prelude",
            CHAOS_BEDROCK_SIGN_FOR=url,
        )  # fmt: skip
    for record in (at_proxy, for_upstream):
        clean(record)
        assert (record["events"], record["text"]) == (direct["events"], direct["text"])
    holds = [signature_holds(*request, credentials) for request in received.requests]
    assert holds == [True, False, True]
    for record, (path, headers, body) in zip(
        (direct, at_proxy, for_upstream), received.requests, strict=True
    ):
        assert (path, body.decode()) == (record["path"], record["body"])
        assert "%3A" in path
        signed = record["headers"]["authorization"].split("SignedHeaders=")[1].split(",")[0]
        assert "host" in signed.split(";")
        lower = {k.lower(): v for k, v in headers.items()}
        assert {k: lower[k] for k in signed.split(";") if k != "host"} == {
            k: record["headers"][k] for k in signed.split(";") if k != "host"
        }
        assert ("x-chaos-scenario" in lower) == (record is direct)  # (none at the proxy)
        assert lower["host"] == url.removeprefix("http://")  # the upstream's, always
    assert at_proxy["headers"]["host"] == proxy_url.removeprefix("http://")
    assert for_upstream["headers"]["host"] == url.removeprefix("http://")
    log = (tmp_path / "frames.jsonl").read_text()
    assert '"provider":"bedrock"' in log  # (framed, and logged with --log-content)
    for record in (at_proxy, for_upstream):
        signature = record["headers"]["authorization"].rsplit("Signature=", 1)[1]
        for secret in (SECRET_KEY, ACCESS_KEY, signature, "AWS4-HMAC-SHA256"):
            assert secret not in log


async def test_the_js_sdk_joins_tool_input_cut_inside_keys_and_escapes(
    node_runner: NodeRunner, proxy: str
) -> None:
    """tool-args-fragmented (its own mock answer: a text, then get_weather): the SDK
    hands each toolUse input fragment over as it came, cut inside keys and escapes;
    joined, they are the arguments, exactly."""
    record = await run(node_runner, proxy, "converse-tool", "tool-args-fragmented")
    clean(record)
    ((tool,),) = [record["tools"]]
    assert (tool["name"], record["text"], record["stop"]) == (
        "get_weather",
        "Let me check.",
        "tool_use",
    )
    assert json.loads(tool["input"]) == {"city": "São Paulo", "note": 'say "hi"\nthen wait'}
    fragments = [e[5:] for e in record["events"] if e.startswith("tool:")]
    assert "".join(fragments) == tool["input"]
    cuts = set(itertools.accumulate(len(f) for f in fragments))
    joined_input = tool["input"]
    for key in ('"city"', '"note"'):  # a cut strictly inside each key
        start = joined_input.index(key) + 1
        assert cuts & set(range(start + 1, start + len(key) - 2)), (key, fragments)
    for escape in ('\\"', "\\n"):  # and between each \ and what it escapes
        assert joined_input.index(escape) + 1 in cuts, (escape, fragments)
