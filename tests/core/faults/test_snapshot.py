"""The ``snapshot`` fault (docs/faults-event.md, ``snapshot``): exact pieces and bytes on
literal streams and the real captures of tests/fixtures/providers/, and the property
that the provider's own SDK reads the rewritten stream back to exactly the upstream's
text."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import chaosproxy_argv
from tests.support.content_streams import parse, render
from tests.support.fault_content import WEATHER, datas, run


@pytest.mark.parametrize(
    ("fault", "provider", "why"),
    [
        ("snapshot: {}", "generic", "a generic stream's text is unknown"),
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
        ("snapshot: {}", None, [WEATHER], "no text delta came"),
        ("snapshot: {}", "Hi", [], "a single text delta came: it is its own snapshot"),
    ],
)
def test_a_content_fault_with_nothing_to_rewrite_says_what_the_stream_lacked(
    fault: str, text: str | None, calls: list[tuple[str, dict[str, Any]]], reason: str
) -> None:
    body = render("openai-chat", text, calls)
    sim = run(fault, "openai-chat", body)
    assert sim.body == body
    assert sim.skipped == [{"fault": fault.split(":")[0], "position": 0, "reason": reason}]


def test_snapshot_sends_running_text_and_the_answer_stays_intact_but_unsound() -> None:
    body = render("openai-chat", "one two three")
    sim = run("snapshot: {}", "openai-chat", body)
    texts = [
        c["choices"][0]["delta"]["content"]
        for c in datas(sim.body)
        if c.get("choices") and c["choices"][0]["delta"].get("content")
    ]
    assert texts == ["one", "one two", "one two three"]
    assert parse("openai-chat", sim.body).text == "oneone twoone two three"  # an appender
    assert sim.summary["integrity"] == "intact"  # what the events stand for
    assert sim.summary["answer"] == {**sim.summary["answer"], "sound": False, "defect": "snapshot"}
