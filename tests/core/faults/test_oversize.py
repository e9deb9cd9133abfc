"""The ``oversize`` fault (docs/faults-event.md, ``oversize``): a real Pipeline (framer,
profile, faults) over a small literal body: the exact bytes of every write, the upstream
ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.faults.oversize import OversizeConfig, OversizeFault, oversize_payload
from chaosproxy.core.framing.eventstream import EventStreamFramer, event_message
from tests.support import bedrock_stream as bs
from tests.support.fault_events import (
    BODY,
    DONE,
    E1,
    E2,
    E3,
    NDJSON,
    ORDINALS,
    PING,
    Spec,
    assert_chunking_independent,
    run,
)


@pytest.mark.parametrize(
    "spec",
    [
        ("oversize", OversizeConfig(after=9, bytes=10)),
    ],
    ids=lambda s: s[0],
)
def test_a_fault_that_never_applies_forwards_every_byte(spec: Spec) -> None:
    r = run([spec], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.ordinals == ORDINALS
    assert r.faults == [()] * 5
    assert r.applied == {}
    [skip] = r.skipped
    assert skip["fault"] == spec[0] and skip["reason"]


@pytest.mark.parametrize(
    ("config", "values"),
    [
        (OversizeConfig, {"after": 1}),
        (OversizeConfig, {"after": -1, "bytes": 10}),
        (OversizeConfig, {"after": 1, "bytes": 0}),
        (OversizeConfig, {"after": 1, "bytes": 64 * 1024 * 1024 + 1}),
        (OversizeConfig, {"after": 1, "bytes": 10, "terminated": "no"}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


def test_oversize_payload_is_exact() -> None:
    assert oversize_payload(5) == b"xxxxx"
    assert oversize_payload(15) == b"x" * 15
    assert oversize_payload(16) == b'{"oversize":"x"}'
    for n in (1, 15, 16, 17, 1000):
        assert len(oversize_payload(n)) == n


def test_oversize_after_an_event() -> None:
    r = run([("oversize", OversizeConfig(after=1, bytes=20))], BODY)
    big = b'data: {"oversize":"xxxxx"}\n\n'
    assert r.data == [E1, big, PING, E2, E3, DONE]
    assert r.ordinals == [1, 0, 0, 2, 3, 4]
    assert r.faults[1] == ("oversize",)
    assert r.applied == {"oversize": 1}


def test_oversize_after_0_goes_before_the_first_event() -> None:
    body = PING + E1.replace(b"\n", b"\r\n")
    r = run([("oversize", OversizeConfig(after=0, bytes=3))], body)
    assert r.data == [PING, b"data: xxx\r\n\r\n", E1.replace(b"\n", b"\r\n")]


def test_oversize_endless_line_withholds_the_rest() -> None:
    specs: list[Spec] = [("oversize", OversizeConfig(after=2, bytes=4, terminated=False))]
    r = assert_chunking_independent(specs, BODY)
    assert r.data == [E1, PING, E2, b"data: xxxx"]
    assert r.sends[-1].events[0].frame.complete is False
    fault = r.pipeline.faults[0]
    assert isinstance(fault, OversizeFault) and fault.withheld == 2


def test_oversize_endless_line_replacing_a_dropped_anchor() -> None:
    specs: list[Spec] = [
        ("drop", DropConfig(nth=2)),
        ("oversize", OversizeConfig(after=2, bytes=4, terminated=False)),
    ]
    r = run(specs, BODY)
    assert r.data == [E1, PING, b"data: xxxx"]
    assert r.pipeline.faults[1].withheld == 2  # type: ignore[attr-defined]


def test_oversize_ndjson() -> None:
    r = run([("oversize", OversizeConfig(after=3, bytes=17))], NDJSON, fmt="ndjson")
    assert r.data[-1] == b'{"oversize":"xx"}\n'
    r = run(
        [("oversize", OversizeConfig(after=1, bytes=2, terminated=False))], NDJSON, fmt="ndjson"
    )
    assert r.data == [b'{"n":1}\n', b"xx"]


def test_oversize_on_an_empty_body_after_0_and_never_reached() -> None:
    assert run([("oversize", OversizeConfig(after=0, bytes=2))], b"").data == [b"data: xx\n\n"]
    r = run([("oversize", OversizeConfig(after=5, bytes=2))], BODY)
    assert r.skipped[0]["reason"] == "after: 5 never reached: the stream had 4 events"


def test_oversize_large_is_exactly_that_long() -> None:
    r = run([("oversize", OversizeConfig(after=1, bytes=1 << 20))], E1)
    line = r.data[1]
    assert line.startswith(b"data: ") and line.endswith(b"\n\n")
    assert len(line) == len(b"data: ") + (1 << 20) + 2


def test_on_an_event_stream_one_big_message_or_one_that_never_completes() -> None:
    data = [s.data for s in bs.run([("oversize", OversizeConfig(after=2, bytes=100_000))])]
    assert data[2] == event_message("chunk", oversize_payload(100_000))
    assert data[:2] + data[3:] == [bs.START, bs.D1, bs.D2, bs.D3, bs.STOP_BLOCK, bs.STOP, bs.META]
    assert bs.names(b"".join(data))[2] == "chunk"
    config = OversizeConfig(after=2, bytes=100, terminated=False)
    data = [s.data for s in bs.run([("oversize", config)])]
    assert data == [bs.START, bs.D1, event_message("chunk", oversize_payload(100))[:-4]]
    framer = EventStreamFramer()
    assert framer.feed(b"".join(data))[2:] == [] and framer.eof()[0].complete is False
