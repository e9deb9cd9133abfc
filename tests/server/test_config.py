"""One configuration: every ``serve`` flag is a :class:`Config` field, has its
``CHAOSPROXY_*`` variable and is a ``ChaosProxy`` argument, parsed the same way."""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from chaosproxy import ChaosProxy
from chaosproxy.cli.main import build_parser, config_from
from chaosproxy.server.config import (
    ARGUMENTS,
    NAMES,
    Config,
    ConfigError,
    flags,
    from_environment,
    parse_duration,
    parse_duration_or_off,
    parse_workers,
    show_duration_or_off,
)
from tests.support.cli import run_cli
from tests.support.flag_samples import SAMPLES

#: The value of a ChaosProxy argument named after a flag whose field has another name, for
#: the flag's sample: ``mock_interval_ms=5`` is ``--mock-interval-ms 5``.
ARGUMENT_SAMPLES: dict[str, Any] = {"--mock-interval-ms": 5}


def serve_options() -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    return {a.option_strings[0]: a for a in serve._actions if a.option_strings[0] not in ("-h",)}


def from_cli(*argv: str) -> Config:
    return config_from(build_parser().parse_args(["serve", *argv]), environ={})


@pytest.mark.parametrize("option", sorted(serve_options()))
def test_every_flag_is_a_field_an_environment_variable_and_a_chaosproxy_argument(
    option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert option in SAMPLES, f"give {option} a sample value in SAMPLES"
    action = serve_options()[option]
    assert action.help, f"{option} has no help text"
    name = action.dest
    assert name in NAMES
    sample = SAMPLES[option]
    argv = [option] if sample is None else [option, sample]
    by_flag = getattr(from_cli(*argv), name)
    assert by_flag != getattr(Config(), name), "the sample must differ from the default"
    env_name = "CHAOSPROXY_" + option.removeprefix("--").upper().replace("-", "_")
    by_env = config_from(
        build_parser().parse_args(["serve"]), environ={env_name: "1" if sample is None else sample}
    )
    assert getattr(by_env, name) == by_flag
    # The ChaosProxy argument named after the flag (the field's name, or the flag's own:
    # mock_interval_ms) gives the same setting.
    argument = option.removeprefix("--").replace("-", "_")
    assert argument == name or argument in ARGUMENTS, f"ChaosProxy({argument}=...) is missing"
    for keyword, value in {name: by_flag, argument: ARGUMENT_SAMPLES.get(option, by_flag)}.items():
        settings: dict[str, Any] = {keyword: value}
        if name == "scenario":  # a default must be a loaded scenario: only check the value
            settings["scenarios"] = ()
        proxy = ChaosProxy(**settings)
        assert getattr(proxy.config, name) == by_flag


def test_the_flag_list_is_the_config_field_list() -> None:
    assert {flag.name for _, flag, _ in flags()} == set(serve_options())


def test_a_flag_wins_over_the_environment_which_wins_over_the_default() -> None:
    args = build_parser().parse_args(["serve", "--seed", "1"])
    assert config_from(args, {"CHAOSPROXY_SEED": "2"}).seed == 1
    args = build_parser().parse_args(["serve"])
    assert config_from(args, {"CHAOSPROXY_SEED": "2"}).seed == 2
    assert config_from(args, {}).seed is None


def test_repeatable_flags_take_a_path_list_from_the_environment() -> None:
    env = {"CHAOSPROXY_SCENARIOS": "a.yaml:b"}
    assert from_environment(env)["scenarios"] == ("a.yaml", "b")
    assert from_cli("--scenarios", "a", "--scenarios", "b").scenarios == ("a", "b")


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("2s", 2.0), ("1m", 60.0), ("1.5s", 1.5)]
)
def test_durations_carry_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5", "5 sec", "-1s", "s", ""])
def test_a_duration_without_a_unit_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="expected a duration with a unit"):
        parse_duration(text)


def test_a_bad_flag_is_one_line_and_exit_2() -> None:
    proc = run_cli("serve", "--connect-timeout", "5")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "chaosproxy serve: error: argument --connect-timeout: "
        "expected a duration with a unit (250ms, 2s, 1m), got '5'"
    )


def test_a_bad_environment_value_is_one_line_and_exit_2(tmp_path: Any) -> None:
    import os

    env = {**os.environ, "CHAOSPROXY_CONNECT_TIMEOUT": "10"}
    proc = run_cli("serve", "--admin", "off", env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "chaosproxy: error: CHAOSPROXY_CONNECT_TIMEOUT: "
        "expected a duration with a unit (250ms, 2s, 1m), got '10'"
    )


def test_chaosproxy_refuses_a_setting_that_does_not_exist() -> None:
    with pytest.raises(TypeError, match="unknown setting"):
        ChaosProxy(conect_timeout=1.0)


@pytest.mark.parametrize("bad", ["X User", "X-User:", "ünïcode"])
def test_a_tenant_header_must_be_a_header_name(bad: str) -> None:
    with pytest.raises(ConfigError, match="CHAOSPROXY_TENANT_HEADER: expected a header name"):
        from_environment({"CHAOSPROXY_TENANT_HEADER": bad})
    with pytest.raises(ConfigError, match="expected a header name"):
        ChaosProxy(tenant_header=bad)
    proc = run_cli("serve", "--tenant-header", bad)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"chaosproxy serve: error: argument --tenant-header: expected a header name, got {bad!r}"
    )


@pytest.mark.parametrize("bad", ["my session", "sid=", "ünïcode", "a;b"])
def test_a_tenant_cookie_must_be_a_cookie_name(bad: str) -> None:
    why = "expected a cookie name, or \\* for every cookie"
    with pytest.raises(ConfigError, match=f"CHAOSPROXY_TENANT_COOKIE: {why}"):
        from_environment({"CHAOSPROXY_TENANT_COOKIE": bad})
    with pytest.raises(ConfigError, match=why):
        ChaosProxy(tenant_cookie=bad)
    proc = run_cli("serve", "--tenant-cookie", bad)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "chaosproxy serve: error: argument --tenant-cookie: "
        f"expected a cookie name, or * for every cookie, got {bad!r}"
    )


def test_every_cookie_is_a_star_and_anonymous_requests_apart_or_shared() -> None:
    assert from_cli("--tenant-cookie", "*").tenant_cookie == "*"
    assert from_cli("--tenant-cookie", " __Host-sid ").tenant_cookie == "__Host-sid"
    assert Config().anonymous_requests == "apart"
    assert ChaosProxy(anonymous_requests="shared").config.anonymous_requests == "shared"
    with pytest.raises(ConfigError, match="anonymous_requests: expected apart or shared"):
        ChaosProxy(anonymous_requests="together")


def test_mock_interval_ms_is_an_argument_in_milliseconds() -> None:
    assert ChaosProxy(mock_interval_ms=2.5).config.mock_interval == 0.0025
    assert ChaosProxy(mock_interval_ms=0).config.mock_interval == 0.0
    assert Config().replace(mock_interval_ms=40) == Config(mock_interval=0.04)
    with pytest.raises(TypeError, match="give mock_interval or mock_interval_ms, not both"):
        ChaosProxy(mock_interval=0.01, mock_interval_ms=10)
    for bad in (-1, "20", True, None):
        with pytest.raises(ConfigError, match="expected a number of milliseconds >= 0"):
            ChaosProxy(mock_interval_ms=bad)


def test_each_help_tells_the_default_the_field_has() -> None:
    """A help that says ``(default X)`` says it from the field's default (``{default}``
    in the Flag), so the two cannot drift: X read back by the flag's own parser is the
    default."""
    told = 0
    for _, flag, default in flags():
        for shown in re.findall(r"\(default:? ([^;),]+)", flag.help):
            if shown in ("random", "passthrough", "1: one process"):
                continue
            parsed = flag.parse(shown)
            expected = (parsed,) if flag.kind == "append" else parsed
            assert expected == default, (flag.name, shown)
            told += 1
    assert told >= 14
    by_help = {flag.name: flag.help for _, flag, _ in flags()}
    assert "(default 20)" in by_help["--mock-interval-ms"]
    assert "(default 24)" in by_help["--mock-tokens"]
    assert "(default 1: one process)" in by_help["--workers"]


def test_the_mock_defaults_are_the_mocks_own() -> None:
    from chaosproxy.core.mock_defaults import DEFAULT_INTERVAL, DEFAULT_TOKENS
    from chaosproxy.mock.app import create_mock_app

    assert (Config().mock_tokens, Config().mock_interval) == (DEFAULT_TOKENS, DEFAULT_INTERVAL)
    signature = inspect.signature(create_mock_app).parameters
    assert (signature["tokens"].default, signature["interval"].default) == (
        DEFAULT_TOKENS,
        DEFAULT_INTERVAL,
    )


def test_reading_the_configuration_does_not_load_the_mock() -> None:
    code = (
        "import sys, chaosproxy.server.config; "
        "print(sorted(m for m in sys.modules if m.startswith(('aiohttp', 'chaosproxy.mock'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


def test_scenarios_poll_is_a_duration_or_off() -> None:
    assert parse_duration_or_off("250ms") == 0.25
    assert parse_duration_or_off("off") == parse_duration_or_off("0s") == 0.0
    assert show_duration_or_off(0.0) == "off" and show_duration_or_off(1.0) == "1s"
    with pytest.raises(
        ConfigError, match=r"^expected a duration with a unit \(250ms, 2s, 1m\) or off, got '5'$"
    ):
        parse_duration_or_off("5")


# --------------------------------------------------------------------------- the flag


def test_workers_is_a_number_or_auto() -> None:
    assert parse_workers("2") == 2
    assert parse_workers("auto") == len(os.sched_getaffinity(0))
    for bad in ("0", "-1", "two", "", "1025"):
        with pytest.raises(ConfigError, match="auto or a number of workers"):
            parse_workers(bad)
