"""The ``throttle`` fault (docs/faults-transport.md, ``throttle``): upstream bytes in, the
exact actions out, through the real Pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Sleep
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.throttle import ThrottleConfig
from chaosproxy.core.frames import Format
from tests.support.fault_transport import E1, run, script


@pytest.mark.parametrize(
    ("rate", "body", "fmt", "pieces", "gap"),
    [
        pytest.param(
            100,
            E1,
            "sse",
            [b"data:", b' {"n"', b":1}\n\n"],
            0.05,
            id="5-byte-writes-at-100-bytes-a-second",
        ),
        pytest.param(
            4, b"abc", "raw", [b"a", b"b", b"c"], 0.25, id="single-bytes-below-20-bytes-a-second"
        ),
    ],
)
def test_throttle_pieces_and_sleeps(
    rate: int, body: bytes, fmt: Format, pieces: list[bytes], gap: float
) -> None:
    """The body in ``pieces``, each followed by a sleep of ``gap``; the last ends the event."""
    out, p = run([("throttle", ThrottleConfig(bytes_per_second=rate))], body, fmt=fmt)
    expected: list[tuple[Any, ...]] = []
    for i, piece in enumerate(pieces, 1):
        expected += [(piece, int(i == len(pieces)), ("throttle",)), ("sleep", gap, "throttle")]
    assert script(out) == expected
    assert sum(a.seconds for a in out if isinstance(a, Sleep)) == pytest.approx(len(body) / rate)
    assert p.summary() == ({"throttle": 1}, [])


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (ThrottleConfig, {}, "Field required"),
        (ThrottleConfig, {"bytes_per_second": 0}, "greater than or equal to 1"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)
