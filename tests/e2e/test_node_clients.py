"""Node clients through the live proxy: the ``openai`` package (Chat Completions and the
Responses stream helper), ``@anthropic-ai/sdk`` (the ``messages.stream()`` helper), the
Vercel ``ai`` SDK with ``@ai-sdk/openai``, and npm ``eventsource``.

Each client is a small script in tests/node/ (see lib.mjs there) that streams one answer
through the proxy, with the scenario named in ``X-Chaos-Scenario``; the runs go through
one Node process (tests/node/runner.mjs, ``node_runner``), each with its own settings,
connection pool and deadline. A run gives one JSON line: the text it assembled, what it
yielded, its error (the cause chain), whether it ended, and whether it was still waiting
when the run's hard deadline passed (``hung``).
The assertions are what each client was seen to do, compared with the same client's
passthrough run (the mock answers identical requests with identical bytes); they are the
"Node" cells of docs/scenario-library.md and docs/providers.md.

Skipped when ``node``/``npm`` or ``tests/node/node_modules`` is absent; ``.ci/run``
installs them with ``npm ci --prefix tests/node``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaosproxy import ChaosProxy
from tests.support.node import NodeRunner
from tests.support.repo import LIBRARY

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "tests" / "node"
CLIENTS = ("openai-chat", "openai-responses", "anthropic", "ai-sdk", "eventsource")
#: The hard deadline of one run, and the ``timeout`` the SDKs are given: generous, except
#: under hang-after-last-event, where it is shorter than the deadline (a client that
#: outlives it shows that the SDK's timeout does not cover reading the body).
DEADLINE_MS = 8000
SDK_TIMEOUT_MS = 30000
HANG_DEADLINE_MS = 4000
HANG_SDK_TIMEOUT_MS = 1500
UTF8_BOM = b"\xef\xbb\xbf"


def _why_skip() -> str | None:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH (the Node client tests need Node >= 20 and npm)"
    if not (NODE_DIR / "node_modules").is_dir():
        return (
            "tests/node/node_modules is absent: run "
            "`npm ci --prefix tests/node --no-audit --no-fund` (as .ci/run does)"
        )
    return None


_SKIP = _why_skip()
pytestmark = [pytest.mark.node, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]


Run = dict[str, Any]


class Lab:
    def __init__(self, proxy: ChaosProxy, node: NodeRunner) -> None:
        self.proxy = proxy
        self.node = node
        self._passthrough: dict[str, Run] = {}

    def run(
        self,
        client: str,
        scenario: str,
        deadline_ms: int = DEADLINE_MS,
        sdk_timeout_ms: int = SDK_TIMEOUT_MS,
    ) -> Run:
        settings = {
            "CHAOS_URL": self.proxy.url,
            "CHAOS_SCENARIO": scenario,
            "CHAOS_TIMEOUT_MS": str(deadline_ms),
            "CHAOS_SDK_TIMEOUT_MS": str(sdk_timeout_ms),
        }
        # (the run's own deadline comes first)
        run = self.node.run(client, settings, timeout=deadline_ms / 1000 + 30)
        assert run["client"] == client and run["scenario"] == scenario
        return run

    def runs(self, scenario: str, *args: int) -> dict[str, Run]:
        """Every client under ``scenario``, concurrently."""
        with ThreadPoolExecutor(len(CLIENTS)) as pool:
            futures = {c: pool.submit(self.run, c, scenario, *args) for c in CLIENTS}
            return {c: f.result() for c, f in futures.items()}

    def ref(self, client: str) -> Run:
        """The client's passthrough run (no scenario), computed once."""
        if not self._passthrough:
            self._passthrough = self.runs("none")
        return self._passthrough[client]


@pytest.fixture(scope="module")
def lab(node_runner: NodeRunner) -> Iterator[Lab]:
    with ChaosProxy(scenarios=[LIBRARY], mock_tokens=12, mock_interval=0.002) as proxy:
        yield Lab(proxy, node_runner)


def texts(run: Run) -> list[str]:
    return [e for e in run["events"] if e.startswith("text:")]


def without(events: list[str], *names: str) -> list[str]:
    return [e for e in events if e not in names]


def nth_text_index(events: list[str], n: int) -> int:
    return [i for i, e in enumerate(events) if e.startswith("text:")][n - 1]


def clean(run: Run) -> None:
    assert run["error"] is None and run["ended"] and not run["hung"], run


def error_chain(run: Run) -> list[tuple[str, str]]:
    """(name, message or code) of the error and each of its causes, outermost first."""
    out, err = [], run["error"]
    while err:
        out.append((err["name"], err.get("code") or err["message"]))
        err = err.get("cause")
    return out


# --------------------------------------------------------------------------- scenarios


def test_passthrough(lab: Lab) -> None:
    for client in CLIENTS:
        run = lab.ref(client)
        clean(run)
        assert len(texts(run)) == 12 and run["text"] == "".join(t[5:] for t in texts(run))
    assert lab.ref("openai-chat")["events"][0] == "role:assistant"
    assert lab.ref("openai-chat")["events"][-1] == "finish:stop"
    assert lab.ref("eventsource")["events"] == [*lab.ref("openai-chat")["events"], "[DONE]"]
    assert lab.ref("openai-responses")["events"][-1] == "response.completed"
    assert lab.ref("openai-responses")["final_text"] == lab.ref("openai-responses")["text"]
    assert lab.ref("anthropic")["events"][-1] == "message_stop"
    assert lab.ref("anthropic")["final_text"] == lab.ref("anthropic")["text"]
    assert lab.ref("ai-sdk")["events"][-3:] == ["text-end", "finish-step", "finish:stop"]


def test_utf8_bom_is_stripped_by_every_node_client(lab: Lab) -> None:
    raw = httpx.post(
        lab.proxy.url + "/v1/chat/completions",
        json={"model": "gpt-4o-mini", "stream": True, "messages": []},
        headers={"X-Chaos-Scenario": "utf8-bom"},
    )
    assert raw.content.startswith(UTF8_BOM + b"data: ")  # the fault is there
    for client, run in lab.runs("utf8-bom").items():
        clean(run)
        # Unlike every Python client tried, nothing is lost: the first event is whole.
        assert run["events"] == lab.ref(client)["events"], client
        assert run["text"] == lab.ref(client)["text"], client


@pytest.mark.parametrize(
    "scenario",
    [
        "hostile-boundaries",
        "all-events-in-one-read",
        "keepalive-comments",
        "crlf-line-endings",
        "cr-line-endings",
    ],
)
def test_split_reads_change_nothing(lab: Lab, scenario: str) -> None:
    for client, run in lab.runs(scenario).items():
        clean(run)
        assert run["events"] == lab.ref(client)["events"], client
        assert run.get("final_text") == lab.ref(client).get("final_text"), client


def edited_runs(
    lab: Lab, scenario: str, edit: Callable[[list[str], int], list[str]]
) -> dict[str, Run]:
    """Every client under ``scenario``: each run clean, its events what ``edit`` makes of
    the client's passthrough events and the index of their third text delta."""
    runs = lab.runs(scenario)
    for client, run in runs.items():
        clean(run)
        ref = lab.ref(client)["events"]
        assert run["events"] == edit(ref, nth_text_index(ref, 3)), client
    return runs


def test_duplicate_third_delta_passes_silently(lab: Lab) -> None:
    runs = edited_runs(
        lab,
        "duplicate-third-delta",
        lambda ref, third: [*ref[: third + 1], ref[third], *ref[third + 1 :]],
    )
    # The Responses final text comes from response.completed, so it is right; the
    # anthropic final message is assembled from the deltas, so it has the copy.
    assert runs["openai-responses"]["final_text"] == lab.ref("openai-responses")["text"]
    assert runs["anthropic"]["final_text"] == runs["anthropic"]["text"]
    assert runs["anthropic"]["final_text"] != lab.ref("anthropic")["text"]


def test_drop_third_delta_passes_silently(lab: Lab) -> None:
    runs = edited_runs(
        lab, "drop-third-delta", lambda ref, third: [*ref[:third], *ref[third + 1 :]]
    )
    assert runs["openai-chat"]["events"][-1] == "finish:stop"
    assert runs["openai-responses"]["final_text"] == lab.ref("openai-responses")["text"]
    assert runs["anthropic"]["final_text"] == runs["anthropic"]["text"]


def test_cut_before_terminal_close(lab: Lab) -> None:
    runs = lab.runs("cut-before-terminal-close")
    # Invisible: every chunk, finish_reason included, and a normal end.
    for client in ("openai-chat", "ai-sdk"):
        clean(runs[client])
        assert runs[client]["events"] == lab.ref(client)["events"], client
    # Responses: no response.completed, and yet finalResponse() returns, with the text.
    responses = runs["openai-responses"]
    clean(responses)
    ref = lab.ref("openai-responses")["events"]
    assert responses["events"] == without(ref, "response.completed")
    assert responses["final_text"] == lab.ref("openai-responses")["text"]
    # anthropic: iteration ends quietly without message_stop; finalMessage() throws.
    anth = runs["anthropic"]
    assert anth["events"] == without(lab.ref("anthropic")["events"], "message_stop")
    assert anth["final_iteration_done"] and not anth["ended"] and not anth["hung"]
    assert error_chain(anth) == [
        ("AnthropicError", "stream ended without producing a Message with role=assistant")
    ]
    # eventsource: the end of the body is an error event, readyState CONNECTING (it
    # would reconnect and ask again), with no message.
    es = runs["eventsource"]
    assert es["events"] == [
        *without(lab.ref("eventsource")["events"], "[DONE]"),
        "error(readyState=0)",
    ]
    assert error_chain(es) == [("EventSourceError", "")]


#: What each SDK raises when the socket is reset or closed mid-stream: undici's
#: "terminated", bare from openai chat, wrapped by openai responses, anthropic and ai.
TERMINATED_AS = {
    "openai-chat": "TypeError",
    "openai-responses": "OpenAIError",
    "anthropic": "AnthropicError",
    "ai-sdk": "APICallError",
}


def assert_terminated(runs: dict[str, Run]) -> None:
    """Each SDK of :data:`TERMINATED_AS` raised its error on undici's "terminated"."""
    for client, name in TERMINATED_AS.items():
        run = runs[client]
        assert not run["ended"] and not run["hung"], client
        assert run["error"]["name"] == name and _is_terminated(error_chain(run)), client


def _is_terminated(chain: list[tuple[str, str]]) -> bool:
    """undici's "terminated" TypeError, caused by the reset socket."""
    names = [name for name, _ in chain]
    return (
        ("TypeError", "terminated") in chain
        and names[-1] in {"Error", "SocketError"}
        and (chain[-1][1] in {"ECONNRESET", "UND_ERR_SOCKET"})
    )


def test_cut_before_terminal_reset(lab: Lab) -> None:
    runs = lab.runs("cut-before-terminal-reset")
    for client, run in runs.items():
        assert not run["ended"] and not run["hung"], client
    # openai chat: every chunk, finish_reason included, then undici's bare TypeError,
    # not wrapped in an openai error (no APIConnectionError, unlike the Python SDK).
    chat = runs["openai-chat"]
    assert chat["events"] == lab.ref("openai-chat")["events"]
    assert chat["error"]["name"] == "TypeError" and _is_terminated(error_chain(chat))
    # Responses (same package): wrapped, as an OpenAIError.
    responses = runs["openai-responses"]
    assert responses["events"] == without(
        lab.ref("openai-responses")["events"], "response.completed"
    )
    assert responses["error"]["name"] == "OpenAIError"
    assert _is_terminated(error_chain(responses))
    anth = runs["anthropic"]
    assert anth["events"] == without(lab.ref("anthropic")["events"], "message_stop")
    assert anth["error"]["name"] == "AnthropicError" and _is_terminated(error_chain(anth))
    # ai: thrown from fullStream (no error part), before text-end and finish.
    ai = runs["ai-sdk"]
    assert ai["events"] == lab.ref("ai-sdk")["events"][:-3]
    assert error_chain(ai)[0] == ("APICallError", "Failed to process successful response")
    assert _is_terminated(error_chain(ai))
    es = runs["eventsource"]
    assert es["events"] == [
        *without(lab.ref("eventsource")["events"], "[DONE]"),
        "error(readyState=0)",
    ]
    assert es["error"]["name"] == "EventSourceError" and "terminated" in es["error"]["message"]


def test_hang_after_last_event(lab: Lab) -> None:
    runs = lab.runs("hang-after-last-event", HANG_DEADLINE_MS, HANG_SDK_TIMEOUT_MS)
    # openai chat stops at [DONE] itself; the eventsource script closes on [DONE].
    for client in ("openai-chat", "eventsource"):
        clean(runs[client])
        assert runs[client]["events"] == lab.ref(client)["events"], client
    # The stream helpers got the terminal event and still wait for the end of the body,
    # past their own `timeout` (HANG_SDK_TIMEOUT_MS): it does not cover reading the body.
    for client in ("openai-responses", "anthropic"):
        run = runs[client]
        assert run["hung"] and run["error"] is None and not run["ended"], client
        assert run["events"] == lab.ref(client)["events"], client
        assert run["ms"] >= HANG_DEADLINE_MS > HANG_SDK_TIMEOUT_MS
    # ai: hangs too, and has not yet even emitted text-end / finish-step / finish.
    ai = runs["ai-sdk"]
    assert ai["hung"] and ai["error"] is None
    assert ai["events"] == lab.ref("ai-sdk")["events"][:-3]


def test_truncated_json_delta(lab: Lab) -> None:
    runs = lab.runs("truncated-json-delta")
    first_two = {c: (e := lab.ref(c)["events"])[: nth_text_index(e, 3)] for c in CLIENTS}
    chat = runs["openai-chat"]
    assert chat["events"] == first_two["openai-chat"]
    assert error_chain(chat) == [
        ("SyntaxError", "Error reading response: malformed server-sent event JSON.")
    ]  # a bare SyntaxError, not an OpenAIError
    responses = runs["openai-responses"]
    assert responses["events"] == first_two["openai-responses"]
    assert [name for name, _ in error_chain(responses)] == ["OpenAIError", "SyntaxError"]
    anth = runs["anthropic"]
    assert anth["events"] == first_two["anthropic"]
    assert [name for name, _ in error_chain(anth)] == ["AnthropicError", "SyntaxError"]
    # ai: no exception. An error part where the third delta was, then the stream goes
    # on to finish:stop: the text silently lacks the piece unless error parts are read.
    ai = runs["ai-sdk"]
    clean(ai)
    ref = lab.ref("ai-sdk")["events"]
    third = nth_text_index(ref, 3)
    assert ai["events"] == [*ref[:third], "error", *ref[third + 1 :]]
    assert ai["stream_error"]["name"] == "JSONParseError"
    # eventsource hands the truncated data over like any event, and carries on.
    es = runs["eventsource"]
    clean(es)
    ref = lab.ref("eventsource")["events"]
    third = nth_text_index(ref, 3)
    assert es["events"] == [*ref[:third], "unparsable", *ref[third + 1 :]]


def test_cut_before_terminal_abort(lab: Lab) -> None:
    runs = lab.runs("cut-before-terminal-abort")
    # Like the reset: undici's "terminated" (here "other side closed").
    assert_terminated(runs)
    for client in TERMINATED_AS:  # every text delta arrived
        assert texts(runs[client]) == texts(lab.ref(client)), client
    assert runs["openai-chat"]["events"] == lab.ref("openai-chat")["events"]
    ref = lab.ref("openai-responses")["events"]
    assert runs["openai-responses"]["events"] == without(ref, "response.completed")
    ref = lab.ref("anthropic")["events"]
    assert runs["anthropic"]["events"] == without(ref, "message_stop")
    es = runs["eventsource"]
    assert es["events"][-1] == "error(readyState=0)"
    assert "terminated" in es["error"]["message"]


def test_error_mid_stream(lab: Lab) -> None:
    runs = lab.runs("error-mid-stream")
    # The injected error comes after the third upstream event.
    chat = runs["openai-chat"]
    assert chat["events"] == lab.ref("openai-chat")["events"][:3]
    assert (chat["error"]["name"], chat["error"]["type"]) == ("APIError", "server_error")
    # Unlike the Python SDK (which yields an `error` event and carries on), Node's
    # Responses stream raises.
    responses = runs["openai-responses"]
    assert responses["events"] == lab.ref("openai-responses")["events"][:3]
    assert (responses["error"]["name"], responses["error"]["code"]) == ("APIError", "server_error")
    anth = runs["anthropic"]
    assert anth["events"] == ["message_start", "content_block_start"]
    assert (anth["error"]["name"], anth["error"]["type"]) == ("APIError", "overloaded_error")
    # ai: no exception; an error part, then every other delta and finish:stop.
    ai = runs["ai-sdk"]
    clean(ai)
    ref = lab.ref("ai-sdk")["events"]
    assert ai["events"] == [*ref[:5], "error", *ref[5:]]
    assert ai["stream_error"] == {
        "name": "StreamProviderError",
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
    }
    # eventsource: one more message, which only the application can recognise.
    es = runs["eventsource"]
    clean(es)
    ref = lab.ref("eventsource")["events"]
    assert es["events"] == [*ref[:3], "error:server_error", *ref[3:]]


def test_terminal_event_twice(lab: Lab) -> None:
    runs = lab.runs("terminal-event-twice")
    for run in runs.values():
        clean(run)
    # Stop at the first [DONE]: nothing changes.
    for client in ("openai-chat", "ai-sdk", "eventsource"):
        assert runs[client]["events"] == lab.ref(client)["events"], client
    # The stream helpers yield the terminal event twice; the final result is unchanged.
    assert runs["openai-responses"]["events"] == [
        *lab.ref("openai-responses")["events"],
        "response.completed",
    ]
    assert runs["anthropic"]["events"] == [*lab.ref("anthropic")["events"], "message_stop"]
    for client in ("openai-responses", "anthropic"):
        assert runs[client]["final_text"] == lab.ref(client)["text"], client


def test_delta_after_done(lab: Lab) -> None:
    runs = lab.runs("delta-after-done")
    for client in ("openai-chat", "eventsource", "anthropic"):
        clean(runs[client])
        assert runs[client]["events"] == lab.ref(client)["events"], client
    # ai reads past [DONE]: the late chat chunk's text reaches the caller.
    ai = runs["ai-sdk"]
    clean(ai)
    ref = lab.ref("ai-sdk")["events"]
    assert ai["events"] == [*ref[:-3], "text: late", *ref[-3:]]
    assert ai["text"] == lab.ref("ai-sdk")["text"] + " late"
    # Responses reads past response.completed and throws on the foreign event.
    responses = runs["openai-responses"]
    assert responses["events"] == lab.ref("openai-responses")["events"]
    assert error_chain(responses) == [("OpenAIError", "Unhandled response stream event: unknown")]


def test_wrong_content_type(lab: Lab) -> None:
    runs = lab.runs("wrong-content-type")
    # The SDKs ignore the Content-Type and parse the stream.
    for client in ("openai-chat", "openai-responses", "anthropic", "ai-sdk"):
        clean(runs[client])
        assert runs[client]["events"] == lab.ref(client)["events"], client
    # EventSource refuses before any event, and does not reconnect (readyState CLOSED).
    es = runs["eventsource"]
    assert es["events"] == ["error(readyState=2)"]
    assert es["error"] == {
        "name": "EventSourceError",
        "message": 'Invalid content type, expected "text/event-stream"',
        "code": 200,
    }


def test_reverse_two_deltas_passes_silently(lab: Lab) -> None:
    runs = edited_runs(
        lab,
        "reverse-two-deltas",
        lambda ref, third: [*ref[:third], ref[third + 1], ref[third], *ref[third + 2 :]],
    )
    # Responses: the final text comes from response.completed, in order.
    assert runs["openai-responses"]["final_text"] == lab.ref("openai-responses")["text"]
    assert runs["anthropic"]["final_text"] == runs["anthropic"]["text"]


def test_reset_mid_stream(lab: Lab) -> None:
    runs = lab.runs("reset-mid-stream")
    assert_terminated(runs)
    # Exactly the first five upstream events reached the client.
    assert runs["openai-chat"]["events"] == lab.ref("openai-chat")["events"][:5]
    # anthropic: message_start, content_block_start, two deltas (the ping is not yielded).
    assert runs["anthropic"]["events"] == lab.ref("anthropic")["events"][:4]
    assert runs["eventsource"]["events"] == [
        *lab.ref("eventsource")["events"][:5],
        "error(readyState=0)",
    ]


def test_service_unavailable(lab: Lab) -> None:
    runs = lab.runs("service-unavailable")
    for client, name in [
        ("openai-chat", "InternalServerError"),
        ("openai-responses", "InternalServerError"),
        ("anthropic", "ServiceUnavailableError"),
    ]:
        run = runs[client]
        assert run["events"] == [] and not run["ended"], client
        assert (run["error"]["name"], run["error"]["status"]) == (name, 503), client
        assert run["error"]["type"] == "chaosproxy_injected", client
    # ai: nothing thrown; the 503 is an error part (APICallError) after `start`.
    ai = runs["ai-sdk"]
    clean(ai)
    assert ai["events"] == ["start", "error"]
    assert ai["stream_error"]["name"] == "APICallError"
    es = runs["eventsource"]
    assert es["events"] == ["error(readyState=2)"]  # CLOSED: no reconnection
    assert es["error"] == {
        "name": "EventSourceError",
        "message": "Non-200 status code (503)",
        "code": 503,
    }
