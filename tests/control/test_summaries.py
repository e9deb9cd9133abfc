"""The request summary's contract: what the admin API (``GET /requests``, ``GET
/requests/{id}``) and the Python API (``ChaosProxy``, ``ChaosClient``) show of real
requests is exactly its type in chaosproxy/core/records.py: every required key there,
of its type (pydantic, strict), and no key the type does not name (its JSON Schema,
every object closed)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import TypeAdapter

from chaosproxy import ChaosClient, ChaosProxy
from chaosproxy.core.records import (
    AdminSummary,
    DoneSummary,
    InFlightSummary,
    RecordedVerdict,
    RequestSummary,
    RunVerdict,
)
from chaosproxy.observe.journal import VerificationError

CHAT = {
    "model": "gpt-4o",
    "stream": True,
    "messages": [{"role": "user", "content": "Tell me about rivers."}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
}


def closed(kind: Any) -> jsonschema.protocols.Validator:
    """A validator of ``kind``'s JSON Schema with every object closed: a key the type
    does not name is an error (pydantic ignores it)."""
    schema = TypeAdapter(kind).json_schema(ref_template="#/$defs/{model}")
    for definition in [schema, *schema.get("$defs", {}).values()]:
        if definition.get("type") == "object" and "properties" in definition:
            definition["additionalProperties"] = False
    return jsonschema.Draft202012Validator(schema)


def check(kind: Any, value: Any) -> None:
    TypeAdapter(kind).validate_python(value, strict=True)
    closed(kind).validate(value)


@pytest.fixture(scope="module")
def proxy() -> Iterator[ChaosProxy]:
    # journal_entry_bytes: the journal keeps the body of the short request only (and
    # keeps bodies at all only with log_content).
    settings: dict[str, Any] = {
        "admin": ("127.0.0.1", 0),
        "journal_entry_bytes": 1024,
        "log_content": True,
    }
    with ChaosProxy(mock_interval=0.001, **settings) as p:
        yield p


@pytest.fixture(scope="module")
def ran(proxy: ChaosProxy) -> dict[str, str]:
    """One request of each kind, by what it is: its request id."""
    ids: dict[str, str] = {}
    with httpx.Client(base_url=proxy.url, timeout=10) as http:

        def send(kind: str, scenario: str | None, body: dict[str, Any] = CHAT) -> None:
            headers = {"X-Chaos-Scenario": scenario} if scenario else {}
            try:
                with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                    ids[kind] = r.headers["X-Chaos-Request-Id"]
                    r.read()
            except httpx.TransportError:  # the cut
                assert kind in ids

        send("passthrough", None)
        send("completed", "drop-third-delta")
        send("cut", "cut-before-terminal-reset")
        send("rejected", "service-unavailable")  # the proxy's 503; no upstream
        send("large", None, {**CHAT, "messages": [{"role": "user", "content": "x" * 4096}]})
        send("verdict", "reverse-two-deltas")
    proxy.verdict(ids["verdict"], text="not the answer")
    return ids


def test_each_kind_of_request_ran_as_meant(proxy: ChaosProxy, ran: dict[str, str]) -> None:
    summaries = {kind: proxy.summary(request_id) for kind, request_id in ran.items()}
    assert summaries["completed"]["outcome"] == "completed"
    assert summaries["completed"].get("answer") is not None
    assert summaries["cut"]["outcome"] == "cut"
    assert summaries["rejected"]["status"] == 503
    assert summaries["rejected"].get("faults_applied") == {"status": 1}
    request = summaries["large"].get("request")
    assert request is not None and request.get("body_omitted") is True
    # The body was not kept: its one message as role, length and hash.
    digest = hashlib.sha256(b"x" * 4096).hexdigest()
    assert request.get("messages") == [{"role": "user", "chars": 4096, "sha256": digest}]
    assert request.get("body_omitted_reason") == "size"
    verdict = summaries["verdict"].get("verdict")
    assert verdict is not None and verdict["verdict"] == "silent_corruption"


def test_the_python_api_returns_request_summaries(proxy: ChaosProxy, ran: dict[str, str]) -> None:
    found = proxy.requests()
    assert {s["request_id"] for s in found} == set(ran.values())
    for summary in found:
        check(RequestSummary, summary)
    check(RecordedVerdict, proxy.summary(ran["verdict"]).get("verdict"))
    check(RequestSummary, proxy.last())
    check(list[RequestSummary], proxy.verify(tool="get_weather"))


def test_the_admin_api_shows_done_summaries(proxy: ChaosProxy, ran: dict[str, str]) -> None:
    assert proxy.admin_url is not None
    with httpx.Client(base_url=proxy.admin_url) as admin:
        listed = admin.get("/requests", params={"limit": 100}).json()["requests"]
        details = {i: admin.get(f"/requests/{i}").json()["summary"] for i in ran.values()}
    assert {s["request_id"] for s in listed} == set(ran.values())
    for shown in [*listed, *details.values()]:
        assert shown["state"] == "done"
        check(DoneSummary, shown)
        check(AdminSummary, shown)
    # The same summary as the Python API's, but for state.
    for request_id, shown in details.items():
        assert {k: v for k, v in shown.items() if k != "state"} == proxy.summary(request_id)


def test_the_chaos_client_returns_the_same_summaries(
    proxy: ChaosProxy, ran: dict[str, str]
) -> None:
    assert proxy.admin_url is not None
    chaos = ChaosClient(proxy.admin_url)
    assert chaos.requests() == proxy.requests()
    for summary in chaos.requests():
        check(RequestSummary, summary)
    again = chaos.verdict(ran["completed"], text="not the answer either")
    check(RunVerdict, again)
    assert again["requests"] == [ran["completed"]]
    check(RequestSummary, chaos.summary(ran["completed"]))


def test_a_request_in_flight_is_an_in_flight_summary() -> None:
    # A proxy of its own: the others' lists are of the module's six requests, in any order.
    headers = {"X-Chaos-Scenario": "hang-after-last-event"}
    with (
        ChaosProxy(mock_interval=0.001, admin=("127.0.0.1", 0)) as proxy,
        httpx.Client(timeout=10) as http,
        http.stream("POST", proxy.url + "/v1/chat/completions", json=CHAT, headers=headers) as r,
    ):
        assert proxy.admin_url is not None
        request_id = r.headers["X-Chaos-Request-Id"]
        lines = r.iter_lines()  # held: closing it would close the response
        while next(lines) != "data: [DONE]":  # everything sent; the body never ends
            pass
        shown = http.get(f"{proxy.admin_url}/requests/{request_id}").json()["summary"]
        assert shown["state"] == "in_flight" and shown["bytes"] > 0
        check(InFlightSummary, shown)
        check(AdminSummary, shown)
        with pytest.raises(KeyError):  # not finished: no RequestSummary yet
            ChaosClient(proxy.admin_url).summary(request_id, timeout=0)


def test_verify_lists_a_request_whose_body_was_not_kept(
    proxy: ChaosProxy, ran: dict[str, str]
) -> None:
    # Its request's messages are a count then (it raised TypeError listing it).
    with pytest.raises(VerificationError, match=ran["large"]):
        proxy.verify(model="no-such-model")
