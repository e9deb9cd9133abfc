"""The scenario library (scenarios/*.yaml), end to end: every file, through the live
proxy in front of the mock upstream, with real clients (the official ``openai`` and
``anthropic`` SDKs, ``httpx-sse``, aiohttp), asserting what each client observed.

Each file in scenarios/ must have a test registered here with ``@covers(stem)``; a file
without one fails ``test_scenario_end_to_end[stem]`` and
``test_every_scenario_file_has_a_test``. The behaviours asserted here are the ones
recorded in docs/scenario-library.md.

The mock is deterministic for a given request body, so a run without the scenario
(pure passthrough) of the same SDK call is the reference every faulted run is compared
with. Timings are measured at the client with ``time.monotonic`` (never slept on), and
the durations they are compared with are read from the scenario files themselves.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import anthropic
import httpx
import openai
import pytest
from aiohttp import web
from anthropic.types import RawContentBlockDeltaEvent, TextDelta
from httpx_sse import ServerSentEvent, SSEError, aconnect_sse
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseTextDeltaEvent

from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.start import RunningProxy, start_proxy
from chaosproxy.core.faults import FaultConfig
from chaosproxy.core.faults.delay import DelayConfig
from chaosproxy.core.faults.stall import StallConfig
from chaosproxy.core.faults.status import StatusConfig
from chaosproxy.core.faults.throttle import ThrottleConfig
from chaosproxy.mock import MOCK_REQUESTS
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import Scenario, load_scenarios, validate_paths
from tests.support.cli import chaosproxy_argv
from tests.support.proxies import LogCapture
from tests.support.realtime_clients import Seen, mock_text, with_websockets
from tests.support.repo import LIBRARY
from tests.support.resume import token_of
from tests.support.resume_client import Run, resume_loop

#: Mock knobs: short answers, fast pacing (the scenarios' own durations dominate).
TOKENS = 12
INTERVAL = 0.002
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
PROMPT = "Plan my week, please."
CHAT_BODY: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": PROMPT}],
    "stream": True,
}
#: How long a client is given to show that it hangs (after everything was received).
HANG_WAIT = 0.3
UTF8_BOM = b"\xef\xbb\xbf"
#: The credentials the SDK clients of the lab send (api_key "test"): one tenant, so
#: another request that sends them is the same user's.
SAME_USER = {"Authorization": "Bearer test"}
#: A shorter answer, where a slow scenario would make the default one take long.
FEW_TOKENS = {"X-Mock-Tokens": "4"}


def library_files() -> list[Path]:
    return sorted([*LIBRARY.glob("*.yaml"), *LIBRARY.glob("*.yml")])


def library_stems() -> list[str]:
    return [p.stem for p in library_files()]


# --------------------------------------------------------------------------- the lab


C = TypeVar("C", bound=FaultConfig)


@dataclass
class Lab:
    """A proxy with the whole library loaded, in front of the mock, and its frame log."""

    proxy: RunningProxy
    log: LogCapture
    scenarios: dict[str, Scenario]
    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def mock_requests(self) -> Counter[str]:
        runner = self.proxy.runners[0]
        assert isinstance(runner, web.AppRunner)
        return runner.app[MOCK_REQUESTS]

    def openai(self, **kw: Any) -> openai.AsyncOpenAI:
        kw.setdefault("max_retries", 0)
        client = openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="test", **kw)
        self._closers.append(client.close)
        return client

    def anthropic(self, **kw: Any) -> anthropic.AsyncAnthropic:
        kw.setdefault("max_retries", 0)
        client = anthropic.AsyncAnthropic(base_url=self.url, api_key="test", **kw)
        self._closers.append(client.close)
        return client

    def config(self, scenario: str, kind: type[C]) -> C:
        """The config of the (first) fault of that type in a library scenario."""
        for _, cfg in self.scenarios[scenario].faults:
            if isinstance(cfg, kind):
                return cfg
        raise AssertionError(f"{scenario} has no {kind.__name__}")

    def request_ids(self, scenario: str, path: str | None = None) -> list[str]:
        """Request ids of that scenario (and path), in arrival order."""
        return [
            line["request_id"]
            for line in self.log.lines
            if line["event"] == "request"
            and line.get("scenario") == scenario
            and (path is None or line["path"] == path)
        ]

    async def settled(self) -> list[dict[str, Any]]:
        """Wait until every request the proxy logged has ended; their response_end lines.

        The proxy logs ``response_end`` just after its last write, so a client can see
        the end of a body a moment before the line exists: this polls for it."""
        async with asyncio.timeout(5):
            while True:
                lines = self.log.lines
                started = [ln["request_id"] for ln in lines if ln["event"] == "request"]
                ends = {ln["request_id"]: ln for ln in lines if ln["event"] == "response_end"}
                if all(r in ends for r in started):
                    return [ends[r] for r in started]
                await asyncio.sleep(0.005)

    async def end(self, request_id: str) -> dict[str, Any]:
        await self.settled()
        return self.log.end(request_id)

    def frame_bounds(self, request_id: str) -> list[int]:
        """Where each write ended, as body offsets (the frame log's promise)."""
        bounds, offset = [], 0
        for frame in self.log.frames(request_id):
            assert frame["offset"] == offset
            offset += frame["size"]
            bounds.append(offset)
        return bounds


@pytest.fixture(scope="module")
def library() -> dict[str, Scenario]:
    return load_scenarios([LIBRARY])


@pytest.fixture
async def lab(library: dict[str, Scenario], log_capture: LogCapture) -> AsyncIterator[Lab]:
    log = FrameLog(None)
    log.add_listener(log_capture)
    proxy = await start_proxy(
        EMBEDDED.replace(mock_tokens=TOKENS, mock_interval=INTERVAL), scenarios=library, log=log
    )
    lab = Lab(proxy, log_capture, library)
    try:
        yield lab
    finally:
        for close in lab._closers:
            await close()
        await proxy.close()


def chaos(scenario: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = {"X-Chaos-Scenario": scenario} if scenario else {}
    headers.update(extra or {})
    return headers


# --------------------------------------------------------------------------- clients


@dataclass
class ChatRun:
    """What the openai SDK yielded for one streamed chat completion."""

    chunks: list[ChatCompletionChunk] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    started: float = 0.0
    created: float = 0.0  # when create() returned (the response headers were in)
    request_id: str = ""

    @property
    def deltas(self) -> list[str]:
        return [
            c.choices[0].delta.content
            for c in self.chunks
            if c.choices and c.choices[0].delta.content
        ]

    @property
    def text(self) -> str:
        return "".join(self.deltas)

    @property
    def finish_reasons(self) -> list[str]:
        return [
            c.choices[0].finish_reason
            for c in self.chunks
            if c.choices and c.choices[0].finish_reason
        ]

    def dumps(self) -> list[dict[str, Any]]:
        return [c.model_dump() for c in self.chunks]


async def stream_chat(
    client: openai.AsyncOpenAI,
    scenario: str | None,
    run: ChatRun | None = None,
    *,
    headers: dict[str, str] | None = None,
) -> ChatRun:
    """Stream one chat completion with the openai SDK, recording chunks as they come
    (pass ``run`` to keep what arrived before an exception)."""
    run = run if run is not None else ChatRun()
    run.started = time.monotonic()
    stream = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
        extra_headers=chaos(scenario, headers),
    )
    run.created = time.monotonic()
    run.request_id = stream.response.headers["X-Chaos-Request-Id"]
    async for chunk in stream:
        run.chunks.append(chunk)
        run.arrivals.append(time.monotonic())
    return run


@dataclass
class MessagesRun:
    """What the anthropic SDK's ``messages.stream()`` yielded."""

    events: list[str] = field(default_factory=list)
    deltas: list[str] = field(default_factory=list)  # text_delta pieces, as sent
    texts: list[str] = field(default_factory=list)  # the SDK's own "text" events
    final: anthropic.types.Message | None = None
    request_id: str = ""

    @property
    def final_text(self) -> str:
        assert self.final is not None
        return "".join(b.text for b in self.final.content if b.type == "text")


async def stream_messages(
    client: anthropic.AsyncAnthropic,
    scenario: str | None,
    run: MessagesRun | None = None,
    *,
    stop_after: str | None = None,
) -> MessagesRun:
    """Stream one message with the anthropic SDK. With ``stop_after``, allow only
    HANG_WAIT for anything to follow that event type (TimeoutError if nothing does)."""
    run = run if run is not None else MessagesRun()
    async with client.messages.stream(
        model="claude-haiku-4-5",
        max_tokens=256,
        messages=[{"role": "user", "content": PROMPT}],
        extra_headers=chaos(scenario),
    ) as stream:
        run.request_id = stream.response.headers["X-Chaos-Request-Id"]
        events = stream.__aiter__()
        async for event in events:
            run.events.append(event.type)
            if isinstance(event, RawContentBlockDeltaEvent) and isinstance(event.delta, TextDelta):
                run.deltas.append(event.delta.text)
            if event.type == "text":
                run.texts.append(event.text)
            if event.type == stop_after:
                # Does the SDK get past this point? (TimeoutError when it hangs.)
                async with asyncio.timeout(HANG_WAIT):
                    await anext(events)
        run.final = await stream.get_final_message()
    return run


@dataclass
class ResponsesRun:
    """What the openai SDK's ``responses.stream()`` yielded."""

    events: list[str] = field(default_factory=list)
    deltas: list[str] = field(default_factory=list)
    sequence: list[int] = field(default_factory=list)  # sequence_number of every event
    errors: list[str] = field(default_factory=list)  # messages of "error" events
    final_text: str | None = None


async def stream_responses(
    client: openai.AsyncOpenAI,
    scenario: str | None,
    run: ResponsesRun | None = None,
    *,
    stop_after: str | None = None,
) -> ResponsesRun:
    run = run if run is not None else ResponsesRun()
    async with client.responses.stream(
        model="gpt-4o-mini", input=PROMPT, extra_headers=chaos(scenario)
    ) as stream:
        events = stream.__aiter__()
        async for event in events:
            run.events.append(event.type)
            run.sequence.append(event.sequence_number)
            if isinstance(event, ResponseTextDeltaEvent):
                run.deltas.append(event.delta)
            if event.type == "error":
                run.errors.append(event.message)
            if event.type == stop_after:
                async with asyncio.timeout(HANG_WAIT):
                    await anext(events)
        run.final_text = (await stream.get_final_response()).output_text
    return run


@dataclass
class SseRun:
    """What httpx-sse parsed from one response."""

    events: list[ServerSentEvent] = field(default_factory=list)
    request_id: str = ""
    content_type: str = ""

    @property
    def datas(self) -> list[str]:
        return [e.data for e in self.events]


async def sse_events(
    lab: Lab,
    scenario: str | None,
    run: SseRun | None = None,
    *,
    path: str = CHAT,
    body: dict[str, Any] = CHAT_BODY,
    stop_at: str | None = None,
    headers: dict[str, str] | None = None,
) -> SseRun:
    """POST and parse the SSE stream with httpx-sse. With ``stop_at``, allow only
    HANG_WAIT for another event or the end after the event whose data is ``stop_at``."""
    run = run if run is not None else SseRun()
    sent = chaos(scenario, headers)
    async with (
        httpx.AsyncClient(timeout=5) as client,
        aconnect_sse(client, "POST", lab.url + path, json=body, headers=sent) as source,
    ):
        run.request_id = source.response.headers["X-Chaos-Request-Id"]
        run.content_type = source.response.headers["Content-Type"]
        events = source.aiter_sse().__aiter__()
        async for event in events:
            run.events.append(event)
            if event.data == stop_at:
                async with asyncio.timeout(HANG_WAIT):
                    run.events.append(await anext(events))
    return run


@dataclass
class RawRun:
    body: bytes
    request_id: str
    headers: dict[str, str]


async def raw_body(
    lab: Lab,
    scenario: str | None,
    *,
    path: str = CHAT,
    body: dict[str, Any] = CHAT_BODY,
    headers: dict[str, str] | None = None,
) -> RawRun:
    """The exact bytes the client received, read with aiohttp."""
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.post(lab.url + path, json=body, headers=chaos(scenario, headers)) as resp,
    ):
        data = await resp.read()
        return RawRun(data, resp.headers["X-Chaos-Request-Id"], dict(resp.headers))


def sse_blocks(body: bytes, sep: bytes = b"\n\n") -> list[bytes]:
    """The SSE event blocks of a body, each with its terminating blank line."""
    parts = body.split(sep)
    assert parts[-1] == b""
    return [p + sep for p in parts[:-1]]


# --------------------------------------------------------------------------- registry


ScenarioTest = Callable[[Lab], Awaitable[None]]
SCENARIO_TESTS: dict[str, ScenarioTest] = {}


def covers(stem: str) -> Callable[[ScenarioTest], ScenarioTest]:
    """Register the end-to-end test of ``scenarios/<stem>.yaml``."""

    def register(test: ScenarioTest) -> ScenarioTest:
        assert stem not in SCENARIO_TESTS, f"two tests for {stem}"
        SCENARIO_TESTS[stem] = test
        return test

    return register


@pytest.mark.parametrize("stem", library_stems())
async def test_scenario_end_to_end(stem: str, lab: Lab) -> None:
    test = SCENARIO_TESTS.get(stem)
    assert test is not None, f"scenarios/{stem}.yaml has no end-to-end test: add @covers({stem!r})"
    await test(lab)
    # Whatever the clients did, every request of the scenario applied all its faults
    # and skipped none: the file does on a real stream what its description says.
    names = {name for name, _ in lab.scenarios[stem].faults}
    active = [e for e in await lab.settled() if e["scenario"] == stem and "faults_applied" in e]
    assert active, "the test never sent a request that this scenario faulted"
    for end in active:
        assert set(end["faults_applied"]) == names, end
        assert end["faults_skipped"] == [], end


def test_every_scenario_file_has_a_test() -> None:
    assert set(SCENARIO_TESTS) == set(library_stems())


def test_library_files_are_valid_named_described_and_commented(
    library: dict[str, Scenario],
) -> None:
    assert validate_paths([LIBRARY]) == []
    assert len(library) == len(library_files()) >= 20
    for path in library_files():
        scenario = library[path.stem]  # name: is the file stem
        assert scenario.name == path.stem
        assert scenario.description.strip(), path.name
        text = path.read_text(encoding="utf-8")
        assert any(line.lstrip().startswith("#") for line in text.splitlines()), path.name
        # Loaded together by `chaosproxy serve` as the default library: a match: rule
        # would change what plain requests get. Scenarios are chosen by name only.
        assert scenario.match is None, path.name
        assert path.stem.islower() and " " not in path.stem and "_" not in path.stem


def test_cli_validate_accepts_the_library() -> None:
    done = subprocess.run(
        [*chaosproxy_argv(), "validate", str(LIBRARY)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"{len(list(LIBRARY.glob('*.yaml')))} scenarios OK\n"  # no problem


# --------------------------------------------------------------------------- delivery


@covers("one-event-per-read")
async def check_one_event_per_read(lab: Lab) -> None:
    reference = await raw_body(lab, None)
    got = await raw_body(lab, "one-event-per-read")
    assert got.body == reference.body
    # One write per event, each ending exactly at the event's blank line.
    end = await lab.end(got.request_id)
    frames = lab.log.frames(got.request_id)
    assert [f["events"] for f in frames] == [[n] for n in range(1, end["events_in"] + 1)]
    blocks = sse_blocks(got.body)
    assert [f["size"] for f in frames] == [len(b) for b in blocks]
    # The SDK sees the same chunks as without the proxy's framing.
    client = lab.openai()
    assert (await stream_chat(client, "one-event-per-read")).dumps() == (
        await stream_chat(client, None)
    ).dumps()


@covers("all-events-in-one-read")
async def check_all_events_in_one_read(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "all-events-in-one-read")
    assert run.dumps() == reference.dumps()
    end = await lab.end(run.request_id)
    [frame] = lab.log.frames(run.request_id)
    assert frame["events"] == list(range(1, end["events_in"] + 1))
    assert frame["size"] == end["bytes"]
    sse = await sse_events(lab, "all-events-in-one-read")
    assert sse.datas == (await sse_events(lab, None)).datas


@covers("one-byte-per-read")
async def check_one_byte_per_read(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "one-byte-per-read")
    assert run.dumps() == reference.dumps()
    end = await lab.end(run.request_id)
    frames = lab.log.frames(run.request_id)
    assert {f["size"] for f in frames} == {1}
    assert len(frames) == end["bytes"]
    messages = await stream_messages(lab.anthropic(), "one-byte-per-read")
    assert messages.final_text == (await stream_messages(lab.anthropic(), None)).final_text


@covers("hostile-boundaries")
async def check_hostile_boundaries(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "hostile-boundaries")
    assert run.text == reference.text
    assert run.dumps() == reference.dumps()
    assert any(ord(ch) > 0x7F for ch in run.text)  # there was something to split
    messages = await stream_messages(lab.anthropic(), "hostile-boundaries")
    assert messages.final_text == (await stream_messages(lab.anthropic(), None)).final_text
    # The writes (rebuilt from the frame log) split every multi-byte character after
    # its first byte, and [DONE] in the middle; the bytes themselves are unchanged.
    raw = await raw_body(lab, "hostile-boundaries")
    assert raw.body == (await raw_body(lab, None)).body
    await lab.settled()
    bounds = set(lab.frame_bounds(raw.request_id))
    assert max(bounds) == len(raw.body)
    leads = [i for i, b in enumerate(raw.body) if b >= 0xC0]
    assert leads
    assert all(i + 1 in bounds for i in leads)
    assert all(0x80 <= raw.body[i + 1] <= 0xBF for i in leads)  # mid-character writes
    assert raw.body.index(b"[DONE]") + 3 in bounds


@covers("throttled-stream")
async def check_throttled_stream(lab: Lab) -> None:
    rate = lab.config("throttled-stream", ThrottleConfig).bytes_per_second
    started = time.monotonic()
    raw = await raw_body(lab, "throttled-stream", headers=FEW_TOKENS)
    elapsed = time.monotonic() - started
    assert raw.body == (await raw_body(lab, None, headers=FEW_TOKENS)).body
    assert elapsed >= len(raw.body) / rate
    await lab.settled()
    assert max(f["size"] for f in lab.log.frames(raw.request_id)) <= rate // 20
    # The SDK still streams the same text, just slower.
    client = lab.openai()
    run = await stream_chat(client, "throttled-stream", headers=FEW_TOKENS)
    assert run.text == (await stream_chat(client, None, headers=FEW_TOKENS)).text


# --------------------------------------------------------------------------- events


@covers("duplicate-third-delta")
async def check_duplicate_third_delta(lab: Lab) -> None:
    client = lab.openai()
    p = (await stream_chat(client, None)).deltas
    run = await stream_chat(client, "duplicate-third-delta")
    # The openai SDK passes the copy on: the third piece of text appears twice.
    assert run.deltas == [*p[:3], p[2], *p[3:]]
    frames = lab.log.frames(run.request_id)
    assert [f["faults"] for f in frames].count(["duplicate"]) == 1
    ant = lab.anthropic()
    a = (await stream_messages(ant, None)).deltas
    messages = await stream_messages(ant, "duplicate-third-delta")
    assert messages.deltas == [*a[:3], a[2], *a[3:]]
    assert messages.final_text == "".join(messages.deltas)  # the snapshot has it twice
    # Responses: the delta event comes twice with the same sequence_number, unnoticed;
    # the final text comes from response.completed, so it is right.
    reference = await stream_responses(client, None)
    responses = await stream_responses(client, "duplicate-third-delta")
    r = reference.deltas
    assert responses.deltas == [*r[:3], r[2], *r[3:]]
    assert len(set(responses.sequence)) == len(responses.sequence) - 1
    assert responses.final_text == reference.final_text


@covers("drop-third-delta")
async def check_drop_third_delta(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "drop-third-delta")
    p = reference.deltas
    assert run.deltas == [*p[:2], *p[3:]]  # no error: the text silently misses a piece
    assert run.finish_reasons == ["stop"]
    ant = lab.anthropic()
    a = (await stream_messages(ant, None)).deltas
    messages = await stream_messages(ant, "drop-third-delta")
    assert messages.deltas == [*a[:2], *a[3:]]
    assert messages.final_text == "".join(a[:2] + a[3:])
    # Responses: a gap in sequence_number, not reported; final text is complete.
    ref_responses = await stream_responses(client, None)
    responses = await stream_responses(client, "drop-third-delta")
    assert responses.deltas == [*ref_responses.deltas[:2], *ref_responses.deltas[3:]]
    assert sorted(set(range(len(ref_responses.sequence))) - set(responses.sequence)) != []
    assert responses.final_text == ref_responses.final_text


@covers("reverse-two-deltas")
async def check_reverse_two_deltas(lab: Lab) -> None:
    client = lab.openai()
    p = (await stream_chat(client, None)).deltas
    run = await stream_chat(client, "reverse-two-deltas")
    assert run.deltas == [*p[:2], p[3], p[2], *p[4:]]
    ant = lab.anthropic()
    a = (await stream_messages(ant, None)).deltas
    messages = await stream_messages(ant, "reverse-two-deltas")
    assert messages.final_text == "".join([*a[:2], a[3], a[2], *a[4:]])
    # Responses: sequence_number goes backwards and the SDK does not object.
    reference = await stream_responses(client, None)
    responses = await stream_responses(client, "reverse-two-deltas")
    r = reference.deltas
    assert responses.deltas == [*r[:2], r[3], r[2], *r[4:]]
    assert responses.sequence != sorted(responses.sequence)
    assert responses.final_text == reference.final_text


@covers("terminal-event-twice")
async def check_terminal_event_twice(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "terminal-event-twice")
    assert run.dumps() == reference.dumps()  # the SDK stops at the first [DONE]
    sse = await sse_events(lab, "terminal-event-twice")
    assert sse.datas[-2:] == ["[DONE]", "[DONE]"]
    ant = lab.anthropic()
    ref_messages = await stream_messages(ant, None)
    messages = await stream_messages(ant, "terminal-event-twice")
    assert messages.events == [*ref_messages.events, "message_stop"]  # yielded twice
    assert messages.final_text == ref_messages.final_text
    responses = await stream_responses(client, "terminal-event-twice")
    assert responses.events[-2:] == ["response.completed", "response.completed"]
    assert responses.final_text == (await stream_responses(client, None)).final_text


@covers("truncated-json-delta")
async def check_truncated_json_delta(lab: Lab) -> None:
    client = lab.openai()
    run = ChatRun()
    # Neither SDK wraps the parse error in its own exception type.
    with pytest.raises(json.JSONDecodeError):
        await stream_chat(client, "truncated-json-delta", run)
    assert len(run.deltas) == 2  # the role chunk and two deltas came first
    messages = MessagesRun()
    with pytest.raises(json.JSONDecodeError):
        await stream_messages(lab.anthropic(), "truncated-json-delta", messages)
    assert len(messages.deltas) == 2
    # A plain SSE parser hands the broken payload over like any other event.
    reference = await sse_events(lab, None)
    sse = await sse_events(lab, "truncated-json-delta")
    assert len(sse.events) == len(reference.events)
    broken = [i for i, d in enumerate(sse.datas) if d != reference.datas[i]]
    assert broken == [3]  # role chunk, delta 1, delta 2, then delta 3
    assert reference.datas[3].startswith(sse.datas[3])
    with pytest.raises(json.JSONDecodeError):
        json.loads(sse.datas[3])


@covers("error-mid-stream")
async def check_error_mid_stream(lab: Lab) -> None:
    client = lab.openai()
    run = ChatRun()
    with pytest.raises(openai.APIError) as info:
        await stream_chat(client, "error-mid-stream", run)
    assert type(info.value) is openai.APIError  # not a status or connection error
    assert len(run.chunks) == 3  # upstream events 1-3, then the error
    messages = MessagesRun()
    with pytest.raises(anthropic.APIStatusError) as ant_info:
        await stream_messages(lab.anthropic(), "error-mid-stream", messages)
    assert "overloaded_error" in str(ant_info.value)
    assert messages.events == ["message_start", "content_block_start"]  # ping is not yielded
    # Responses: the SDK yields the error as an ordinary event and carries on.
    reference = await stream_responses(client, None)
    responses = await stream_responses(client, "error-mid-stream")
    assert responses.events[3] == "error"
    assert len(responses.errors) == 1
    assert responses.final_text == reference.final_text


@covers("delta-after-done")
async def check_delta_after_done(lab: Lab) -> None:
    sse = await sse_events(lab, "delta-after-done")
    assert sse.datas[-2] == "[DONE]"
    late = json.loads(sse.datas[-1])
    assert late["choices"][0]["delta"]["content"] == " late"
    client = lab.openai()
    run = await stream_chat(client, "delta-after-done")
    assert run.dumps() == (await stream_chat(client, None)).dumps()  # stops at [DONE]
    assert not run.text.endswith(" late")
    frames = lab.log.frames(run.request_id)
    assert frames[-1]["faults"] == ["inject"]


#: Another user's request: the mock answers it with other text and other ids.
OTHER_BODY: dict[str, Any] = {
    **CHAT_BODY,
    "messages": [{"role": "user", "content": "Another user's question."}],
}


def chat_text_deltas(datas: list[str]) -> list[dict[str, Any]]:
    """The OpenAI chat chunks (parsed) of an SSE stream's data that carry text."""
    chunks = [json.loads(d) for d in datas if d != "[DONE]"]
    return [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]


@covers("splice-previous-delta")
async def check_splice_previous_delta(lab: Lab) -> None:
    # The source: another answer of the same user (the SDKs' api_key "test": one tenant),
    # framed (a passthrough stream is not a source).
    other = await sse_events(lab, "one-event-per-read", body=OTHER_BODY, headers=SAME_USER)
    foreign = chat_text_deltas(other.datas)
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "splice-previous-delta")
    # The openai SDK passes the foreign chunk on, after upstream event 2: a piece of the
    # other answer, with the other answer's id, sits in this text.
    ref = reference.dumps()
    spliced = run.dumps()[2]
    assert run.dumps() == [*ref[:2], spliced, *ref[2:]]
    assert spliced["id"] != ref[0]["id"] and spliced["id"] == foreign[0]["id"]
    assert spliced["choices"][0]["delta"]["content"] in [
        c["choices"][0]["delta"]["content"] for c in foreign
    ]
    assert run.deltas == [*reference.deltas[:1], run.deltas[1], *reference.deltas[1:]]
    [frame] = [f for f in lab.log.frames(run.request_id) if f["faults"] == ["splice"]]
    assert frame["splice_from"] == other.request_id
    # Anthropic: the previous stream is that OpenAI chat answer; its chunk arrives as
    # an SSE event without an event name, which the SDK passes over.
    ant = lab.anthropic()
    ant_ref = await stream_messages(ant, None)
    messages = await stream_messages(ant, "splice-previous-delta")
    assert messages.events == ant_ref.events
    assert messages.final_text == ant_ref.final_text
    [frame] = [f for f in lab.log.frames(messages.request_id) if f["faults"] == ["splice"]]
    assert frame["splice_from"] == run.request_id


@covers("splice-concurrent-delta")
async def check_splice_concurrent_delta(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    got = b""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            lab.url + CHAT, json=OTHER_BODY, headers=chaos("hang-after-last-event", SAME_USER)
        ) as other,
    ):
        # Another stream of the same user (tenant), still open (it hangs after its last
        # event): running now.
        async with asyncio.timeout(5):
            while b"data: [DONE]\n\n" not in got:
                got += await other.content.readany()
        other_id = other.headers["X-Chaos-Request-Id"]
        run = await stream_chat(client, "splice-concurrent-delta")
    foreign = chat_text_deltas([b.decode()[len("data: ") : -2] for b in sse_blocks(got)])
    ref = reference.dumps()
    spliced = run.dumps()[2]
    assert run.dumps() == [*ref[:2], spliced, *ref[2:]]
    assert spliced in [
        ChatCompletionChunk.model_validate(c).model_dump() for c in foreign
    ]  # another answer's text, in this one
    [frame] = [f for f in lab.log.frames(run.request_id) if f["faults"] == ["splice"]]
    assert frame["splice_from"] == other_id


@covers("keepalive-comments")
async def check_keepalive_comments(lab: Lab) -> None:
    raw = await raw_body(lab, "keepalive-comments")
    end = await lab.end(raw.request_id)
    assert raw.body.count(b"\n: keepalive\n\n") == end["events_in"]
    assert raw.body.replace(b": keepalive\n\n", b"") == (await raw_body(lab, None)).body
    # Real SSE clients drop comments: same events, same chunks.
    sse = await sse_events(lab, "keepalive-comments")
    assert sse.datas == (await sse_events(lab, None)).datas
    client = lab.openai()
    run = await stream_chat(client, "keepalive-comments")
    assert run.dumps() == (await stream_chat(client, None)).dumps()
    messages = await stream_messages(lab.anthropic(), "keepalive-comments")
    assert messages.final_text == (await stream_messages(lab.anthropic(), None)).final_text


@covers("crlf-line-endings")
async def check_crlf_line_endings(lab: Lab) -> None:
    raw = await raw_body(lab, "crlf-line-endings")
    assert raw.body.replace(b"\r\n", b"\n") == (await raw_body(lab, None)).body
    assert b"\n" not in raw.body.replace(b"\r\n", b"")
    client = lab.openai()
    run = await stream_chat(client, "crlf-line-endings")
    assert run.dumps() == (await stream_chat(client, None)).dumps()
    sse = await sse_events(lab, "crlf-line-endings")
    assert sse.datas == (await sse_events(lab, None)).datas
    messages = await stream_messages(lab.anthropic(), "crlf-line-endings")
    assert messages.final_text == (await stream_messages(lab.anthropic(), None)).final_text


@covers("cr-line-endings")
async def check_cr_line_endings(lab: Lab) -> None:
    raw = await raw_body(lab, "cr-line-endings")
    assert b"\n" not in raw.body
    assert raw.body.replace(b"\r", b"\n") == (await raw_body(lab, None)).body
    # All three parsers follow the SSE spec here: a bare CR ends a line.
    client = lab.openai()
    run = await stream_chat(client, "cr-line-endings")
    assert run.dumps() == (await stream_chat(client, None)).dumps()
    sse = await sse_events(lab, "cr-line-endings")
    assert sse.datas == (await sse_events(lab, None)).datas
    messages = await stream_messages(lab.anthropic(), "cr-line-endings")
    assert messages.final_text == (await stream_messages(lab.anthropic(), None)).final_text
    # A naive reader that splits on LF (aiohttp's line iterator) sees one endless line.
    async with (
        aiohttp.ClientSession() as session,
        session.post(lab.url + CHAT, json=CHAT_BODY, headers=chaos("cr-line-endings")) as resp,
    ):
        lines = [line async for line in resp.content]
    assert lines == [raw.body]


@covers("utf8-bom")
async def check_utf8_bom(lab: Lab) -> None:
    raw = await raw_body(lab, "utf8-bom")
    assert raw.body.startswith(UTF8_BOM)
    assert raw.body[3:] == (await raw_body(lab, None)).body
    # None of these clients strips the BOM: each loses the first event (the BOM makes
    # its first line's field name "\ufeffdata" or "\ufeffevent", an unknown field).
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "utf8-bom")
    assert run.dumps() == reference.dumps()[1:]  # the role chunk is gone
    assert run.text == reference.text  # ... which carried no text
    sse = await sse_events(lab, "utf8-bom")
    assert sse.datas == (await sse_events(lab, None)).datas[1:]
    # Anthropic loses message_start: no text events, and no final message.
    messages = MessagesRun()
    with pytest.raises(AssertionError):
        await stream_messages(lab.anthropic(), "utf8-bom", messages)
    assert "message_start" not in messages.events
    assert messages.events[-1] == "message_stop"
    assert messages.texts == []
    assert messages.deltas  # the raw deltas were yielded
    # Responses loses nothing: its first line is "event: response.created", the one
    # ignored, and the SDK types events by the JSON "type" in the data line.
    reference_responses = await stream_responses(client, None)
    responses = await stream_responses(client, "utf8-bom")
    assert responses.events == reference_responses.events
    assert responses.final_text == reference_responses.final_text


# --------------------------------------------------------------------------- endings


@covers("cut-before-terminal-close")
async def check_cut_before_terminal_close(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "cut-before-terminal-close")
    # Silent truncation: the openai SDK cannot tell. Only [DONE] is missing, and the
    # SDK never yields [DONE]; the finish chunk came before it.
    assert run.dumps() == reference.dumps()
    assert run.finish_reasons == ["stop"]
    sse = await sse_events(lab, "cut-before-terminal-close")
    reference_sse = await sse_events(lab, None)
    assert sse.datas == reference_sse.datas[:-1]
    assert "[DONE]" not in sse.datas
    # Anthropic: no error either, even without message_stop.
    ant = lab.anthropic()
    messages = await stream_messages(ant, "cut-before-terminal-close")
    assert "message_stop" not in messages.events
    assert messages.final is not None and messages.final.stop_reason == "end_turn"
    assert messages.final_text == (await stream_messages(ant, None)).final_text
    # Responses is the one that notices: iterating ends quietly, but
    # get_final_response() raises for want of response.completed.
    responses = ResponsesRun()
    with pytest.raises(RuntimeError, match=r"response\.completed"):
        await stream_responses(client, "cut-before-terminal-close", responses)
    assert responses.events[-1] == "response.output_item.done"
    end = await lab.end(run.request_id)
    assert end["outcome"] == "cut"


@covers("cut-before-terminal-abort")
async def check_cut_before_terminal_abort(lab: Lab) -> None:
    client = lab.openai()
    run = ChatRun()
    with pytest.raises(openai.APIConnectionError) as info:
        await stream_chat(client, "cut-before-terminal-abort", run)
    cause = info.value.__cause__
    assert type(cause).__name__ == "RemoteProtocolError"
    assert "incomplete chunked read" in str(cause)
    assert run.finish_reasons == ["stop"]  # everything but [DONE] had arrived
    # The anthropic SDK (>= 2.17) wraps its HTTP library's exception, as openai does.
    messages = MessagesRun()
    with pytest.raises(anthropic.APIConnectionError) as ant_info:
        await stream_messages(lab.anthropic(), "cut-before-terminal-abort", messages)
    assert type(ant_info.value.__cause__).__name__ == "RemoteProtocolError"
    assert type(ant_info.value.__cause__).__module__.startswith("httpx")
    assert messages.events[-1] == "message_delta"
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            lab.url + CHAT, json=CHAT_BODY, headers=chaos("cut-before-terminal-abort")
        ) as resp,
    ):
        with pytest.raises(aiohttp.ClientPayloadError, match="not completed"):
            await resp.read()
    action = [ln for ln in lab.log.for_request(run.request_id) if ln["event"] == "action"]
    assert action[0]["how"] == "abort"


@covers("cut-before-terminal-reset")
async def check_cut_before_terminal_reset(lab: Lab) -> None:
    client = lab.openai()
    run = ChatRun()
    with pytest.raises(openai.APIConnectionError) as info:
        await stream_chat(client, "cut-before-terminal-reset", run)
    assert type(info.value.__cause__).__name__ == "ReadError"
    reference = await stream_chat(client, None)
    assert run.dumps() == reference.dumps()  # every chunk arrived before the RST
    messages = MessagesRun()
    with pytest.raises(anthropic.APIConnectionError) as ant_info:
        await stream_messages(lab.anthropic(), "cut-before-terminal-reset", messages)
    assert type(ant_info.value.__cause__).__name__ == "ReadError"
    assert type(ant_info.value.__cause__).__module__.startswith("httpx")
    sse = SseRun()
    with pytest.raises(httpx.ReadError):
        await sse_events(lab, "cut-before-terminal-reset", sse)
    assert sse.datas == (await sse_events(lab, None)).datas[:-1]
    end = await lab.end(run.request_id)
    assert end["outcome"] == "cut"


@covers("reset-mid-stream")
async def check_reset_mid_stream(lab: Lab) -> None:
    client = lab.openai()
    run = ChatRun()
    with pytest.raises(openai.APIConnectionError) as info:
        await stream_chat(client, "reset-mid-stream", run)
    assert type(info.value.__cause__).__name__ == "ReadError"
    await lab.settled()
    [action] = [ln for ln in lab.log.for_request(run.request_id) if ln["event"] == "action"]
    assert action["how"] == "reset"
    assert len(run.chunks) == action["after_event"] == 5
    assert run.finish_reasons == []
    sse = SseRun()
    with pytest.raises(httpx.ReadError):
        await sse_events(lab, "reset-mid-stream", sse)
    assert len(sse.events) == 5


@covers("hang-after-last-event")
async def check_hang_after_last_event(lab: Lab) -> None:
    # The openai chat SDK stops at [DONE] and closes the response itself.
    client = lab.openai()
    run = await stream_chat(client, "hang-after-last-event")
    assert run.dumps() == (await stream_chat(client, None)).dumps()
    # The anthropic SDK reads on after message_stop, waiting for the body to end.
    messages = MessagesRun()
    with pytest.raises(TimeoutError):
        await stream_messages(
            lab.anthropic(), "hang-after-last-event", messages, stop_after="message_stop"
        )
    assert messages.events[-1] == "message_stop"
    # So does the Responses helper after response.completed, and httpx-sse after [DONE].
    responses = ResponsesRun()
    with pytest.raises(TimeoutError):
        await stream_responses(
            client, "hang-after-last-event", responses, stop_after="response.completed"
        )
    assert responses.events[-1] == "response.completed"
    sse = SseRun()
    with pytest.raises(TimeoutError):
        await sse_events(lab, "hang-after-last-event", sse, stop_at="[DONE]")
    assert sse.datas[-1] == "[DONE]"
    # Each hung response ended only when its client gave up.
    ends = [e for e in await lab.settled() if e["scenario"] == "hang-after-last-event"]
    assert [e["outcome"] for e in ends] == ["client_gone"] * 4


# --------------------------------------------------------------------------- timing


@covers("stall-mid-stream")
async def check_stall_mid_stream(lab: Lab) -> None:
    stall = lab.config("stall-mid-stream", StallConfig)
    assert isinstance(stall.after, int) and stall.duration is not None
    client = lab.openai()
    run = await stream_chat(client, "stall-mid-stream")
    assert run.dumps() == (await stream_chat(client, None)).dumps()
    gaps = [b - a for a, b in zip(run.arrivals, run.arrivals[1:], strict=False)]
    longest = max(range(len(gaps)), key=gaps.__getitem__)
    assert longest == stall.after - 1  # between upstream events N and N+1
    # (from the request: a gap from chunk N is shorter when the client read it late)
    assert run.arrivals[stall.after] - run.started >= stall.duration
    frames = lab.log.frames(run.request_id)
    assert (frames[stall.after]["t_ms"] - frames[stall.after - 1]["t_ms"]) / 1000 >= stall.duration
    # A read timeout shorter than the stall applies per read: the SDK times out there.
    impatient = lab.openai(timeout=stall.duration / 2)
    cut_short = ChatRun()
    with pytest.raises(openai.APITimeoutError):
        await stream_chat(impatient, "stall-mid-stream", cut_short)
    assert len(cut_short.chunks) == stall.after


@covers("slow-first-byte")
async def check_slow_first_byte(lab: Lab) -> None:
    delay = lab.config("slow-first-byte", DelayConfig).first_byte
    assert delay is not None
    # The status line and headers come at once; the first body byte after the delay
    # (measured from the request: a client late to read the head cannot shorten it).
    async with aiohttp.ClientSession() as session:
        sent_at = time.monotonic()
        async with session.post(
            lab.url + CHAT, json=CHAT_BODY, headers=chaos("slow-first-byte")
        ) as resp:
            first = await resp.content.readany()
            first_at = time.monotonic()
            request_id = resp.headers["X-Chaos-Request-Id"]
            await resp.read()
    assert first
    assert first_at - sent_at >= delay
    assert (await lab.end(request_id))["ttfb_ms"] >= delay * 1000
    # The openai SDK's create() returns on the headers: most of the wait comes after
    # it, before the first chunk (time create() and you miss the slow first token).
    client = lab.openai()
    run = await stream_chat(client, "slow-first-byte")
    assert run.arrivals[0] - run.started >= delay
    assert run.arrivals[0] - run.created >= delay / 2
    assert run.dumps() == (await stream_chat(client, None)).dumps()


# --------------------------------------------------------------------------- HTTP


@covers("rate-limited-then-ok")
async def check_rate_limited_then_ok(lab: Lab) -> None:
    status = lab.config("rate-limited-then-ok", StatusConfig)
    retry_after = float(status.headers["Retry-After"])
    client = lab.openai(max_retries=2)
    run = await stream_chat(client, "rate-limited-then-ok")
    # The SDK honoured Retry-After, retried once, and the retry went through.
    assert time.monotonic() - run.started >= retry_after
    assert lab.mock_requests[CHAT] == 1
    first, second = lab.request_ids("rate-limited-then-ok")
    assert run.request_id == second
    assert (await lab.end(first))["status"] == status.code == 429
    assert lab.log.end(second)["status"] == 200
    assert run.text == (await stream_chat(client, None)).text


@covers("service-unavailable")
async def check_service_unavailable(lab: Lab) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await stream_chat(lab.openai(), "service-unavailable")
    assert info.value.status_code == 503
    assert isinstance(info.value.body, dict) and info.value.body["type"] == "chaosproxy_injected"
    # The anthropic SDK retries a 503 (here once) and then raises its own subclass.
    with pytest.raises(anthropic.ServiceUnavailableError):
        await stream_messages(lab.anthropic(max_retries=1), "service-unavailable")
    assert len(lab.request_ids("service-unavailable", MESSAGES)) == 2
    assert sum(lab.mock_requests.values()) == 0  # the upstream never saw any


@covers("wrong-content-type")
async def check_wrong_content_type(lab: Lab) -> None:
    raw = await raw_body(lab, "wrong-content-type")
    assert raw.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert raw.body == (await raw_body(lab, None)).body  # only the label changed
    # Both SDKs ignore the Content-Type and parse the stream as SSE anyway.
    client = lab.openai()
    run = await stream_chat(client, "wrong-content-type")
    assert run.dumps() == (await stream_chat(client, None)).dumps()
    messages = await stream_messages(lab.anthropic(), "wrong-content-type")
    assert messages.final_text == (await stream_messages(lab.anthropic(), None)).final_text
    # httpx-sse checks it and refuses the stream before the first event.
    sse = SseRun()
    with pytest.raises(SSEError, match="text/event-stream"):
        await sse_events(lab, "wrong-content-type", sse)
    assert sse.content_type.startswith("text/plain")
    assert sse.events == []


# --------------------------------------------------------------------------- reconnection


async def resume_run(lab: Lab, stem: str) -> tuple[Run, list[str]]:
    """The fetch-style resuming client of tests/support/resume_client.py under ``stem``, and the
    data of every event of the same request, uncut (the reference)."""
    reference = (await sse_events(lab, None)).datas
    async with httpx.AsyncClient(timeout=5) as client:
        run = await resume_loop(client, lab.url + CHAT, json=CHAT_BODY, headers=chaos(stem))
    return run, reference


def stream_ids(token: str, first: int, last: int) -> list[str]:
    return [f"{token}.{n}" for n in range(first, last + 1)]


@covers("resume-after-mid-utf8-cut")
async def check_resume_after_mid_utf8_cut(lab: Lab) -> None:
    run, reference = await resume_run(lab, "resume-after-mid-utf8-cut")
    rid, n = run.connections[0].request_id, len(reference)
    token = token_of(lab.proxy, rid)
    assert run.statuses == [200, 200, 204] and run.connections[0].end == "error"
    assert run.ids == stream_ids(token, 1, n)  # each event once, the whole answer
    assert run.datas == reference
    [action] = [x for x in lab.log.for_request(rid or "") if x["event"] == "action"]
    assert (action["how"], action["position"]) == ("abort", "mid_utf8")
    assert "requested" not in action  # no fallback: inside a character, as named
    # seek: inside the first event after the third that has a multi-byte character.
    whole = action["after_event"]
    assert whole >= 3 and all(d.isascii() for d in reference[3:whole])
    assert not reference[whole].isascii()
    assert sum(lab.mock_requests.values()) == 2  # the reference and the first connection


@covers("replay-last-after-id-cut")
async def check_replay_last_after_id_cut(lab: Lab) -> None:
    run, reference = await resume_run(lab, "replay-last-after-id-cut")
    token, n = token_of(lab.proxy, run.connections[0].request_id), len(reference)
    assert run.statuses == [200, 200, 204]
    assert run.connections[0].ids == stream_ids(token, 1, 3)  # the 4th's id never dispatched
    assert run.connections[1].ids == stream_ids(token, 3, n)
    assert run.twice() == [f"{token}.3"]
    assert run.deduplicated() == reference


@covers("restart-after-cut-before-terminal")
async def check_restart_after_cut_before_terminal(lab: Lab) -> None:
    run, reference = await resume_run(lab, "restart-after-cut-before-terminal")
    token, n = token_of(lab.proxy, run.connections[0].request_id), len(reference)
    assert run.statuses == [200, 200, 204]
    assert run.connections[0].ids == stream_ids(token, 1, n - 1)
    assert run.connections[1].ids == stream_ids(token, 1, n)  # from the first, same ids
    assert run.twice() == stream_ids(token, 1, n - 1)
    assert run.datas == reference[:-1] + reference  # appended blindly: twice the answer
    assert run.deduplicated() == reference


@covers("new-stream-after-reset")
async def check_new_stream_after_reset(lab: Lab) -> None:
    run, reference = await resume_run(lab, "new-stream-after-reset")
    first, second = (c.request_id for c in run.connections[:2])
    assert run.statuses == [200, 200, 204] and first != second
    token = token_of(lab.proxy, first)
    assert run.connections[0].ids == stream_ids(token, 1, 5)
    assert run.connections[1].ids == stream_ids(token_of(lab.proxy, second), 1, len(reference))
    assert run.datas == reference[:5] + reference and run.twice() == []
    [request] = [x for x in lab.log.for_request(second or "") if x["event"] == "request"]
    assert (request["resumes"], request["last_event_id"]) == (first, f"{token[:6]}\u2026.5")


@covers("unsupported-after-cut")
async def check_unsupported_after_cut(lab: Lab) -> None:
    run, reference = await resume_run(lab, "unsupported-after-cut")
    assert run.statuses == [200, 204]
    assert run.datas == reference[:5]
    assert sum(lab.mock_requests.values()) == 2  # the 204 never asked the upstream


@covers("history-expired")
async def check_history_expired(lab: Lab) -> None:
    run, reference = await resume_run(lab, "history-expired")
    assert run.statuses == [200, 204]
    assert run.datas == reference[:5]
    assert sum(lab.mock_requests.values()) == 2
    end = await lab.end(run.connections[1].request_id or "")
    assert (end["status"], end["bytes"]) == (204, 0)


# --------------------------------------------------------------------------- content


def fixture_text(lab: Lab, stem: str) -> str:
    """The text of the scenario's own mock fixture."""
    text = lab.scenarios[stem].mock[0].text
    assert text is not None
    return text


def chat_calls(run: ChatRun) -> tuple[list[int], dict[int, str]]:
    """The call index of each argument fragment the openai SDK yielded, in order, and
    each call's arguments joined."""
    order: list[int] = []
    calls: dict[int, str] = {}
    for chunk in run.chunks:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            fragment = call.function.arguments if call.function else None
            if fragment:
                order.append(call.index)
                calls[call.index] = calls.get(call.index, "") + fragment
    return order, calls


async def tool_inputs(lab: Lab, scenario: str) -> list[Any]:
    """The anthropic SDK's final message's tool inputs (parsed by the SDK)."""
    messages = await stream_messages(lab.anthropic(), scenario)
    assert messages.final is not None
    return [b.input for b in messages.final.content if b.type == "tool_use"]


@covers("emoji-split-in-grapheme")
async def check_emoji_split_in_grapheme(lab: Lab) -> None:
    text = fixture_text(lab, "emoji-split-in-grapheme")
    run = await stream_chat(lab.openai(), "emoji-split-in-grapheme")
    assert run.text == text  # the SDK joins the pieces back: exactly the text
    for cluster in ("👍🏽", "👩\u200d👩\u200d👧", "e\u0301", "🇫🇷"):
        assert not any(cluster in delta for delta in run.deltas), cluster
    assert "👍" in run.deltas[run.deltas.index("🏽!") - 1]  # the tone came alone, later
    end = await lab.end(run.request_id)
    assert end["integrity"] == "intact"
    assert end["answer"]["sound"] is True
    messages = await stream_messages(lab.anthropic(), "emoji-split-in-grapheme")
    assert messages.final_text == text
    assert "🏽!" in messages.deltas


@covers("moderation-phrase-split")
async def check_moderation_phrase_split(lab: Lab) -> None:
    text = fixture_text(lab, "moderation-phrase-split")
    phrase = "ignore previous instructions"
    run = await stream_chat(lab.openai(), "moderation-phrase-split")
    assert run.text == text
    # A scanner of each delta misses it; a scanner of the accumulated text finds it.
    assert not any(phrase in delta for delta in run.deltas)
    assert phrase in run.text
    assert len(run.deltas) == 3  # upstream: one delta; now the phrase in three pieces
    messages = await stream_messages(lab.anthropic(), "moderation-phrase-split")
    assert messages.final_text == text
    assert not any(phrase in delta for delta in messages.deltas)
    responses = await stream_responses(lab.openai(), "moderation-phrase-split")
    assert "".join(responses.deltas) == responses.final_text == text
    assert not any(phrase in delta for delta in responses.deltas)
    assert responses.sequence == list(range(len(responses.sequence)))  # renumbered


@covers("markdown-fence-across-deltas")
async def check_markdown_fence_across_deltas(lab: Lab) -> None:
    text = fixture_text(lab, "markdown-fence-across-deltas")
    run = await stream_chat(lab.openai(), "markdown-fence-across-deltas")
    assert run.text == text
    opening = next(i for i, d in enumerate(run.deltas) if "`" in d)
    assert run.deltas[opening : opening + 3] == ["`", "`", "`"]  # one backtick each
    closing = next(i for i, d in enumerate(run.deltas) if "```" in d)
    assert closing - opening > 10  # closed many deltas later
    messages = await stream_messages(lab.anthropic(), "markdown-fence-across-deltas")
    assert messages.final_text == text


@covers("empty-deltas")
async def check_empty_deltas(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "empty-deltas")
    assert run.text == reference.text
    contents = [c.choices[0].delta.content for c in run.chunks if c.choices]
    assert contents.count("") == 1 + 2 * len(reference.deltas)  # the role chunk's, and 2 each
    messages = await stream_messages(lab.anthropic(), "empty-deltas")
    assert messages.final_text == (await stream_messages(lab.anthropic(), None)).final_text
    assert messages.deltas.count("") == 2 * (len(messages.deltas) // 3)


@covers("tool-args-fragmented")
async def check_tool_args_fragmented(lab: Lab) -> None:
    fixture = lab.scenarios["tool-args-fragmented"].mock[0]
    arguments = fixture.tool_calls[0].argument_object
    run = await stream_chat(lab.openai(), "tool-args-fragmented")
    _, calls = chat_calls(run)
    assert json.loads(calls[0]) == arguments
    fragments = []
    for c in run.chunks:
        if c.choices and c.choices[0].delta.tool_calls:
            function = c.choices[0].delta.tool_calls[0].function
            assert function is not None
            fragments.append(function.arguments)
    assert any(f and f.endswith("\\") for f in fragments)  # between \ and what it escapes
    assert fragments[1:4] == ['{"', "c", "ity"]  # inside the key "city"
    assert await tool_inputs(lab, "tool-args-fragmented") == [arguments]
    end = await lab.end(run.request_id)
    assert end["integrity"] == "intact"


@covers("two-tool-calls-interleaved")
async def check_two_tool_calls_interleaved(lab: Lab) -> None:
    fixture = lab.scenarios["two-tool-calls-interleaved"].mock[0]
    expected = [call.argument_object for call in fixture.tool_calls]
    run = await stream_chat(lab.openai(), "two-tool-calls-interleaved")
    order, calls = chat_calls(run)
    assert order[:4] == [0, 1, 0, 1]
    assert [json.loads(calls[i]) for i in sorted(calls)] == expected
    assert await tool_inputs(lab, "two-tool-calls-interleaved") == expected
    end = await lab.end(run.request_id)
    assert (end["integrity"], end["answer"]["sound"]) == ("intact", True)


@covers("cumulative-snapshots")
async def check_cumulative_snapshots(lab: Lab) -> None:
    client = lab.openai()
    reference = await stream_chat(client, None)
    run = await stream_chat(client, "cumulative-snapshots")
    # Each delta is the text so far: an appender shows it many times over, the last
    # snapshot is the answer.
    assert run.deltas[-1] == reference.text
    assert all(b.startswith(a) for a, b in zip(run.deltas, run.deltas[1:], strict=False))
    assert run.text != reference.text
    end = await lab.end(run.request_id)
    assert end["integrity"] == "intact"  # what each event stands for
    assert (end["answer"]["sound"], end["answer"]["defect"]) == (False, "snapshot")
    messages = await stream_messages(lab.anthropic(), "cumulative-snapshots")
    assert messages.deltas[-1] == (await stream_messages(lab.anthropic(), None)).final_text


# --------------------------------------------------------------------------- bedrock


def bedrock_events(url: str, scenario: str | None) -> tuple[str | None, list[Any], str]:
    """boto3's ``converse_stream`` through the proxy with dummy credentials (the scenario
    asked for after signing): what it raised (its class, and its code if any), the
    events it yielded, and the request id."""
    import boto3
    from botocore.config import Config

    runtime = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        config=Config(retries={"max_attempts": 1}),
    )
    if scenario is not None:
        runtime.meta.events.register(
            "before-send.bedrock-runtime.*",
            lambda request, **_: request.headers.__setitem__("X-Chaos-Scenario", scenario),
        )
    events: list[Any] = []
    reply = runtime.converse_stream(
        modelId="anthropic.claude-3-5-haiku-20241022-v1:0",
        messages=[{"role": "user", "content": [{"text": "Plan my week."}]}],
    )
    request_id = reply["ResponseMetadata"]["HTTPHeaders"]["x-chaos-request-id"]
    try:
        for event in reply["stream"]:
            events.append(event)
    except Exception as exc:  # what boto3 raised is what is checked
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        return f"{type(exc).__name__}({code})" if code else type(exc).__name__, events, request_id
    return None, events, request_id


@covers("bedrock-split-prelude")
async def check_bedrock_split_prelude(lab: Lab) -> None:
    _, reference, _ = await asyncio.to_thread(bedrock_events, lab.url, None)
    error, events, request_id = await asyncio.to_thread(
        bedrock_events, lab.url, "bedrock-split-prelude"
    )
    assert (error, events) == (None, reference)
    frames = lab.log.frames(request_id)
    assert [f["size"] for f in frames[:4]] == [5, 7, 5, 7]
    assert {f["size"] for f in frames} <= {1, 2, 3, 4, 5, 6, 7}
    # OpenAI chat gets the same small reads, and the same text.
    client = lab.openai()
    assert (await stream_chat(client, "bedrock-split-prelude")).dumps() == (
        await stream_chat(client, None)
    ).dumps()


@covers("bedrock-bad-crc")
async def check_bedrock_bad_crc(lab: Lab) -> None:
    _, reference, _ = await asyncio.to_thread(bedrock_events, lab.url, None)
    error, events, request_id = await asyncio.to_thread(bedrock_events, lab.url, "bedrock-bad-crc")
    assert error == "ChecksumMismatch"  # botocore.eventstream's: not a ClientError
    assert events == reference[:3]  # messageStart and two deltas, then the bad one
    end = await lab.end(request_id)
    assert (end["provider"], end["format"]) == ("bedrock", "eventstream")
    assert end["faults_applied"] == {"corrupt": 1}  # (the rest may be sent or not: a race)


@covers("bedrock-throttling-mid-stream")
async def check_bedrock_throttling_mid_stream(lab: Lab) -> None:
    _, reference, _ = await asyncio.to_thread(bedrock_events, lab.url, None)
    error, events, request_id = await asyncio.to_thread(
        bedrock_events, lab.url, "bedrock-throttling-mid-stream"
    )
    assert error == "EventStreamError(throttlingException)"
    assert events == reference[:3]
    end = await lab.end(request_id)
    assert end["outcome"] == "cut" and end["faults_applied"] == {"inject": 1, "cut": 1}
    # OpenAI chat: its own error event, then the same clean end.
    with pytest.raises(openai.APIError):
        await stream_chat(lab.openai(), "bedrock-throttling-mid-stream", ChatRun())


# --------------------------------------------------------------------------- realtime


async def realtime(lab: Lab, scenario: str, wait: float = 5.0) -> tuple[Seen, dict[str, Any]]:
    """The ``websockets`` client through the proxy's WebSocket relay under ``scenario``
    (tests/support/realtime_clients.py): what it saw, and the connection's end line."""
    seen = await with_websockets(lab.url.replace("http://", "ws://"), scenario, wait)
    ends = [e for e in await lab.settled() if e["scenario"] == scenario]
    assert ends, f"no response_end for {scenario}"
    return seen, ends[-1]


@covers("realtime-fragmented-utf8")
async def check_realtime_fragmented_utf8(lab: Lab) -> None:
    seen, end = await realtime(lab, "realtime-fragmented-utf8")
    assert (seen.raised, seen.done) == (None, True)
    assert seen.text == "Café crème, 日本語, and 👍🏽 for the realtime stream."
    assert (end["outcome"], end["integrity"]) == ("completed", "intact")
    fragmented = [f for f in lab.log.frames(end["request_id"]) if "fragments" in f]
    assert fragmented and end["faults_applied"] == {"fragment": len(fragmented)}


@covers("realtime-close-1011-mid-response")
async def check_realtime_close_1011_mid_response(lab: Lab) -> None:
    seen, end = await realtime(lab, "realtime-close-1011-mid-response")
    assert (seen.raised, seen.code, seen.reason, seen.done) == (
        "ConnectionClosedError",
        1011,
        "internal server error",
        False,
    )
    assert seen.types.count("response.output_text.delta") == 2
    assert mock_text().startswith(seen.text)
    assert (end["outcome"], end["integrity"]) == ("cut", "broken")


@covers("realtime-no-close-frame")
async def check_realtime_no_close_frame(lab: Lab) -> None:
    seen, end = await realtime(lab, "realtime-no-close-frame")
    assert (seen.raised, seen.code, seen.done) == ("ConnectionClosedError", 1006, False)
    assert seen.text == mock_text()  # every delta came; response.done did not
    assert (end["outcome"], end["integrity"]) == ("cut", "broken")


@covers("realtime-duplicated-delta")
async def check_realtime_duplicated_delta(lab: Lab) -> None:
    seen, end = await realtime(lab, "realtime-duplicated-delta")
    assert (seen.raised, seen.done) == (None, True)
    assert seen.types.count("response.output_text.delta") == 5  # four tokens, one twice
    assert len(seen.text) > len(mock_text())
    assert (end["outcome"], end["integrity"]) == ("completed", "altered")


@covers("realtime-missing-done")
async def check_realtime_missing_done(lab: Lab) -> None:
    seen, end = await realtime(lab, "realtime-missing-done", wait=1.0)
    assert (seen.raised, seen.done) == ("TimeoutError", False)
    assert seen.text == mock_text()
    assert "response.done" not in seen.types
    assert end["integrity"] != "intact"
