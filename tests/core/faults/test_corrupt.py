"""The ``corrupt`` fault (docs/faults-event.md, ``corrupt``): a real Pipeline (framer,
profile, faults) over a small literal body: the exact bytes of every write, the upstream
ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from pydantic import ValidationError

from chaosproxy.core.actions import Send
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.corrupt import CorruptConfig, CorruptFault
from chaosproxy.core.faults.drawing import Choices, Shape, options
from chaosproxy.core.framing import FramingError
from chaosproxy.core.framing.eventstream import EventStreamFramer, message_headers
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile
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
        ("corrupt", CorruptConfig(match="nowhere", mode="invalid_json")),
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
        (CorruptConfig, {}),
        (CorruptConfig, {"mode": "scramble"}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


TEXT = 'data: {"text":"héllo wörld"}\n\n'.encode()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("truncate_json", b'data: {"text":"h\xc3\xa9\n\n'),  # 12 of 24 bytes
        ("invalid_json", 'data: {"text":"héllo wörld"\n\n'.encode()),
        ("invalid_utf8", b'data: {"text":"h\xc3\xa9\xffllo w\xc3\xb6rld"}\n\n'),
        ("empty_data", b"data:\n\n"),
    ],
)
def test_corrupt_modes(mode: str, expected: bytes) -> None:
    cfg = CorruptConfig.model_validate({"mode": mode, "nth": 1})
    r = assert_chunking_independent([("corrupt", cfg)], TEXT + DONE)
    assert r.data == [expected, DONE]
    assert r.faults == [("corrupt",), ()]
    assert r.ordinals == [1, 2]


def test_corrupt_truncate_backs_off_to_a_character_boundary() -> None:
    # 8 bytes of data; half is 4, inside the second "é" (bytes 3-4): cut back to 3.
    r = run([("corrupt", CorruptConfig(mode="truncate_json"))], 'data: "ééé"\n\n'.encode())
    assert r.data == ['data: "é\n\n'.encode()]
    r = run([("corrupt", CorruptConfig(mode="invalid_utf8"))], 'data: "ééé"\n\n'.encode())
    assert r.data == [b'data: "\xc3\xa9\xff\xc3\xa9\xc3\xa9"\n\n']


def test_corrupt_invalid_json_is_never_valid_json() -> None:
    samples = [b'{"a":{}}', b"[1,[2]]", b"42", b'"s"', b"true", b"{}  "]
    for payload in samples:
        r = run([("corrupt", CorruptConfig(mode="invalid_json"))], b"data: " + payload + b"\n\n")
        data = r.sends[0].events[0].frame.data
        assert data is not None
        with pytest.raises(json.JSONDecodeError):
            json.loads(data)
    r = run([("corrupt", CorruptConfig(mode="invalid_json"))], b"data: 42\n\n")
    assert r.data == [b"data: 42}\n\n"]


def test_corrupt_keeps_crlf_and_other_fields() -> None:
    body = b'event: x\r\nid: 1\r\ndata: {"a":1}\r\n\r\n'
    r = run([("corrupt", CorruptConfig(mode="invalid_json"))], body)
    assert r.data == [b'event: x\r\nid: 1\r\ndata: {"a":1\r\n\r\n']


def test_corrupt_ndjson() -> None:
    for mode, line in [
        ("empty_data", b"{}"),
        ("invalid_json", b'{"n":2'),
        ("truncate_json", b'{"n'),
        ("invalid_utf8", b'{"n\xff":2}'),
    ]:
        r = run([("corrupt", CorruptConfig(mode=mode, nth=2))], NDJSON, fmt="ndjson")  # type: ignore[arg-type]
        assert r.data[1] == line + b"\n", mode
        assert r.data[0] == b'{"n":1}\n'


def test_corrupt_an_unterminated_final_event_stays_unterminated() -> None:
    r = run([("corrupt", CorruptConfig(mode="empty_data", kind="terminal"))], E1 + b"data: [DONE]")
    assert r.data == [E1, b"data:"]
    assert r.sends[1].events[0].frame.complete is False


def test_corrupt_keeps_the_wire_bytes_of_invalid_utf8_data() -> None:
    body = b'data: "\xff\xfeab"\n\n'
    r = run([("corrupt", CorruptConfig(mode="invalid_json"))], body)
    assert r.data == [b'data: "\xff\xfeab"}\n\n']
    r = run([("corrupt", CorruptConfig(mode="truncate_json"))], b'{"\xff":1}\n', fmt="ndjson")
    assert r.data == [b'{"\xff\n']


def test_on_an_event_stream_a_corrupt_message_is_re_encoded_with_right_lengths_and_crcs() -> None:
    sends = bs.run([("corrupt", CorruptConfig(kind="delta", nth=1, mode="invalid_json"))])
    messages = bs.decoded(b"".join(s.data for s in sends))  # no ChecksumMismatch
    assert messages[1] == (message_headers(bs.D1), b'{"contentBlockIndex":0,"delta":{"text":"Hel"}')
    assert [s.data for s in sends][2:] == [bs.D2, bs.D3, bs.STOP_BLOCK, bs.STOP, bs.META]
    assert sends[1].faults == ("corrupt",)


@pytest.mark.parametrize(
    ("mode", "reason"), [("crc", "message CRC mismatch"), ("prelude_crc", "prelude CRC mismatch")]
)
def test_crc_modes_break_one_messages_checksum_as_decoders_see_it(mode: str, reason: str) -> None:
    config = CorruptConfig.model_validate({"kind": "delta", "nth": 2, "mode": mode})
    data = [s.data for s in bs.run([("corrupt", config)])]
    assert data[:2] + data[3:] == [bs.START, bs.D1, bs.D3, bs.STOP_BLOCK, bs.STOP, bs.META]
    assert len(data[2]) == len(bs.D2) and data[2] != bs.D2
    body = b"".join(data)
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    assert next(buffer).payload == orjson.dumps({"role": "assistant"})
    next(buffer)
    with pytest.raises(ChecksumMismatch):
        next(buffer)
    framer = EventStreamFramer()
    assert len(framer.feed(body)) == 2
    with pytest.raises(FramingError, match=f"event stream message 3: {reason}"):
        framer.feed(b"")


def test_crc_modes_on_another_framing_skip_and_say_why() -> None:
    profile = get_profile("generic")
    specs: list[Spec] = [("corrupt", CorruptConfig(mode="crc"))]
    pipeline = Pipeline(build_faults(specs, 7, "sse", profile), "sse", profile)
    body = b'data: {"n":1}\n\n'
    assert b"".join(a.data for a in pipeline.feed(body, 0.0) if isinstance(a, Send)) == body
    pipeline.end(0.0)
    assert pipeline.summary() == (
        {},
        [
            {
                "fault": "corrupt",
                "position": 0,
                "reason": "mode crc breaks an AWS event stream's checksum; this body is sse, "
                "which has none",
            }
        ],
    )


@dataclass(frozen=True)
class _Within:
    shape: Shape
    endless: bool = False


def test_explore_draws_the_crc_modes_only_for_an_event_stream() -> None:
    explore = CorruptFault.declaration.explore
    assert explore is not None
    kinds = {"start": 1, "delta": 3, "other": 2, "terminal": 1}
    for fmt, modes in [
        ("sse", {"truncate_json", "invalid_json", "invalid_utf8", "empty_data"}),
        ("eventstream", set(options(CorruptConfig, "mode"))),
    ]:
        space = _Within(Shape("bedrock", fmt, 7, kinds, 700))
        drawn = {explore.draw(Choices(random.Random(k)), space)["mode"] for k in range(200)}
        assert drawn == modes, fmt
