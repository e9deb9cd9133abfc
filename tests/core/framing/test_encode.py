"""The framing helpers the faults write events with (chaosproxy/core/framing/encode.py,
parse_block): lines split and joined back, data replaced, blocks parsed as the framers
see them."""

from __future__ import annotations

import pytest

from chaosproxy.core.events import Event
from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import parse_block
from chaosproxy.core.framing.encode import data_bytes, replace_data, split_lines
from chaosproxy.core.framing.eventstream import event_message, parse_message
from chaosproxy.core.providers import get_profile
from tests.support.fault_events import E1, PING


def ev(raw: bytes, ordinal: int, fmt: Format = "sse") -> Event:
    """An event built directly (for tests that call a fault's hooks)."""
    frame = parse_block(raw, fmt)
    return Event(frame, ordinal, get_profile("generic").classify(frame) if ordinal else frozenset())


def test_split_lines_round_trips() -> None:
    raw = b"a\r\nb\rc\n\nd"
    assert split_lines(raw) == [
        (b"a", b"\r\n"),
        (b"b", b"\r"),
        (b"c", b"\n"),
        (b"", b"\n"),
        (b"d", b""),
    ]
    assert b"".join(c + t for c, t in split_lines(raw)) == raw


def test_replace_data_spacing_and_hooks_directly() -> None:
    frame = Frame(raw=b"data:old\n\n", data="old")
    assert replace_data(frame, "sse", b" lead\nx").raw == b"data:  lead\ndata:x\n\n"
    fault = build_faults([("drop", DropConfig(nth=1))], 1, "sse", get_profile("generic"))[0]
    first, comment = ev(E1, 1), ev(PING, 0)
    fault.observe(first)
    assert fault.on_event(comment) == [comment]
    assert fault.on_event(first) == []
    assert fault.on_event_end() == []


def test_parse_block_views() -> None:
    frame = parse_block(
        b"\xef\xbb\xbf: c\r\nevent: e\r\nretry: 5\r\ndata: a\r\ndata\r\n\r\n", "sse"
    )
    assert (frame.data, frame.event, frame.retry, frame.comments) == ("a\n", "e", 5, (" c",))
    assert (frame.newline, frame.complete) == (b"\r\n", True)
    assert parse_block(b"data: x", "sse").complete is False
    assert parse_block(b": only\n\n", "sse").is_event is False
    assert parse_block(b"  \n", "ndjson").data is None
    assert parse_block(b'{"a":1}\r\n', "ndjson").data == '{"a":1}'


@pytest.mark.parametrize(
    "raw",
    [
        b"data: x\n\n",
        b"event: e\r\ndata: {}\r\n\r\n",
        b": c\rid: 7\rretry: 10\rdata\rdata:  two\r\r",
        b"\xef\xbb\xbfdata: bom\n\n",
        b"id: a\x00b\nretry: 1x\nfoo: bar\ndata: \xff\n\n",
        b"data: unterminated",
    ],
)
def test_parse_block_is_the_framers_view(raw: bytes) -> None:
    """One SSE parser: bytes a fault builds parse exactly as the framer cuts them."""
    from chaosproxy.core.framing.sse import SseFramer

    framer = SseFramer()
    frames = framer.feed(raw) + framer.eof()
    assert frames == [parse_block(raw, "sse")]


def test_replace_data_in_an_event_stream_message_keeps_its_headers_and_parsed_view() -> None:
    d1 = event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"Hel"}}')
    frame = parse_message(d1)
    changed = replace_data(frame, "eventstream", b'{"x":1}')
    assert changed.raw[4:8] == d1[4:8] == (87).to_bytes(4, "big")
    assert changed.raw[12 : 12 + 87] == d1[12 : 12 + 87]  # the three headers, as they were
    assert changed == parse_message(changed.raw)
    assert data_bytes(changed, "eventstream") == b'{"x":1}'
    assert (changed.event, changed.data) == ("contentBlockDelta", '{"x":1}')
    partial = parse_message(d1[:-1])
    assert replace_data(partial, "eventstream", b"{}") is partial
