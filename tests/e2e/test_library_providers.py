"""Every library scenario against every provider the mock serves: each of its faults
either did what the scenario asks, or the request's summary says why not
(``faults_skipped``, ``faults_fallback``), exactly as listed here.

The streams are the mock's own (its renderers, the answer a request body picks, the
scenario's ``mock:`` fixture when it has one), run through the proxy's core on a virtual
clock (``chaosproxy simulate``): the same session the proxy runs, without sockets, so
the whole library over every provider takes well under a second. Last, live: a client
that resumes, under `chaosproxy matrix`, meets resume-after-mid-utf8-cut's cut inside a
character for every SSE provider.
"""

from __future__ import annotations

import hashlib
import re
import sys
from typing import Any

import orjson
import pytest

from chaosproxy.core.actions import Cut, Send
from chaosproxy.core.faults._websocket import NOT_A_WEBSOCKET
from chaosproxy.core.frames import Format
from chaosproxy.mock import anthropic as mock_anthropic
from chaosproxy.mock import bedrock as mock_bedrock
from chaosproxy.mock import gemini as mock_gemini
from chaosproxy.mock import ollama as mock_ollama
from chaosproxy.mock import openai_chat as mock_chat
from chaosproxy.mock import openai_responses as mock_responses
from chaosproxy.mock.common import Knobs
from chaosproxy.mock.corpus import ANSWERS
from chaosproxy.scenario import Fixture, Scenario, load_library
from chaosproxy.tools.matrix import run_matrix
from chaosproxy.tools.simulate import Simulation, simulate
from tests.support.repo import REPO

LIBRARY = load_library()
KNOBS = Knobs(tokens=24, interval=0.0)  # the mock's defaults (--mock-tokens)

#: Every provider the mock serves, by the endpoint a client streams from.
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
    "ollama-chat": "/api/chat",
    "ollama-generate": "/api/generate",
    "bedrock-converse": "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream",
}


def mock_stream(
    endpoint: str, prompt: str, fixture: Fixture | None = None, knobs: Knobs = KNOBS
) -> tuple[bytes, bytes]:
    """The mock's streamed answer to a request of ``endpoint`` asking ``prompt``: the
    request body (whose digest picks the corpus answer) and the response body."""
    messages = [{"role": "user", "content": prompt}]
    payload: dict[str, Any]
    if endpoint == "openai-chat":
        payload = {"model": "gpt-4o-mini", "messages": messages, "stream": True}
        body = orjson.dumps(payload)
        reply = mock_chat.respond(body, payload, knobs, fixture)
    elif endpoint == "openai-responses":
        payload = {"model": "gpt-4o-mini", "input": prompt, "stream": True}
        body = orjson.dumps(payload)
        reply = mock_responses.respond(body, payload, knobs, fixture)
    elif endpoint == "anthropic":
        payload = {"model": "claude", "max_tokens": 256, "messages": messages, "stream": True}
        body = orjson.dumps(payload)
        reply = mock_anthropic.respond(body, payload, knobs, fixture)
    elif endpoint == "gemini":
        payload = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
        body = orjson.dumps(payload)
        reply = mock_gemini.respond(
            body,
            payload,
            knobs,
            model="gemini-2.0-flash",
            action="streamGenerateContent",
            alt="sse",
            fixture=fixture,
        )
    elif endpoint == "bedrock-converse":
        payload = {"messages": [{"role": "user", "content": [{"text": prompt}]}]}
        body = orjson.dumps(payload)
        reply = mock_bedrock.respond(
            body, payload, knobs, model="claude", action="converse-stream", fixture=fixture
        )
    elif endpoint == "ollama-chat":
        payload = {"model": "llama3.2", "messages": messages}
        body = orjson.dumps(payload)
        reply = mock_ollama.respond(body, payload, knobs, endpoint="chat", fixture=fixture)
    else:
        payload = {"model": "llama3.2", "prompt": prompt}
        body = orjson.dumps(payload)
        reply = mock_ollama.respond(body, payload, knobs, endpoint="generate", fixture=fixture)
    return body, b"".join(reply.chunks)


def run(
    scenario: Scenario, endpoint: str, prompt: str = "Plan my week, please.", knobs: Knobs = KNOBS
) -> Simulation:
    """``scenario`` over the mock's answer to ``prompt`` on ``endpoint``."""
    fixture = scenario.mock[0] if scenario.mock else None
    _, data = mock_stream(endpoint, prompt, fixture, knobs)
    fmt: Format = (
        "ndjson"
        if endpoint.startswith("ollama")
        else "eventstream"
        if endpoint.startswith("bedrock")
        else "sse"
    )
    return simulate(scenario, data, seed=1, fmt=fmt, path=PATHS[endpoint])


def not_as_asked(sim: Simulation) -> dict[int, str]:
    """Each fault (by its position) that did not do what was asked: how, and why."""
    out = {s["position"]: f"skipped: {s['reason']}" for s in sim.summary["faults_skipped"]}
    for fell in sim.summary.get("faults_fallback", ()):
        out[fell["position"]] = f"{fell['actual']} for {fell['requested']}: {fell['reason']}"
    return out


NDJSON_IDS = "skipped: ids need SSE; NDJSON has no id field"
OFFLINE = "no other stream to take from (an offline run has only its own)"
WHOLE = "sends each tool call whole: there are no argument fragments"

EVENTSTREAM_IDS = "skipped: ids need SSE; an event stream has no id field"
NO_LINES = "skipped: an event stream has no line endings; the body was left unchanged"

#: What does not happen as asked, per scenario and endpoint; everything else does.
EXPECTED: dict[tuple[str, str], dict[int, str]] = {
    ("cr-line-endings", "bedrock-converse"): {0: NO_LINES},
    ("crlf-line-endings", "bedrock-converse"): {0: NO_LINES},
    ("keepalive-comments", "bedrock-converse"): {
        0: "skipped: comments need SSE; an event stream has no comment syntax"
    },
    **{
        (name, "bedrock-converse"): {0: EVENTSTREAM_IDS}
        for name in (
            "history-expired",
            "new-stream-after-reset",
            "restart-after-cut-before-terminal",
            "resume-after-mid-utf8-cut",
            "unsupported-after-cut",
        )
    },
    ("replay-last-after-id-cut", "bedrock-converse"): {
        0: EVENTSTREAM_IDS,
        1: "boundary for after_id: an event stream message has no id",
    },
    **{
        ("bedrock-bad-crc", endpoint): {
            0: "skipped: mode crc breaks an AWS event stream's checksum; this body is "
            + ("ndjson" if endpoint.startswith("ollama") else "sse")
            + ", which has none"
        }
        for endpoint in PATHS
        if not endpoint.startswith("bedrock")
    },
    ("cr-line-endings", "ollama-chat"): {
        0: "skipped: style cr is not an NDJSON line ending; the body was left unchanged"
    },
    ("cr-line-endings", "ollama-generate"): {
        0: "skipped: style cr is not an NDJSON line ending; the body was left unchanged"
    },
    ("crlf-line-endings", "gemini"): {0: "skipped: every line already ended in crlf"},
    ("keepalive-comments", "ollama-chat"): {
        0: "skipped: comments need SSE; NDJSON has no comment syntax"
    },
    ("keepalive-comments", "ollama-generate"): {
        0: "skipped: comments need SSE; NDJSON has no comment syntax"
    },
    ("tool-args-fragmented", "gemini"): {0: f"skipped: gemini {WHOLE}"},
    ("tool-args-fragmented", "ollama-chat"): {0: f"skipped: ollama {WHOLE}"},
    ("two-tool-calls-interleaved", "gemini"): {0: f"skipped: gemini {WHOLE}"},
    ("two-tool-calls-interleaved", "ollama-chat"): {0: f"skipped: ollama {WHOLE}"},
    # /api/generate has no tools: the fixture's calls are not in its answer.
    ("tool-args-fragmented", "ollama-generate"): {0: f"skipped: ollama {WHOLE}"},
    ("two-tool-calls-interleaved", "ollama-generate"): {0: f"skipped: ollama {WHOLE}"},
    **{
        (name, endpoint): {0: NDJSON_IDS}
        for name in (
            "history-expired",
            "new-stream-after-reset",
            "restart-after-cut-before-terminal",
            "resume-after-mid-utf8-cut",
            "unsupported-after-cut",
        )
        for endpoint in ("ollama-chat", "ollama-generate")
    },
    **{
        ("replay-last-after-id-cut", endpoint): {
            0: NDJSON_IDS,
            1: "boundary for after_id: the event has no id line",
        }
        for endpoint in ("ollama-chat", "ollama-generate")
    },
    **{
        (name, endpoint): {0: f"skipped: {NOT_A_WEBSOCKET}"}
        for name in ("realtime-close-1011-mid-response", "realtime-fragmented-utf8")
        for endpoint in PATHS
    },
    **{
        (f"splice-{source}-delta", endpoint): {0: f"skipped: from: {source}: {OFFLINE}"}
        for source in ("previous", "concurrent")
        for endpoint in PATHS
    },
}


@pytest.mark.parametrize("endpoint", list(PATHS))
@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_every_fault_fires_as_asked_or_says_why_not(name: str, endpoint: str) -> None:
    scenario = LIBRARY[name]
    sim = run(scenario, endpoint)
    missing = not_as_asked(sim)
    assert missing == EXPECTED.get((name, endpoint), {})
    # Every fault not skipped acted (one that fell back acted otherwise, and says so).
    skipped = {s["position"] for s in sim.summary["faults_skipped"]}
    acted = {fault for i, (fault, _) in enumerate(scenario.faults) if i not in skipped}
    assert set(sim.summary["faults_applied"]) == acted


def test_the_expected_table_names_only_library_scenarios_and_endpoints() -> None:
    assert {name for name, _ in EXPECTED} <= set(LIBRARY)
    assert {endpoint for _, endpoint in EXPECTED} <= set(PATHS)


def prompts_for_every_answer(endpoint: str) -> dict[int, str]:
    """A prompt per corpus answer: the mock starts from the answer the request body's
    digest picks, so the first prompts (in order) that pick each one."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < len(ANSWERS):
        prompt = f"question {n}"
        body, _ = mock_stream(endpoint, prompt)
        start = int.from_bytes(hashlib.sha256(body).digest()[:8], "big") % len(ANSWERS)
        found.setdefault(start, prompt)
        n += 1
    return found


LEAD = re.compile(rb"[\xc0-\xf7]\Z")


@pytest.mark.parametrize("tokens", [24, 8])
# (Text streams only: an event stream's messages are binary, their lengths and CRCs
# may hold any byte, so a cut there is no cut inside a character.)
@pytest.mark.parametrize("endpoint", [e for e in PATHS if not e.startswith("bedrock")])
def test_resume_after_mid_utf8_cut_cuts_inside_a_character_for_every_answer(
    endpoint: str, tokens: int
) -> None:
    """Whatever the answer (each of the corpus's), even cut short to 8 tokens
    (``--mock-tokens 8``), the cut falls inside a character: the last byte sent is the
    lead byte of a multi-byte character, and every event sent whole after the third has
    none."""
    scenario = LIBRARY["resume-after-mid-utf8-cut"]
    knobs = Knobs(tokens=tokens, interval=0.0)
    for answer, prompt in sorted(prompts_for_every_answer(endpoint).items()):
        sim = run(scenario, endpoint, prompt, knobs)
        [cut] = [a for _, a in sim.actions if isinstance(a, Cut)]
        sends = [a for _, a in sim.actions if isinstance(a, Send)]
        assert (cut.detail["position"], cut.how) == ("mid_utf8", "abort"), (answer, cut)
        assert "fallback" not in cut.detail
        whole = int(str(cut.detail["after_event"]))
        assert whole >= 3
        assert LEAD.search(sends[-1].data), (answer, sends[-1].data[-8:])
        assert sends[-1].ends == 0 and "cut" in sends[-1].faults  # part of an event
        passed = [s for s in sends[:-1] if s.events and s.events[0].ordinal > 3]
        assert all(s.data.isascii() for s in passed), answer
        assert sim.summary.get("faults_fallback") is None


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses", "anthropic", "gemini"])
def test_a_resuming_client_meets_a_cut_inside_a_character_under_the_matrix(
    provider: str,
) -> None:
    """Live, through `chaosproxy matrix`'s proxy and mock, with a client that resumes
    (tests/clients/resume_any.py): for every SSE provider the first connection is cut
    inside a character, the client reconnects, gets the rest and the 204 of the
    finished stream, and ends with the clean answer: tolerated, nothing fell back."""
    command = f"cd {REPO} && {sys.executable} -m tests.clients.resume_any {provider}"
    matrix, lines = run_matrix(
        command,
        scenarios=["resume-after-mid-utf8-cut"],
        timeout=20,
        settings={"mock_interval": 0.002},
    )
    (result,) = matrix.results
    assert (result.verdict, result.fallbacks, result.text_column) == ("tolerated", [], "same")
    assert result.reason == "the client accepted the clean answer over 2 connections"
    first, reconnect, finished = result.requests
    [cut] = [x for x in lines if x["event"] == "action"]
    assert (cut["request_id"], cut["position"], cut["how"]) == (first, "mid_utf8", "abort")
    assert "requested" not in cut and cut["after_event"] >= 3
    ends = {x["request_id"]: x for x in lines if x["event"] == "response_end"}
    assert (ends[first]["outcome"], ends[reconnect]["status"], ends[finished]["status"]) == (
        "cut",
        200,
        204,
    )
