"""Event faults on an AWS event stream (Bedrock): whole messages moved, changed ones
re-encoded with right lengths and CRCs, and every body still what botocore decodes.

Playbook style, as tests/core/test_faults_event.py: a real Pipeline (the event stream
framer, the bedrock profile, the faults) over a literal body, the exact writes out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from chaosproxy.core.actions import Cut, Send
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.corrupt import CorruptConfig
from chaosproxy.core.faults.cut import CutConfig, cut_prefix
from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.faults.duplicate import DuplicateConfig
from chaosproxy.core.faults.inject import InjectConfig
from chaosproxy.core.faults.line_endings import LineEndingsConfig
from chaosproxy.core.faults.mutate import MutateConfig
from chaosproxy.core.faults.oversize import OversizeConfig, oversize_payload
from chaosproxy.core.faults.rechunk import RechunkConfig, hostile_cuts, message_cuts
from chaosproxy.core.faults.reorder import ReorderConfig
from chaosproxy.core.faults.resegment import ResegmentConfig
from chaosproxy.core.faults.split_tool_args import SplitToolArgsConfig
from chaosproxy.core.framing import FramingError
from chaosproxy.core.framing.encode import data_bytes, replace_data
from chaosproxy.core.framing.eventstream import (
    EventStreamFramer,
    event_message,
    exception_message,
    message_headers,
    parse_message,
)
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile

Spec = tuple[str, FaultConfig]


def converse(name: str, payload: Any) -> bytes:
    return event_message(name, orjson.dumps(payload))


START = converse("messageStart", {"role": "assistant"})
D1, D2, D3 = (
    converse("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": t}})
    for t in ("Hel", "lo", " you")
)
STOP_BLOCK = converse("contentBlockStop", {"contentBlockIndex": 0})
STOP = converse("messageStop", {"stopReason": "end_turn"})
META = converse("metadata", {"usage": {"inputTokens": 2, "outputTokens": 3}})
BODY = START + D1 + D2 + D3 + STOP_BLOCK + STOP + META


def run(specs: Sequence[Spec], chunks: Sequence[bytes] = (BODY,), seed: int = 7) -> list[Send]:
    profile = get_profile("bedrock")
    pipeline = Pipeline(
        build_faults(list(specs), seed, "eventstream", profile), "eventstream", profile
    )
    actions = [a for chunk in chunks for a in pipeline.feed(chunk, 0.0)] + pipeline.end(0.0)
    sends = [a for a in actions if isinstance(a, Send)]
    assert len(sends) == len(actions)
    return sends


def decoded(body: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """What botocore reads in ``body``: it checks both CRCs and every length."""
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    messages = [(m.headers, m.payload) for m in buffer]
    assert sum(16 + len(p) for _, p in messages) <= len(body)
    return messages


def names(body: bytes) -> list[str]:
    return [str(h.get(":event-type", h.get(":exception-type"))) for h, _ in decoded(body)]


def test_no_fault_every_message_is_one_write_with_its_kinds() -> None:
    sends = run([])
    assert [s.data for s in sends] == [START, D1, D2, D3, STOP_BLOCK, STOP, META]
    assert [sorted(e.kinds) for s in sends for e in s.events] == [
        ["start"],
        ["delta"],
        ["delta"],
        ["delta"],
        ["other"],
        ["other"],
        ["terminal", "usage"],
    ]


def test_drop_duplicate_and_reorder_move_whole_messages_at_any_chunking() -> None:
    specs: list[Spec] = [
        ("drop", DropConfig(kind="delta", nth=2)),
        ("duplicate", DuplicateConfig(kind="terminal")),
        ("reorder", ReorderConfig(kind="delta", window=2)),
    ]
    whole = [s.data for s in run(specs)]
    assert whole == [START, D3, D1, STOP_BLOCK, STOP, META, META]
    for k in range(1, len(BODY)):
        assert [s.data for s in run(specs, [BODY[:k], BODY[k:]])] == whole, k
    assert names(b"".join(whole)) == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "metadata",
    ]


def test_corrupt_and_mutate_re_encode_with_right_lengths_and_crcs() -> None:
    sends = run(
        [
            ("corrupt", CorruptConfig(kind="delta", nth=1, mode="invalid_json")),
            ("mutate", MutateConfig(kind="delta", nth=3, set={"delta.text": "ünïcode"})),
        ]
    )
    body = b"".join(s.data for s in sends)
    messages = decoded(body)  # no ChecksumMismatch: both CRCs recomputed
    assert messages[1] == (
        message_headers(D1),
        b'{"contentBlockIndex":0,"delta":{"text":"Hel"}',
    )
    assert orjson.loads(messages[3][1]) == {"contentBlockIndex": 0, "delta": {"text": "ünïcode"}}
    assert [s.data for s in sends][2] == D2  # (the unselected ones untouched)
    assert sends[1].faults == ("corrupt",) and sends[3].faults == ("mutate",)


def test_replace_data_keeps_the_headers_bytes_and_the_parsed_view() -> None:
    frame = parse_message(D1)
    changed = replace_data(frame, "eventstream", b'{"x":1}')
    assert changed.raw[4:8] == D1[4:8] == (87).to_bytes(4, "big")
    assert changed.raw[12 : 12 + 87] == D1[12 : 12 + 87]  # the three headers, as they were
    assert changed == parse_message(changed.raw)
    assert data_bytes(changed, "eventstream") == b'{"x":1}'
    assert (changed.event, changed.data) == ("contentBlockDelta", '{"x":1}')
    partial = parse_message(D1[:-1])
    assert replace_data(partial, "eventstream", b"{}") is partial


def test_inject_the_providers_exception_and_a_named_event() -> None:
    sends = run(
        [
            ("inject", InjectConfig.model_validate({"after": 2, "event": {"kind": "error"}})),
            (
                "inject",
                InjectConfig.model_validate(
                    {"after": "terminal", "event": {"event": "metadata", "data": {"late": True}}}
                ),
            ),
        ]
    )
    data = [s.data for s in sends]
    assert data[2] == get_profile("bedrock").error_event("eventstream")
    assert data[2] == exception_message(
        "throttlingException",
        b'{"message":"Too many requests, please wait before trying again."}',
    )
    assert sorted(sends[2].events[0].kinds) == ["error"]
    assert data[-1] == event_message("metadata", b'{"late":true}')
    assert names(b"".join(data)) == [
        "messageStart",
        "contentBlockDelta",
        "throttlingException",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "metadata",
    ]


def test_line_endings_leave_an_event_stream_alone_and_say_why() -> None:
    profile = get_profile("bedrock")
    specs: list[Spec] = [("line_endings", LineEndingsConfig(style="crlf"))]
    pipeline = Pipeline(build_faults(specs, 7, "eventstream", profile), "eventstream", profile)
    sends = [a for a in pipeline.feed(BODY, 0.0) + pipeline.end(0.0) if isinstance(a, Send)]
    assert b"".join(s.data for s in sends) == BODY
    applied, skipped = pipeline.summary()
    assert applied == {}
    assert skipped == [
        {
            "fault": "line_endings",
            "position": 0,
            "reason": "an event stream has no line endings; the body was left unchanged",
        }
    ]


def test_corrupt_crc_modes_break_one_messages_checksum_as_decoders_see_it() -> None:
    for mode, reason in [("crc", "message CRC mismatch"), ("prelude_crc", "prelude CRC mismatch")]:
        sends = run([("corrupt", CorruptConfig(kind="delta", nth=2, mode=mode))])  # type: ignore[arg-type]
        data = [s.data for s in sends]
        assert data[:2] + data[3:] == [START, D1, D3, STOP_BLOCK, STOP, META]
        assert len(data[2]) == len(D2) and data[2] != D2
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


def test_corrupt_crc_on_another_framing_skips_and_says_why() -> None:
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


def test_rechunk_hostile_cuts_inside_preludes_headers_payloads_and_crcs() -> None:
    n = len(D1)
    headers = 32 + 33 + 22  # :event-type contentBlockDelta, :content-type, :message-type
    assert D1[4:8] == headers.to_bytes(4, "big")
    payload = 12 + headers
    assert message_cuts(D1) == sorted(
        {2, 4, 8, 10, 12, 14, payload, n - 4, n - 2}
        | {payload + c for c in hostile_cuts(D1[payload : n - 4])}
    )
    assert message_cuts(D1 + D2) == [*message_cuts(D1), n, *(n + c for c in message_cuts(D2))]
    assert message_cuts(D1[:-1]) == [] and message_cuts(b"\x00" * 20) == []
    sends = run([("rechunk", RechunkConfig(boundaries="hostile"))])
    assert b"".join(s.data for s in sends) == BODY
    assert [s.data for s in sends][:6] == [
        START[:2],
        START[2:4],
        START[4:8],
        START[8:10],
        START[10:12],
        START[12:14],
    ]
    # botocore reassembles the same messages from the hostile writes
    buffer = EventStreamBuffer()
    got: list[bytes] = []
    for s in sends:
        buffer.add_data(s.data)
        got.extend(m.payload for m in buffer)
    assert got == [m[1] for m in decoded(BODY)]


TOOL = b"".join(
    [
        START,
        converse(
            "contentBlockStart",
            {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t1", "name": "w"}}},
        ),
        converse(
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"toolUse": {"input": '{"city":"S\\u00e3o'}}},
        ),
        converse(
            "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": ' P"}'}}}
        ),
        converse("contentBlockStop", {"contentBlockIndex": 0}),
        STOP,
        META,
    ]
)


def tool_input(body: bytes) -> list[str]:
    return [
        orjson.loads(p)["delta"]["toolUse"]["input"]
        for h, p in decoded(body)
        if h[":event-type"] == "contentBlockDelta"
    ]


def test_split_tool_args_cuts_tool_use_input_into_more_messages() -> None:
    sends = run([("split_tool_args", SplitToolArgsConfig(at=["keys", "escapes"]))], [TOOL])
    body = b"".join(s.data for s in sends)
    fragments = tool_input(body)
    assert "".join(fragments) == '{"city":"S\\u00e3o P"}'
    # inside the key, after the escape's backslash and inside its four hex digits
    assert fragments == ['{"c', 'ity":"S\\', "u00", "e3o", ' P"}']
    assert names(body).count("contentBlockDelta") == len(fragments)


def test_resegment_cuts_text_deltas_into_more_messages() -> None:
    sends = run([("resegment", ResegmentConfig(every=1))])
    body = b"".join(s.data for s in sends)
    texts = [
        orjson.loads(p)["delta"]["text"]
        for h, p in decoded(body)
        if h[":event-type"] == "contentBlockDelta"
    ]
    assert texts == list("Hello you")


def test_oversize_is_one_big_message_or_a_message_that_never_completes() -> None:
    sends = run([("oversize", OversizeConfig(after=2, bytes=100_000))])
    data = [s.data for s in sends]
    assert data[2] == event_message("chunk", oversize_payload(100_000))
    assert data[:2] + data[3:] == [START, D1, D2, D3, STOP_BLOCK, STOP, META]
    assert names(b"".join(data))[2] == "chunk"
    sends = run([("oversize", OversizeConfig(after=2, bytes=100, terminated=False))])
    data = [s.data for s in sends]
    assert data == [START, D1, event_message("chunk", oversize_payload(100))[:-4]]
    framer = EventStreamFramer()
    assert framer.feed(b"".join(data))[2:] == [] and framer.eof()[0].complete is False


def cut_run(position: str) -> tuple[list[bytes], list[Any]]:
    profile = get_profile("bedrock")
    cfg = CutConfig.model_validate({"after": 2, "position": position, "how": "close"})
    pipeline = Pipeline(
        build_faults([("cut", cfg)], 7, "eventstream", profile), "eventstream", profile
    )
    actions = pipeline.feed(BODY, 0.0) + pipeline.end(0.0)
    return [a.data for a in actions if isinstance(a, Send)], [
        a for a in actions if isinstance(a, Cut)
    ]


def test_cut_positions_inside_a_message_truncate_it() -> None:
    """after_data: all but the message CRC; mid_line: half the message; mid_utf8: into
    the payload's first multi-byte character (botocore keeps each partial message in
    its buffer and says nothing: tests/e2e/test_bedrock_boto3.py)."""
    wide = converse("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " wörld"}})
    assert cut_run("after_data")[0] == [START, D1, D2[:-4]]
    assert cut_run("mid_line")[0] == [START, D1, D2[: len(D2) // 2]]
    data, (cut,) = cut_run("after_id")
    assert data == [START, D1] and cut.detail["fallback"] == "an event stream message has no id"
    assert cut_prefix(wide, "mid_utf8", "eventstream") == (wide[: wide.index(b"\xc3") + 1], "")
    assert cut_prefix(D2, "mid_utf8", "eventstream") == (
        None,
        "the event has no multi-byte UTF-8 character",
    )
    # (its CRC may hold such bytes: only the payload is searched)
    crc_lead = next(
        m
        for i in range(200)
        if (m := converse("x", {"n": i}))[-4:-2][0] in range(0xC0, 0xF8)
        and m[-3] in range(0x80, 0xC0)
    )
    assert cut_prefix(crc_lead, "mid_utf8", "eventstream")[0] is None
