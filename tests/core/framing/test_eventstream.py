"""EventStreamFramer: one frame per AWS event stream message, both CRCs checked, the
same frames for any chunking, and the same messages as botocore's own decoder."""

from __future__ import annotations

import base64
import random
import struct
import zlib
from typing import Any

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer, ParserError
from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy.core.frames import Frame, format_for_content_type
from chaosproxy.core.framing import FramingError, make_framer, parse_block
from chaosproxy.core.framing.eventstream import (
    EventStreamFramer,
    Header,
    encode_message,
    event_message,
    exception_message,
    message_headers,
    message_payload,
    parse_message,
)
from tests.support.framing_helpers import cut, frame_chunks, frame_until_error, general_path
from tests.support.properties import examples

# --- real-shaped streams (the shapes of AWS's ConverseStream and InvokeModel docs) ------


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


CONVERSE: list[tuple[str, bytes]] = [
    ("messageStart", _json({"role": "assistant", "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"})),
    ("contentBlockDelta", _json({"contentBlockIndex": 0, "delta": {"text": "Hello"}, "p": "abcd"})),
    ("contentBlockDelta", _json({"contentBlockIndex": 0, "delta": {"text": " wörld ✓"}})),
    ("contentBlockStop", _json({"contentBlockIndex": 0, "p": "abcdefghijklmnopqrstuvwxyzABCDEFG"})),
    (
        "contentBlockStart",
        _json(
            {
                "contentBlockIndex": 1,
                "start": {"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": "w"}},
            }
        ),
    ),
    ("contentBlockDelta", _json({"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"ci'}}})),
    (
        "contentBlockDelta",
        _json({"contentBlockIndex": 1, "delta": {"toolUse": {"input": 'ty":1}'}}}),
    ),
    ("contentBlockStop", _json({"contentBlockIndex": 1})),
    ("messageStop", _json({"stopReason": "tool_use"})),
    (
        "metadata",
        _json(
            {
                "usage": {"inputTokens": 12, "outputTokens": 9, "totalTokens": 21},
                "metrics": {"latencyMs": 412},
            }
        ),
    ),
]

ANTHROPIC_CHUNKS = [
    {"type": "message_start", "message": {"id": "msg_bdrk_01", "role": "assistant"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 3}},
]


def converse_body() -> bytes:
    return b"".join(event_message(name, payload) for name, payload in CONVERSE)


def invoke_body() -> bytes:
    return b"".join(
        event_message("chunk", _json({"bytes": base64.b64encode(_json(c)).decode(), "p": None}))
        for c in ANTHROPIC_CHUNKS
    )


#: One message as a decoder gives it: its headers and payload.
Message = tuple[dict[str, Any], bytes]

THROTTLED = exception_message(
    "throttlingException", _json({"message": "Too many requests, please wait before trying again."})
)


def botocore_messages(body: bytes, cuts: list[int] | None = None) -> list[Message]:
    """What botocore's EventStreamBuffer decodes from ``body`` fed in pieces."""
    buffer = EventStreamBuffer()
    out: list[Message] = []
    for chunk in cut(body, cuts or []):
        buffer.add_data(chunk)
        out.extend((m.headers, m.payload) for m in buffer)
    return out


def split(body: bytes, *positions: int, max_size: int = 1 << 20) -> list[Frame]:
    return frame_chunks(EventStreamFramer(max_size), cut(body, positions))


def ours(frames: list[Frame]) -> list[Message]:
    return [(message_headers(f.raw), message_payload(f.raw)) for f in frames if f.complete]


# --- whole reads -----------------------------------------------------------------------


@pytest.mark.parametrize("make", [converse_body, invoke_body], ids=["converse", "invoke"])
def test_whole_read_gives_one_frame_per_message(make: Any) -> None:
    body = make()
    frames = split(body)
    assert b"".join(f.raw for f in frames) == body
    assert ours(frames) == botocore_messages(body)
    assert all(f.complete and f.newline == b"" and f.data is not None for f in frames)


def test_frames_say_the_message_name_and_payload() -> None:
    frames = split(converse_body() + THROTTLED)
    assert [f.event for f in frames] == [name for name, _ in CONVERSE] + ["throttlingException"]
    assert [f.data for f in frames[:-1]] == [p.decode() for _, p in CONVERSE]
    assert frames[2].json() == {"contentBlockIndex": 0, "delta": {"text": " wörld ✓"}}
    assert frames[2].type == "contentBlockDelta"
    assert message_headers(frames[-1].raw) == {
        ":exception-type": "throttlingException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }


def test_an_error_message_is_named_by_its_error_code() -> None:
    raw = encode_message({":message-type": "error", ":error-code": "InternalFailure"}, b"")
    (frame,) = split(raw)
    assert (frame.event, frame.data, frame.is_event) == ("InternalFailure", "", True)


def test_every_two_way_split_of_both_streams() -> None:
    for body in (converse_body(), invoke_body() + THROTTLED):
        expected = split(body)
        for k in range(len(body) + 1):
            assert split(body, k) == expected, f"split at {k}"


def test_every_three_way_split_inside_one_message() -> None:
    """Both cuts anywhere in a message (prelude, headers, payload, CRC) and its
    neighbours' edges."""
    first, second, _ = (event_message(n, p) for n, p in CONVERSE[1:4])
    body = first + second
    expected = split(body)
    for i in range(len(first) - 4, len(body) + 1):
        for j in range(i, len(body) + 1):
            assert split(body, i, j) == expected, f"cuts at {i}, {j}"


def test_byte_by_byte_and_other_reads() -> None:
    body = converse_body()
    expected = split(body)
    assert (
        frame_chunks(EventStreamFramer(), [body[i : i + 1] for i in range(len(body))]) == expected
    )
    assert frame_chunks(EventStreamFramer(), general_path([body[:50], body[50:]])) == expected
    assert frame_chunks(EventStreamFramer(), [memoryview(body)]) == expected


def test_botocore_decodes_every_header_type_we_encode() -> None:
    headers: list[Header] = [
        ("t", 0, True),
        ("f", 1, False),
        ("byte", 2, -7),
        ("short", 3, -30000),
        ("int", 4, 2_000_000_000),
        ("long", 5, -(2**62)),
        ("bytes", 6, b"\x00\xff raw"),
        ("str", 7, "wörld"),
        ("time", 8, 1_700_000_000_000),
        ("uuid", 9, bytes(range(16))),
    ]
    raw = encode_message(headers, b"\x00binary payload\xff")
    expected = {name: value for name, _, value in headers}
    assert botocore_messages(raw) == [(expected, b"\x00binary payload\xff")]
    (frame,) = split(raw)
    assert message_headers(frame.raw) == expected
    assert frame.data == "\x00binary payload\ufffd"  # decoded with replacement
    assert frame.event is None  # an event with no :event-type


def test_parse_message_reads_one_built_message() -> None:
    raw = event_message("contentBlockDelta", b'{"a":1}')
    assert parse_message(raw) == split(raw)[0]
    assert parse_block(raw, "eventstream") == split(raw)[0]
    broken = parse_message(raw[:-1] + bytes([raw[-1] ^ 1]))
    assert (broken.complete, broken.data) == (False, None)
    assert parse_message(b"short") == Frame(b"short", None, None, None, None, (), b"", False)
    assert message_headers(b"short") == {} and message_payload(b"short") == b""


def test_make_framer_and_content_type() -> None:
    assert isinstance(make_framer("eventstream", 64), EventStreamFramer)
    assert format_for_content_type("application/vnd.amazon.eventstream") == "eventstream"
    assert format_for_content_type("Application/VND.Amazon.EventStream; x=1") == "eventstream"
    with pytest.raises(ValueError, match="max_size must be >= 16"):
        EventStreamFramer(15)


# --- the end of the body -----------------------------------------------------------------


def test_eof_keeps_a_partial_message_as_one_incomplete_frame() -> None:
    body = converse_body()
    whole = split(body)
    for k in (1, 11, 12, 13, len(event_message(*CONVERSE[-1])) - 1):
        frames = split(body[:-k])
        assert frames[:-1] == whole[:-1]
        assert frames[-1] == Frame(
            body[-len(whole[-1].raw) : -k], None, None, None, None, (), b"", False
        )
    assert split(b"") == []


# --- errors --------------------------------------------------------------------------------


def _with_prelude(total: int, headers: int) -> bytes:
    prelude = struct.pack("!II", total, headers)
    return prelude + struct.pack("!I", zlib.crc32(prelude))


def _flip(raw: bytes, at: int) -> bytes:
    return raw[:at] + bytes([raw[at] ^ 0x40]) + raw[at + 1 :]


GOOD = event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"ok"}}')


def _resealed(raw: bytes) -> bytes:
    """``raw`` with its message CRC made right again (a header broken on purpose)."""
    return raw[:-4] + struct.pack("!I", zlib.crc32(raw[:-4]))


def _retyped(raw: bytes, at: int, new: bytes) -> bytes:
    return raw[:at] + new + raw[at + len(new) :]


BIG = event_message("x", b"y" * 300)
#: One header "a" (name length at 12, name at 13, type at 14, value length at 15-16).
ONE_HEADER = encode_message([("a", 7, "bcd")], b"")
BYTES_HEADER = encode_message([("a", 6, b"\xff")], b"")

ERRORS = {
    "prelude_crc": (
        _flip(GOOD, 9),
        "event stream message 2: prelude CRC mismatch (prelude says 0x",
    ),
    "prelude_length_crc": (_flip(GOOD, 2), "event stream message 2: prelude CRC mismatch"),
    "message_crc": (_flip(GOOD, 40), "event stream message 2: message CRC mismatch (message says"),
    "under_overhead": (
        _with_prelude(15, 0) + b"\x00" * 3,
        "event stream message 2: total length 15 is under the 16 bytes of prelude and CRCs",
    ),
    "headers_too_long": (
        _with_prelude(20, 5) + b"\x00" * 8,
        "event stream message 2: headers length 5 does not fit in a message of 20 bytes",
    ),
    "over_max_size": (
        BIG,
        f"event stream message 2 of {len(BIG)} bytes is longer than max_size (256 bytes)",
    ),
    "unknown_type": (
        _resealed(_retyped(ONE_HEADER, 14, b"\x0c")),
        "event stream message 2: header 'a' has unknown type 12",
    ),
    "duplicate": (
        encode_message([("a", 7, "b"), ("a", 7, "c")], b""),
        "event stream message 2: header 'a' given twice",
    ),
    "runs_past": (
        _resealed(_retyped(ONE_HEADER, 15, b"\x00\x09")),
        "event stream message 2: header 'a' runs past the headers",
    ),
    "not_utf8_unsealed": (
        _retyped(BYTES_HEADER, 14, b"\x07"),
        "event stream message 2: message CRC mismatch",  # the CRC says so first
    ),
    "not_utf8": (
        _resealed(_retyped(BYTES_HEADER, 14, b"\x07")),
        "event stream message 2: header 'a' is not UTF-8",
    ),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_a_bad_message_is_an_error_after_the_good_ones_at_every_split(name: str) -> None:
    bad, reason = ERRORS[name]
    body = GOOD + bad + GOOD
    for k in range(len(body) + 1):
        frames, raised = frame_until_error(EventStreamFramer(256), cut(body, [k]))
        assert raised, f"split at {k}"
        assert frames == split(GOOD), f"split at {k}"
    framer = EventStreamFramer(256)
    assert framer.feed(body) == split(GOOD)  # the good one first ...
    with pytest.raises(FramingError) as caught:
        framer.feed(b"")  # ... the error on the next call, and every call after
    assert reason in str(caught.value)
    with pytest.raises(FramingError):
        framer.eof()


def test_the_size_bound_holds_before_the_message_arrives() -> None:
    """A prelude announcing 4 GB is refused at its 12th byte: nothing is buffered for it."""
    framer = EventStreamFramer()
    with pytest.raises(FramingError, match="4294967295 bytes is longer than max_size"):
        framer.feed(_with_prelude(0xFFFFFFFF, 0))


# --- hypothesis: long inputs ------------------------------------------------------------

_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20).filter(
    lambda s: len(s.encode()) < 256
)
_header = st.one_of(
    st.tuples(_names, st.sampled_from([0, 1]), st.just(True)).map(
        lambda h: (h[0], h[1], h[1] == 0)
    ),
    st.tuples(_names, st.just(2), st.integers(-128, 127)),
    st.tuples(_names, st.just(3), st.integers(-(2**15), 2**15 - 1)),
    st.tuples(_names, st.just(4), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(_names, st.sampled_from([5, 8]), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(_names, st.just(6), st.binary(max_size=40)),
    st.tuples(_names, st.just(7), st.text(max_size=40)),
    st.tuples(_names, st.just(9), st.binary(min_size=16, max_size=16)),
)
_message = st.builds(
    lambda headers, payload: encode_message(list({h[0]: h for h in headers}.values()), payload),
    st.lists(_header, max_size=6),
    st.binary(max_size=300),
)


@given(
    messages=st.lists(_message, min_size=1, max_size=40),
    cuts=st.lists(st.integers(0, 12000), max_size=30),
)
@settings(max_examples=examples(300), deadline=None)
def test_hypothesis_any_chunking_gives_botocores_messages(
    messages: list[bytes], cuts: list[int]
) -> None:
    body = b"".join(messages)
    frames = frame_chunks(EventStreamFramer(), cut(body, [c % (len(body) + 1) for c in cuts]))
    assert [f.raw for f in frames] == messages
    assert ours(frames) == botocore_messages(body, cuts=[c % (len(body) + 1) for c in cuts])


# --- the fuzz against botocore --------------------------------------------------------------


def _random_message(rng: random.Random) -> bytes:
    headers: list[Header] = []
    for i in range(rng.randrange(5)):
        type_ = rng.randrange(10)
        value: Any = {
            0: True,
            1: False,
            2: rng.randrange(-128, 128),
            3: rng.randrange(-(2**15), 2**15),
            4: rng.randrange(-(2**31), 2**31),
            5: rng.randrange(-(2**63), 2**63),
            6: rng.randbytes(rng.randrange(20)),
            7: "".join(rng.choice("aé✓z\U0001f600") for _ in range(rng.randrange(10))),
            8: rng.randrange(0, 2**62),
            9: rng.randbytes(16),
        }[type_]
        headers.append((f"h{i}", type_, value))
    return encode_message(headers, rng.randbytes(rng.randrange(200)))


def _botocore_until_error(body: bytes, cuts: list[int]) -> tuple[list[Message], bool]:
    buffer = EventStreamBuffer()
    out: list[Message] = []
    try:
        for chunk in cut(body, cuts):
            buffer.add_data(chunk)
            out.extend((m.headers, m.payload) for m in buffer)
    except ParserError:
        return out, True
    return out, False


def test_fuzz_zero_mismatches_with_botocore() -> None:
    """Seeded: random streams, some with one byte flipped, cut at random; ours and
    botocore's decoders agree on every message and on whether the stream is broken."""
    rng = random.Random(37)
    runs = examples(2000)
    corrupted = 0
    for run in range(runs):
        body = b"".join(_random_message(rng) for _ in range(rng.randrange(1, 8)))
        if run % 3 == 0:
            at = rng.randrange(len(body))
            body = body[:at] + bytes([body[at] ^ (1 << rng.randrange(8))]) + body[at + 1 :]
            corrupted += 1
        cuts = sorted(rng.randrange(len(body) + 1) for _ in range(rng.randrange(6)))
        theirs, their_error = _botocore_until_error(body, cuts)
        frames, our_error = frame_until_error(EventStreamFramer(1 << 20), cut(body, cuts))
        assert ours(frames) == theirs, f"run {run}"
        # botocore never sees the end: a partial message at eof is its silence, our
        # incomplete frame.
        assert our_error == their_error, f"run {run}"
    assert corrupted == len(range(0, runs, 3))
