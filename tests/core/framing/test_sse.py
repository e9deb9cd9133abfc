"""SseFramer: bytes in, event blocks out, the same frames for any chunking.

Three layers, as h11's test_io does it: every provider fixture whole, at every split
point and byte by byte; hypothesis bodies at random splits against a naive whole-body
reference parser; and one small test per WHATWG edge case.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import DEFAULT_MAX_SIZE, FramingError, make_framer
from chaosproxy.core.framing.sse import SseFramer
from tests.support.framing_helpers import (
    BOM,
    byte_soup,
    cut,
    cut_points,
    fixture_bounds_window,
    frame_bounds,
    frame_chunks,
    frame_until_error,
    general_path,
    reference_sse_frames,
    source_module,
    sse_bodies,
    three_way_cuts,
    uniform_sse_bodies,
    within_max_size,
)
from tests.support.properties import examples
from tests.support.repo import fixture_paths

#: Fixtures up to this size are re-framed from the start at every split point; longer
#: ones at every split point within a window of frames (see test_every_two_way_split).
WHOLE_BODY_SPLITS_LIMIT = 2048
#: Fixtures up to this size are also cut in three.
THREE_WAY_LIMIT = 1200


def params(paths: list[Path]) -> list[object]:
    assert paths, "no provider capture to parametrize over"
    return [pytest.param(p, id=p.name) for p in paths]


SSE_FIXTURES = fixture_paths(".sse", ".txt")
fixture_params = params(SSE_FIXTURES)
short_fixture_params = params([p for p in SSE_FIXTURES if p.stat().st_size <= THREE_WAY_LIMIT])


def whole(body: bytes) -> list[Frame]:
    return frame_chunks(SseFramer(), [body])


def split(body: bytes, *positions: int, max_size: int = DEFAULT_MAX_SIZE) -> list[Frame]:
    return frame_chunks(SseFramer(max_size), cut(body, positions))


def joined(frames: list[Frame]) -> bytes:
    return b"".join(f.raw for f in frames)


def one(body: bytes | list[bytes]) -> Frame:
    """The single frame of a body (given whole or as chunks)."""
    frames = frame_chunks(SseFramer(), [body] if isinstance(body, bytes) else body)
    assert len(frames) == 1, frames
    return frames[0]


# --- provider fixtures ---------------------------------------------------------------


@pytest.mark.parametrize("path", fixture_params)
def test_fixture_whole_read_matches_reference(path: Path) -> None:
    body = path.read_bytes()
    frames = whole(body)
    assert joined(frames) == body
    assert frames == reference_sse_frames(body)
    assert frames, "a provider fixture has at least one frame"
    ends_with_blank_line = body.endswith((b"\n\n", b"\r\n\r\n", b"\r\r"))
    assert frames[-1].complete is ends_with_blank_line
    assert all(f.complete for f in frames[:-1])


@pytest.mark.parametrize("path", fixture_params)
def test_fixture_byte_by_byte(path: Path) -> None:
    body = path.read_bytes()
    frames = split(body, *range(1, len(body)))
    assert frames == whole(body)
    assert joined(frames) == body


@pytest.mark.parametrize("path", fixture_params)
def test_fixture_every_two_way_split(path: Path) -> None:
    """Every split point gives the frames of the whole read, joined back exactly.

    Short fixtures are framed from their first byte for every split. For the long ones
    that would be quadratic (seconds per file), so each split point is checked on the
    window of frames around it (the frame it falls in and the one before) - a window
    starts on a frame boundary, where a framer's state is fresh - and additionally
    from the first byte at 200 seeded split points.
    """
    body = path.read_bytes()
    expected = whole(body)
    if len(body) <= WHOLE_BODY_SPLITS_LIMIT:
        for k in range(len(body) + 1):
            frames = split(body, k)
            assert frames == expected, f"split at {k}"
            assert joined(frames) == body
        return
    bounds = frame_bounds(expected)
    for k in range(len(body) + 1):
        lo, hi = fixture_bounds_window(bounds, k)
        window = body[bounds[lo] : bounds[hi]]
        assert split(window, k - bounds[lo]) == expected[lo:hi], f"split at {k}"
    for k in random.Random(path.name).sample(range(len(body) + 1), 200):
        assert split(body, k) == expected, f"split at {k}"


@pytest.mark.parametrize("path", short_fixture_params)
def test_fixture_three_way_splits(path: Path) -> None:
    """Short fixtures cut in three, at a dense sample of cut pairs (every pair of all
    would be ~500k framings per fixture): see framing_helpers.three_way_cuts."""
    body = path.read_bytes()
    expected = whole(body)
    for i, j in three_way_cuts(len(body)):
        frames = split(body, i, j)
        assert frames == expected, f"cuts at {i}, {j}"
        assert joined(frames) == body


# --- hypothesis ----------------------------------------------------------------------


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_bodies_any_split(data: st.DataObject) -> None:
    body = data.draw(sse_bodies(), label="body")
    expected = reference_sse_frames(body)
    assert whole(body) == expected
    frames = frame_chunks(SseFramer(), cut(body, cut_points(data, body)))
    assert frames == expected
    assert joined(frames) == body


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_byte_soup_any_split(data: st.DataObject) -> None:
    """Arbitrary bytes (broken UTF-8, stray CRs, BOM fragments): still the invariant."""
    body = data.draw(byte_soup, label="body")
    expected = reference_sse_frames(body)
    assert whole(body) == expected
    assert frame_chunks(SseFramer(), cut(body, cut_points(data, body))) == expected
    assert split(body, *range(1, len(body))) == expected


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_size_limit_is_independent_of_chunking(data: st.DataObject) -> None:
    """With a small max_size, every split returns the same frames before the same
    error (or none), and the error comes iff some frame is longer than max_size."""
    body = data.draw(st.one_of(sse_bodies(), byte_soup), label="body")
    max_size = data.draw(st.integers(min_value=1, max_value=40), label="max_size")
    whole = frame_until_error(SseFramer(max_size), [body])
    assert whole == within_max_size(reference_sse_frames(body), max_size)
    chunks = cut(body, cut_points(data, body))
    assert frame_until_error(SseFramer(max_size), chunks) == whole


# --- line endings --------------------------------------------------------------------


@pytest.mark.parametrize("nl", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_line_endings(nl: bytes) -> None:
    body = b"event: e" + nl + b"data: a" + nl + b"data: b" + nl + nl + b"data: c" + nl + nl
    frames = whole(body)
    assert [f.raw for f in frames] == [
        b"event: e" + nl + b"data: a" + nl + b"data: b" + nl + nl,
        b"data: c" + nl + nl,
    ]
    assert [(f.event, f.data, f.newline, f.complete) for f in frames] == [
        ("e", "a\nb", nl, True),
        (None, "c", nl, True),
    ]


def test_mixed_line_endings_in_one_block() -> None:
    frame = one(b"data: a\rdata: b\r\ndata: c\n\r\n")
    assert (frame.data, frame.newline) == ("a\nb\nc", b"\r")


def test_cr_ending_one_read_and_lf_starting_the_next() -> None:
    framer = SseFramer()
    assert framer.feed(b"data: a\r") == []
    assert framer.feed(b"\n\r") == []  # the blank line's CR could still be a CRLF
    frames = framer.feed(b"\ndata: b\n\n")
    assert [(f.raw, f.data, f.newline) for f in frames] == [
        (b"data: a\r\n\r\n", "a", b"\r\n"),
        (b"data: b\n\n", "b", b"\n"),
    ]
    assert framer.eof() == []


def test_event_ending_with_a_lone_cr_waits_for_the_next_byte() -> None:
    """Documented: a CR-only blank line is only known to be one when the next byte
    (which could have been an LF) arrives, or at eof."""
    framer = SseFramer()
    assert framer.feed(b"data: a\r\r") == []
    assert framer.feed(b"d") == [Frame(raw=b"data: a\r\r", data="a", newline=b"\r")]
    other = SseFramer()
    assert other.feed(b"data: a\r\r") == []
    assert other.eof() == [Frame(raw=b"data: a\r\r", data="a", newline=b"\r")]


def test_cr_at_eof_ends_the_line() -> None:
    frame = one(b"data: a\r")
    assert (frame.data, frame.newline, frame.complete) == ("a", b"\r", False)


# --- fields --------------------------------------------------------------------------


def test_comments_are_kept_verbatim_after_the_colon() -> None:
    frame = one(b": keepalive\n:\n::x\n\n")
    assert frame.comments == (" keepalive", "", ":x")
    assert frame.data is None
    assert not frame.is_event


def test_comment_between_data_lines() -> None:
    frame = one(b"data: a\n: ping\ndata: b\n\n")
    assert (frame.data, frame.comments) == ("a\nb", (" ping",))


def test_several_data_lines_are_joined_with_lf() -> None:
    assert one(b"data: a\ndata:\ndata: c\n\n").data == "a\n\nc"
    assert one(b"data\ndata\n\n").data == "\n"


def test_id_event_and_retry() -> None:
    frame = one(b"id: 7\nevent: delta\nretry: 1500\ndata: x\n\n")
    assert (frame.id, frame.event, frame.retry, frame.data) == ("7", "delta", 1500, "x")


def test_last_field_wins() -> None:
    frame = one(b"id: 1\nid: 2\nevent: a\nevent: b\nretry: 1\nretry: 2\n\n")
    assert (frame.id, frame.event, frame.retry) == ("2", "b", 2)


@pytest.mark.parametrize("value", [b"1.5", b"-1", b"+1", b" 1", b"1 ", b"1a", b"", b"\xd9\xa1"])
def test_retry_that_is_not_all_ascii_digits_is_ignored(value: bytes) -> None:
    assert one(b"retry: 10\nretry: " + value + b"\n\n").retry == 10
    assert one(b"retry: " + value + b"\n\n").retry is None


def test_retry_with_leading_zeros() -> None:
    assert one(b"retry: 02000\n\n").retry == 2000
    assert one(b"retry:0\n\n").retry == 0


def test_retry_with_more_digits_than_int_accepts_is_ignored() -> None:
    assert one(b"retry: 5\nretry: " + b"9" * 5000 + b"\n\n").retry == 5


def test_id_with_nul_is_ignored() -> None:
    assert one(b"id: 1\nid: a\x00b\n\n").id == "1"
    assert one(b"id: \x00\n\n").id is None


def test_empty_id_resets() -> None:
    assert one(b"id: 1\nid\n\n").id == ""
    assert one(b"id:\n\n").id == ""


def test_line_without_colon_is_a_field_with_empty_value() -> None:
    frame = one(b"data\nevent\n\n")
    assert (frame.data, frame.event) == ("", "")


def test_only_one_space_is_stripped_after_the_colon() -> None:
    assert one(b"data:  two\n\n").data == " two"
    assert one(b"data:x\n\n").data == "x"
    assert one(b"data:\tx\n\n").data == "\tx"  # U+0020 only, not TAB
    assert one(b"event:  e\n\n").event == " e"


def test_only_the_first_colon_splits() -> None:
    assert one(b'data: {"a": 1}\n\n').data == '{"a": 1}'


def test_empty_data_counts_as_data() -> None:
    frame = one(b"data:\n\n")
    assert frame.data == ""
    assert frame.is_event


def test_block_without_data_has_data_none() -> None:
    frame = one(b"event: ping\nid: 3\n\n")
    assert (frame.data, frame.event, frame.id) == (None, "ping", "3")
    assert not frame.is_event


def test_unknown_fields_and_case_are_ignored() -> None:
    frame = one(b"Data: x\nfoo: bar\nDATA\n\n")
    assert (frame.data, frame.event, frame.id, frame.retry) == (None, None, None, None)


def test_json_payload() -> None:
    frame = one(b'event: message_start\ndata: {"type": "message_start"}\n\n')
    assert frame.json() == {"type": "message_start"}
    assert frame.type == "message_start"


# --- BOM -----------------------------------------------------------------------------


def test_one_leading_bom_is_stripped_but_kept_in_raw() -> None:
    frame = one(BOM + b"data: x\n\n")
    assert (frame.raw, frame.data) == (BOM + b"data: x\n\n", "x")


def test_second_bom_is_not_stripped() -> None:
    frame = one(BOM + BOM + b"data: x\n\n")
    assert frame.data is None  # the field name is "\ufeffdata": unknown


def test_bom_after_the_start_is_not_stripped() -> None:
    frames = whole(b"data: x\n\n" + BOM + b"data: y\n\n")
    assert [f.data for f in frames] == ["x", None]


@pytest.mark.parametrize("cuts", [(1,), (2,), (1, 2), (1, 2, 3)])
def test_bom_split_over_reads(cuts: tuple[int, ...]) -> None:
    body = BOM + b"data: x\n\n"
    frames = split(body, *cuts)
    assert [(f.raw, f.data) for f in frames] == [(body, "x")]


def test_bom_before_a_blank_line() -> None:
    assert whole(BOM + b"\ndata: x\n\n") == [
        Frame(raw=BOM + b"\n", data=None, newline=b"\n"),
        Frame(raw=b"data: x\n\n", data="x", newline=b"\n"),
    ]


@pytest.mark.parametrize("body", [BOM[:1], BOM[:2], BOM])
def test_bom_or_bom_prefix_alone(body: bytes) -> None:
    assert whole(body) == [Frame(raw=body, data=None, newline=b"", complete=False)]


# --- frames and eof ------------------------------------------------------------------


def test_stray_empty_lines_are_their_own_frames() -> None:
    frames = whole(b"data: a\n\n\n\r\n\rdata: b\n\n")
    assert [(f.raw, f.data) for f in frames] == [
        (b"data: a\n\n", "a"),
        (b"\n", None),
        (b"\r\n", None),
        (b"\r", None),
        (b"data: b\n\n", "b"),
    ]
    assert [f.newline for f in frames[1:4]] == [b"\n", b"\r\n", b"\r"]


def test_unterminated_final_event_is_flushed_at_eof() -> None:
    framer = SseFramer()
    assert framer.feed(b"data: a\n\ndata: [DONE]") == [Frame(raw=b"data: a\n\n", data="a")]
    assert framer.eof() == [Frame(raw=b"data: [DONE]", data="[DONE]", newline=b"", complete=False)]
    assert framer.eof() == []


def test_final_event_without_blank_line_at_eof() -> None:
    frame = one(b"event: message_stop\ndata: {}\n")
    assert (frame.event, frame.data, frame.newline, frame.complete) == (
        "message_stop",
        "{}",
        b"\n",
        False,
    )


def test_eof_with_nothing_buffered() -> None:
    assert SseFramer().eof() == []
    assert whole(b"") == []
    assert whole(b"data: a\n\n") == [Frame(raw=b"data: a\n\n", data="a")]


def test_many_events_in_one_read_and_empty_reads() -> None:
    body = b"".join(b"data: %d\n\n" % i for i in range(1000))
    framer = SseFramer()
    assert framer.feed(b"") == []
    frames = framer.feed(body)
    assert [f.data for f in frames] == [str(i) for i in range(1000)]
    assert framer.feed(b"") == []
    assert framer.eof() == []


def test_multibyte_utf8_split_across_reads() -> None:
    body = "data: é€😀\n\n".encode()
    expected = [Frame(raw=body, data="é€😀")]
    for k in range(len(body) + 1):
        assert split(body, k) == expected
    assert split(body, *range(1, len(body))) == expected


def test_invalid_utf8_is_replaced() -> None:
    assert one(b"data: \xff\xe2\x82\n\n").data == "\ufffd\ufffd"


# --- max_size ------------------------------------------------------------------------


def test_long_line_raises_as_it_arrives() -> None:
    framer = SseFramer(max_size=100)
    assert framer.feed(b"data: " + b"x" * 90) == []
    with pytest.raises(FramingError, match="line longer than max_size"):
        framer.feed(b"x" * 20)  # no line end yet: raised before the line finishes
    with pytest.raises(FramingError):
        framer.feed(b"\n\n")  # and it stays failed
    with pytest.raises(FramingError):
        framer.eof()


def test_long_event_raises() -> None:
    framer = SseFramer(max_size=100)
    with pytest.raises(FramingError, match="event longer than max_size"):
        for _ in range(20):
            framer.feed(b"data: 0123456789\n")


def test_complete_event_over_the_limit_in_one_read_raises() -> None:
    with pytest.raises(FramingError, match="event longer than max_size"):
        SseFramer(max_size=30).feed(b"data: 0123456789\ndata: 0123456789\n\n")


def test_frames_before_an_oversized_event_are_returned_first() -> None:
    framer = SseFramer(max_size=30)
    frames = framer.feed(b"data: a\n\ndata: " + b"x" * 40)
    assert frames == [Frame(raw=b"data: a\n\n", data="a")]
    with pytest.raises(FramingError):
        framer.feed(b"\n\n")


def test_event_of_exactly_max_size_is_fine() -> None:
    body = b"data: 0123\n\n"
    assert split(body, 5, max_size=len(body)) == [Frame(raw=body, data="0123")]
    with pytest.raises(FramingError):
        SseFramer(max_size=len(body) - 1).feed(body)


def test_max_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_size"):
        SseFramer(max_size=0)


# --- the fast path: bytes reads with one line ending ----------------------------------
# A bytes read with only LF or only CRLF line endings is cut straight from the read;
# anything else, and every bytearray read, goes through the buffer (general_path).


def _variants(body: bytes) -> list[bytes]:
    """The body as it is, with every line ending LF, and with every one CRLF."""
    lf = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return [body, lf, lf.replace(b"\n", b"\r\n")]


@pytest.mark.parametrize("path", params([p for p in SSE_FIXTURES if p.stat().st_size <= 2048]))
def test_fast_path_equals_general_path_at_every_split(path: Path) -> None:
    """Short fixtures, as captured and with LF or CRLF throughout: every two-way split,
    and one read per event, give the reference frames through both paths."""
    for body in _variants(path.read_bytes()):
        expected = reference_sse_frames(body)
        per_event = cut(body, frame_bounds(expected)[1:-1])
        assert frame_chunks(SseFramer(), per_event) == expected
        assert frame_chunks(SseFramer(), general_path(per_event)) == expected
        for k in range(len(body) + 1):
            chunks = cut(body, [k])
            assert frame_chunks(SseFramer(), chunks) == expected, f"split at {k}"
            assert frame_chunks(SseFramer(), general_path(chunks)) == expected, f"split at {k}"


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fast_path_equals_general_path_on_random_bodies(data: st.DataObject) -> None:
    body = data.draw(st.one_of(uniform_sse_bodies(), sse_bodies()), label="body")
    expected = reference_sse_frames(body)
    chunks = cut(body, cut_points(data, body))
    assert frame_chunks(SseFramer(), chunks) == expected
    assert frame_chunks(SseFramer(), general_path(chunks)) == expected
    per_event = cut(body, frame_bounds(expected)[1:-1])
    assert frame_chunks(SseFramer(), per_event) == expected


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_fast_path_size_limit_equals_general_path(data: st.DataObject) -> None:
    body = data.draw(uniform_sse_bodies(), label="body")
    max_size = data.draw(st.integers(min_value=1, max_value=40), label="max_size")
    reference = reference_sse_frames(body)
    expected = within_max_size(reference, max_size)
    for chunks in (
        [body],
        cut(body, cut_points(data, body)),
        cut(body, frame_bounds(reference)[1:-1]),
    ):
        assert frame_until_error(SseFramer(max_size), chunks) == expected
        assert frame_until_error(SseFramer(max_size), general_path(chunks)) == expected


@pytest.mark.parametrize("nl", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize(
    "shape",
    [
        b"data: xyz{nl}{nl}",
        b"event: e{nl}data: xyz{nl}{nl}",
        b"data: a{nl}data: b{nl}{nl}",
        b"{nl}",
    ],
    ids=["data", "event-data", "two-data", "blank"],
)
def test_fast_path_size_limit_at_the_boundary(nl: bytes, shape: bytes) -> None:
    """An event of exactly max_size passes and one byte more fails, whether it is a
    read of its own, shares a read, or follows a pending frame, on both paths."""
    event = shape.replace(b"{nl}", nl)
    first = b"data: 1" + nl + nl
    body = first + event + first
    for max_size in range(max(1, len(event) - 1), len(event) + 2):
        reference = reference_sse_frames(body)
        expected = within_max_size(reference, max_size)
        for chunks in (
            [first, event, first],
            [body],
            [first[:-1], first[-1:] + event, first],
            [first + event[:1], event[1:] + first],
        ):
            got = frame_until_error(SseFramer(max_size), chunks)
            assert got == expected, (max_size, chunks)
            assert frame_until_error(SseFramer(max_size), general_path(chunks)) == expected


# Which path a read takes is watched on the framer's source (source_module): the
# framer in use may be compiled, and a compiled class cannot be patched. That it
# frames the same as its source is what every other test here checks.
_source = source_module("chaosproxy.core.framing.sse")
SourceSseFramer = _source.SseFramer


def _no_buffer(self: SseFramer, data: bytes) -> list[Frame]:
    raise AssertionError(f"took the general path for {data!r}")


@pytest.mark.parametrize("nl", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_uniform_reads_never_touch_the_buffer(nl: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests above compare two different paths: whole events in LF or CRLF, one per
    read or many per read, are cut without the general path."""
    events = [
        b"data: " + b"x" * 1000 + nl + nl,
        b"event: delta" + nl + b"data: {}" + nl + nl,
        b": keepalive" + nl + nl,
        nl,
        b"id: 7" + nl + b"data: a" + nl + b"data: b" + nl + nl,
        b"data: \xc3\xa9" + nl + nl,
    ]
    expected = reference_sse_frames(b"".join(events))
    monkeypatch.setattr(SourceSseFramer, "_feed_buffered", _no_buffer)
    framer = SourceSseFramer()
    frames = [frame for event in events for frame in framer.feed(event)]
    assert frames == expected
    assert frames[0].raw is events[0]  # a read that is one event is not even copied
    framer = SourceSseFramer()
    assert framer.feed(b"".join(events)) == expected
    assert framer.eof() == []
    compiled = SseFramer()  # and the framer in use, as far as it shows
    assert compiled.feed(events[0])[0].raw is events[0]


@pytest.mark.parametrize(
    "body",
    [b"data: a\r\n\n", b"data: a\r\r", b"data: a\n\r\n", BOM + b"data: a\n\n"],
    ids=["crlf-then-lf", "cr", "lf-then-crlf", "bom"],
)
def test_mixed_endings_and_a_bom_take_the_general_path(
    body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bytes] = []
    general = SourceSseFramer._feed_buffered

    def spy(self: SseFramer, data: bytes) -> list[Frame]:
        calls.append(bytes(data))
        return general(self, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(SourceSseFramer, "_feed_buffered", spy)
    assert frame_chunks(SourceSseFramer(), [body]) == reference_sse_frames(body)
    assert calls == [body]
    assert frame_chunks(SseFramer(), [body]) == reference_sse_frames(body)


def test_a_frame_pending_across_reads_then_the_fast_path() -> None:
    """A 64 KiB read ends mid-event: the next read finishes it through the buffer and
    cuts the rest straight from the read."""
    events = [b'data: {"i": %d, "pad": "%b"}\n\n' % (i, b"x" * 1000) for i in range(200)]
    body = b"".join(events)
    reads = cut(body, range(65536, len(body), 65536))
    frames = frame_chunks(SseFramer(), reads)
    assert [f.raw for f in frames] == events
    assert [f.data for f in frames] == [e[6:-2].decode() for e in events]


# --- performance guards (linear, not quadratic) --------------------------------------


def test_tiny_reads_of_a_large_event() -> None:
    """100 KB fed one byte at a time: each read does O(1) work, never a rescan."""
    payload = b"x" * 100_000
    framer = SseFramer()
    frames: list[Frame] = []
    for chunk in cut(b"data: " + payload + b"\r\n\r\n", range(1, 100_010)):
        frames += framer.feed(chunk)
    assert [len(f.data or "") for f in frames] == [len(payload)]


def test_make_framer_builds_an_sse_framer() -> None:
    framer = make_framer("sse", max_size=10)
    assert isinstance(framer, SseFramer)
    assert framer.max_size == 10
