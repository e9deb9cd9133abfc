"""The WebSocket side of the framing (chaosproxy/core/framing/websocket.py): a server's
frames byte for byte (RFC 6455, 5.2: the three length forms, FIN, no mask), close
payloads, messages as NDJSON lines and the pipeline's writes cut back into messages,
at every split point."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaosproxy.core.framing.websocket import (
    BINARY,
    CONTINUATION,
    PING,
    TEXT,
    MessageSplitter,
    WsFrame,
    close_payload,
    encode_frame,
    message_line,
)


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (WsFrame(TEXT, b"hi"), b"\x81\x02hi"),
        (WsFrame(TEXT, b"hi", fin=False), b"\x01\x02hi"),
        (WsFrame(CONTINUATION, b"!"), b"\x80\x01!"),
        (WsFrame(PING, b""), b"\x89\x00"),
        (WsFrame(BINARY, b"x" * 125), b"\x82\x7d" + b"x" * 125),
        (WsFrame(BINARY, b"x" * 126), b"\x82\x7e\x00\x7e" + b"x" * 126),
        (WsFrame(BINARY, b"x" * 65536), b"\x82\x7f" + (65536).to_bytes(8, "big") + b"x" * 65536),
    ],
    ids=["text", "not-fin", "continuation", "ping", "125", "126", "64k"],
)
def test_server_frames_byte_for_byte(frame: WsFrame, expected: bytes) -> None:
    assert encode_frame(frame) == expected


def test_close_payload_is_the_code_then_the_reason_cut_at_a_character() -> None:
    assert close_payload(1011, "boom") == b"\x03\xf3boom"
    long = close_payload(1001, "é" * 100)  # 200 bytes: cut to 122, a whole character
    assert long[:2] == b"\x03\xe9" and long[2:].decode() == "é" * 61


def test_a_message_is_one_line_its_line_breaks_read_as_blanks() -> None:
    assert message_line(b'{"a":1}') == b'{"a":1}\n'
    assert message_line(b'{\r\n "a": "x\\ny"\n}') == b'{   "a": "x\\ny" }\n'


MESSAGES = [b'{"type":"a"}', b"", b'{"type":"b","delta":"\xc3\xa9"}']


def test_the_splitter_gives_back_each_message_at_every_split_point() -> None:
    stream = b"".join(message_line(m) for m in MESSAGES)
    for cut in range(len(stream) + 1):
        splitter = MessageSplitter()
        got = splitter.feed(stream[:cut]) + splitter.feed(stream[cut:])
        assert got == MESSAGES, cut
        assert splitter.rest() == b""


def test_the_splitter_keeps_an_unfinished_line() -> None:
    splitter = MessageSplitter()
    assert splitter.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert splitter.rest() == b'{"b"'


@given(st.lists(st.binary().map(lambda b: b.replace(b"\n", b"")), max_size=8), st.data())
def test_any_chunking_gives_the_same_messages(messages: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(message_line(m) for m in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    splitter = MessageSplitter()
    got: list[bytes] = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += splitter.feed(stream[a:b])
    assert [m.replace(b"\r", b" ") for m in messages] == got
