"""NdjsonFramer: one frame per line, the same frames for any chunking."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import FramingError, make_framer
from chaosproxy.core.framing.ndjson import NdjsonFramer
from tests.support.framing_helpers import (
    cut,
    cut_points,
    frame_chunks,
    frame_until_error,
    general_path,
    ndjson_bodies,
    reference_ndjson_frames,
    three_way_cuts,
    within_max_size,
)
from tests.support.properties import examples
from tests.support.repo import fixture_paths

fixture_params = [pytest.param(p, id=p.name) for p in fixture_paths(".ndjson")]


def split(body: bytes, *positions: int, max_size: int = 1024) -> list[Frame]:
    return frame_chunks(NdjsonFramer(max_size), cut(body, positions))


def joined(frames: list[Frame]) -> bytes:
    return b"".join(f.raw for f in frames)


# --- provider fixtures ---------------------------------------------------------------


@pytest.mark.parametrize("path", fixture_params)
def test_fixture_whole_read(path: Path) -> None:
    body = path.read_bytes()
    frames = split(body)
    assert frames == reference_ndjson_frames(body)
    assert joined(frames) == body
    assert len(frames) == body.count(b"\n") + (not body.endswith(b"\n"))
    assert all(isinstance(f.json(), dict) for f in frames), "every fixture line is an object"


@pytest.mark.parametrize("path", fixture_params)
def test_fixture_every_two_and_three_way_split(path: Path) -> None:
    body = path.read_bytes()
    expected = split(body)
    for k in range(len(body) + 1):
        assert split(body, k) == expected, f"split at {k}"
    # Cut in three at a dense sample of pairs (all pairs: ~70k framings per fixture).
    for i, j in three_way_cuts(len(body)):
        frames = split(body, i, j)
        assert frames == expected, f"cuts at {i}, {j}"
        assert joined(frames) == body


@pytest.mark.parametrize("path", fixture_params)
def test_fixture_byte_by_byte(path: Path) -> None:
    body = path.read_bytes()
    assert split(body, *range(1, len(body))) == split(body)


# --- hypothesis ----------------------------------------------------------------------


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_random_bodies_any_split(data: st.DataObject) -> None:
    body = data.draw(ndjson_bodies(), label="body")
    expected = reference_ndjson_frames(body)
    assert split(body) == expected
    frames = split(body, *cut_points(data, body))
    assert frames == expected
    assert joined(frames) == body


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_size_limit_is_independent_of_chunking(data: st.DataObject) -> None:
    body = data.draw(ndjson_bodies(), label="body")
    max_size = data.draw(st.integers(min_value=1, max_value=30), label="max_size")
    whole = frame_until_error(NdjsonFramer(max_size), [body])
    assert whole == within_max_size(reference_ndjson_frames(body), max_size)
    chunks = cut(body, cut_points(data, body))
    assert frame_until_error(NdjsonFramer(max_size), chunks) == whole


# --- the fast path: complete lines cut straight from a bytes read --------------------
# A bytearray read always goes through the buffer (general_path).


@pytest.mark.parametrize("path", fixture_params)
def test_fast_path_equals_general_path_at_every_split(path: Path) -> None:
    lf = path.read_bytes().replace(b"\r\n", b"\n")
    for body in (lf, lf.replace(b"\n", b"\r\n")):
        expected = reference_ndjson_frames(body)
        per_line = body.splitlines(keepends=True)
        assert frame_chunks(NdjsonFramer(), per_line) == expected
        assert frame_chunks(NdjsonFramer(), general_path(per_line)) == expected
        for k in range(len(body) + 1):
            chunks = cut(body, [k])
            assert frame_chunks(NdjsonFramer(), chunks) == expected, f"split at {k}"
            assert frame_chunks(NdjsonFramer(), general_path(chunks)) == expected


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_fast_path_equals_general_path_on_random_bodies(data: st.DataObject) -> None:
    body = data.draw(ndjson_bodies(), label="body")
    max_size = data.draw(st.sampled_from([1024, 1, 2, 5, 10, 20]), label="max_size")
    reference = reference_ndjson_frames(body)
    expected = within_max_size(reference, max_size)
    per_line = [f.raw for f in reference]
    for chunks in ([body], cut(body, cut_points(data, body)), per_line):
        assert frame_until_error(NdjsonFramer(max_size), chunks) == expected
        assert frame_until_error(NdjsonFramer(max_size), general_path(chunks)) == expected


def test_one_line_per_read_is_not_copied() -> None:
    line = b'{"i": 1, "pad": "' + b"x" * 1000 + b'"}\n'
    (frame,) = NdjsonFramer().feed(line)
    assert frame.raw is line
    assert frame.json()["i"] == 1


def test_a_line_pending_across_reads_then_the_fast_path() -> None:
    lines = [b'{"i": %d, "pad": "%b"}\n' % (i, b"x" * 1000) for i in range(200)]
    body = b"".join(lines)
    frames = frame_chunks(NdjsonFramer(), cut(body, range(65536, len(body), 65536)))
    assert [f.raw for f in frames] == lines


# --- edge cases ----------------------------------------------------------------------


def test_lf_lines() -> None:
    assert split(b'{"a": 1}\n{"b": 2}\n') == [
        Frame(raw=b'{"a": 1}\n', data='{"a": 1}', newline=b"\n"),
        Frame(raw=b'{"b": 2}\n', data='{"b": 2}', newline=b"\n"),
    ]


def test_crlf_is_kept_in_raw_and_excluded_from_data() -> None:
    frames = split(b'{"a": 1}\r\n{"b": 2}\n', 9)  # cut between the CR and the LF
    assert [(f.raw, f.data, f.newline) for f in frames] == [
        (b'{"a": 1}\r\n', '{"a": 1}', b"\r\n"),
        (b'{"b": 2}\n', '{"b": 2}', b"\n"),
    ]
    assert frames[0].json() == {"a": 1}


def test_lone_cr_is_not_a_line_break() -> None:
    assert split(b"a\rb\n") == [Frame(raw=b"a\rb\n", data="a\rb", newline=b"\n")]


@pytest.mark.parametrize("line", [b"", b" ", b"\t \r", b"\x0b"])
def test_blank_line_has_data_none(line: bytes) -> None:
    frames = split(b"{}\n" + line + b"\n{}\n")
    assert [f.data for f in frames] == ["{}", None, "{}"]
    assert not frames[1].is_event


def test_unterminated_last_line_at_eof() -> None:
    framer = NdjsonFramer()
    assert framer.feed(b'{"done": false}\n{"done": tr') == [
        Frame(raw=b'{"done": false}\n', data='{"done": false}')
    ]
    assert framer.feed(b"ue}") == []
    assert framer.eof() == [
        Frame(raw=b'{"done": true}', data='{"done": true}', newline=b"", complete=False)
    ]
    assert framer.eof() == []


def test_eof_with_nothing_buffered() -> None:
    assert NdjsonFramer().eof() == []
    assert split(b"") == []
    assert NdjsonFramer().feed(b"") == []


def test_multibyte_utf8_split_across_reads() -> None:
    body = '{"t": "é€😀"}\n'.encode()
    for k in range(len(body) + 1):
        assert split(body, k) == [Frame(raw=body, data='{"t": "é€😀"}')]


def test_long_line_raises_as_it_arrives() -> None:
    framer = NdjsonFramer(max_size=50)
    assert framer.feed(b'{"a": "' + b"x" * 40) == []
    with pytest.raises(FramingError, match="line longer than max_size"):
        framer.feed(b"x" * 20)  # still no "\n": raised before the line ends
    with pytest.raises(FramingError):
        framer.eof()


def test_lines_before_a_long_line_are_returned_first() -> None:
    framer = NdjsonFramer(max_size=10)
    assert framer.feed(b"{}\n" + b"x" * 20) == [Frame(raw=b"{}\n", data="{}")]
    with pytest.raises(FramingError):
        framer.feed(b"\n")


def test_line_of_exactly_max_size_is_fine() -> None:
    assert split(b"1234\n", 2, max_size=5) == [Frame(raw=b"1234\n", data="1234")]
    with pytest.raises(FramingError):
        NdjsonFramer(max_size=4).feed(b"1234\n")


def test_many_lines_in_one_read() -> None:
    body = b"".join(b'{"i": %d}\n' % i for i in range(1000))
    assert [f.json()["i"] for f in split(body)] == list(range(1000))


def test_make_framer_builds_an_ndjson_framer() -> None:
    framer = make_framer("ndjson", max_size=10)
    assert isinstance(framer, NdjsonFramer)
    assert framer.max_size == 10
    with pytest.raises(ValueError, match="max_size"):
        NdjsonFramer(max_size=0)
