"""``chaosproxy record`` end to end, on real sockets: a test upstream serves the real
captures of tests/fixtures/providers/ byte for byte, per provider; clients send their
requests (with an API key in a header, and Gemini's in a ``key=`` query) through
``chaosproxy record``, which passes each answer through unchanged and writes its
fixture; then ``chaosproxy serve --mock-fixtures FILE`` answers the same requests
offline with the same text and tool calls, as the suite's providers classification and
the official ``openai`` and ``anthropic`` SDKs read them. No secret reaches the file or
stderr; an upstream's error status or garbage is said and not recorded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from chaosproxy.core.answer import fold, piece_of
from chaosproxy.core.framing import make_framer
from chaosproxy.core.providers import get_profile, provider_for_path
from chaosproxy.scenario import load_fixture_files
from tests.support.cli import chaosproxy_argv, port_in, run_cli, start_serve, stop_serve
from tests.support.ports import refused_port
from tests.support.repo import fixture_bytes
from tests.support.scripted_upstream import Script, Seen, scripted_upstream, serve_handler

SECRET_KEY = "sk-proj-RecordTestSecret0123456789abcdef"
GOOGLE_KEY = "AIzaSyRecordTestSecret0123456789"
SSE = {"Content-Type": "text/event-stream"}
NDJSON = {"Content-Type": "application/x-ndjson"}
WEATHER: dict[str, object] = {"type": "object", "properties": {"city": {"type": "string"}}}


@dataclass(frozen=True)
class Case:
    """A client request, and the capture the upstream answers it with."""

    path: str
    capture: str
    body: dict[str, Any]
    query: str = ""
    headers: tuple[tuple[str, str], ...] = (("Authorization", f"Bearer {SECRET_KEY}"),)

    @property
    def ctype(self) -> dict[str, str]:
        return NDJSON if self.capture.endswith(".ndjson") else SSE


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


CASES = [
    Case(
        "/v1/chat/completions",
        "openai_chat_text_usage.sse",
        {"model": "gpt-4o", "stream": True, "messages": user("Weather in San Francisco?")},
    ),
    Case(
        "/v1/chat/completions",
        "openai_chat_tool_call_usage.sse",
        {
            "model": "gpt-4o",
            "stream": True,
            "messages": user("Weather in New York City?"),
            "tools": [
                {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
            ],
        },
    ),
    Case(
        "/v1/responses",
        "openai_responses_o4mini_reasoning_text.sse",
        {
            "model": "o4-mini",
            "stream": True,
            "input": "What is the sum of the first 5 positive integers?",
        },
    ),
    Case(
        "/v1/messages",
        "anthropic_docs_tool_use.sse",
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "stream": True,
            "messages": user("What's the weather like in San Francisco?"),
            "tools": [{"name": "get_weather", "input_schema": WEATHER}],
        },
        headers=(("x-api-key", SECRET_KEY), ("anthropic-version", "2023-06-01")),
    ),
    Case(
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
        "gemini_2_0_flash_text.crlf.sse",
        {"contents": [{"role": "user", "parts": [{"text": "Potato in seven languages"}]}]},
        query=f"?alt=sse&key={GOOGLE_KEY}",
        headers=(),
    ),
    Case(
        "/api/chat",
        "ollama_chat_stream.ndjson",
        {"model": "llama3.2", "messages": user("Why is the sky blue?")},
    ),
    Case("/api/generate", "ollama_generate_stream.ndjson", {"model": "llama3.2", "prompt": "Why?"}),
]


#: Each case's request as stderr shows it: Gemini's key masked.
SHOWN = [c.path + c.query.replace(GOOGLE_KEY, "***") for c in CASES]


def content(path: str, headers: Any, body: bytes) -> tuple[str, list[Any]]:
    """The answer's text and its calls' arguments, as the suite's providers classification
    reads a stream (the profile's content, folded)."""
    provider = provider_for_path(path)
    assert provider is not None
    profile = get_profile(provider)
    ndjson = "ndjson" in headers.get("Content-Type", "")
    framer = make_framer("ndjson" if ndjson else "sse")
    frames = framer.feed(body) + framer.eof()
    folded = fold([(None, piece_of(profile, f)) for f in frames], dedup=False)
    assert folded.terminal and not folded.errors
    return dict(folded.texts).get(0, ""), [orjson.loads(a) for _, a in folded.tools]


async def ask(session: aiohttp.ClientSession, base: str, case: Case) -> tuple[Any, bytes]:
    async with session.post(
        base + case.path + case.query, json=case.body, headers=dict(case.headers)
    ) as response:
        assert response.status == 200, await response.text()
        return response.headers, await response.read()


@contextlib.asynccontextmanager
async def recording(upstream: str, out: Path) -> AsyncIterator[tuple[str, list[str]]]:
    """``chaosproxy record`` as a process; yields its URL and, once it stopped, its
    stderr lines (in the list)."""
    proc = await asyncio.create_subprocess_exec(
        *chaosproxy_argv(), "record", "--upstream", upstream, "--out", str(out),
        "--listen", "127.0.0.1:0",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(20):
            banner = (await proc.stderr.readline()).decode()
        lines.append(banner)
        yield f"http://127.0.0.1:{port_in(banner)}", lines
    finally:
        lines.extend((await stop_serve(proc)).splitlines())


@contextlib.asynccontextmanager
async def replaying(out: Path) -> AsyncIterator[str]:
    """``chaosproxy serve --mock-fixtures FILE``: the mock answers from the recording."""
    proc, banner = await start_serve(
        "--mock-fixtures", str(out), "--listen", "127.0.0.1:0", "--admin", "off",
        "--mock-interval-ms", "0", "--log", "/dev/null",
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port_in(banner)}"
    finally:
        await stop_serve(proc)


class CaptureUpstream:
    """Answers each case's request (known by its body) with its capture, byte for byte,
    in one write; keeps what it was sent."""

    def __init__(self) -> None:
        self.url = ""
        self.seen: list[Seen] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path_qs, dict(request.headers), body))
        case = next(c for c in CASES if c.path == request.path and orjson.loads(body) == c.body)
        response = web.StreamResponse(headers=case.ctype)
        await response.prepare(request)
        await response.write(fixture_bytes(case.capture))
        await response.write_eof()
        return response


async def test_every_provider_recorded_then_served_back_offline_the_same(tmp_path: Path) -> None:
    out = tmp_path / "recorded.yaml"
    async with serve_handler(CaptureUpstream()) as up:
        async with recording(up.url, out) as (url, stderr), aiohttp.ClientSession() as session:
            live = [await ask(session, url, case) for case in CASES]
        # The upstream got each request once, its credentials with it.
        assert [s.path_qs for s in up.seen] == [c.path + c.query for c in CASES]
        assert up.seen[0].headers["Authorization"] == f"Bearer {SECRET_KEY}"
    # What the client got through record is the capture, byte for byte.
    assert [body for _, body in live] == [fixture_bytes(c.capture) for c in CASES]
    # One fixture per answer; no secret in the file or on stderr.
    text = out.read_text(encoding="utf-8")
    fixtures = load_fixture_files([str(out)])
    assert len(fixtures) == len(CASES)
    for secret in (SECRET_KEY, GOOGLE_KEY, "Authorization", "x-api-key", "key="):
        assert secret not in text
    for secret in (SECRET_KEY, GOOGLE_KEY):
        assert not [line for line in stderr if secret in line], stderr
    names = [f.name for f in fixtures]
    assert stderr[1:] == [
        f"chaosproxy: notice: recorded POST {shown} as fixture {name} in {out}"
        for shown, name in zip(SHOWN, names, strict=True)
    ]
    # Offline: the same requests get the same text and tool calls from the mock.
    async with replaying(out) as url, aiohttp.ClientSession() as session:
        for case, name, (headers, body) in zip(CASES, names, live, strict=True):
            got_headers, got = await ask(session, url, case)
            assert got_headers["X-Mock-Fixture"] == name
            assert content(case.path, got_headers, got) == content(case.path, headers, body)


async def test_the_sdks_get_the_same_answer_recorded_and_replayed(tmp_path: Path) -> None:
    out = tmp_path / "recorded.yaml"

    def openai_call(base: str) -> tuple[str, list[tuple[str, Any]]]:
        client = openai.OpenAI(base_url=base + "/v1", api_key=SECRET_KEY, max_retries=0)
        stream = client.chat.completions.create(
            model="gpt-4o",
            stream=True,
            messages=[{"role": "user", "content": "Weather in New York City?"}],
            tools=[
                {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
            ],
        )
        text, calls = "", dict[int, tuple[str, str]]()
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for call in delta.tool_calls or []:
                name, args = calls.get(call.index, ("", ""))
                function = call.function
                calls[call.index] = (
                    name + (function.name or "" if function else ""),
                    args + (function.arguments or "" if function else ""),
                )
        return text, [(n, orjson.loads(a)) for n, a in calls.values()]

    def anthropic_call(base: str) -> tuple[str, list[tuple[str, Any]]]:
        client = anthropic.Anthropic(base_url=base, api_key=SECRET_KEY, max_retries=0)
        with client.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=1024,
            messages=[{"role": "user", "content": "What's the weather like in San Francisco?"}],
            tools=[{"name": "get_weather", "input_schema": WEATHER}],
        ) as stream:
            message = stream.get_final_message()
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = [(b.name, b.input) for b in message.content if b.type == "tool_use"]
        return text, calls

    async with serve_handler(CaptureUpstream()) as up, recording(up.url, out) as (url, _):
        recorded = (
            await asyncio.to_thread(openai_call, url),
            await asyncio.to_thread(anthropic_call, url),
        )
    assert recorded[0] == ("", [("get_weather", {"city": "New York City"})])
    assert recorded[1] == (
        "Okay, let's check the weather for San Francisco, CA:",
        [("get_weather", {"location": "San Francisco, CA", "unit": "fahrenheit"})],
    )
    async with replaying(out) as url:
        replayed = (
            await asyncio.to_thread(openai_call, url),
            await asyncio.to_thread(anthropic_call, url),
        )
    assert replayed == recorded


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (
            Script(
                writes=[(b'{"error": {"message": "Incorrect API key provided"}}', 0)],
                status=401,
                headers={"Content-Type": "application/json"},
            ),
            "the upstream answered 401",
        ),
        (
            Script(writes=[(b"\x00\x01garbage, no event\xff", 0)], headers=SSE),
            "the body has no event",
        ),
        (
            Script.events(fixture_bytes("openai_chat_text_usage.sse")[:900], headers=SSE),
            "the stream ended before its terminal event",
        ),
        (
            Script.events(fixture_bytes("openai_chat_text_usage.sse"), headers=SSE, end="die"),
            "the upstream body failed",
        ),
    ],
    ids=["status-401", "garbage", "no-terminal-event", "upstream-died"],
)
async def test_an_answer_that_is_not_a_whole_stream_is_passed_on_and_not_recorded(
    tmp_path: Path, script: Script, why: str
) -> None:
    out = tmp_path / "recorded.yaml"
    case = CASES[0]
    async with scripted_upstream() as up:
        up.route(case.path, script)
        async with (
            recording(up.url, out) as (url, stderr),
            aiohttp.ClientSession() as session,
            session.post(url + case.path, json=case.body, headers=dict(case.headers)) as response,
        ):
            assert response.status == script.status
            sent = b"".join(w for w, _ in script.writes)
            if script.end == "die":  # the client sees the body fail, after all it got
                got = b""
                with pytest.raises(aiohttp.ClientPayloadError):
                    async for chunk in response.content.iter_any():
                        got += chunk
                assert sent.startswith(got)
            else:
                assert await response.read() == sent
    assert not out.exists()
    assert len(stderr) == 2, stderr
    assert stderr[1].startswith(f"chaosproxy: warning: not recorded: POST {case.path}: {why}"), (
        stderr
    )
    assert SECRET_KEY not in "".join(stderr)


async def test_an_upstream_that_is_not_there_is_a_502_and_not_recorded(tmp_path: Path) -> None:
    out = tmp_path / "recorded.yaml"
    with refused_port() as port:
        upstream = f"http://user:pa55word@127.0.0.1:{port}"
        async with recording(upstream, out) as (url, stderr), aiohttp.ClientSession() as session:
            response = await session.post(url + "/v1/chat/completions", json=CASES[0].body)
            assert response.status == 502
            said = (await response.json())["error"]["message"]
    assert said.startswith(f"upstream http://user:***@127.0.0.1:{port} failed: ")
    assert not out.exists()
    assert "pa55word" not in "".join(stderr)
    assert stderr[1].startswith("chaosproxy: warning: not recorded: POST /v1/chat/completions: ")


def test_record_refuses_a_file_that_is_not_a_fixture_file_and_a_missing_upstream(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.yaml"
    notes.write_text("just: notes\n")
    done = run_cli("record", "--upstream", "http://127.0.0.1:9", "--out", str(notes))
    assert (done.returncode, done.stderr) == (
        2,
        f"chaosproxy: error: {notes}: not a fixture file (a mapping with a fixtures: list)\n",
    )
    assert notes.read_text() == "just: notes\n"
    done = run_cli("record", "--out", str(tmp_path / "x.yaml"))
    assert (done.returncode, done.stderr) == (
        2,
        "chaosproxy: error: record: give the real upstream: --upstream URL\n",
    )
    done = run_cli("record", "--out", str(tmp_path / "x.yaml"), "--upstream", "mock")
    assert (done.returncode, done.stderr) == (
        2,
        "chaosproxy record: error: argument --upstream: expected the real upstream's http(s) "
        "URL, not 'mock'\n",
    )
