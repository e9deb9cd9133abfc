"""A library scenario's clean answer: what a client prints with no scenario, and what a
scenario with its own mock answer should read as clean."""

from __future__ import annotations

import os
from typing import Any

from chaosproxy.control.api import ChaosProxy
from chaosproxy.scenario import load_library
from chaosproxy.tools.matrix import run_command

#: A mock fast enough for a library run (its answer: 12 tokens, 2 ms apart).
FAST: dict[str, Any] = {"mock_interval": 0.002, "mock_tokens": 12}


def clean_text(command: str) -> str:
    """What the client prints with no scenario: its clean answer."""
    with ChaosProxy(**FAST) as proxy:
        env = {**os.environ, "CHAOSPROXY_URL": proxy.url}
        outcome = run_command(command, env, 60)
    assert outcome.exit_code == 0, outcome.stderr
    return outcome.stdout


def scenario_clean(name: str, clean: str) -> str:
    """The clean answer of a run under library scenario ``name``: the text of the
    scenario's own mock answer (its ``mock:``) when it has one, else ``clean`` (the
    client's answer with no scenario)."""
    own = load_library()[name].mock if name in load_library() else ()
    return own[0].text if own and own[0].text is not None else clean
