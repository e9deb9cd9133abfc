"""The ``split_tool_args`` fault (docs/faults-event.md, ``split_tool_args``): exact pieces
and bytes on literal streams and the real captures of tests/fixtures/providers/, and the
property that the provider's own SDK reads the rewritten stream back to exactly the
upstream's text."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaosproxy.core.faults.split_tool_args import SplitToolArgsConfig
from chaosproxy.scenario import ScenarioError, parse_scenario
from tests.support import bedrock_stream as bs
from tests.support.cli import chaosproxy_argv
from tests.support.content_streams import FRAGMENTS, parse, render
from tests.support.fault_content import CAPTURES, datas, run
from tests.support.properties import examples


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("split_tool_args: {}", "split_tool_args: give at (keys, escapes) and/or every"),
        (
            "split_tool_args: {at: values}",
            "split_tool_args.at: must be one of: keys, escapes or a list",
        ),
    ],
)
def test_bad_parameters_are_located(yaml: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(f"name: t\nfaults:\n  - {yaml}\n", "t.yaml")
    assert str(err.value) == f"t.yaml:3: faults[0].{message}"


@pytest.mark.parametrize(
    ("fault", "provider", "why"),
    [
        ("split_tool_args: {at: keys}", "gemini", "gemini sends each tool call whole"),
        ("split_tool_args: {every: 1}", "generic", "a generic stream's tool calls are unknown"),
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


@pytest.mark.parametrize(
    ("fault", "text", "calls", "reason"),
    [
        ("split_tool_args: {at: keys}", "Hello there", [], "no tool-call argument fragment came"),
    ],
)
def test_a_content_fault_with_nothing_to_rewrite_says_what_the_stream_lacked(
    fault: str, text: str | None, calls: list[tuple[str, dict[str, Any]]], reason: str
) -> None:
    body = render("openai-chat", text, calls)
    sim = run(fault, "openai-chat", body)
    assert sim.body == body
    assert sim.skipped == [{"fault": fault.split(":")[0], "position": 0, "reason": reason}]


def test_split_tool_args_on_the_openai_chat_capture_cuts_keys_and_escapes() -> None:
    body = (CAPTURES / "openai_chat_tool_call_usage.sse").read_bytes()
    sim = run("split_tool_args: {at: [keys, escapes]}", "openai-chat", body)
    fragments = [
        c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
        for c in datas(sim.body)
        if c.get("choices") and c["choices"][0]["delta"].get("tool_calls")
    ]
    # {"city":"New York City"}: the upstream's "{\"" / "city" / "\":\"" / ..., now also
    # inside the key and between each backslash and its quote (on the wire: \\ and \")
    assert fragments == ["", '{"', "c", "ity", '":"', "New", " York", " City", '"}']
    assert "".join(fragments) == '{"city":"New York City"}'
    escaped = run("split_tool_args: {at: escapes}", "anthropic", render_escaped())
    parts = [
        d["delta"]["partial_json"]
        for d in datas(escaped.body)
        if d.get("delta", {}).get("type") == "input_json_delta"
    ]
    # one upstream fragment: cut after every backslash, and inside the \u00e9
    assert parts == ["", '{"q": "say \\', '"hi\\', '"\\', 'n", "u": "\\', "u00", 'e9"}']
    assert json.loads("".join(parts)) == {"q": 'say "hi"\n', "u": "é"}


def render_escaped() -> bytes:
    """An Anthropic tool call whose arguments hold escapes (\\", \\n, \\u00e9)."""
    body = render("anthropic", None, [("ask", {"q": 'say "hi"\n', "u": "é"})], per_event=100)
    return body.replace("é".encode(), b"\\\\u00e9")


#: Tool arguments: any JSON object, keys and strings of any Unicode.
ARGUMENTS = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=6,
    ),
    min_size=1,
    max_size=4,
)


@pytest.mark.parametrize("provider", FRAGMENTS)
@given(
    calls=st.lists(ARGUMENTS, min_size=2, max_size=3),
    fault=st.sampled_from(
        [
            "split_tool_args: {at: keys}",
            "split_tool_args: {at: escapes}",
            "split_tool_args: {at: [keys, escapes], every: 3}",
            "interleave_tool_calls: {}",
            "interleave_tool_calls: {step: 2}",
        ]
    ),
)
@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_arguments_split_or_interleaved_parse_in_the_sdk_to_exactly_those(
    provider: str, calls: list[dict[str, Any]], fault: str
) -> None:
    body = render(provider, "ok", [(f"tool_{i}", args) for i, args in enumerate(calls)])
    sim = run(fault, provider, body)
    got, ref = parse(provider, sim.body), parse(provider, body)
    assert got.arguments == ref.arguments  # the raw JSON text of each call
    assert got.inputs == ref.inputs == calls
    assert got.text == "ok"
    assert sim.summary["integrity"] == "intact"
    assert sim.summary["answer"]["sound"] is True


def test_on_an_event_stream_tool_use_input_is_cut_into_more_messages() -> None:
    config = SplitToolArgsConfig(at=["keys", "escapes"])
    body = b"".join(s.data for s in bs.run([("split_tool_args", config)], [bs.TOOL]))
    fragments = bs.deltas(body, "delta", "toolUse", "input")
    assert "".join(fragments) == '{"city":"S\\u00e3o P"}'
    # inside the key, after the escape's backslash and inside its four hex digits
    assert fragments == ['{"c', 'ity":"S\\', "u00", "e3o", ' P"}']
    assert bs.names(body).count("contentBlockDelta") == len(fragments)
