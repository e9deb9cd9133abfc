"""The transport stage, every transport fault alike: they run in the order the scenario
lists them, the same seed gives the same actions, they work on raw streams, durations
take numbers of ms or a unit, and what earlier faults made passes through them."""

from __future__ import annotations

import pytest

from chaosproxy.core.actions import Cut, Sleep
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.coalesce import CoalesceConfig
from chaosproxy.core.faults.compress import CompressConfig
from chaosproxy.core.faults.cut import CutConfig
from chaosproxy.core.faults.delay import DelayConfig
from chaosproxy.core.faults.hang import HangConfig
from chaosproxy.core.faults.rechunk import RechunkConfig
from chaosproxy.core.faults.stall import StallConfig
from chaosproxy.core.faults.throttle import ThrottleConfig
from tests.support.fault_transport import BODY, E1, GENERIC, C, Spec, body, cut_detail, run, script


def test_transport_faults_run_in_the_order_listed() -> None:
    cut_first: list[Spec] = [("cut", CutConfig(after=1)), ("coalesce", CoalesceConfig(all=True))]
    coalesce_first: list[Spec] = [
        ("coalesce", CoalesceConfig(all=True)),
        ("cut", CutConfig(after=1)),
    ]
    assert script(run(cut_first)[0]) == [(E1, 1, ()), ("cut", "abort", cut_detail(1, "boundary"))]
    # Coalesced first, the cut only sees one write carrying three events.
    assert script(run(coalesce_first)[0]) == [
        (BODY, 3, C),
        ("cut", "abort", cut_detail(3, "boundary")),
    ]


def test_same_seed_same_actions() -> None:
    def scenario() -> list[Spec]:
        return [
            ("delay", DelayConfig(per_event=10, jitter=100, probability=0.5)),
            ("rechunk", RechunkConfig(random=(1, 9))),
            ("throttle", ThrottleConfig(bytes_per_second=1000)),
        ]

    chunks = (BODY[:7], BODY[7:30], BODY[30:])
    first, _ = run(scenario(), *chunks, seed=99)
    assert run(scenario(), *chunks, seed=99)[0] == first
    assert run(scenario(), *chunks, seed=100)[0] != first
    assert body(first) == BODY


def test_transport_faults_work_on_raw_streams() -> None:
    for name, cfg in [
        ("rechunk", RechunkConfig(size=1)),
        ("coalesce", CoalesceConfig(events=2)),
        ("delay", DelayConfig(per_event=1)),
        ("throttle", ThrottleConfig(bytes_per_second=1)),
        ("stall", StallConfig(after=1, duration=1)),
        ("cut", CutConfig(after=1, position="mid_line")),
        ("hang", HangConfig()),
        ("compress", CompressConfig()),
    ]:
        fault = build_faults([(name, cfg)], 1, "raw", GENERIC)[0]
        assert not fault.needs_framing(cfg), name


def test_durations_accept_ms_numbers_and_unit_strings() -> None:
    cfg = DelayConfig.model_validate({"first_byte": 250, "per_event": "2s", "jitter": "15ms"})
    assert (cfg.first_byte, cfg.per_event, cfg.jitter) == (0.25, 2.0, 0.015)
    assert CoalesceConfig.model_validate({"window": "1.5s"}).window == 1.5
    assert StallConfig.model_validate({"after": "terminal", "duration": "1m"}).duration == 60.0


ALL_TRANSPORT: list[Spec] = [
    ("rechunk", RechunkConfig(size=1)),
    ("coalesce", CoalesceConfig(events=2)),
    ("delay", DelayConfig(first_byte=5, per_event=1)),
    ("throttle", ThrottleConfig(bytes_per_second=1)),
    ("stall", StallConfig(after=0, duration=1)),
    ("cut", CutConfig(after=1)),
    ("hang", HangConfig()),
    ("compress", CompressConfig()),
]


@pytest.mark.parametrize(("name", "cfg"), ALL_TRANSPORT, ids=[n for n, _ in ALL_TRANSPORT])
def test_sleeps_and_cuts_from_earlier_faults_pass_through_untouched(
    name: str, cfg: FaultConfig
) -> None:
    # Driven directly, with nothing held: what a fault did not make, it passes on as is.
    fault = build_faults([(name, cfg)], 1, "sse", GENERIC)[0]
    sleep = Sleep(0.5, fault="earlier")
    cut = Cut("reset", fault="earlier", detail={"x": 1})
    assert fault.on_action(sleep) == [sleep]
    assert fault.on_action(cut) == [cut]
