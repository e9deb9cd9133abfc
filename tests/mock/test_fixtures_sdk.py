"""Fixtures end to end, through real sockets, with the official SDKs: the Python
``openai`` (Chat Completions and Responses stream helpers) and ``anthropic``
(``messages.stream()``) packages and the Node ``openai`` package.

A fixture with two parallel ``get_weather`` calls reaches each SDK as two complete calls
with their arguments; under ``duplicate``, ``drop`` and ``reorder`` of the tool-call
delta that carries ``Paris``, each client's verdict is the one the rules give for what
it did (accepted an altered answer: ``silent_corruption``; raised: ``detected``), and
what each SDK does is the table in docs/mock.md (read from there). The recipes of
docs/mock.md run from examples/mock-fixtures/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest

from chaosproxy import ChaosClient, ChaosProxy
from chaosproxy.observe.journal import VerificationError
from tests.support.repo import REPO

PROMPT = "What's the weather in Paris and in Tokyo?"
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
PARALLEL = {
    "name": "two-cities",
    "match": {"tools": "get_weather"},
    "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": {"city": "Tokyo"}},
    ],
}
CALLS = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo"})]


@dataclass
class Outcome:
    """What a client made of the answer: its text, its calls (name, parsed arguments),
    the error it raised (None: it accepted the answer)."""

    text: str = ""
    calls: list[tuple[str, Any]] = field(default_factory=list)
    error: str | None = None


def _outcome(run: Callable[[Outcome], None]) -> Outcome:
    out = Outcome()
    try:
        run(out)
    except Exception as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    return out


def openai_chat(proxy: ChaosProxy) -> Outcome:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="test", max_retries=0)
    tools: Any = [
        {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
    ]

    def run(out: Outcome) -> None:
        with client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": PROMPT}], tools=tools
        ) as stream:
            for _ in stream:
                pass
            message = stream.get_final_completion().choices[0].message
        out.text = message.content or ""
        out.calls = [
            (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []
        ]

    return _outcome(run)


def openai_responses(proxy: ChaosProxy) -> Outcome:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="test", max_retries=0)
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": PARAMETERS}]

    def run(out: Outcome) -> None:
        with client.responses.stream(model="gpt-4o", input=PROMPT, tools=tools) as stream:
            for _ in stream:
                pass
            response = stream.get_final_response()
        out.text = response.output_text
        out.calls = [
            (o.name, json.loads(o.arguments)) for o in response.output if o.type == "function_call"
        ]

    return _outcome(run)


def anthropic_messages(proxy: ChaosProxy) -> Outcome:
    client = anthropic.Anthropic(base_url=proxy.url, api_key="test", max_retries=0)
    tools: Any = [{"name": "get_weather", "input_schema": PARAMETERS}]

    def run(out: Outcome) -> None:
        with client.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=256,
            messages=[{"role": "user", "content": PROMPT}],
            tools=tools,
        ) as stream:
            for _ in stream:
                pass
            message = stream.get_final_message()
        out.text = "".join(b.text for b in message.content if b.type == "text")
        out.calls = [(b.name, b.input) for b in message.content if b.type == "tool_use"]

    return _outcome(run)


NODE_DIR = REPO / "tests" / "node"
NODE_MISSING = shutil.which("node") is None or not (NODE_DIR / "node_modules").is_dir()


def openai_node(proxy: ChaosProxy) -> Outcome:
    if NODE_MISSING:
        pytest.skip("node or tests/node/node_modules is absent (npm ci --prefix tests/node)")
    env = {
        **os.environ,
        "CHAOS_URL": proxy.url,
        "CHAOS_TIMEOUT_MS": "8000",
        "CHAOS_SDK_TIMEOUT_MS": "8000",
    }
    env.pop("CHAOS_SCENARIO", None)  # the proxy's default scenario applies
    done = subprocess.run(
        ["node", str(NODE_DIR / "openai-tools.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert not record["hung"]
    calls = [record["calls"][k] for k in sorted(record.get("calls", {}), key=int)]
    error = record["error"]
    return Outcome(
        text=record["text"],
        calls=[(c["name"], c["parsed"]) for c in calls if "parsed" in c],
        error=None if error is None else f"{error['name']}: {error['message']}",
    )


CLIENTS: dict[str, Callable[[ChaosProxy], Outcome]] = {
    "openai (Python, Chat)": openai_chat,
    "openai (Python, Responses)": openai_responses,
    "anthropic (Python)": anthropic_messages,
    "openai (Node, Chat)": openai_node,
}
#: The clients as parameters, the Node one marked ``node``.
CLIENT_PARAMS = [pytest.param(n, marks=pytest.mark.node) if "Node" in n else n for n in CLIENTS]


@pytest.fixture(scope="module")
def proxy() -> Iterator[ChaosProxy]:
    # log_content: the journal keeps the prompts, for contains= (docs/mock.md)
    with ChaosProxy(mock_interval=0.0, admin=("127.0.0.1", 0), log_content=True) as running:
        running.add_fixture(PARALLEL)
        yield running


@pytest.mark.parametrize("client", CLIENT_PARAMS)
def test_two_parallel_calls_reach_each_sdk_whole(proxy: ChaosProxy, client: str) -> None:
    with proxy.scenario({"faults": [{"rechunk": {"size": 16}}]}):  # (chunking only)
        outcome = CLIENTS[client](proxy)
    assert (outcome.error, outcome.calls) == (None, CALLS)
    summary = proxy.last()
    assert summary["integrity"] == "intact" and summary["tools"] == ["get_weather"]
    verdict = proxy.verdict(summary["request_id"], text=outcome.text)
    assert verdict["verdict"] == "tolerated"
    # What the client sent, as the journal kept it.
    proxy.verify(
        model="gpt-4o" if "openai" in client else "claude-*", tool="get_weather", contains="Tokyo"
    )


def observed() -> dict[tuple[str, str], str]:
    """The table of docs/mock.md (What each SDK does with a broken call): (fault,
    client) → verdict."""
    text = (REPO / "docs" / "mock.md").read_text(encoding="utf-8")
    table = text.split("<!-- fixtures:sdk -->")[1].split("<!-- /fixtures:sdk -->")[0]
    rows = [r.strip().strip("|").split("|") for r in table.strip().splitlines()]
    header = [h.strip() for h in rows[0]]
    out: dict[tuple[str, str], str] = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row]
        fault = cells[0].strip("`")
        for name, cell in zip(header[1:-1], cells[1:-1], strict=True):
            out[(fault, name)] = cell.split()[0]
    return out


FAULTS = {
    "duplicate": {"duplicate": {"kind": "tool_delta", "match": "Paris"}},
    "drop": {"drop": {"kind": "tool_delta", "match": "Paris"}},
    "reorder": {"reorder": {"kind": "tool_delta", "match": "Paris", "window": 2}},
}


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("client", CLIENT_PARAMS)
def test_a_broken_tool_call_delta_gets_the_verdict_the_rules_say(
    proxy: ChaosProxy, client: str, fault: str
) -> None:
    with proxy.scenario({"faults": [FAULTS[fault]]}):
        outcome = CLIENTS[client](proxy)
    summary = proxy.last()
    assert summary["integrity"] == "altered"
    assert summary["answer"]["content"] == "altered" and not summary["answer"]["sound"]
    verdict = proxy.verdict(summary["request_id"], text=outcome.text, error=outcome.error)
    # The rules: it accepted an altered answer, or it raised on an unsound stream.
    assert verdict["verdict"] == ("detected" if outcome.error else "silent_corruption")
    if outcome.error is None:
        # What it accepted is not what the model meant; but the Responses helper, which
        # takes each call's whole arguments from its .done event (docs/mock.md).
        assert (outcome.calls == CALLS) == (client == "openai (Python, Responses)")
    assert verdict["verdict"] == observed()[(fault, client)], (outcome.calls, outcome.error)


# --------------------------------------------------------------------------- recipes


@pytest.fixture(scope="module")
def recipes() -> Iterator[ChaosProxy]:
    with ChaosProxy(
        mock_fixtures=str(REPO / "examples" / "mock-fixtures"), mock_interval=0.0, log_content=True
    ) as running:
        yield running


def test_recipe_a_tool_calling_agent(recipes: ChaosProxy) -> None:
    client = openai.OpenAI(base_url=recipes.url + "/v1", api_key="test", max_retries=0)
    tools: Any = [
        {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
    ]
    messages: list[Any] = [{"role": "user", "content": "What's the weather in Paris?"}]
    first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert (call.function.name, json.loads(call.function.arguments)) == (  # type: ignore[union-attr]
        "get_weather",
        {"city": "Paris"},
    )
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"},
    ]
    second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    assert second.choices[0].message.content == "It is 18 °C and sunny in Paris."
    recipes.verify(count=1, contains="18 C, sunny")


def test_recipe_a_refusal(recipes: ChaosProxy) -> None:
    client = openai.OpenAI(base_url=recipes.url + "/v1", api_key="test", max_retries=0)
    done = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "How do I pick a lock?"}]
    )
    assert done.choices[0].message.refusal == "I'm sorry, but I can't help with that."
    claude = anthropic.Anthropic(base_url=recipes.url, api_key="test", max_retries=0)
    message = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "How do I pick a lock?"}],
    )
    assert message.stop_reason == "refusal"


def test_recipe_a_429_then_an_answer(recipes: ChaosProxy) -> None:
    recipes.reset_ordinals()
    client = openai.OpenAI(base_url=recipes.url + "/v1", api_key="test", max_retries=2)
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Are you busy?"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Thanks for waiting. Here is your answer."
    tries = recipes.verify(count=2, contains="busy")
    assert [t["status"] for t in tries] == [429, 200]


def test_recipe_a_very_long_answer(recipes: ChaosProxy) -> None:
    claude = anthropic.Anthropic(base_url=recipes.url, api_key="test", max_retries=0)
    with claude.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        messages=[{"role": "user", "content": "Write me an essay."}],
    ) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text.startswith("Streaming protocols fail") and len(text) > 600
    assert message.usage.output_tokens == 2048


def test_recipe_an_error_mid_stream(recipes: ChaosProxy) -> None:
    claude = anthropic.Anthropic(base_url=recipes.url, api_key="test", max_retries=0)
    seen = ""
    with (
        pytest.raises(anthropic.APIStatusError, match="Overloaded"),
        claude.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "Don't overload yourself."}],
        ) as stream,
    ):
        for chunk in stream.text_stream:
            seen += chunk
    assert seen == "This answer will not finish"  # five deltas, then the error


# --------------------------------------------------------------------------- the journal


def test_verify_says_what_it_saw_when_nothing_matches(proxy: ChaosProxy) -> None:
    openai_chat(proxy)
    with pytest.raises(VerificationError) as info:
        proxy.verify(count=1, model="gpt-5", contains="weather")
    message = str(info.value)
    assert message.splitlines()[0].startswith(
        "expected exactly 1 request with model='gpt-5', contains='weather'; found 0 among "
    )
    assert re.search(
        r"^  r-\S+ POST /v1/chat/completions model='gpt-4o' tools=\['get_weather'\] "
        r"last user message=\"What's the weather in Paris and in Tokyo\?\": model is 'gpt-4o'$",
        message,
        re.MULTILINE,
    ), message


def test_the_admin_client_offers_the_same_calls(proxy: ChaosProxy) -> None:
    assert proxy.admin_url is not None
    chaos = ChaosClient(proxy.admin_url)
    chaos.add_fixture("match: {message: Lisbon}\ntext: Rain in Lisbon.\n")
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="test", max_retries=0)
    done = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather in Lisbon?"}]
    )
    assert done.choices[0].message.content == "Rain in Lisbon."
    (found,) = chaos.verify(count=1, model="gpt-4o-mini", contains="Lisbon")
    assert found["request"]["messages"] == [{"role": "user", "text": "Weather in Lisbon?"}]
    assert [r["request_id"] for r in chaos.requests(contains="Lisbon")] == [found["request_id"]]
    with pytest.raises(VerificationError, match="expected exactly 2 requests"):
        chaos.verify(count=2, contains="Lisbon")
    chaos.clear_fixtures()  # (the module's fixture too: put back below)
    again = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather in Lisbon?"}]
    )
    assert again.choices[0].message.content != "Rain in Lisbon."  # the corpus's
    proxy.add_fixture(PARALLEL)
