"""The ``delay`` fault (docs/faults-transport.md, ``delay``): upstream bytes in, the exact
actions out, through the real Pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Send, Sleep
from chaosproxy.core.faults.base import FaultConfig, fault_rng
from chaosproxy.core.faults.delay import DelayConfig
from chaosproxy.core.pipeline import Pipeline
from tests.support.fault_http import GENERIC, fault
from tests.support.fault_transport import DONE, E1, E2, run, script


def test_delay_first_byte_and_per_event_with_selector() -> None:
    cfg = DelayConfig.model_validate({"first_byte": "1.5s", "per_event": 200, "nth": 2})
    out, p = run([("delay", cfg)])
    assert script(out) == [
        ("sleep", 1.5, "delay"),
        (E1, 1, ()),
        ("sleep", 0.2, "delay"),
        (E2, 1, ()),
        (DONE, 1, ()),
    ]
    assert p.summary() == ({"delay": 2}, [])


def test_delay_per_event_jitter_is_seeded_and_skips_comments() -> None:
    cfg = DelayConfig(per_event=100, jitter=50)
    chunk = E1 + b": keepalive\n\n" + DONE
    out, _ = run([("delay", cfg)], chunk, seed=7)
    rng = fault_rng(7, 0, "delay")
    jitters = [rng.uniform(0.0, 0.05) for _ in range(2)]
    assert script(out) == [
        ("sleep", 0.1 + jitters[0], "delay"),
        (E1, 1, ()),
        (b": keepalive\n\n", 1, ()),  # a comment is not an event
        ("sleep", 0.1 + jitters[1], "delay"),
        (DONE, 1, ()),
    ]
    assert run([("delay", cfg)], chunk, seed=7)[0] == out


def test_delay_per_event_counts_raw_reads_and_kind_selector() -> None:
    out, _ = run([("delay", DelayConfig(per_event=10))], b"ab", b"cd", fmt="raw")
    assert script(out) == [
        ("sleep", 0.01, "delay"),
        (b"ab", 1, ()),
        ("sleep", 0.01, "delay"),
        (b"cd", 1, ()),
    ]
    out, _ = run([("delay", DelayConfig.model_validate({"per_event": "1s", "kind": "terminal"}))])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), ("sleep", 1.0, "delay"), (DONE, 1, ())]


def test_delay_skipped_when_selector_never_reached() -> None:
    _, p = run([("delay", DelayConfig(per_event=10, nth=9))])
    assert p.summary() == (
        {},
        [
            {
                "fault": "delay",
                "position": 0,
                "reason": "ordinal 9 never reached: the stream had 3 events",
            }
        ],
    )


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (DelayConfig, {}, "give at least one of first_byte, per_event, jitter, headers"),
        (DelayConfig, {"per_event": -5}, "greater than or equal to 0"),
        (DelayConfig, {"per_event": 5, "kind": "nope"}, "unknown kind 'nope'"),
        (DelayConfig, {"headers": "later"}, "not a duration"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)


def test_delay_headers_holds_the_response_headers_back() -> None:
    f = fault("delay", DelayConfig.model_validate({"headers": "1.5s"}))
    assert f.before_upstream() == [Sleep(1.5, fault="delay")]
    assert f.applied == 1
    # headers alone leaves the body alone.
    p = Pipeline([f], "sse", GENERIC)
    out = p.feed(b"data: x\n\n", 0.0) + p.end(0.0)
    assert [(type(a), getattr(a, "data", None)) for a in out] == [(Send, b"data: x\n\n")]


def test_delay_without_headers_does_nothing_before_upstream() -> None:
    f = fault("delay", DelayConfig(first_byte=10))
    assert f.before_upstream() == []
