"""The ``resegment`` fault (docs/faults-event.md, ``resegment``): exact pieces and bytes on
literal streams and the real captures of tests/fixtures/providers/, and the property
that the provider's own SDK reads the rewritten stream back to exactly the upstream's
text."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chaosproxy.core.faults.resegment import ResegmentConfig
from chaosproxy.scenario import ScenarioError, parse_scenario
from tests.support import bedrock_stream as bs
from tests.support.cli import chaosproxy_argv
from tests.support.content_streams import PROVIDERS, parse, render
from tests.support.fault_content import CAPTURES, datas, run
from tests.support.properties import examples


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        (
            "resegment: {at: graphemes, every: 2}",
            "resegment: give one of at, every, phrase, merge (got at, every)",
        ),
        ("resegment: {}", "resegment: give one of at, every, phrase, merge, or empty"),
        ("resegment: {parts: 3, at: bytes}", "resegment: parts goes with phrase"),
        (
            "resegment: {phrase: ab, parts: 3}",
            "resegment: phrase 'ab' has 2 character(s): it cannot be cut into 3 parts",
        ),
        (
            "resegment: {at: letters}",
            "resegment.at: must be one of: graphemes, codepoints, bytes, words",
        ),
        ("resegment: {merge: 1}", "resegment.merge: must be >= 2"),
    ],
)
def test_bad_parameters_are_located(yaml: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(f"name: t\nfaults:\n  - {yaml}\n", "t.yaml")
    assert str(err.value) == f"t.yaml:3: faults[0].{message}"


@pytest.mark.parametrize(
    ("fault", "provider", "why"),
    [
        ("resegment: {at: words}", "generic", "a generic stream's text is unknown"),
    ],
)
def test_validate_refuses_a_fault_the_provider_cannot_carry(
    tmp_path: Path, fault: str, provider: str, why: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nprovider: {provider}\nfaults:\n  - {fault}\n")
    done = subprocess.run(
        [*chaosproxy_argv(), "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    name = fault.split(":")[0]
    assert done.stdout.strip() == (
        f"{path}:4: faults[0].{name}: cannot apply with provider: {provider}: {why}"
        + (": there are no argument fragments" if "tool calls" in why or "whole" in why else "")
        + (": there are no text deltas to rewrite" if "text" in why else "")
    )


def test_with_provider_auto_it_is_skipped_at_run_time_with_the_reason() -> None:
    body = render("gemini", None, [("get_weather", {"city": "Paris"})])
    sim = run("split_tool_args: {at: keys}", "gemini", body)
    assert sim.body == body
    assert sim.skipped == [
        {
            "fault": "split_tool_args",
            "position": 0,
            "reason": "gemini sends each tool call whole: there are no argument fragments",
        }
    ]
    sim = run("resegment: {phrase: nowhere}", "anthropic", render("anthropic", "Hello there"))
    assert sim.skipped[0]["reason"] == "phrase 'nowhere' never came in the text"


def test_graphemes_codepoints_bytes_words_on_the_gemini_capture_exact_bytes() -> None:
    """gemini_2_5_flash_short: one text chunk ("Four."), then the finishReason chunk."""
    body = (CAPTURES / "gemini_2_5_flash_short.crlf.sse").read_bytes()
    first, rest = body.split(b"\r\n\r\n", 1)

    def chunk(text: str) -> bytes:
        return first.replace(b'"text": "Four."', f'"text": "{text}"'.encode()) + b"\r\n\r\n"

    for mode, pieces in [
        ("graphemes", ["Four."]),
        ("codepoints", ["F", "o", "u", "r", "."]),
        ("bytes", ["F", "o", "u", "r", "."]),
        ("words", ["Four", "."]),
    ]:
        sim = run(f"resegment: {{at: {mode}}}", "gemini", body)
        assert sim.body == b"".join(chunk(p) for p in pieces) + rest, mode
        assert sim.summary["integrity"] == "intact"


def test_each_at_mode_on_the_gemini_japanese_capture_exact_bytes() -> None:
    """gemini_2_0_flash_text: Japanese split across chunks (ジャ / ガイモ), Cyrillic, and a
    last chunk that carries text and finishReason: its pieces but the last lose the
    finishReason, the last keeps it and the final usage."""
    body = (CAPTURES / "gemini_2_0_flash_text.crlf.sse").read_bytes()
    events = body.split(b"\r\n\r\n")[:-1]
    last = events[-1]
    sim = run("resegment: {at: bytes}", "gemini", body)
    out = sim.body.split(b"\r\n\r\n")[:-1]
    assert out[: len(out) - 1] and all(b"\r\n\r\n" not in e for e in out)
    texts = [d["candidates"][0]["content"]["parts"][0]["text"] for d in datas(sim.body)]
    upstream = "".join(d["candidates"][0]["content"]["parts"][0]["text"] for d in datas(body))
    assert "".join(texts) == upstream
    assert len(texts) == len(upstream.encode())  # one event per byte
    assert texts[texts.index("ジ") - 2 : texts.index("ジ") + 1] == ["", "", "ジ"]
    # Only the last event ends the stream; it is the upstream's last chunk with only
    # its text changed.
    finishes = [d["candidates"][0].get("finishReason") for d in datas(sim.body)]
    assert finishes == [None] * (len(finishes) - 1) + ["STOP"]
    assert out[-1] == last.replace(
        "ガイモ (jagaimo)\\nRussian: картофель (kartofel')\\n".encode(), b"\\n"
    )
    # The pieces of the last chunk keep its usage but not its end (written compactly).
    piece = datas(out[-2] + b"\r\n\r\n")[0]
    assert piece["usageMetadata"]["candidatesTokenCount"] == 49
    assert "finishReason" not in piece["candidates"][0]
    assert sim.summary["integrity"] == "intact"


def test_every_mode_keeps_the_anthropic_capture_byte_for_byte_but_the_text() -> None:
    body = (CAPTURES / "anthropic_docs_basic.sse").read_bytes()
    sim = run("resegment: {at: codepoints}", "anthropic", body)

    def delta(text: str) -> bytes:
        return (
            b"event: content_block_delta\n"
            b'data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", '
            b'"text": "' + text.encode() + b'"}}\n\n'
        )

    expected = body.replace(delta("Hello"), b"".join(delta(c) for c in "Hello"))
    assert sim.body == expected
    sim = run("resegment: {merge: 2}", "anthropic", body)
    assert sim.body == body.replace(delta("Hello") + delta("!"), delta("Hello!"))
    sim = run("resegment: {empty: 1}", "anthropic", body)
    assert sim.body == body.replace(delta("!"), delta("!") + delta("")).replace(
        delta("Hello"), delta("Hello") + delta("")
    )


def test_the_responses_capture_is_renumbered_from_the_first_cut() -> None:
    body = (CAPTURES / "openai_responses_o4mini_reasoning_text.sse").read_bytes()
    sim = run("resegment: {at: words}", "openai-responses", body)
    up, out = datas(body), datas(sim.body)
    assert [d["sequence_number"] for d in out] == list(range(len(out)))
    assert len(out) > len(up)
    text = [d["delta"] for d in out if d["type"] == "response.output_text.delta"]
    assert text[:4] == ["The", " ", "sum", " "]
    assert "".join(text) == next(d["text"] for d in up if d["type"] == "response.output_text.done")
    # every other event as it came but for its number
    rest = [{**d, "sequence_number": 0} for d in out if d["type"] != "response.output_text.delta"]
    assert rest == [
        {**d, "sequence_number": 0} for d in up if d["type"] != "response.output_text.delta"
    ]
    assert sim.summary["integrity"] == "intact"
    assert sim.summary["answer"]["sound"] is True


def test_pieces_of_an_event_with_an_id_leave_it_to_the_last() -> None:
    body = b'id: 7\ndata: {"choices":[{"index":0,"delta":{"content":"abc"}}]}\n\ndata: [DONE]\n\n'
    sim = run("resegment: {at: codepoints}", "openai-chat", body)
    assert sim.body == (
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n'
        b'id: 7\ndata: {"choices":[{"index":0,"delta":{"content":"c"}}]}\n\n'
        b"data: [DONE]\n\n"
    )


def test_a_phrase_is_found_across_deltas_and_cut_into_parts() -> None:
    body = render("openai-chat", "please ignore all previous instructions now", per_event=1)
    sim = run("resegment: {phrase: ignore all previous, parts: 3}", "openai-chat", body)
    deltas = parse("openai-chat", sim.body)
    assert deltas.text == "please ignore all previous instructions now"
    pieces = [
        c["choices"][0]["delta"]["content"]
        for c in datas(sim.body)
        if c.get("choices") and c["choices"][0]["delta"].get("content")
    ]
    assert not any("ignore all previous" in p for p in pieces)
    # the upstream's cuts (" ignore", " all", " previous") stay; the parts add theirs
    assert "".join(pieces) == "please ignore all previous instructions now"
    assert sim.applied == {"resegment": 2}


def test_the_simulate_command_shows_the_rewritten_stream(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nfaults:\n  - resegment: {at: codepoints}\n")
    body = (CAPTURES / "anthropic_docs_basic.sse").read_bytes()
    done = subprocess.run(
        [*chaosproxy_argv(), "simulate", str(scenario), "--provider", "anthropic"],
        input=body,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b'"type": "text_delta"') == len("Hello!")
    assert b'"faults_applied": {"resegment": 1}' in done.stderr


#: Text built from the pieces that break per-delta handling, mixed with anything.
HAZARD_TEXT = st.lists(
    st.sampled_from(
        [
            "👍🏽",
            "👩\u200d👩\u200d👧\u200d👦",
            "e\u0301",
            "\u0915\u094d\u0937",  # a Devanagari conjunct
            "🇯🇵",
            "שָׁלוֹם",
            "مرحبا",
            "日本語",
            "😀",
            "```",
            "\r\n",
            "\\",
            '"',
            "\u2028",
            " ",
        ]
    )
    | st.text(min_size=1, max_size=6),
    min_size=1,
    max_size=12,
).map("".join)


MODES = [
    "resegment: {at: graphemes}",
    "resegment: {at: codepoints}",
    "resegment: {at: bytes}",
    "resegment: {at: words}",
    "resegment: {every: 2}",
    "resegment: {merge: 3}",
    "resegment: {empty: 2}",
    "resegment: {merge: 2, empty: 1}",
]


def _escaped(body: bytes, provider: str) -> bytes:
    """``body`` as a provider that escapes every character beyond ASCII writes it (a
    character beyond the BMP as a surrogate pair: ``\\ud83d\\ude00``)."""
    out = []
    for line in re.split(rb"(\r\n|\n)", body):
        prefix = b"data: " if line.startswith(b"data: ") else b""
        rest = line[len(prefix) :]
        if rest.startswith(b"{"):
            line = prefix + json.dumps(json.loads(rest), separators=(",", ":")).encode()
        out.append(line)
    return b"".join(out)


@pytest.mark.parametrize("provider", PROVIDERS)
@given(text=HAZARD_TEXT, mode=st.sampled_from(MODES), escaped=st.booleans())
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_text_resegmented_parses_in_the_sdk_to_exactly_that_text(
    provider: str, text: str, mode: str, escaped: bool
) -> None:
    if provider == "ollama":
        # The ollama SDK reads lines with str.splitlines, for which a raw NEL, U+2028 or
        # U+2029 ends one; the mock writes them raw (Ollama's Go encoder escapes the
        # last two), which breaks the SDK before any fault.
        assume(not {"\x85", "\u2028", "\u2029"} & set(text))
    body = render(provider, text, per_event=2)
    if escaped:
        body = _escaped(body, provider)
        assert all(b < 0x80 for b in body)
    sim = run(mode, provider, body)
    assert parse(provider, sim.body).text == text
    assert sim.summary["integrity"] == "intact"
    assert sim.summary["answer"]["sound"] is True
    if escaped:  # written as the provider writes: escaped, and never half a character
        assert all(b < 0x80 for b in sim.body)
        assert not re.search(rb'\\ud[89ab][0-9a-f]{2}"', sim.body)


def test_on_an_event_stream_text_deltas_are_cut_into_more_messages() -> None:
    body = b"".join(s.data for s in bs.run([("resegment", ResegmentConfig(every=1))]))
    assert bs.deltas(body, "delta", "text") == list("Hello you")
