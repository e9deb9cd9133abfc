"""A real stream turned into a fixture (chaosproxy/mock/transcript.py): each provider's
captures in tests/fixtures/providers/ read whole, in every chunking, into exact
fixtures; what is not a whole stream (an error status, garbage, an in-stream error, a
stream cut short, a broken tool call, no stream at all) refused with its reason; the
match made from the request; the fixture file appended to, never over what is not one;
and a recorded fixture rendered by the mock gives back the same content."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaosproxy.core.answer import fold, piece_of
from chaosproxy.core.framing import make_framer
from chaosproxy.core.llm_request import read_request
from chaosproxy.core.providers import get_profile
from chaosproxy.mock import anthropic, bedrock, gemini, ollama, openai_chat, openai_responses
from chaosproxy.mock.common import Knobs
from chaosproxy.mock.transcript import (
    NotRecorded,
    Transcript,
    append_fixtures,
    read_fixture_items,
    recorded_match,
)
from chaosproxy.scenario import Fixture, load_fixture_files
from tests.support.repo import fixture_bytes

SSE = "text/event-stream"
NDJSON = "application/x-ndjson"
CHAT = "/v1/chat/completions"
GEMINI = "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
ASK = read_request(CHAT, {"model": "m", "messages": [{"role": "user", "content": "Hi (there)?"}]})
MATCH = {"message_regex": r"\AHi\ \(there\)\?\Z", "tools": False}
WEATHER_SF = "Okay, let's check the weather for San Francisco, CA:"


def transcript(path: str, name: str, ctype: str = SSE, *, step: int = 0) -> Transcript:
    """A capture read whole (``step`` 0) or ``step`` bytes at a time."""
    data = fixture_bytes(name)
    recording = Transcript(path, 200, ctype)
    for i in range(0, len(data), step or len(data)):
        recording.feed(data[i : i + (step or len(data))])
    recording.end()
    return recording


def answer(fixture: Fixture) -> dict[str, Any]:
    """The fixture without its name (a hash of the rest, checked apart)."""
    item = fixture.as_dict()
    item.pop("name")
    return item


CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    (
        CHAT,
        "openai_chat_text_usage.sse",
        SSE,
        {
            "text": "I'm unable to provide real-time weather updates. To get the current weather "
            "in San Francisco, I recommend checking a reliable weather website or a weather app.",
            "usage": {"input_tokens": 14, "output_tokens": 30},
        },
    ),
    (
        CHAT,
        "openai_chat_tool_call_usage.sse",
        SSE,
        {
            "tool_calls": [
                {
                    "name": "get_weather",
                    "arguments": {"city": "New York City"},
                    "id": "call_4XzlGBLtUe9dy3GVNV4jhq7h",
                }
            ],
            "usage": {"input_tokens": 44, "output_tokens": 16},
        },
    ),
    (  # n=3: the first choice (the mock answers every choice alike)
        CHAT,
        "openai_chat_n3_usage.sse",
        SSE,
        {
            "text": '{"city":"San Francisco","temperature":65,"units":"f"}',
            "usage": {"input_tokens": 79, "output_tokens": 42},
        },
    ),
    (
        "/v1/responses",
        "openai_responses_o4mini_reasoning_text.sse",
        SSE,
        {
            "text": "The sum of the first 5 positive integers is 15.",
            "usage": {"input_tokens": 17, "output_tokens": 122},
        },
    ),
    (
        "/v1/messages",
        "anthropic_docs_basic.sse",
        SSE,
        {"text": "Hello!", "usage": {"input_tokens": 25, "output_tokens": 15}},
    ),
    (
        "/v1/messages",
        "anthropic_docs_tool_use.sse",
        SSE,
        {
            "text": WEATHER_SF,
            "tool_calls": [
                {
                    "name": "get_weather",
                    "arguments": {"location": "San Francisco, CA", "unit": "fahrenheit"},
                    "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                }
            ],
            "usage": {"input_tokens": 472, "output_tokens": 89},
        },
    ),
    (
        "/v1/messages",
        "anthropic_sdkfixture_refusal_response.txt",
        SSE,
        {"text": "", "finish": "refusal", "usage": {"input_tokens": 20, "output_tokens": 0}},
    ),
    (
        GEMINI,
        "gemini_2_5_flash_short.crlf.sse",
        SSE,
        {"text": "Four.", "usage": {"input_tokens": 51, "output_tokens": 2}},
    ),
    (
        "/api/chat",
        "ollama_chat_stream.ndjson",
        NDJSON,
        {"text": "The", "usage": {"input_tokens": 26, "output_tokens": 282}},
    ),
    (
        "/api/generate",
        "ollama_generate_stream.ndjson",
        NDJSON,
        {"text": "The", "usage": {"input_tokens": 26, "output_tokens": 259}},
    ),
]


@pytest.mark.parametrize(("path", "name", "ctype", "expected"), CASES, ids=[c[1] for c in CASES])
def test_a_capture_becomes_its_fixture_in_every_chunking(
    path: str, name: str, ctype: str, expected: dict[str, Any]
) -> None:
    whole = transcript(path, name, ctype).fixture(ASK)
    assert answer(whole) == {"match": MATCH, **expected}
    assert whole.name is not None and whole.name.startswith(f"recorded-{whole_provider(path)}-")
    for step in (1, 7, 64):  # a byte at a time, and odd cuts: the same fixture
        assert transcript(path, name, ctype, step=step).fixture(ASK) == whole


def whole_provider(path: str) -> str:
    return Transcript(path, 200, SSE).provider or "?"


def test_the_gemini_text_capture_keeps_its_text_exactly() -> None:
    fixture = transcript(GEMINI, "gemini_2_0_flash_text.crlf.sse").fixture(ASK)
    assert fixture.text is not None
    assert fixture.text.startswith("Here you go:\n\nEnglish: potato\n")
    assert "Japanese: ジャガイモ (jagaimo)\nRussian: картофель (kartofel')\n" in fixture.text
    assert fixture.usage is not None and fixture.usage.output_tokens == 49


@pytest.mark.parametrize(
    ("path", "name", "ctype", "why"),
    [
        (CHAT, "openai_chat_midstream_error.sse", SSE, "the stream carries an error event"),
        (GEMINI, "gemini_midstream_error.crlf.sse", SSE, "the stream carries an error event"),
        ("/api/chat", "ollama_midstream_error.ndjson", NDJSON, "the stream carries an error event"),
        (
            "/v1/messages",
            "anthropic_error_overloaded.sse",
            SSE,
            "the stream carries an error event",
        ),
        (
            "/v1/messages",
            "anthropic_sdkfixture_incomplete_partial_json_response.txt",
            SSE,
            "tool call make_file's arguments are not JSON: unexpected end of data: line 6 "
            "column 14 (char 149)",
        ),
        (CHAT, "openai_chat_text_usage.sse", "application/json", "not a stream"),
        ("/v2/chat", "cohere_v2_chat.sse", SSE, "/v2/chat is no provider's path the mock serves"),
    ],
)
def test_what_is_not_a_whole_stream_is_not_recorded(
    path: str, name: str, ctype: str, why: str
) -> None:
    with pytest.raises(NotRecorded) as caught:
        transcript(path, name, ctype).fixture(ASK)
    assert str(caught.value).startswith(why)


def test_an_error_status_is_not_recorded() -> None:
    recording = Transcript(CHAT, 429, SSE)
    recording.feed(fixture_bytes("openai_chat_text_usage.sse"))
    recording.end()
    with pytest.raises(NotRecorded, match=r"^the upstream answered 429$"):
        recording.fixture(ASK)


def test_a_stream_cut_before_its_terminal_event_is_not_recorded() -> None:
    data = fixture_bytes("openai_chat_text_usage.sse")
    recording = Transcript(CHAT, 200, SSE)
    recording.feed(data[: data.index(b"data: [DONE]")])
    recording.end()
    with pytest.raises(NotRecorded, match=r"^the stream ended before its terminal event$"):
        recording.fixture(ASK)


def test_a_client_that_left_at_the_terminal_event_leaves_a_whole_answer() -> None:
    """An SDK closes right after ``[DONE]``: the recording proxy may see it leave before
    the upstream's body ended. What it was sent is whole: recorded, exactly as if it had
    stayed. One that left before the terminal event leaves nothing to record."""
    data = fixture_bytes("openai_chat_text_usage.sse")
    stayed = transcript(CHAT, "openai_chat_text_usage.sse")
    done = data.index(b"data: [DONE]") + len(b"data: [DONE]\n\n")
    left = Transcript(CHAT, 200, SSE)
    left.feed(data[:done])
    left.client_left()
    assert left.fixture(ASK) == stayed.fixture(ASK)
    early = Transcript(CHAT, 200, SSE)
    early.feed(data[: data.index(b"data: [DONE]")])
    early.client_left()
    with pytest.raises(NotRecorded, match=r"^the client left before the terminal event$"):
        early.fixture(ASK)


def test_a_body_that_failed_or_was_garbage_is_not_recorded() -> None:
    failed = Transcript(CHAT, 200, SSE)
    failed.feed(fixture_bytes("openai_chat_text_usage.sse"))
    failed.fail("the upstream body failed: reset")
    with pytest.raises(NotRecorded, match=r"^the upstream body failed: reset$"):
        failed.fixture(ASK)
    garbage = Transcript(CHAT, 200, SSE)
    garbage.feed(b"data: {]]\n\ndata: \x00\xff not JSON\n\n")
    garbage.end()
    with pytest.raises(NotRecorded, match=r"^the stream ended before its terminal event$"):
        garbage.fixture(ASK)
    empty = Transcript(CHAT, 200, SSE)
    empty.feed(b": a comment only\n\n")
    empty.end()
    with pytest.raises(NotRecorded, match=r"^the body has no event$"):
        empty.fixture(ASK)


def test_the_match_is_the_last_user_message_exactly_and_the_tools() -> None:
    body = {
        "model": "claude",
        "max_tokens": 10,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "What's 2+2? (be exact)"},
        ],
        "tools": [{"name": "calc", "input_schema": {}}, {"name": "web", "input_schema": {}}],
    }
    request = read_request("/v1/messages", body)
    match = recorded_match(request)
    assert match == {
        "message_regex": r"\AWhat's\ 2\+2\?\ \(be\ exact\)\Z",
        "tools": ["calc", "web"],
    }
    fixture = Fixture.model_validate({"match": match, "text": "4"})
    assert fixture.match.mismatch("/v1/messages", request, {}) is None
    longer = read_request(
        "/v1/messages",
        {**body, "messages": [{"role": "user", "content": "What's 2+2? (be exact) no"}]},
    )
    assert fixture.match.mismatch("/v1/messages", longer, {}) == "message_regex"
    no_tools = read_request("/v1/messages", {**body, "tools": []})
    assert fixture.match.mismatch("/v1/messages", no_tools, {}) == "tools"
    assert recorded_match(read_request(CHAT, {"messages": []})) == {"tools": False}


def test_fixtures_are_appended_to_the_file_and_read_back(tmp_path: Path) -> None:
    out = tmp_path / "recorded.yaml"
    first = transcript(CHAT, "openai_chat_tool_call_usage.sse").fixture(ASK)
    second = transcript("/v1/messages", "anthropic_docs_basic.sse").fixture(ASK)
    append_fixtures(out, [first])
    append_fixtures(out, [second])
    assert [f.name for f in load_fixture_files([str(out)])] == [first.name, second.name]
    assert list(load_fixture_files([str(out)])) == [first, second]
    assert len(read_fixture_items(out)) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["recorded.yaml"]  # no temporary left


def test_appends_from_many_threads_at_once_lose_nothing(tmp_path: Path) -> None:
    out = tmp_path / "recorded.yaml"
    out.write_text("fixtures:\n  - {name: mine, text: hello}\n")
    out.chmod(0o640)
    fixture = transcript("/v1/messages", "anthropic_docs_basic.sse").fixture(ASK)
    barrier = threading.Barrier(8)

    def append() -> None:
        barrier.wait()
        for _ in range(5):
            append_fixtures(out, [fixture])

    threads = [threading.Thread(target=append) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    loaded = load_fixture_files([str(out)])
    assert [f.name for f in loaded] == ["mine"] + [fixture.name] * 40
    assert out.stat().st_mode & 0o777 == 0o640  # the file's mode kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recorded.yaml"]


def test_a_file_that_is_not_a_fixture_file_is_never_written_over(tmp_path: Path) -> None:
    out = tmp_path / "notes.yaml"
    out.write_text("- a list, not fixtures\n")
    fixture = transcript("/v1/messages", "anthropic_docs_basic.sse").fixture(ASK)
    with pytest.raises(ValueError, match="not a fixture file"):
        append_fixtures(out, [fixture])
    assert out.read_text() == "- a list, not fixtures\n"
    out.write_text("fixtures: [\n")
    with pytest.raises(ValueError, match="not YAML"):
        append_fixtures(out, [fixture])
    assert out.read_text() == "fixtures: [\n"


def content_of(path: str, ctype: str, chunks: list[bytes]) -> tuple[str, list[str]]:
    """The text and each call's arguments (as sorted JSON), read by the suite's
    providers classification (the profile's content, folded)."""
    import orjson

    profile = get_profile(Transcript(path, 200, ctype).provider or "generic")
    framer = make_framer("ndjson" if ctype == NDJSON else "sse")
    frames = [f for chunk in chunks for f in framer.feed(chunk)] + framer.eof()
    content = fold([(None, piece_of(profile, f)) for f in frames], dedup=False)
    calls = [
        orjson.dumps(orjson.loads(a), option=orjson.OPT_SORT_KEYS).decode()
        for key, a in content.tools
        if profile.name != "openai-chat" or key.startswith("0/")
    ]
    return dict(content.texts).get(0, ""), calls


KNOBS = Knobs(tokens=24, interval=0.0)


@pytest.mark.parametrize(("path", "name", "ctype", "expected"), CASES, ids=[c[1] for c in CASES])
def test_the_mock_renders_a_recorded_fixture_with_the_same_content(
    path: str, name: str, ctype: str, expected: dict[str, Any]
) -> None:
    fixture = transcript(path, name, ctype).fixture(ASK)
    payload: dict[str, Any] = {"model": "m", "stream": True, "max_tokens": 4096}
    if path == CHAT:
        reply = openai_chat.respond(b"{}", {**payload, "messages": []}, KNOBS, fixture)
    elif path == "/v1/responses":
        reply = openai_responses.respond(b"{}", {**payload, "input": "x"}, KNOBS, fixture)
    elif path == "/v1/messages":
        reply = anthropic.respond(b"{}", {**payload, "messages": []}, KNOBS, fixture)
    elif path == GEMINI:
        reply = gemini.respond(
            b"{}", {"contents": []}, KNOBS, model="g", action="streamGenerateContent",
            alt="sse", fixture=fixture,
        )  # fmt: skip
    else:
        endpoint = path.rsplit("/", 1)[1]
        body = {**payload, "messages": []} if endpoint == "chat" else {**payload, "prompt": "x"}
        reply = ollama.respond(b"{}", body, KNOBS, endpoint=endpoint, fixture=fixture)
    replayed = content_of(path, ctype, list(reply.chunks))
    text, calls = content_of(path, ctype, [fixture_bytes(name)])
    if name == "openai_chat_n3_usage.sse":  # the capture's first choice only
        calls = []
    assert replayed == (text, calls)
    again = Transcript(path, 200, reply.content_type)
    for chunk in reply.chunks:
        again.feed(chunk)
    again.end()
    back = answer(again.fixture(ASK))
    back.pop("usage", None)
    kept = {k: v for k, v in expected.items() if k != "usage"}
    assert back == {"match": MATCH, **kept}


def test_yaml_of_a_recorded_file_is_plain(tmp_path: Path) -> None:
    out = tmp_path / "f.yaml"
    append_fixtures(out, [transcript(GEMINI, "gemini_2_0_flash_text.crlf.sse").fixture(ASK)])
    loaded = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert "ジャガイモ" in out.read_text(encoding="utf-8")  # unicode kept as it is
    assert list(loaded["fixtures"][0]) == ["name", "match", "text", "usage"]


def rendered(path: str, fixture: Fixture, stream_usage: bool = True) -> Transcript:
    """The mock's own rendering of ``fixture`` for ``path``, read back by a transcript."""
    payload: dict[str, Any] = {"model": "m", "stream": True, "max_tokens": 4096}
    if path == CHAT:
        options = {"stream_options": {"include_usage": True}} if stream_usage else {}
        reply = openai_chat.respond(b"{}", {**payload, "messages": [], **options}, KNOBS, fixture)
    elif path == "/v1/responses":
        reply = openai_responses.respond(b"{}", {**payload, "input": "x"}, KNOBS, fixture)
    elif path == "/v1/messages":
        reply = anthropic.respond(b"{}", {**payload, "messages": []}, KNOBS, fixture)
    elif path == GEMINI:
        reply = gemini.respond(
            b"{}", {"contents": []}, KNOBS, model="g", action="streamGenerateContent",
            alt="sse", fixture=fixture,
        )  # fmt: skip
    elif path == BEDROCK:
        reply = bedrock.respond(
            b"{}", {"messages": []}, KNOBS, model="m", action="converse-stream", fixture=fixture
        )
    else:
        reply = ollama.respond(
            b"{}", {**payload, "messages": []}, KNOBS, endpoint="chat", fixture=fixture
        )
    back = Transcript(path, 200, reply.content_type)
    for chunk in reply.chunks:
        back.feed(chunk)
    back.end()
    return back


BEDROCK = "/model/m/converse-stream"
PATHS = [CHAT, "/v1/responses", "/v1/messages", GEMINI, "/api/chat", BEDROCK]
#: What each provider's finish reason reads back as: where a provider says two reasons
#: alike (docs/mock.md, How a finish reason is said), the reading is that one word.
FINISH_BACK: dict[str, dict[str, str]] = {
    CHAT: {},
    "/v1/responses": {},
    "/v1/messages": {"content_filter": "refusal"},
    GEMINI: {"refusal": "stop"},
    "/api/chat": {"content_filter": "stop", "refusal": "stop"},
    BEDROCK: {},
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("finish", ["stop", "length", "content_filter", "refusal"])
def test_every_finish_reason_reads_back_from_the_mocks_own_stream(path: str, finish: str) -> None:
    fixture = Fixture.model_validate(
        {
            "text": "Hi there, café 🚀",
            "finish": finish,
            "usage": {"input_tokens": 7, "output_tokens": 5},
        }
    )
    back = rendered(path, fixture).fixture(ASK)
    assert back.text == "Hi there, café 🚀"
    assert (back.finish or "stop") == FINISH_BACK[path].get(finish, finish)
    assert back.usage is not None and back.usage.output_tokens == 5
    if path != "/api/chat":  # (Ollama's counts are the mock's own)
        assert back.usage.input_tokens == 7


@pytest.mark.parametrize("path", PATHS)
def test_parallel_tool_calls_read_back_with_their_names_arguments_and_ids(path: str) -> None:
    calls = [
        {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}, "id": "call_one"},
        {"name": "get_time", "arguments": {"zone": "Europe/Paris"}, "id": "call_two"},
    ]
    fixture = Fixture.model_validate({"text": "Checking.", "tool_calls": calls})
    back = rendered(path, fixture).fixture(ASK)
    got = [c.model_dump(exclude_none=True) for c in back.tool_calls]
    if path in (GEMINI, "/api/chat"):  # whole calls; Ollama's carry no id
        for call in got:
            call.pop("id", None)
        calls = [{k: v for k, v in c.items() if k != "id"} for c in calls]
    assert got == calls
    assert (back.text, back.finish) == ("Checking.", None)  # tool_calls: the default


def events_of(*payloads: dict[str, Any]) -> bytes:
    import orjson

    return b"".join(b"data: " + orjson.dumps(p) + b"\n\n" for p in payloads)


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (  # arguments that are JSON, but not an object
            events_of(
                chat_chunk(
                    {
                        "tool_calls": [
                            {"index": 0, "id": "c", "function": {"name": "f", "arguments": "[1]"}}
                        ]
                    }
                ),
                chat_chunk({}, "tool_calls"),
            )
            + b"data: [DONE]\n\n",
            "tool call f's arguments are not a JSON object",
        ),
        (  # a call that never says its name
            events_of(
                chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
                chat_chunk({}, "tool_calls"),
            )
            + b"data: [DONE]\n\n",
            "tool call 0/0 has no name",
        ),
        (b"data: " + b"x" * (2 * 1024 * 1024) + b"\n\n", "the body breaks its framing"),
    ],
    ids=["arguments-not-an-object", "call-without-a-name", "event-over-the-size-limit"],
)
def test_hostile_streams_are_not_recorded(body: bytes, why: str) -> None:
    recording = Transcript(CHAT, 200, SSE)
    recording.feed(body)
    recording.end()
    with pytest.raises(NotRecorded) as caught:
        recording.fixture(ASK)
    assert str(caught.value).startswith(why)


def test_an_answer_longer_than_the_bound_is_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaosproxy.mock import transcript as module

    monkeypatch.setattr(module, "MAX_CONTENT", 100)
    recording = Transcript(CHAT, 200, SSE)
    recording.feed(events_of(*[chat_chunk({"content": "0123456789"}) for _ in range(11)]))
    recording.feed(events_of(chat_chunk({}, "stop")) + b"data: [DONE]\n\n")
    recording.end()
    with pytest.raises(NotRecorded, match=r"^the answer is longer than 100 characters$"):
        recording.fixture(ASK)
