"""The ``interleave_tool_calls`` fault (docs/faults-event.md, ``interleave_tool_calls``):
exact pieces and bytes on literal streams and the real captures of
tests/fixtures/providers/, and the property that the provider's own SDK reads the
rewritten stream back to exactly the upstream's text."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from chaosproxy.scenario import ScenarioError, parse_scenario
from tests.support.cli import chaosproxy_argv
from tests.support.content_streams import FRAGMENTS, parse, render
from tests.support.fault_content import WEATHER, datas, run


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("interleave_tool_calls: {step: 0}", "interleave_tool_calls.step: must be >= 1"),
    ],
)
def test_bad_parameters_are_located(yaml: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(f"name: t\nfaults:\n  - {yaml}\n", "t.yaml")
    assert str(err.value) == f"t.yaml:3: faults[0].{message}"


@pytest.mark.parametrize(
    ("fault", "provider", "why"),
    [
        ("interleave_tool_calls: {}", "ollama", "ollama sends each tool call whole"),
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
        ("interleave_tool_calls: {}", None, [WEATHER], "no two parallel tool calls came"),
    ],
)
def test_a_content_fault_with_nothing_to_rewrite_says_what_the_stream_lacked(
    fault: str, text: str | None, calls: list[tuple[str, dict[str, Any]]], reason: str
) -> None:
    body = render("openai-chat", text, calls)
    sim = run(fault, "openai-chat", body)
    assert sim.body == body
    assert sim.skipped == [{"fault": fault.split(":")[0], "position": 0, "reason": reason}]


def test_interleave_tool_calls_keeps_each_call_whole_in_every_format() -> None:
    calls = [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "Europe/Paris"})]
    for provider in FRAGMENTS:
        body = render(provider, None, calls)
        sim = run("interleave_tool_calls: {}", provider, body)
        assert sim.applied == {"interleave_tool_calls": 1}
        got, ref = parse(provider, sim.body), parse(provider, body)
        assert got.arguments == ref.arguments and got.inputs == ref.inputs == [
            {"city": "Paris"},
            {"zone": "Europe/Paris"},
        ]
        keys = _fragment_calls(provider, sim.body)
        assert keys[:4] in ([0, 1, 0, 1], [1, 2, 1, 2]), (provider, keys)
        assert sim.summary["integrity"] == "intact"
        assert sim.summary["answer"]["sound"] is True, sim.summary["answer"]
        if provider == "openai-responses":
            seqs = [d["sequence_number"] for d in datas(sim.body)]
            assert seqs == list(range(len(seqs)))


def _fragment_calls(provider: str, body: bytes) -> list[int]:
    """The call each argument fragment belongs to, in the order they were sent."""
    out = []
    for d in datas(body):
        if provider == "openai-chat" and d.get("choices"):
            for call in d["choices"][0]["delta"].get("tool_calls") or []:
                if call["function"].get("arguments"):
                    out.append(call["index"])
        elif provider == "openai-responses" and d["type"].endswith("arguments.delta"):
            out.append(d["output_index"])
        elif provider == "anthropic" and d.get("delta", {}).get("partial_json"):
            out.append(d["index"])
    return out
