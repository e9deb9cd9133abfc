"""Regexes that cannot stall the loop (issue 21): a ``match`` selector runs on upstream
text, which a user's prompt can steer.

- ``(a+)+$`` on text of 30 ``a`` and a ``!`` (Python's ``re``: 2^30 steps, minutes;
  23 characters already held every stream for 1.3 s) is searched in linear time, live
  through the proxy, with Python's meaning (the event is not selected).
- What cannot be searched in linear time (backreferences, lookaround, atomic groups,
  possessive repeats, a Unicode ``\\b``) is refused by ``chaosproxy validate`` and by
  scenario loading, located: ``FILE:LINE: faults[0].drop.match: …``.
- Whatever is accepted finds exactly what Python's ``re.search`` finds: tests/core/test_regex.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.live_faults import Live
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import ScriptedUpstream

EVIL = "(a+)+$"
HOSTILE = b"data: " + b"a" * 30 + b"!\n\n"
SELECTED = b"data: aaaa\n\n"


@pytest.fixture
def live(upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture) -> Live:
    return Live(upstream, make_proxy, log_capture)


@pytest.mark.timeout(30)  # Python's re: minutes per event; linear: microseconds
async def test_a_backtracking_match_on_hostile_upstream_text_does_not_hold_the_stream(
    live: Live,
) -> None:
    events = [HOSTILE, SELECTED, HOSTILE, b"data: [DONE]\n\n"]
    reply, end = await live.run(f"faults:\n  - drop: {{match: '{EVIL}'}}", events=events)
    assert reply.body == HOSTILE + HOSTILE + b"data: [DONE]\n\n"
    assert end["outcome"] == "completed"
    assert end["faults_applied"] == {"drop": 1}


REFUSED = [
    (r"(a)\1", r"backreferences (\1, (?P=name)) cannot be searched in linear time"),
    ("(?P<x>a)(?P=x)", "backreferences"),
    ("(?=stop)", "lookahead and lookbehind"),
    ("(?<!x)stop", "negative lookahead and lookbehind"),
    ("(?>a+)b", "atomic groups"),
    ("a++b", "possessive repeats"),
    (r"\bstop\b", r"add (?a) at the start for ASCII word boundaries"),
    ("a{1001}", "repeat counts over 1000 ({1001})"),
    ("$x", r"use \Z for the very end"),
]


@pytest.mark.parametrize(("pattern", "message"), REFUSED)
def test_validate_refuses_what_cannot_be_searched_in_linear_time(
    tmp_path: Path, pattern: str, message: str
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\nfaults:\n  - drop:\n      match: '{pattern}'\n")
    result = run_cli("validate", str(scenario))
    assert result.returncode == 2, result
    line = result.stdout.strip() or result.stderr.strip()
    assert line.startswith(f"{scenario}:4: faults[0].drop.match: "), line
    assert message in line, line
    assert "docs/scenarios.md" in line or "(?a)" in line or r"\Z" in line, line


def test_validate_accepts_python_syntax_that_runs_in_linear_time(tmp_path: Path) -> None:
    for i, pattern in enumerate(
        [r'"finish_reason":"stop"', "(?i)error", r"\d+\.\d+", r"(?a)\bdone\b", "(?x) a b  # c"]
    ):
        (tmp_path / f"s{i}.yaml").write_text(f"faults:\n  - drop: {{match: '{pattern}'}}\n")
    result = run_cli("validate", str(tmp_path))
    assert result.returncode == 0, result
    assert result.stdout.strip() == "5 scenarios OK"
