"""A new provider needs its own file and nothing else: ``acme``, declared here only (its
profile, request shape, key header and parameter, slots, and its mock renderer: this
module's ``serve`` and ``error_body``), registered for each test's duration, is routed
by the mock, framed and kinded by the pipeline, rewritten by the content faults through
its slots, read by the journal, keyed by tenancy, masked by redaction, named by
scenarios and the scenario schema, and judged by the verdicts, through a real proxy,
mock and client.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from jsonschema.validators import validator_for

from chaosproxy import ChaosProxy
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers import declared, provider_for_path, register, unregister
from chaosproxy.core.providers._wire import DELTA, OTHER, START, TERMINAL, encode_event
from chaosproxy.core.providers.base import (
    NOTHING,
    TERMINAL_PIECE,
    EventContent,
    JsonProfile,
    MockRoute,
    ProviderSlots,
    RequestShape,
    Slot,
)
from chaosproxy.core.redact import mask_headers, redact_path
from chaosproxy.core.tenancy import TenantKeys
from chaosproxy.mock.common import MockCall, MockRequestError, MockResponse
from chaosproxy.scenario.errors import ScenarioError
from chaosproxy.scenario.loader import parse_scenario
from chaosproxy.tools.schema import scenario_schema
from chaosproxy.tools.simulate import simulate

# --------------------------------------------------------------------------- the provider


class AcmeSlots(ProviderSlots):
    fragments = False

    def text(self, frame: Frame) -> Slot | None:
        payload = frame.json()
        if not isinstance(payload, dict) or payload.get("t") != "text":
            return None
        text = payload.get("text")
        return Slot(("text",), text, "0") if isinstance(text, str) and text else None


class AcmeProfile(JsonProfile):
    """NDJSON: ``{"t": "start"}``, then ``{"t": "text", "text": ...}`` each, then
    ``{"t": "end"}``."""

    name = "acme"
    rank = 70
    paths = (re.compile(r"/acme/v1/stream$"),)
    request = RequestShape(model=("engine",), prompt=("query",), tools=("functions",))
    # Names no rule of redaction's knows for a secret: only the declaration masks them.
    key_headers = frozenset({"x-acme-credz"})
    key_params = frozenset({"acme_sig"})
    slots = AcmeSlots()
    mock = __name__
    mock_routes = (MockRoute("/acme/v1/stream"),)

    @classmethod
    def recognises_payload(cls, payload: dict[str, Any]) -> bool:
        return payload.get("t") == "start" and "acme" in payload

    def classify_payload(self, payload: dict[str, Any]) -> frozenset[str]:
        kind = payload.get("t")
        if kind == "text":
            return DELTA
        return START if kind == "start" else TERMINAL if kind == "end" else OTHER

    def content_payload(self, payload: dict[str, Any]) -> EventContent:
        if payload.get("t") == "text" and isinstance(payload.get("text"), str):
            return EventContent(((0, payload["text"]),))
        return TERMINAL_PIECE if payload.get("t") == "end" else NOTHING

    def error_event(self, fmt: Format, newline: bytes = b"\n") -> bytes:
        return encode_event(fmt, newline, b'{"error":"acme failed"}', native="ndjson")


# ------------------------------------------------ its mock renderer (AcmeProfile.mock)


def serve(call: MockCall) -> MockResponse:
    """The answer: the query echoed, one word an event."""
    query = call.payload.get("query")
    if not isinstance(query, str):
        raise MockRequestError("query is required")
    words = ["You", " asked", ":", *(" " + w for w in query.split())]
    events: list[dict[str, Any]] = [{"t": "start", "acme": 1}]
    events += [{"t": "text", "text": w} for w in words]
    events.append({"t": "end"})
    return MockResponse("application/x-ndjson", [orjson.dumps(e) + b"\n" for e in events])


def error_body(status: int, message: str, kind: str | None = None) -> dict[str, Any]:
    return {"error": message}


# --------------------------------------------------------------------------- the tests

BODY = {"engine": "acme-1", "query": "how far", "functions": [{"name": "lookup"}]}
CLEAN = (
    b'{"t":"start","acme":1}\n'
    b'{"t":"text","text":"You"}\n'
    b'{"t":"text","text":" asked"}\n'
    b'{"t":"text","text":":"}\n'
    b'{"t":"text","text":" how"}\n'
    b'{"t":"text","text":" far"}\n'
    b'{"t":"end"}\n'
)


@pytest.fixture
def acme() -> Iterator[None]:
    register(AcmeProfile)
    try:
        yield
    finally:
        unregister("acme")


@pytest.fixture
def proxy(acme: None) -> Iterator[ChaosProxy]:
    with ChaosProxy(mock_interval=0) as running:
        running.add_scenario({"faults": []}, "acme-clean")
        running.add_scenario(
            {"provider": "acme", "faults": [{"drop": {"kind": "delta", "nth": 2}}]}, "acme-drop"
        )
        running.add_scenario({"faults": [{"resegment": {"every": 2}}]}, "acme-resegment")
        yield running


def text_of(body: bytes) -> str:
    events = [orjson.loads(line) for line in body.splitlines()]
    return "".join(e["text"] for e in events if e.get("t") == "text")


def ask(proxy: ChaosProxy, scenario: str | None = None) -> tuple[str, bytes]:
    headers = {"x-acme-credz": "k-123"}
    if scenario is not None:
        headers["X-Chaos-Scenario"] = scenario
    response = httpx.post(
        proxy.url + "/acme/v1/stream?acme_sig=s3cr3t", json=BODY, headers=headers, timeout=10
    )
    assert response.status_code == 200
    return response.headers["X-Chaos-Request-Id"], response.content


def test_the_mock_serves_it_and_the_proxy_passes_it_clean(proxy: ChaosProxy) -> None:
    request_id, body = ask(proxy, "acme-clean")
    assert body == CLEAN
    summary = proxy.last()
    assert (summary["provider"], summary["format"]) == ("acme", "ndjson")
    assert (summary["events_in"], summary["events_out"], summary["integrity"]) == (7, 7, "intact")
    assert proxy.verdict(request_id, text=text_of(body))["verdict"] == "tolerated"


def test_its_request_is_read_and_its_credentials_masked(proxy: ChaosProxy) -> None:
    ask(proxy)
    request = proxy.last()["request"]
    assert (request["model"], request["tools"]) == ("acme-1", ["lookup"])
    digest = hashlib.sha256(b"how far").hexdigest()  # the prompts only with --log-content
    assert request["messages"] == [{"role": "user", "chars": 7, "sha256": digest}]
    assert request["headers"]["x-acme-credz"] == "***"
    assert request["path"] == "/acme/v1/stream?acme_sig=***"
    assert len(proxy.requests(model="acme-1", tool="lookup", path="/acme/v1/stream")) == 1


def test_a_fault_on_its_kinds_and_the_verdict_on_what_the_client_kept(proxy: ChaosProxy) -> None:
    request_id, body = ask(proxy, "acme-drop")
    assert body == CLEAN.replace(b'{"t":"text","text":" asked"}\n', b"")
    summary = proxy.last()
    assert summary["faults_applied"] == {"drop": 1}
    assert (summary["events_in"], summary["events_out"]) == (7, 6)
    assert summary["integrity"] == "altered"
    assert proxy.verdict(request_id, text="You: how far")["verdict"] == "silent_corruption"


def test_a_content_fault_rewrites_it_through_its_slots(proxy: ChaosProxy) -> None:
    request_id, body = ask(proxy, "acme-resegment")
    assert body == (
        b'{"t":"start","acme":1}\n'
        b'{"t":"text","text":"Yo"}\n'
        b'{"t":"text","text":"u"}\n'
        b'{"t":"text","text":" a"}\n'
        b'{"t":"text","text":"sk"}\n'
        b'{"t":"text","text":"ed"}\n'
        b'{"t":"text","text":":"}\n'
        b'{"t":"text","text":" h"}\n'
        b'{"t":"text","text":"ow"}\n'
        b'{"t":"text","text":" f"}\n'
        b'{"t":"text","text":"ar"}\n'
        b'{"t":"end"}\n'
    )
    assert proxy.last()["faults_applied"] == {"resegment": 4}
    assert proxy.verdict(request_id, text=text_of(body))["verdict"] == "tolerated"


def test_its_key_header_and_parameter_key_a_tenant_and_are_masked_only_once_declared() -> None:
    keys = TenantKeys(secrets.token_bytes(16))
    header = [("X-Acme-Credz", "k-123")]
    path = "/acme/v1/stream?acme_sig=s3cr3t"
    unknown = (keys.of(header), keys.of([], "acme_sig=s3cr3t"), mask_headers(header))
    assert unknown == (keys.anonymous, keys.anonymous, {"x-acme-credz": "k-123"})
    assert redact_path(path) == path
    assert provider_for_path(path) is None
    register(AcmeProfile)
    try:
        assert declared("acme").key_headers == {"x-acme-credz"}
        tenant = keys.of(header)
        assert tenant != keys.anonymous
        assert keys.of([("x-acme-credz", "k-124")]) != tenant
        assert keys.of([], "acme_sig=s3cr3t") != keys.anonymous
        assert mask_headers(header) == {"x-acme-credz": "***"}
        assert redact_path(path) == "/acme/v1/stream?acme_sig=***"
        assert provider_for_path(path) == "acme"
    finally:
        unregister("acme")
    assert keys.of(header) == keys.anonymous


def test_scenarios_name_it_and_the_schema_lists_it(acme: None) -> None:
    assert parse_scenario("provider: acme\nfaults: []", "s.yaml", "s").provider == "acme"
    with pytest.raises(ScenarioError) as refused:
        parse_scenario("provider: acmee\nfaults: []", "s.yaml", "s")
    assert str(refused.value) == (
        "s.yaml:1: provider: must be one of: auto, openai-chat, openai-responses, "
        "openai-realtime, anthropic, gemini, ollama, bedrock, acme, generic"
    )
    # Its slots say its tool calls come whole: a fault that cuts their fragments cannot
    # apply to it, in the loader and in the schema an editor checks files with.
    with pytest.raises(ScenarioError, match="acme sends each tool call whole"):
        parse_scenario("provider: acme\nfaults:\n  - split_tool_args: {every: 2}", "s.yaml", "s")
    schema = scenario_schema()
    assert schema["properties"]["provider"]["enum"][-2:] == ["acme", "generic"]
    validator = validator_for(schema)(schema)
    document = {"provider": "acme", "faults": [{"split_tool_args": {"every": 2}}]}
    assert not validator.is_valid(document)
    assert validator.is_valid({**document, "provider": "anthropic"})
    assert not validator.is_valid({"provider": "acmee", "faults": []})


def test_the_simulator_runs_a_scenario_over_it_offline(acme: None) -> None:
    scenario = parse_scenario(
        "faults:\n  - drop: {kind: delta, nth: 2}\n  - inject: {after: 4, event: {kind: error}}",
        "s.yaml",
        "s",
    )
    result = simulate(scenario, CLEAN, path="/acme/v1/stream", seed=1)
    # The second delta dropped; its own error event after the upstream's 4th event (":").
    assert result.body == (
        b'{"t":"start","acme":1}\n'
        b'{"t":"text","text":"You"}\n'
        b'{"t":"text","text":":"}\n'
        b'{"error":"acme failed"}\n'
        b'{"t":"text","text":" how"}\n'
        b'{"t":"text","text":" far"}\n'
        b'{"t":"end"}\n'
    )
