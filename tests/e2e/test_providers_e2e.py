"""One scenario, the same meaning for every provider: end to end with the official SDKs.

Each scenario names events by kind (``delta``, ``terminal``, ``start``, ``error``), so
the same YAML applies to OpenAI Chat Completions and Responses, Anthropic Messages,
Gemini and Ollama. Here every one of them runs through the live proxy in front of the
mock upstream, with the provider's official client (``openai``, ``anthropic``,
``google-genai``, ``ollama``), and the tests assert what each client observed. The
results are written down in docs/providers.md, "What each client observes".

The mock is deterministic for a given request body, so the same SDK call with
``X-Chaos-Scenario: none`` (passthrough) is the reference a faulted run is compared
with: expected texts are derived from it and from the proxy's frame log, never typed
in. Timings are measured at the client with ``time.monotonic`` (measurement only;
nothing here sleeps to synchronise).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import aiohttp
import anthropic
import httpx
import httpx2
import ollama
import openai
import pytest
from anthropic.types import RawContentBlockDeltaEvent, TextDelta
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from openai.types.responses import ResponseErrorEvent, ResponseTextDeltaEvent

from tests.support.proxies import LogCapture, ProxyFactory

#: Mock knobs, per request: short answers, no pacing.
TOKENS = 8
MOCK_HEADERS = {"X-Mock-Tokens": str(TOKENS), "X-Mock-Interval-Ms": "0"}
PROMPT = "Plan my week, please."
#: Scheduling slack for gaps measured at the client (the proxy's own log is exact).
STALL = 0.3

SCENARIOS = {
    "drop-third-delta": "faults:\n  - drop: {kind: delta, nth: 3}\n",
    "duplicate-terminal": "faults:\n  - duplicate: {kind: terminal}\n",
    "cut-before-terminal-abort": "faults:\n  - cut: {before: terminal, how: abort}\n",
    "cut-before-terminal-close": "faults:\n  - cut: {before: terminal, how: close}\n",
    "error-after-2": "faults:\n  - inject: {after: 2, event: {kind: error}}\n",
    "stall-after-start": "faults:\n  - stall: {after: start, duration: 300ms}\n",
}

# google-genai subclasses aiohttp.ClientSession, which aiohttp warns about; not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession:DeprecationWarning"
)


# --------------------------------------------------------------------------- observing


@dataclass
class Observed:
    """What one official client yielded (or raised) for one streamed request."""

    #: What the client yielded, one label per item (its event type, or "chunk").
    events: list[str] = field(default_factory=list)
    #: time.monotonic() when the request was about to be sent, and when each item was
    #: yielded.
    started: float = 0.0
    arrivals: list[float] = field(default_factory=list)
    #: The non-empty text pieces, in the order the client yielded them.
    deltas: list[str] = field(default_factory=list)
    #: Items that told the client the answer is finished (see Client.finish_is_terminal).
    finishes: int = 0
    #: Messages of in-stream errors the client yielded as items instead of raising.
    error_events: list[str] = field(default_factory=list)
    #: What the client raised while streaming.
    error: Exception | None = None
    #: The text of the SDK's own final object (stream helpers only), or what getting it raised.
    final_text: str | None = None
    final_error: Exception | None = None
    #: The proxy's view of this request: its id, frame lines and response_end line.
    request_id: str = ""
    frames: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.deltas)

    def saw(
        self, label: str, text: str | None = None, *, finish: bool = False, error: str | None = None
    ) -> None:
        self.arrivals.append(time.monotonic())
        self.events.append(label)
        if text:
            self.deltas.append(text)
        self.finishes += finish
        if error is not None:
            self.error_events.append(error)

    async def final(self, get: Callable[[], Awaitable[str | None]]) -> None:
        try:
            self.final_text = await get()
        except Exception as exc:
            self.final_error = exc


Stream = Callable[[str, dict[str, str], Observed], Awaitable[None]]


async def openai_chat(url: str, headers: dict[str, str], seen: Observed) -> None:
    async with openai.AsyncOpenAI(
        base_url=url + "/v1", api_key="test", max_retries=0, default_headers=headers
    ) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}], stream=True
        )
        async for chunk in stream:
            choice = chunk.choices[0] if chunk.choices else None
            seen.saw(
                "chunk",
                choice.delta.content if choice else None,
                finish=bool(choice and choice.finish_reason),
            )


async def openai_responses(url: str, headers: dict[str, str], seen: Observed) -> None:
    async with (
        openai.AsyncOpenAI(
            base_url=url + "/v1", api_key="test", max_retries=0, default_headers=headers
        ) as client,
        client.responses.stream(model="gpt-4o-mini", input=PROMPT) as stream,
    ):
        async for event in stream:
            seen.saw(
                event.type,
                event.delta if isinstance(event, ResponseTextDeltaEvent) else None,
                finish=event.type == "response.completed",
                error=event.message if isinstance(event, ResponseErrorEvent) else None,
            )

        async def output_text() -> str:
            return (await stream.get_final_response()).output_text

        await seen.final(output_text)


async def anthropic_messages(url: str, headers: dict[str, str], seen: Observed) -> None:
    async with (
        anthropic.AsyncAnthropic(
            base_url=url, api_key="test", max_retries=0, default_headers=headers
        ) as client,
        client.messages.stream(
            model="claude-haiku-4-5",
            max_tokens=256,
            messages=[{"role": "user", "content": PROMPT}],
        ) as stream,
    ):
        async for event in stream:
            text = None
            if isinstance(event, RawContentBlockDeltaEvent) and isinstance(event.delta, TextDelta):
                text = event.delta.text
            seen.saw(event.type, text, finish=event.type == "message_stop")

        async def final_text() -> str:
            message = await stream.get_final_message()
            return "".join(b.text for b in message.content if b.type == "text")

        await seen.final(final_text)


async def gemini(url: str, headers: dict[str, str], seen: Observed) -> None:
    client = genai.Client(
        api_key="test", http_options=genai_types.HttpOptions(base_url=url, headers=headers)
    )
    try:
        stream = await client.aio.models.generate_content_stream(
            model="gemini-2.0-flash", contents=PROMPT
        )
        async for chunk in stream:
            finish = bool(chunk.candidates and chunk.candidates[0].finish_reason)
            seen.saw("chunk", chunk.text, finish=finish)
    finally:
        await client.aio.aclose()


async def ollama_chat(url: str, headers: dict[str, str], seen: Observed) -> None:
    async with ollama.AsyncClient(host=url, headers=headers) as client:
        parts = await client.chat(
            model="llama3.2", messages=[{"role": "user", "content": PROMPT}], stream=True
        )
        async for part in parts:
            seen.saw("done" if part.done else "chunk", part.message.content, finish=bool(part.done))


async def ollama_generate(url: str, headers: dict[str, str], seen: Observed) -> None:
    async with ollama.AsyncClient(host=url, headers=headers) as client:
        async for part in await client.generate(model="llama3.2", prompt=PROMPT, stream=True):
            seen.saw("done" if part.done else "chunk", part.response, finish=bool(part.done))


@dataclass(frozen=True)
class Client:
    """One official client, and the facts about it the scenarios below depend on."""

    name: str
    #: The profile the proxy must detect for this client's requests.
    provider: str
    stream: Stream
    #: Is the item the client reports as "finished" the profile's terminal event? Not for
    #: OpenAI chat: its finish chunk (finish_reason) is `other`; the terminal is [DONE],
    #: which the SDK consumes without yielding it.
    finish_is_terminal: bool
    #: Where the text of the SDK's final object comes from: assembled from the deltas,
    #: sent whole in the terminal event, or no final object at all.
    final: Literal["deltas", "terminal"] | None
    #: What the client raises when the connection is aborted before the terminal event.
    abort_error: type[Exception]
    #: What it raises on the provider's in-stream error event (None: it yields the event).
    error_raised: type[Exception] | None
    #: Whether the profile has a `start` kind for this stream.
    has_start: bool


CLIENTS = [
    Client(
        "openai-chat",
        "openai-chat",
        openai_chat,
        finish_is_terminal=False,
        final=None,
        abort_error=openai.APIConnectionError,
        error_raised=openai.APIError,
        has_start=True,
    ),
    Client(
        "openai-responses",
        "openai-responses",
        openai_responses,
        finish_is_terminal=True,
        final="terminal",
        abort_error=openai.APIConnectionError,
        error_raised=None,
        has_start=True,
    ),
    Client(
        "anthropic",
        "anthropic",
        anthropic_messages,
        finish_is_terminal=True,
        final="deltas",
        # anthropic >= 2.17 wraps the transport error (earlier: the bare httpx2 one).
        abort_error=anthropic.APIConnectionError,
        error_raised=anthropic.APIStatusError,
        has_start=True,
    ),
    Client(
        "gemini",
        "gemini",
        gemini,
        finish_is_terminal=True,
        final=None,
        abort_error=aiohttp.ClientPayloadError,
        error_raised=genai_errors.ServerError,
        has_start=False,
    ),
    Client(
        "ollama-chat",
        "ollama",
        ollama_chat,
        finish_is_terminal=True,
        final=None,
        abort_error=httpx.RemoteProtocolError,
        error_raised=ollama.ResponseError,
        has_start=False,
    ),
]
# /api/generate: the same facts as /api/chat.
CLIENTS.append(replace(CLIENTS[-1], name="ollama-generate", stream=ollama_generate))


def clients(*, has_start: bool | None = None) -> pytest.MarkDecorator:
    """Parametrize a test over CLIENTS (those with or without a `start` kind)."""
    chosen = [c for c in CLIENTS if has_start is None or c.has_start == has_start]
    return pytest.mark.parametrize("client", chosen, ids=[c.name for c in chosen])


@dataclass
class Lab:
    url: str
    log: LogCapture

    async def observe(self, client: Client, scenario: str) -> Observed:
        """Run one streamed request through the proxy with ``client``: what it saw,
        and the proxy's frame log of it. ``none`` is the passthrough."""
        seen = Observed()
        before = len(self.log.lines)
        seen.started = time.monotonic()
        try:
            await client.stream(self.url, {**MOCK_HEADERS, "X-Chaos-Scenario": scenario}, seen)
        except Exception as exc:
            seen.error = exc
        # Exactly one request reached the proxy: no client retried.
        [request] = [ln for ln in self.log.lines[before:] if ln["event"] == "request"]
        assert request["scenario"] == (None if scenario == "none" else scenario)
        seen.request_id = request["request_id"]
        seen.end = await self.log.wait_end(seen.request_id)
        seen.frames = self.log.frames(seen.request_id)
        return seen

    async def reference(self, client: Client) -> Observed:
        """The same request, passed through untouched."""
        seen = await self.observe(client, "none")
        assert seen.error is None and seen.final_error is None
        assert len(seen.deltas) == TOKENS
        assert seen.finishes == 1
        assert seen.end["outcome"] == "completed"
        return seen


@pytest.fixture
async def lab(make_proxy: ProxyFactory, log_capture: LogCapture) -> Lab:
    proxy = await make_proxy(scenarios=SCENARIOS, content=True)
    return Lab(proxy.url, log_capture)


def deltas_sent(frames: list[dict[str, Any]]) -> int:
    """How many upstream delta events the proxy wrote."""
    return sum("delta" in f["kinds"] for f in frames)


def injected_message(frame: dict[str, Any]) -> str:
    """The error message inside an injected error event, as the proxy logged it."""
    lines = [line for line in frame["data"].splitlines() if line.strip()]
    if any(line.startswith("data:") for line in lines):  # SSE: the data lines
        lines = [line[5:].strip() for line in lines if line.startswith("data:")]
    body = json.loads("\n".join(lines))
    error = body.get("error", body)
    message = error["message"] if isinstance(error, dict) else error
    assert isinstance(message, str)
    return message


# --------------------------------------------------------------------------- drop


@clients()
async def test_drop_third_delta_loses_exactly_that_piece(lab: Lab, client: Client) -> None:
    reference = await lab.reference(client)
    run = await lab.observe(client, "drop-third-delta")
    assert run.error is None and run.final_error is None
    assert run.deltas == reference.deltas[:2] + reference.deltas[3:]
    assert run.finishes == 1
    assert run.end["provider"] == client.provider
    assert run.end["faults_applied"] == {"drop": 1}
    assert run.end["events_out"] == run.end["events_in"] - 1
    if client.final == "deltas":  # anthropic: the final message is assembled from deltas
        assert run.final_text == run.text
    elif client.final == "terminal":  # responses: response.completed carries the whole text
        assert run.final_text == reference.text
    else:
        assert run.final_text is None


# --------------------------------------------------------------------------- duplicate


@clients()
async def test_duplicate_terminal(lab: Lab, client: Client) -> None:
    reference = await lab.reference(client)
    run = await lab.observe(client, "duplicate-terminal")
    terminals = [f for f in run.frames if "terminal" in f["kinds"]]
    assert len(terminals) == 2
    assert terminals[0]["events"] == terminals[1]["events"]
    assert terminals[0]["size"] == terminals[1]["size"]
    assert terminals[1]["faults"] == ["duplicate"]
    assert run.end["faults_applied"] == {"duplicate": 1}
    assert run.end["provider"] == client.provider
    # No client complains about the second terminal event.
    assert run.error is None and run.final_error is None
    # Those that yield the terminal event yield it twice; the openai chat SDK stops at the
    # first [DONE] and never yields either.
    assert run.finishes == (2 if client.finish_is_terminal else 1)
    # Gemini's terminal chunk carries the last text piece: the client gets it twice.
    repeated = reference.deltas[-1:] if "delta" in terminals[0]["kinds"] else []
    assert run.deltas == reference.deltas + repeated
    assert (client.provider == "gemini") == bool(repeated)
    if client.final is not None:  # the SDK's final object is unaffected
        assert run.final_text == reference.text


# --------------------------------------------------------------------------- cut


def assert_cut_before_terminal(run: Observed, reference: Observed, client: Client) -> None:
    """The stream was cut just before its terminal event: none was written, and everything
    before it arrived."""
    assert run.end["outcome"] == "cut"
    assert not [f for f in run.frames if "terminal" in f["kinds"]]
    assert run.events == reference.events[: len(reference.events) - client.finish_is_terminal]
    assert run.deltas == reference.deltas[: deltas_sent(run.frames)]
    # No terminal seen: no response.completed, message_stop, done:true or finishReason.
    # OpenAI chat still saw its finish chunk (it precedes [DONE]): it cannot tell.
    assert run.finishes == (0 if client.finish_is_terminal else 1)
    if client.provider == "gemini":  # its terminal is the last text chunk: that piece is lost
        assert run.deltas == reference.deltas[:-1]
    else:
        assert run.deltas == reference.deltas


@clients()
async def test_cut_before_terminal_abort(lab: Lab, client: Client) -> None:
    reference = await lab.reference(client)
    run = await lab.observe(client, "cut-before-terminal-abort")
    assert_cut_before_terminal(run, reference, client)
    assert run.end["faults_applied"] == {"cut": 1}
    # Every client notices an aborted body, each with its own (often unwrapped) class.
    assert type(run.error) is client.abort_error, repr(run.error)
    if isinstance(run.error, openai.APIConnectionError | anthropic.APIConnectionError):
        assert type(run.error.__cause__) is httpx2.RemoteProtocolError
    if isinstance(run.error, aiohttp.ClientPayloadError):
        assert "not completed" in str(run.error)
    else:
        assert "incomplete chunked read" in str(run.error.__cause__ or run.error)


@clients()
async def test_cut_before_terminal_close(lab: Lab, client: Client) -> None:
    reference = await lab.reference(client)
    run = await lab.observe(client, "cut-before-terminal-close")
    assert_cut_before_terminal(run, reference, client)
    # A clean end of body: no client raises while streaming; the stream just ends.
    assert run.error is None
    if client.final == "terminal":  # only the Responses helper notices
        assert type(run.final_error) is RuntimeError
        assert "response.completed" in str(run.final_error)
    elif client.final == "deltas":  # anthropic assembles a final message regardless
        assert run.final_error is None and run.final_text == reference.text


# --------------------------------------------------------------------------- inject


@clients()
async def test_injected_provider_error(lab: Lab, client: Client) -> None:
    reference = await lab.reference(client)
    run = await lab.observe(client, "error-after-2")
    assert run.end["faults_applied"] == {"inject": 1}
    assert run.end["outcome"] == "completed"
    [injected] = [f for f in run.frames if f["faults"] == ["inject"]]
    assert "error" in injected["kinds"]
    position = run.frames.index(injected)
    before = [e for f in run.frames[:position] for e in f["events"]]
    assert before == [1, 2]
    message = injected_message(injected)
    if client.error_raised is None:
        # Responses: the error is an event like any other; streaming carries on and the
        # final response is complete. The caller must look for `error` events itself.
        assert run.error is None and run.final_error is None
        assert run.error_events == [message]
        assert run.events.index("error") == 2
        assert run.deltas == reference.deltas
        assert run.final_text == reference.text
    else:
        assert type(run.error) is client.error_raised, repr(run.error)
        assert message in str(run.error)
        assert run.events == reference.events[: len(before)]  # raised right at the error
        assert run.deltas == reference.deltas[: deltas_sent(run.frames[:position])]
        assert run.finishes == 0
    # What each error carries. A retry policy keyed on the status sees 200 (anthropic:
    # the stream's own HTTP status) or -1 (ollama: no status); only Gemini's has 503.
    if isinstance(run.error, anthropic.APIStatusError):
        assert isinstance(run.error.body, dict)
        assert run.error.body["error"]["type"] == "overloaded_error"
        assert run.error.status_code == 200
    if isinstance(run.error, genai_errors.APIError):
        assert (run.error.code, run.error.status) == (503, "UNAVAILABLE")
    if isinstance(run.error, ollama.ResponseError):
        assert run.error.status_code == -1
    if type(run.error) is openai.APIError:
        assert run.error.type == "server_error"


# --------------------------------------------------------------------------- stall


@clients(has_start=True)
async def test_stall_after_start(lab: Lab, client: Client) -> None:
    reference = await lab.reference(client)
    run = await lab.observe(client, "stall-after-start")
    assert run.error is None and run.final_error is None
    assert run.deltas == reference.deltas
    assert run.end["faults_applied"] == {"stall": 1}
    assert "start" in run.frames[0]["kinds"]
    assert run.frames[1]["t_ms"] - run.frames[0]["t_ms"] >= STALL * 1000
    # What came after the stall came a stall after the request at least (a gap from the
    # first item would be shorter when the client was late to read that item).
    assert run.arrivals[1] - run.started >= STALL
    gaps = [b - a for a, b in itertools.pairwise(run.arrivals)]
    assert max(gaps) == gaps[0]


@clients(has_start=False)
async def test_stall_after_start_without_a_start_is_skipped(lab: Lab, client: Client) -> None:
    reference = await lab.reference(client)
    run = await lab.observe(client, "stall-after-start")
    assert run.error is None
    assert run.deltas == reference.deltas
    assert run.end["faults_applied"] == {}
    [skipped] = run.end["faults_skipped"]
    assert skipped["fault"] == "stall"
    assert "start" in skipped["reason"]
    assert not [f for f in run.frames if "start" in f["kinds"]]
