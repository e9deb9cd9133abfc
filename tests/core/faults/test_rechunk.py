"""The ``rechunk`` fault (docs/faults-transport.md, ``rechunk``): upstream bytes in, the
exact actions out, through the real Pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer
from pydantic import ValidationError

from chaosproxy.core.actions import Send
from chaosproxy.core.faults.base import FaultConfig, fault_rng
from chaosproxy.core.faults.rechunk import RechunkConfig, hostile_cuts, message_cuts
from tests.support import bedrock_stream as bs
from tests.support.fault_transport import BODY, DONE, E1, E2, R, body, ordinals, run, script


def test_rechunk_size_splits_each_event_without_holding_bytes() -> None:
    out, p = run([("rechunk", RechunkConfig(size=6))])
    assert script(out) == [
        (b"data: ", 0, R),
        (b'{"n":1', 0, R),
        (b"}\n\n", 1, R),
        (b"data: ", 0, R),
        (b'{"n":2', 0, R),
        (b"}\n\n", 1, R),
        (b"data: ", 0, R),
        (b"[DONE]", 0, R),
        (b"\n\n", 1, R),
    ]
    assert [ordinals(a) for a in out] == [[1]] * 3 + [[2]] * 3 + [[3]] * 3
    assert p.summary() == ({"rechunk": 3}, [])


def test_rechunk_leaves_short_writes_alone_and_reports_when_nothing_split() -> None:
    out, p = run([("rechunk", RechunkConfig(size=100))])
    assert script(out) == [(E1, 1, ()), (E2, 1, ()), (DONE, 1, ())]
    assert p.summary() == (
        {},
        [{"fault": "rechunk", "position": 0, "reason": "no write was long enough to split"}],
    )


def test_rechunk_sizes_cycle_across_events() -> None:
    # 2,5,2,5… and a shortened last piece still uses up its entry.
    out, _ = run([("rechunk", RechunkConfig(sizes=[2, 5]))])
    sizes = [len(a.data) for a in out if isinstance(a, Send)]
    assert sizes == [2, 5, 2, 5, 1, 5, 2, 5, 2, 1, 2, 5, 2, 5]
    assert body(out) == BODY


def test_rechunk_random_is_seeded() -> None:
    out, _ = run([("rechunk", RechunkConfig(random=(1, 6)))], seed=42)
    sizes = [len(a.data) for a in out if isinstance(a, Send)]
    assert sizes == [3, 4, 6, 1, 1, 1, 6, 1, 3, 4, 5, 5, 1, 3]
    # The draws come from the fault's own generator (seed 42, position 0), one per piece.
    rng = fault_rng(42, 0, "rechunk")
    draws = [rng.randint(1, 6) for _ in sizes]
    assert [min(d, s) for d, s in zip(draws, sizes, strict=True)] == sizes
    assert body(out) == BODY
    again, _ = run([("rechunk", RechunkConfig(random=(1, 6)))], seed=42)
    assert again == out
    other, _ = run([("rechunk", RechunkConfig(random=(1, 6)))], seed=43)
    assert [len(a.data) for a in other if isinstance(a, Send)] != sizes


HOSTILE = 'data: {"t":"é🙂"}\r\n\r\n'.encode() + b"data: [DONE]\r\n\r\n"


def test_rechunk_hostile_boundaries() -> None:
    out, _ = run([("rechunk", RechunkConfig(boundaries="hostile"))], HOSTILE)
    pieces = [a.data for a in out if isinstance(a, Send)]
    assert pieces == [
        b"data",
        b":",
        b" ",
        b"{",
        b'"t":"\xc3',  # é = c3 a9: cut after its first byte
        b"\xa9\xf0",  # 🙂 = f0 9f 99 82
        b'\x9f\x99\x82"',
        b"}",
        b"\r",  # CR | LF
        b"\n",  # between the two line ends that close the event
        b"\r",
        b"\n",
        b"data",
        b":",
        b" [DO",
        b"NE]\r",
        b"\n",
        b"\r",
        b"\n",
    ]
    assert b"".join(pieces) == HOSTILE
    assert [a.ends for a in out if isinstance(a, Send)] == [0] * 11 + [1] + [0] * 6 + [1]


def test_hostile_cuts_lf_and_cr_blank_lines_and_field_colons() -> None:
    data = b"event: x\nid: 7\n\n"
    cuts = hostile_cuts(data)
    assert [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)] == [
        b"event:",
        b" x\nid:",
        b" 7\n",
        b"\n",
    ]
    assert hostile_cuts(b"data: x\r\r") == [4, 5, 8]
    assert hostile_cuts(b"x") == []


def test_rechunk_on_raw_reads() -> None:
    out, p = run([("rechunk", RechunkConfig(size=4))], b"abcdef", b"ghij", fmt="raw")
    assert script(out) == [
        (b"abcd", 0, R),
        (b"ef", 1, R),
        (b"ghij", 1, ()),
    ]
    assert [ordinals(a) for a in out] == [[1], [1], [2]]
    assert p.summary() == ({"rechunk": 1}, [])


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (RechunkConfig, {}, "give exactly one of size, sizes, random, boundaries"),
        (RechunkConfig, {"size": 2, "sizes": [1]}, "give exactly one of"),
        (RechunkConfig, {"size": 0}, "greater than or equal to 1"),
        (RechunkConfig, {"sizes": []}, "at least 1 item"),
        (RechunkConfig, {"sizes": [3, 0]}, "greater than or equal to 1"),
        (RechunkConfig, {"random": [5, 2]}, "random must be [min, max] with min <= max"),
        (RechunkConfig, {"random": [0, 2]}, "greater than or equal to 1"),
        (RechunkConfig, {"boundaries": "nice"}, "Input should be 'hostile'"),
        (RechunkConfig, {"size": 2, "extra": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)


def test_hostile_cuts_fall_inside_preludes_headers_payloads_and_crcs() -> None:
    d1, d2 = bs.D1, bs.D2
    n = len(d1)
    headers = 32 + 33 + 22  # :event-type contentBlockDelta, :content-type, :message-type
    assert d1[4:8] == headers.to_bytes(4, "big")
    payload = 12 + headers
    assert message_cuts(d1) == sorted(
        {2, 4, 8, 10, 12, 14, payload, n - 4, n - 2}
        | {payload + c for c in hostile_cuts(d1[payload : n - 4])}
    )
    assert message_cuts(d1 + d2) == [*message_cuts(d1), n, *(n + c for c in message_cuts(d2))]
    assert message_cuts(d1[:-1]) == [] and message_cuts(b"\x00" * 20) == []
    sends = bs.run([("rechunk", RechunkConfig(boundaries="hostile"))])
    assert b"".join(s.data for s in sends) == bs.BODY
    start = bs.START
    assert [s.data for s in sends][:6] == [
        start[:2],
        start[2:4],
        start[4:8],
        start[8:10],
        start[10:12],
        start[12:14],
    ]
    # botocore reassembles the same messages from the hostile writes
    buffer = EventStreamBuffer()
    got: list[bytes] = []
    for s in sends:
        buffer.add_data(s.data)
        got.extend(m.payload for m in buffer)
    assert got == [m[1] for m in bs.decoded(bs.BODY)]
