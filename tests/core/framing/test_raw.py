"""RawFramer: one frame per upstream read, untouched."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import make_framer
from chaosproxy.core.framing.raw import RawFramer
from tests.support.framing_helpers import frame_chunks
from tests.support.properties import examples


def test_each_read_is_one_frame() -> None:
    framer = RawFramer()
    assert framer.feed(b"data: a\n\nda") == [Frame(raw=b"data: a\n\nda", data=None, newline=b"")]
    assert framer.feed(b"\xff") == [Frame(raw=b"\xff", data=None, newline=b"")]
    assert framer.eof() == []


def test_empty_read_gives_no_frame() -> None:
    assert RawFramer().feed(b"") == []
    assert RawFramer().eof() == []


def test_raw_frames_are_not_events() -> None:
    (frame,) = RawFramer().feed(b'{"type": "x"}')
    assert not frame.is_event
    assert frame.complete


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.binary(max_size=20), max_size=10))
def test_frames_are_the_reads(chunks: list[bytes]) -> None:
    frames = frame_chunks(RawFramer(), chunks)
    assert [f.raw for f in frames] == [c for c in chunks if c]
    assert b"".join(f.raw for f in frames) == b"".join(chunks)


def test_make_framer_builds_a_raw_framer() -> None:
    assert isinstance(make_framer("raw"), RawFramer)
