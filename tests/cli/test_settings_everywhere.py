"""Every command reads the CHAOSPROXY_* settings that apply to it, and only those
(docs/operations.md, "Settings for every command"): in a container, where the image sets
CHAOSPROXY_SCENARIOS and CHAOSPROXY_LISTEN, `scenarios`, `validate`, `simulate`, `mock`,
`matrix` and `report` see what `serve` sees."""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from chaosproxy.cli import main as cli
from chaosproxy.server.config import flags, from_environment
from tests.support.cli import chaosproxy_argv, one_line_error, read_until, run_cli
from tests.support.repo import LIBRARY, REPO

MINE = "description: Mine, from CHAOSPROXY_SCENARIOS.\nfaults:\n  - drop: {kind: delta, nth: 1}\n"
LIBRARY_SIZE = len(list(LIBRARY.glob("*.yaml")))


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    directory = tmp_path / "mine"
    directory.mkdir()
    (directory / "my-scenario.yaml").write_text(MINE)
    return directory


def test_scenarios_lists_those_of_chaosproxy_scenarios(mine: Path) -> None:
    listed = run_cli("scenarios", env={"CHAOSPROXY_SCENARIOS": str(mine)})
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert len(names) == LIBRARY_SIZE + 1 and "my-scenario" in names
    # A PATH given adds to them (and a file of the same name wins: given last).
    other = mine.parent / "other.yaml"
    other.write_text(MINE.replace("Mine", "Other"))
    both = run_cli("scenarios", str(other), env={"CHAOSPROXY_SCENARIOS": str(mine)})
    assert {"my-scenario", "other"} <= {line.split()[0] for line in both.stdout.splitlines()}


def test_scenarios_reads_no_other_setting() -> None:
    listed = run_cli("scenarios", env={"CHAOSPROXY_SEED": "not-a-seed", "CHAOSPROXY_LISTEN": "x"})
    assert (listed.returncode, len(listed.stdout.splitlines())) == (0, LIBRARY_SIZE)


def test_scenarios_says_which_variable_is_bad() -> None:
    line = one_line_error(run_cli("scenarios", env={"CHAOSPROXY_SCENARIOS": "/nonexistent/dir"}))
    assert "/nonexistent/dir" in line


def test_validate_without_a_path_checks_chaosproxy_scenarios(mine: Path) -> None:
    done = run_cli("validate", env={"CHAOSPROXY_SCENARIOS": str(mine)})
    assert (done.returncode, done.stdout) == (0, "1 scenario OK\n")
    (mine / "bad.yaml").write_text("faults:\n  - rechunk: {size: 0}\n")
    done = run_cli("validate", env={"CHAOSPROXY_SCENARIOS": str(mine)})
    assert done.returncode == 2
    assert done.stdout == f"{mine / 'bad.yaml'}:2: faults[0].rechunk.size: must be >= 1\n"
    # A path given is what is checked.
    assert (
        run_cli("validate", str(LIBRARY), env={"CHAOSPROXY_SCENARIOS": str(mine)}).returncode == 0
    )
    assert one_line_error(run_cli("validate")) == (
        "chaosproxy: error: validate: give scenario files (PATH...) or --mock-fixtures PATH "
        "(or set CHAOSPROXY_SCENARIOS or CHAOSPROXY_MOCK_FIXTURES)"
    )


def test_simulate_finds_a_name_of_chaosproxy_scenarios(mine: Path) -> None:
    stream = (
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
    )
    done = run_cli(
        "simulate", "my-scenario", "--provider", "openai-chat", stdin=stream,
        env={"CHAOSPROXY_SCENARIOS": str(mine)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == 'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'  # the first dropped
    assert "no built-in scenario named 'my-scenario'" in one_line_error(
        run_cli("simulate", "my-scenario")
    )


def test_mock_takes_its_address_and_tokens_from_the_settings() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CHAOSPROXY_LISTEN": "127.0.0.1:0",
        "CHAOSPROXY_MOCK_TOKENS": "3",
        "CHAOSPROXY_MOCK_INTERVAL_MS": "1",
    }
    proc = subprocess.Popen(
        [*chaosproxy_argv(), "mock"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        banner = read_until(proc, "listening on")
        url = banner.split("listening on ")[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":8000")
        import httpx

        body = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
            timeout=10,
        ).text
        chunks = [json.loads(e[6:]) for e in body.split("\n\n") if e.startswith("data: {")]
        texts = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
        assert len([t for t in texts if t]) == 3
    finally:
        proc.terminate()
        proc.wait(10)
    # An option given wins over the variable.
    assert one_line_error(run_cli("mock", "--listen", "nonsense", env={"CHAOSPROXY_LISTEN": "x:1"}))


def test_report_reads_chaosproxy_log_when_no_source_is_given(tmp_path: Path) -> None:
    log = tmp_path / "frames.jsonl"
    log.write_text(
        '{"event":"request","request_id":"r-1","ts":"2026-01-01T00:00:00.000Z"}\n'
        '{"event":"response_end","request_id":"r-1","outcome":"completed","status":200,'
        '"bytes":0,"frames":0,"duration_ms":1.0,"ts":"2026-01-01T00:00:00.001Z"}\n'
    )
    page = tmp_path / "page.html"
    done = run_cli("report", "-o", str(page), env={"CHAOSPROXY_LOG": str(log)})
    assert done.returncode == 0, done.stderr
    assert page.read_text().lower().startswith("<!doctype html")
    assert one_line_error(run_cli("report", env={"CHAOSPROXY_LOG": "-"})) == (
        "chaosproxy: error: report: give a frame log or a trace directory (or set "
        "CHAOSPROXY_LOG to a file, or CHAOSPROXY_TRACE_DIR)"
    )


def stop_before_running(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``matrix`` and ``explore`` stop (exit 2) where they would start running the client;
    what they would have run it with (the upstream, the proxies' settings) is returned."""
    from chaosproxy.tools import explore, matrix

    seen: dict[str, Any] = {}

    def run_matrix(command: str, **kw: Any) -> Any:
        seen.update(kw)
        raise matrix.MatrixInputError("stopped here")

    class Runner:
        def __init__(self, client: str, **kw: Any) -> None:
            seen.update(kw)

        def __enter__(self) -> Any:
            raise explore.ExploreError("stopped here")

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(matrix, "run_matrix", run_matrix)
    monkeypatch.setattr(explore, "CommandRunner", Runner)
    return seen


def test_matrix_takes_the_upstream_and_the_proxies_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = stop_before_running(monkeypatch)
    monkeypatch.setenv("CHAOSPROXY_UPSTREAM", "http://gateway.test:9")
    monkeypatch.setenv("CHAOSPROXY_SEED", "42")
    monkeypatch.setenv("CHAOSPROXY_MOCK_TOKENS", "5")
    monkeypatch.setenv("CHAOSPROXY_CONNECT_TIMEOUT", "2s")
    monkeypatch.setenv("CHAOSPROXY_LISTEN", "0.0.0.0:1")  # the matrix's own: not read
    monkeypatch.setenv("CHAOSPROXY_LOG", "/nonexistent/log")  # likewise
    assert cli.main(["matrix", "--client", "true"]) == 2
    assert seen["upstream"] == "http://gateway.test:9"
    assert seen["settings"] == {"seed": 42, "mock_tokens": 5, "connect_timeout": 2.0}
    assert cli.main(["matrix", "--client", "true", "--upstream", "mock", "--seed", "7"]) == 2
    assert (seen["upstream"], seen["settings"]["seed"]) == ("mock", 7)


def test_explore_takes_the_upstream_and_the_proxies_settings_but_the_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its --seed draws the runs (each run has a seed of its own): CHAOSPROXY_SEED is not
    one of its settings."""
    seen = stop_before_running(monkeypatch)
    monkeypatch.setenv("CHAOSPROXY_UPSTREAM", "http://gateway.test:9")
    monkeypatch.setenv("CHAOSPROXY_SEED", "42")
    monkeypatch.setenv("CHAOSPROXY_IDLE_TIMEOUT", "3s")
    assert cli.main(["explore", "--client", "true", "--budget", "1"]) == 2
    assert seen["upstream"] == "http://gateway.test:9"
    assert seen["settings"] == {"idle_timeout": 3.0}
    assert cli.main(["explore", "--client", "true", "--budget", "1", "--upstream", "mock"]) == 2
    assert seen["upstream"] == "mock"


def test_matrix_and_explore_take_the_mock_interval_in_milliseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = stop_before_running(monkeypatch)
    monkeypatch.setenv("CHAOSPROXY_MOCK_INTERVAL_MS", "7")
    assert cli.main(["matrix", "--client", "true"]) == 2
    assert seen["settings"] == {"mock_interval": 0.007}
    assert cli.main(["matrix", "--client", "true", "--mock-interval-ms", "2.5"]) == 2
    assert seen["settings"] == {"mock_interval": 0.0025}
    assert cli.main(["explore", "--client", "true", "--mock-interval-ms", "0"]) == 2
    assert seen["settings"] == {"mock_interval": 0.0}


def test_matrix_refuses_several_upstreams_however_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOSPROXY_UPSTREAM", "/a=http://a.test:1 http://b.test:2")
    for command in ("matrix", "explore"):
        assert one_line_error(run_cli(command, "--client", "true", env=dict(os.environ))) == (
            f"chaosproxy: error: {command} takes one upstream: CHAOSPROXY_UPSTREAM has several "
            "(routes)"
        )


# ------------------------------------------------------------- one set of flag definitions

#: The options of other commands that are settings of serve, generated from the same
#: Config fields (chaosproxy.server.config.add_flags): (command, option) → field.
SETTING_OPTIONS = {
    ("mock", "--listen"): "listen",
    ("mock", "--tokens"): "mock_tokens",
    ("mock", "--interval-ms"): "mock_interval",
    ("mock", "--mock-fixtures"): "mock_fixtures",
    ("replay", "--listen"): "listen",
    ("validate", "--mock-fixtures"): "mock_fixtures",
    ("matrix", "--upstream"): "upstream",
    ("matrix", "--seed"): "seed",
    ("matrix", "--mock-interval-ms"): "mock_interval",
    ("explore", "--upstream"): "upstream",
    ("explore", "--mock-interval-ms"): "mock_interval",
}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize(("command", "option"), sorted(SETTING_OPTIONS))
def test_an_option_that_is_a_setting_is_the_settings_flag(command: str, option: str) -> None:
    from tests.support.flag_samples import SAMPLES

    name = SETTING_OPTIONS[(command, option)]
    action = next(a for a in _subcommands()[command]._actions if option in a.option_strings)
    serve_flag = next(flag for field, flag, _ in flags() if field == name)
    assert (action.dest, action.default) == (name, argparse.SUPPRESS)  # the environment fills it
    sample = SAMPLES[serve_flag.name]
    assert sample is not None and callable(action.type)
    by_option = action.type(sample)
    assert by_option == serve_flag.parse(sample)
    env = {serve_flag.env: sample}
    assert from_environment(env, [name])[name] in (by_option, (by_option,))


def test_every_option_of_serve_is_generated_from_config() -> None:
    serve = _subcommands()["serve"]
    options = {a.option_strings[0]: a.dest for a in serve._actions if a.dest != "help"}
    assert options == {flag.name: field for field, flag, _ in flags()}


#: Options that two commands write each for itself, meaning something different in each.
OWN_OPTIONS = {
    # simulate's is the simulated request's seed, explore's the seed its runs are drawn
    # from; neither is serve's base seed (the matrix's is, and comes from Config).
    "--seed": 2,
}


def test_no_option_is_written_twice() -> None:
    """An option is written in one ``add_argument`` call of the package (the settings'
    from their Flag in config.py, the client-running commands' in matrix.add_run_flags)."""
    written: dict[str, list[str]] = {}
    for path in sorted((REPO / "chaosproxy").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for arg in node.args:
                    constant = arg.value if isinstance(arg, ast.Constant) else None
                    if isinstance(constant, str) and constant.startswith("--"):
                        written.setdefault(constant, []).append(f"{path.name}:{node.lineno}")
    assert written  # the scan sees the literal ones
    twice = {option: len(where) for option, where in written.items() if len(where) > 1}
    assert twice == OWN_OPTIONS
