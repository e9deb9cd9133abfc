"""The ``coalesce`` fault (docs/faults-transport.md, ``coalesce``): upstream bytes in, the
exact actions out, through the real Pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.coalesce import CoalesceConfig
from chaosproxy.core.faults.cut import CutConfig
from chaosproxy.core.faults.rechunk import RechunkConfig
from chaosproxy.core.faults.stall import StallConfig
from tests.support.fault_transport import (
    BODY,
    DONE,
    E1,
    E2,
    C,
    Spec,
    ordinals,
    pipeline,
    run,
    script,
)


def test_coalesce_events_merges_n_and_flushes_the_rest_at_end() -> None:
    p = pipeline([("coalesce", CoalesceConfig(events=2))])
    first = p.feed(BODY, 0.0)
    assert script(first) == [(E1 + E2, 2, C)]
    assert ordinals(first[0]) == [1, 2]
    assert script(p.end(0.0)) == [(DONE, 1, ())]  # a lone remainder is not merged
    assert p.summary() == ({"coalesce": 1}, [])


def test_coalesce_window_uses_the_pipeline_clock() -> None:
    p = pipeline([("coalesce", CoalesceConfig(window=100))])  # 100 ms
    assert p.deadline() is None
    assert p.feed(E1, 10.0) == []
    assert p.deadline() == pytest.approx(10.1)
    assert p.feed(E2, 10.05) == []
    assert p.poll(10.09) == []  # not yet due
    due = p.poll(10.1)
    assert script(due) == [(E1 + E2, 2, C)]
    assert p.deadline() is None
    # A write arriving after the window closed (nobody polled) flushes what was held
    # before it, and opens a new window itself.
    assert p.feed(E1, 20.0) == []
    assert script(p.feed(E2, 20.5)) == [(E1, 1, ())]
    assert p.deadline() == pytest.approx(20.6)
    assert script(p.feed(DONE, 20.55) + p.end(20.56)) == [(E2 + DONE, 2, C)]


def test_coalesce_all_is_one_write_at_the_end() -> None:
    p = pipeline([("coalesce", CoalesceConfig(all=True))], fmt="raw")
    assert p.feed(b"ab", 0.0) + p.feed(b"cd", 1.0) == []
    out = p.end(2.0)
    assert script(out) == [(b"abcd", 2, C)]
    assert ordinals(out[0]) == [1, 2]


def test_coalesce_flushes_before_a_sleep_or_cut() -> None:
    specs: list[Spec] = [
        ("stall", StallConfig.model_validate({"after": 1, "duration": "2s"})),
        ("cut", CutConfig(after=2, how="close")),
        ("coalesce", CoalesceConfig(all=True)),
    ]
    out, _ = run(specs)
    assert script(out) == [
        (E1, 1, ()),
        ("sleep", 2.0, "stall"),
        (E2, 1, ()),
        ("cut", "close", {"after_event": 2, "position": "boundary"}),
    ]


def test_coalesce_merges_the_faults_of_its_parts() -> None:
    out, _ = run([("rechunk", RechunkConfig(size=10)), ("coalesce", CoalesceConfig(all=True))])
    assert script(out) == [(BODY, 3, ("rechunk", "coalesce"))]
    assert ordinals(out[0]) == [1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (CoalesceConfig, {}, "give exactly one of events, window, all"),
        (CoalesceConfig, {"events": 1}, "greater than or equal to 2"),
        (CoalesceConfig, {"window": 0}, "greater than 0"),
        (CoalesceConfig, {"window": "soon"}, "not a duration"),
        (CoalesceConfig, {"all": False}, "Input should be True"),
        (CoalesceConfig, {"events": 2, "all": True}, "give exactly one of"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)
