"""The framing package's two entry points (chaosproxy/core/framing/__init__.py): a framer
by format (with its size bound), and ``parse_block``, bytes made outside a body read by
the rules of the stream's format: SSE as one block of lines, NDJSON and raw as one line
without its terminator; the bytes kept exactly. The framers' own rules are in
tests/core/framing/."""

from __future__ import annotations

import pytest

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import FramingError, make_framer, parse_block
from chaosproxy.core.framing.ndjson import NdjsonFramer
from chaosproxy.core.framing.raw import RawFramer
from chaosproxy.core.framing.sse import SseFramer


def test_a_framer_by_format_with_its_bound() -> None:
    assert isinstance(make_framer("sse"), SseFramer)
    assert isinstance(make_framer("ndjson"), NdjsonFramer)
    assert isinstance(make_framer("raw"), RawFramer)
    with pytest.raises(FramingError):
        make_framer("ndjson", max_size=4).feed(b"0123456789")
    assert [f.raw for f in make_framer("ndjson", max_size=16).feed(b"0123456789\n")] == [
        b"0123456789\n"
    ]


@pytest.mark.parametrize(
    ("raw", "fmt", "frame"),
    [
        (
            b"event: e\r\nid: 3\r\ndata: a\r\ndata: b\r\n\r\n",
            "sse",
            Frame(
                b"event: e\r\nid: 3\r\ndata: a\r\ndata: b\r\n\r\n",
                data="a\nb",
                event="e",
                id="3",
                newline=b"\r\n",
            ),
        ),
        (b": keepalive\n\n", "sse", Frame(b": keepalive\n\n", comments=(" keepalive",))),
        (b"data: x", "sse", Frame(b"data: x", data="x", newline=b"", complete=False)),
        (b'{"a":1}\r\n', "ndjson", Frame(b'{"a":1}\r\n', data='{"a":1}', newline=b"\r\n")),
        (b"\n", "ndjson", Frame(b"\n")),
        (b"plain", "ndjson", Frame(b"plain", data="plain", newline=b"", complete=False)),
        (b'{"a":1}\n', "raw", Frame(b'{"a":1}\n', data='{"a":1}')),  # (read as a line)
    ],
)
def test_a_block_made_outside_a_body_is_read_by_its_formats_rules(
    raw: bytes, fmt: Format, frame: Frame
) -> None:
    parsed = parse_block(raw, fmt)
    assert parsed == frame
