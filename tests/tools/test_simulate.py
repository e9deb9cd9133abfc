"""``chaosproxy simulate``: the CLI (a subprocess: stdin in, stdout bytes, stderr JSON
lines) and the Python function, on a virtual clock."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from chaosproxy.core.actions import Cut, Respond, Send, Sleep
from chaosproxy.core.faults.base import fault_rng
from chaosproxy.scenario import parse_scenario
from chaosproxy.tools.simulate import Simulation, simulate
from tests.support.cli import chaosproxy_argv
from tests.support.live_faults import BODY, E1, E2, E3, EVENTS, PATH, upto, without


def run_cli(
    tmp_path: Path, scenario: str, stdin: bytes, *args: str
) -> tuple[int, bytes, list[dict[str, Any]], str]:
    """(exit code, stdout bytes, stderr lines parsed as JSON where they are, raw stderr)."""
    path = tmp_path / "s.yaml"
    path.write_text(scenario)
    proc = subprocess.run(
        [*chaosproxy_argv(), "simulate", str(path), *args],
        input=stdin,
        capture_output=True,
        timeout=30,
        check=False,
    )
    err = proc.stderr.decode()
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return proc.returncode, proc.stdout, lines, err


def scenario(text: str) -> Any:
    return parse_scenario(text, "<test>", default_name="test")


# ---------------------------------------------------------------------------- the CLI


def test_cli_writes_the_body_to_stdout_and_actions_to_stderr(tmp_path: Path) -> None:
    code, out, lines, _ = run_cli(
        tmp_path,
        "faults:\n  - drop: {nth: 2}\n  - cut: {after: 3, how: reset}\n",
        BODY,
        "--seed",
        "1",
    )
    assert code == 0
    assert out == without(2, 5, 6)  # three events sent, then the cut
    head, *middle, tail = lines
    assert head == {"event": "simulate", "seed": 1, "format": "sse", "provider": "openai-chat"}
    sends = [x for x in middle if x["action"] == "send"]
    assert [(x["events"], x["size"]) for x in sends] == [
        ([1], len(EVENTS[0])),
        ([3], len(EVENTS[2])),
        ([4], len(EVENTS[3])),
    ]
    assert [x["offset"] for x in sends] == [0, len(E1), len(E1) + len(E3)]
    assert middle[-1] == {
        "t_ms": 0.0,
        "action": "cut",
        "how": "reset",
        "fault": "cut",
        "after_event": 3,
        "position": "boundary",
    }
    assert tail == {"event": "end", "faults_applied": {"drop": 1, "cut": 1}, "faults_skipped": []}


def test_cli_says_when_a_fault_applied_otherwise_than_asked(tmp_path: Path) -> None:
    code, out, lines, _ = run_cli(
        tmp_path,
        "faults:\n  - cut: {after: 1, position: after_id}\n",
        BODY,
        "--provider",
        "openai-chat",
    )
    assert (code, out) == (0, upto(1))
    assert lines[-1] == {
        "event": "end",
        "faults_applied": {"cut": 1},
        "faults_skipped": [],
        "faults_fallback": [
            {
                "fault": "cut",
                "position": 0,
                "requested": "after_id",
                "actual": "boundary",
                "reason": "the event has no id line",
            }
        ],
    }


def test_cli_sleeps_on_a_virtual_clock(tmp_path: Path) -> None:
    code, out, lines, _ = run_cli(
        tmp_path,
        "faults:\n  - delay: {headers: 100, first_byte: 50, per_event: 10ms, nth: 2}\n"
        "  - stall: {after: 2, forever: true}\n",
        BODY,
        "--seed",
        "1",
    )
    assert code == 0
    assert out == upto(2)
    steps = [(x["t_ms"], x["action"], x.get("ms"), x.get("stage")) for x in lines[1:-1]]
    assert steps == [
        (0.0, "sleep", 100.0, "http"),  # the held response headers
        (100.0, "sleep", 50.0, None),
        (150.0, "send", None, None),
        (150.0, "sleep", 10.0, None),
        (160.0, "send", None, None),
        (160.0, "sleep", "forever", None),
    ]


@pytest.mark.slow
def test_cli_seed_reported_and_replayed(tmp_path: Path) -> None:
    text = "faults:\n  - drop: {probability: 0.5}\n  - rechunk: {random: [1, 50]}\n"
    code, out, lines, _ = run_cli(tmp_path, text, BODY)  # no --seed: a random one
    assert code == 0
    seed = lines[0]["seed"]
    assert isinstance(seed, int)
    again = run_cli(tmp_path, text, BODY, "--seed", str(seed))
    assert again[1] == out
    assert again[2] == lines
    rng = fault_rng(seed, 0, "drop")
    assert out == without(*[i for i in range(1, 7) if rng.random() < 0.5])


def test_cli_format_provider_and_chunk(tmp_path: Path) -> None:
    ndjson = b'{"message":{"content":"a"},"done":false}\n' * 3 + b'{"done":true}\n'
    code, out, lines, _ = run_cli(
        tmp_path,
        "faults:\n  - drop: {kind: delta, nth: 2}\n",
        ndjson,
        "--format",
        "ndjson",
        "--provider",
        "ollama",
    )
    assert code == 0
    assert lines[0]["format"] == "ndjson"
    assert lines[0]["provider"] == "ollama"
    assert out == ndjson[: ndjson.index(b"\n") + 1] * 2 + b'{"done":true}\n'
    # raw: ordinals count reads, so --chunk decides where "after: 2" falls
    code, out, lines, _ = run_cli(
        tmp_path, "faults:\n  - cut: {after: 2, how: close}\n", BODY, "--format", "raw",
        "--chunk", "5",
    )  # fmt: skip
    assert (code, out) == (0, BODY[:10])
    assert [x["size"] for x in lines if x.get("action") == "send"] == [5, 5]


def test_cli_invalid_scenario_exits_2_with_located_problems(tmp_path: Path) -> None:
    code, out, _, err = run_cli(tmp_path, "faults:\n  - drop: {nth: 0}\n", BODY)
    assert code == 2
    assert out == b""
    assert err.strip() == f"{tmp_path / 's.yaml'}:2: faults[0].drop.nth: must be >= 1"


def test_cli_on_an_empty_stdin(tmp_path: Path) -> None:
    code, out, lines, _ = run_cli(tmp_path, "faults:\n  - bom: {}\n", b"", "--seed", "1")
    assert (code, out) == (0, b"")
    assert lines[-1]["faults_skipped"][0]["fault"] == "bom"


# ---------------------------------------------------------------------------- the function


def test_function_returns_writes_body_and_timed_actions() -> None:
    sim = simulate(
        scenario("faults:\n  - duplicate: {nth: 1}\n  - delay: {per_event: 20, nth: 2}\n"),
        BODY,
        seed=4,
        path=PATH,
    )
    assert isinstance(sim, Simulation)
    assert (sim.seed, sim.format, sim.provider) == (4, "sse", "openai-chat")
    assert sim.writes == [E1, E1, E2, *EVENTS[2:]]
    assert sim.body == E1 + BODY
    times = [(t, type(a).__name__) for t, a in sim.actions]
    assert times[:4] == [(0.0, "Send"), (0.0, "Send"), (0.0, "Sleep"), (0.02, "Send")]
    assert sim.applied == {"duplicate": 1, "delay": 1}
    sends = [a for _, a in sim.actions if isinstance(a, Send)]
    assert [[e.ordinal for e in s.events] for s in sends[:3]] == [[1], [1], [2]]
    assert sends[1].faults == ("duplicate",)


def test_function_log_lines_rebuild_the_body() -> None:
    sim = simulate(scenario("faults:\n  - rechunk: {sizes: [3, 11]}\n"), BODY, seed=1)
    lines = sim.log_lines()
    sends = [x for x in lines if x.get("action") == "send"]
    assert sum(x["size"] for x in sends) == len(BODY)
    assert [x["offset"] for x in sends] == [sum(len(w) for w in sim.writes[:i]) for i in
                                            range(len(sim.writes))]  # fmt: skip
    assert lines[-1] == {"event": "end", "faults_applied": {"rechunk": 6}, "faults_skipped": []}


def test_function_http_faults() -> None:
    sim = simulate(scenario("faults:\n  - status: {code: 503, body: busy}\n"), BODY, seed=1)
    assert sim.actions == [
        (0.0, Respond(503, {"Content-Type": "text/plain; charset=utf-8"}, b"busy"))
    ]
    assert (sim.writes, sim.body) == ([], b"busy")
    assert sim.log_lines()[1] == {
        "t_ms": 0.0, "stage": "http", "action": "respond", "status": 503, "size": 4,
    }  # fmt: skip
    sim = simulate(scenario("faults:\n  - cut: {before: headers, how: reset}\n"), BODY, seed=1)
    assert sim.actions == [(0.0, Cut("reset"))]
    assert sim.body == b""
    assert sim.applied == {"cut": 1}


def test_function_hang_ends_with_an_endless_sleep() -> None:
    sim = simulate(scenario("faults:\n  - hang: {}\n"), BODY, seed=1)
    assert sim.body == BODY
    _, last = sim.actions[-1]
    assert isinstance(last, Sleep) and math.isinf(last.seconds)
    assert sim.log_lines()[-2]["ms"] == "forever"


def test_function_reports_skipped_faults() -> None:
    sim = simulate(scenario("faults:\n  - drop: {nth: 9}\n"), BODY, seed=1, path=PATH)
    assert sim.body == BODY
    assert sim.skipped == [
        {
            "fault": "drop",
            "position": 0,
            "reason": "ordinal 9 never reached: the stream had 6 events",
        }
    ]


def test_function_coalesce_window_on_the_virtual_clock() -> None:
    """A pause from an earlier fault releases what a window holds before time moves on."""
    sim = simulate(
        scenario(
            "faults:\n  - delay: {per_event: 60ms, nth: [3, 5]}\n  - coalesce: {window: 100ms}\n"
        ),
        BODY,
        seed=1,
        path=PATH,
    )
    assert sim.writes == [upto(2), E3 + EVENTS[3], b"".join(EVENTS[4:])]


def test_function_rejects_an_unknown_provider() -> None:
    with pytest.raises(ValueError, match="unknown provider 'bogus'"):
        simulate(scenario("faults: []\n"), BODY, provider="bogus")


def test_function_sniffs_the_format() -> None:
    text = scenario("faults:\n  - drop: {nth: 1}\n")
    assert simulate(text, BODY, seed=1).format == "sse"
    assert simulate(text, b'{"a":1}\n{"b":2}\n', seed=1).body == b'{"b":2}\n'
    raw = simulate(text, b"plain bytes", seed=1)
    assert (raw.format, raw.body) == ("raw", b"plain bytes")
    assert raw.skipped[0]["reason"] == "the response is not sse or ndjson, so it has no events"


def test_an_aws_event_stream_is_sniffed_and_read_as_bedrock() -> None:
    """A body with no format given that opens with a sound event stream prelude is
    framed as one, and its first event names the provider."""
    from chaosproxy.core.framing.eventstream import event_message
    from chaosproxy.tools.simulate import sniff_format

    start = event_message("messageStart", b'{"role":"assistant"}')
    delta = event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"Hi"}}')
    stop = event_message("metadata", b'{"usage":{}}')
    assert sniff_format(start) == "eventstream"
    assert sniff_format(start[:8] + b"\x00\x00\x00\x00" + start[12:]) == "raw"  # bad prelude CRC
    assert sniff_format(b'data: {"n":1}\n\n') == "sse"
    sim = simulate(scenario("faults:\n  - drop: {kind: delta}\n"), start + delta + stop)
    assert sim.body == start + stop
    assert (sim.summary["format"], sim.summary["provider"]) == ("eventstream", "bedrock")
