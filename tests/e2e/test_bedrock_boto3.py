"""boto3's ``bedrock-runtime`` through ``chaosproxy serve``: ConverseStream and
InvokeModelWithResponseStream, SigV4-signed with dummy credentials, each assembling
exactly the mock's answer; the signed request reaches the upstream as the client sent
it, and no credential reaches the frame log or stderr."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

from chaosproxy.core.framing.eventstream import CONTENT_TYPE
from chaosproxy.mock import bedrock, create_mock_app
from chaosproxy.mock.common import Knobs
from chaosproxy.tools.matrix import run_matrix
from tests.support.cli import chaosproxy_argv
from tests.support.repo import REPO

TOKENS = 7
CLAUDE = "anthropic.claude-3-5-haiku-20241022-v1:0"
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKENxyz0123456789"
STARTED = re.compile(r"listening on http://[\d.]+:(\d+)")


@dataclass
class Serve:
    """A ``chaosproxy serve`` process, its frame log and its stderr."""

    port: int
    log: Path
    stderr: Path
    proc: asyncio.subprocess.Process

    async def stop(self) -> None:
        """Stop it (SIGTERM: the log flushed, in-flight streams given their end)."""
        if self.proc.returncode is None:
            self.proc.terminate()
        async with asyncio.timeout(15):
            await self.proc.wait()

    async def lines(self) -> list[dict[str, Any]]:
        """Every line of its frame log, once it has stopped (a ``response_end`` is
        written after the client has its last byte)."""
        await self.stop()
        return [json.loads(line) for line in self.log.read_text().splitlines()]


async def serve(
    tmp_path: Path, upstream: str, scenarios: Path | None = None
) -> AsyncIterator[Serve]:
    if scenarios is None:
        scenarios = tmp_path / "clean.yaml"
        scenarios.write_text("name: clean\nfaults: []\n")
    log, stderr = tmp_path / "frames.jsonl", tmp_path / "stderr.txt"
    with stderr.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *chaosproxy_argv(), "serve", "--listen", "127.0.0.1:0", "--admin", "off",
            "--upstream", upstream, "--mock-tokens", str(TOKENS), "--mock-interval-ms", "0",
            "--scenarios", str(scenarios), "--log", str(log), "--log-level", "frames",
            "--log-content",
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )  # fmt: skip
    try:
        async with asyncio.timeout(20):
            while not (found := STARTED.search(stderr.read_text())):
                assert proc.returncode is None, stderr.read_text()
                await asyncio.sleep(0.05)
        running = Serve(int(found.group(1)), log, stderr, proc)
        yield running
    finally:
        if proc.returncode is None:
            proc.terminate()
        async with asyncio.timeout(15):
            await proc.wait()


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[Serve]:
    """``serve`` in front of the built-in mock."""
    async for running in serve(tmp_path, "mock"):
        yield running


@dataclass
class Sent:
    """What boto3 sent: each request's URL, headers and body, as signed."""

    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)


def client(port: int, scenario: str | None = None) -> tuple[Any, Sent]:
    """boto3's ``bedrock-runtime`` at the proxy, with dummy credentials; ``scenario``
    asked for with ``X-Chaos-Scenario``, added after signing (the signature does not
    cover it)."""
    sent = Sent()
    bedrock_runtime = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        aws_session_token=SESSION_TOKEN,
        config=Config(retries={"max_attempts": 1}),
    )

    def keep(request: Any, **_: Any) -> None:
        if scenario is not None:
            request.headers["X-Chaos-Scenario"] = scenario
        headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        sent.requests.append((request.url, headers, bytes(request.body)))

    bedrock_runtime.meta.events.register("before-send.bedrock-runtime.*", keep)
    return bedrock_runtime, sent


def mock_answer(body: bytes, action: str) -> tuple[bytes, list[tuple[dict[str, Any], bytes]]]:
    """The built-in mock's answer to this exact body: its bytes, and its messages as
    botocore decodes them."""
    reply = bedrock.respond(body, json.loads(body), Knobs(TOKENS, 0.0), model=CLAUDE, action=action)
    raw = b"".join(reply.chunks)
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    return raw, [(m.headers, m.payload) for m in buffer]


def converse(runtime: Any) -> list[dict[str, Any]]:
    reply = runtime.converse_stream(
        modelId=CLAUDE, messages=[{"role": "user", "content": [{"text": "Plan my week."}]}]
    )
    return list(reply["stream"])


INVOKE_BODY = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 200,
    "messages": [{"role": "user", "content": "Plan my week."}],
}


def invoke(runtime: Any) -> list[dict[str, Any]]:
    reply = runtime.invoke_model_with_response_stream(modelId=CLAUDE, body=json.dumps(INVOKE_BODY))
    return [json.loads(event["chunk"]["bytes"]) for event in reply["body"]]


async def in_thread(call: Callable[[], Any]) -> Any:
    return await asyncio.to_thread(call)


async def test_converse_stream_assembles_exactly_the_mocks_answer(proxy: Serve) -> None:
    runtime, sent = client(proxy.port)
    events = await in_thread(lambda: converse(runtime))
    ((_, _, body),) = sent.requests
    raw, expected = mock_answer(body, "converse-stream")
    assert events == [{str(h[":event-type"]): json.loads(p)} for h, p in expected]
    text = "".join(
        e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e
    )
    assert len(text) > TOKENS and events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    # No scenario: the proxy passes the body through unframed.
    (end,) = [line for line in await proxy.lines() if line["event"] == "response_end"]
    assert end["status"] == 200 and end["content_type"] == CONTENT_TYPE
    assert "provider" not in end and end["bytes"] == len(raw)


async def test_invoke_model_with_response_stream_assembles_exactly_the_mocks_answer(
    proxy: Serve,
) -> None:
    runtime, sent = client(proxy.port)
    chunks = await in_thread(lambda: invoke(runtime))
    ((_, _, body),) = sent.requests
    _, expected = mock_answer(body, "invoke-with-response-stream")
    assert [h[":event-type"] for h, _ in expected] == ["chunk"] * len(expected)
    assert chunks == [json.loads(base64.b64decode(json.loads(p)["bytes"])) for _, p in expected]
    assert [c["type"] for c in chunks][-3:] == [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


async def test_a_clean_scenario_frames_every_message_as_bedrock(proxy: Serve) -> None:
    runtime, _ = client(proxy.port, scenario="clean")
    events = await in_thread(lambda: converse(runtime))
    chunks = await in_thread(lambda: invoke(runtime))
    lines = await proxy.lines()
    ends = [line for line in lines if line["event"] == "response_end"]
    assert [(e["provider"], e["format"], e["integrity"]) for e in ends] == [
        ("bedrock", "eventstream", "intact")
    ] * 2
    assert [(e["events_in"], e["events_out"]) for e in ends] == [
        (len(events), len(events)),
        (len(chunks), len(chunks)),
    ]
    first = ends[0]["request_id"]
    kinds = [
        line["kinds"] for line in lines if line["event"] == "frame" and line["request_id"] == first
    ]
    assert kinds == [
        ["start"],
        *[["delta"]] * TOKENS,
        ["other"],
        ["other"],
        sorted(["usage", "terminal"]),
    ]


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


async def test_the_signed_request_reaches_the_upstream_as_sent_and_no_credential_is_logged(
    tmp_path: Path, recorded_upstream: tuple[str, Received]
) -> None:
    url, received = recorded_upstream
    async for running in serve(tmp_path, url):
        runtime, sent = client(running.port, scenario="clean")
        events = await in_thread(lambda: converse(runtime))  # noqa: B023 (awaited here)
        assert events[-1]["metadata"]["usage"]["outputTokens"] == TOKENS
        ((sent_url, sent_headers, sent_body),) = sent.requests
        ((path, headers, body),) = received.requests
        assert body == sent_body
        assert path == sent_url.split(str(running.port), 1)[1]  # %3A kept, not decoded
        signed = {"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "Content-Type"}
        assert {k: headers[k] for k in signed} == {k: sent_headers[k] for k in signed}
        assert "X-Chaos-Scenario" not in headers
        # The one signed header the proxy does not pass on: Host names the upstream.
        assert "host" in sent_headers["Authorization"].split("SignedHeaders=")[1]
        assert headers["Host"] == url.removeprefix("http://")
        await running.stop()
        log = running.log.read_text()
        assert '"provider":"bedrock"' in log  # (framed and logged with --log-content)
        signature = sent_headers["Authorization"].rsplit("Signature=", 1)[1]
        for secret in (SECRET_KEY, SESSION_TOKEN, ACCESS_KEY, signature, "AWS4-HMAC-SHA256"):
            assert secret not in log
            assert secret not in running.stderr.read_text()


#: docs/providers.md, "What boto3 does": each scenario, and what boto3 raised (None:
#: nothing) and which of the clean answer's events it yielded, for both operations.
FAULTS = {
    "bad-crc": "corrupt: {kind: delta, nth: 3, mode: crc}",
    "bad-prelude-crc": "corrupt: {kind: delta, nth: 3, mode: prelude_crc}",
    "throttled": "inject: {after: 3, event: {kind: error}}",
    "drop": "drop: {kind: delta, nth: 3}",
    "duplicate": "duplicate: {kind: terminal}",
    "close": "cut: {before: terminal, how: close}",
    "abort": "cut: {before: terminal, how: abort}",
    "hostile": "rechunk: {boundaries: hostile}",
    "truncated": "cut: {after_bytes: 130, how: close}",  # inside the 2nd message
}


def observe(runtime: Any, call: Callable[[Any], Iterable[Any]]) -> tuple[str | None, list[Any]]:
    """What one call yielded before it ended, and the name of what it raised."""
    got: list[Any] = []
    try:
        for item in call(runtime):
            got.append(item)
    except Exception as exc:  # what boto3 raised is what is observed
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        name = f"{type(exc).__module__}.{type(exc).__name__}"
        return (f"{name}({code})" if code else name), got
    return None, got


def observe_new(port: int, call: Callable[[Any], Iterable[Any]]) -> tuple[str | None, list[Any]]:
    """What one call of a new client yielded, and what it raised."""
    return observe(client(port)[0], call)


def events_of(runtime: Any) -> Iterable[Any]:
    reply = runtime.converse_stream(
        modelId=CLAUDE, messages=[{"role": "user", "content": [{"text": "Plan my week."}]}]
    )
    stream: Iterable[Any] = reply["stream"]
    return stream


def chunks_of(runtime: Any) -> Iterable[Any]:
    reply = runtime.invoke_model_with_response_stream(modelId=CLAUDE, body=json.dumps(INVOKE_BODY))
    return (json.loads(event["chunk"]["bytes"]) for event in reply["body"])


async def test_what_boto3_does_under_each_fault(tmp_path: Path) -> None:
    library = tmp_path / "faults"
    library.mkdir()
    for name, fault in FAULTS.items():
        (library / f"{name}.yaml").write_text(f"name: {name}\nfaults:\n  - {fault}\n")
    async for running in serve(tmp_path, "mock", library):
        port = running.port
        seen: dict[tuple[str, str], tuple[str | None, list[Any]]] = {}
        for op, call in (("converse", events_of), ("invoke", chunks_of)):
            clean = await in_thread(partial(observe_new, port, call))
            assert clean[0] is None
            for name in FAULTS:
                runtime = client(port, scenario=name)[0]
                seen[name, op] = await in_thread(partial(observe, runtime, call))
            ok = clean[1]
            three = 3 if op == "converse" else 4  # (Invoke's stream has content_block_start)
            checksum = "botocore.eventstream.ChecksumMismatch"
            assert (
                {name: seen[name, op] for name in FAULTS}
                == {
                    "bad-crc": (checksum, ok[:three]),
                    "bad-prelude-crc": (checksum, ok[:three]),
                    "throttled": (  # (after upstream event 3, whatever its kind)
                        "botocore.exceptions.EventStreamError(throttlingException)",
                        ok[:3],
                    ),
                    "drop": (None, ok[:three] + ok[three + 1 :]),
                    "duplicate": (None, [*ok, ok[-1]]),
                    "close": (None, ok[:-1]),
                    "abort": ("urllib3.exceptions.ProtocolError", ok[:-1]),
                    "hostile": (None, ok),
                    "truncated": (None, ok[:1] if op == "converse" else []),
                }
            ), op


@pytest.mark.parametrize("operation", ["converse", "invoke"])
def test_chaosproxy_matrix_judges_boto3_as_it_behaved(tmp_path: Path, operation: str) -> None:
    """Under `chaosproxy matrix`, each verdict follows from what boto3 did (the table
    above): it raised on the broken checksums, the exception and the abort (detected);
    it accepted a wrong text after a drop or a truncated message, and the right text
    without its terminal event after a clean cut (silent corruption); and a duplicated
    terminal or hostile reads changed nothing it was sent (tolerated)."""
    library = tmp_path / "faults"
    library.mkdir()
    for name, fault in FAULTS.items():
        (library / f"{name}.yaml").write_text(f"name: {name}\nfaults:\n  - {fault}\n")
    command = f"cd {REPO} && {sys.executable} -m tests.clients.bedrock_boto3 {operation}"
    matrix, _ = run_matrix(command, scenarios=[str(library)], timeout=30)
    verdicts = {r.scenario: r.verdict for r in matrix.results}
    assert verdicts == {
        "bad-crc": "detected",
        "bad-prelude-crc": "detected",
        "throttled": "detected",
        "abort": "detected",
        "drop": "silent_corruption",
        "close": "silent_corruption",
        "truncated": "silent_corruption",
        "duplicate": "tolerated",
        "hostile": "tolerated",
    }
    errors = {r.scenario: (r.error or "").split(":", 1)[0] for r in matrix.results}
    assert errors["bad-crc"] == "botocore.eventstream.ChecksumMismatch"
    assert errors["throttled"] == "botocore.exceptions.EventStreamError"
    assert errors["abort"] == "urllib3.exceptions.ProtocolError"


# ------------------------------------------------------------------------ SigV4 and Host


def signature_holds(path: str, headers: dict[str, str], body: bytes) -> bool:
    """Whether a request, as the upstream received it, carries a valid SigV4 signature
    (what AWS checks): recomputed by botocore from what arrived, over the headers its
    ``Authorization`` says were signed, with the dummy credentials."""
    authorization = headers["Authorization"]
    signed = authorization.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";")
    lower = {k.lower(): v for k, v in headers.items()}
    request = AWSRequest(
        method="POST",
        url=f"http://{lower['host']}{path}",
        data=body,
        headers={name: lower[name] for name in signed if name in lower},
    )
    request.context["timestamp"] = lower["x-amz-date"]
    auth = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN), "bedrock", "us-east-1")
    to_sign = auth.string_to_sign(request, auth.canonical_request(request))
    expected = auth.signature(to_sign, request)
    return bool(authorization.rsplit("Signature=", 1)[1] == expected)


def signed_for(endpoint: str, send_to: str | None = None) -> Any:
    """boto3's ``bedrock-runtime`` signing for ``endpoint``; ``send_to``: each request,
    once signed, sent there instead (a ``before-send`` hook: the client's own setup for
    a proxy in front of AWS whose Host the proxy sets to the upstream's)."""
    runtime = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        aws_session_token=SESSION_TOKEN,
        config=Config(retries={"max_attempts": 1}),
    )
    if send_to is not None:

        def redirect(request: Any, **_: Any) -> None:
            request.url = send_to + request.url.removeprefix(endpoint)

        runtime.meta.events.register("before-send.bedrock-runtime.*", redirect)
    return runtime


async def test_a_signature_for_the_proxys_host_breaks_and_one_for_the_upstreams_holds(
    tmp_path: Path, recorded_upstream: tuple[str, Received]
) -> None:
    """docs/providers.md, "SigV4 and Host": the proxy sends the upstream's Host, a
    signed header. boto3 with ``endpoint_url`` at the proxy signs the proxy's address, so
    the upstream (AWS) sees a signature that no longer holds; boto3 signing for the
    upstream's address and sending to the proxy (a ``before-send`` hook) gets its
    signature through intact. The first request, straight to the upstream, shows the
    check itself accepts what boto3 signs."""
    url, received = recorded_upstream
    await in_thread(partial(converse, signed_for(url)))
    async for running in serve(tmp_path, url):
        proxy_url = f"http://127.0.0.1:{running.port}"
        await in_thread(partial(converse, signed_for(proxy_url)))
        await in_thread(partial(converse, signed_for(url, send_to=proxy_url)))
    direct, at_the_proxy, for_the_upstream = received.requests
    assert [signature_holds(*r) for r in received.requests] == [True, False, True]
    assert at_the_proxy[1]["Host"] == for_the_upstream[1]["Host"] == url.removeprefix("http://")
    assert direct[0] == at_the_proxy[0] == for_the_upstream[0]  # the path, %3A kept
