"""What every framer shares (chaosproxy/core/framing/base.py): any bytes-like read a
``feed`` takes (``bytes``, ``bytearray``, ``memoryview``) gives the same frames, an
event over the size bound is the one ``FramingError``, and ``eof`` flushes what is
left. Each framer's own rules are in its test file beside this one."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import make_framer
from chaosproxy.core.framing.base import DEFAULT_MAX_SIZE, BodyRead, Framer, FramingError

BODIES: dict[Format, bytes] = {
    "sse": b'data: {"a":1}\n\n: ping\n\ndata: [DONE]\n\ndata: tail',
    "ndjson": b'{"a":1}\n{"b":2}\r\n\n{"c":3}',
    "raw": b"anything \x00 at all",
}
KINDS: list[Callable[[bytes], BodyRead]] = [bytes, bytearray, memoryview]


def frames(framer: Framer, body: BodyRead, cut: int) -> list[Frame]:
    return [*framer.feed(body[:cut]), *framer.feed(body[cut:]), *framer.eof()]


@pytest.mark.parametrize("fmt", ["sse", "ndjson", "raw"])
def test_any_bytes_like_read_gives_the_same_frames(fmt: Format) -> None:
    body = BODIES[fmt]
    for cut in (0, 5, len(body) // 2, len(body)):
        expected = frames(make_framer(fmt), body, cut)
        assert b"".join(f.raw for f in expected) == body
        for kind in KINDS:
            assert frames(make_framer(fmt), kind(body), cut) == expected, (kind, cut)


def test_the_last_unterminated_event_comes_at_eof_marked_incomplete() -> None:
    framer = make_framer("sse")
    assert [f.data for f in framer.feed(BODIES["sse"])] == ['{"a":1}', None, "[DONE]"]
    (tail,) = framer.eof()
    assert (tail.raw, tail.data, tail.complete) == (b"data: tail", "tail", False)


@pytest.mark.parametrize("fmt", ["sse", "ndjson"])
def test_an_event_over_the_bound_is_a_framing_error(fmt: Format) -> None:
    framer = make_framer(fmt, max_size=64)
    with pytest.raises(FramingError):
        framer.feed(b"data: " + b"x" * 100 if fmt == "sse" else b"x" * 100)
    assert DEFAULT_MAX_SIZE == 1024 * 1024


def test_a_raw_framer_has_no_bound() -> None:
    framer = make_framer("raw", max_size=8)
    big = b"x" * (DEFAULT_MAX_SIZE + 1)
    assert [f.raw for f in framer.feed(big)] == [big]
    assert framer.eof() == []
