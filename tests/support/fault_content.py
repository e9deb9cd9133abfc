"""Shared by the fault tests that were tests/core/test_faults_content.py, now one file per
fault in tests/core/faults/: their streams, configs and runners."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from chaosproxy.scenario import parse_scenario
from chaosproxy.tools.simulate import Simulation, simulate
from tests.support.content_streams import FORMATS, PATHS

CAPTURES = Path(__file__).parents[1] / "fixtures" / "providers"

REPO = Path(__file__).resolve().parents[2]

#: Text with every hazard the issue names: a skin tone, a ZWJ family, a combining mark,
#: a flag, right-to-left with its points, CJK, a character beyond the BMP, a fence.
HAZARDS = "Hi 👍🏽 café e\u0301 👩‍👩‍👧 🇫🇷 שָׁלוֹם 日本語 😀. ```py\nx = 1\n``` done"


def run(faults: str, provider: str, body: bytes, **kw: Any) -> Simulation:
    scenario = parse_scenario(f"name: t\nfaults:\n  - {faults}\n", "t.yaml")
    return simulate(
        scenario, body, provider=provider, fmt=FORMATS[provider], path=PATHS[provider], seed=7, **kw
    )


def datas(body: bytes) -> list[Any]:
    """The JSON of every SSE data line (or NDJSON line) of a body."""
    out = []
    for line in re.split(rb"\r\n|\n", body):
        text = line[6:] if line.startswith(b"data: ") else line
        if text.strip().startswith(b"{"):
            out.append(orjson.loads(text))
    return out


WEATHER = ("get_weather", {"city": "Paris"})


__all__ = ["CAPTURES", "HAZARDS", "REPO", "WEATHER", "datas", "run"]
