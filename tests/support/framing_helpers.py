"""Shared helpers for the framer tests: feeding, reference parsers, hypothesis strategies.

The reference parsers are deliberately naive (whole body at once, text-level field
rules straight from WHATWG HTML §9.2.6), so they check the incremental framers against
an independent reading of the spec rather than against themselves.
"""

from __future__ import annotations

import bisect
import importlib.util
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType

from hypothesis import strategies as st

from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import BodyRead, Framer, FramingError

BOM = b"\xef\xbb\xbf"

FramerFactory = Callable[[], Framer]


def source_module(name: str) -> ModuleType:
    """A fresh copy of module ``name`` of the package made from its ``.py`` source,
    under a name of its own: what a test may patch to watch the code's inner steps.
    The module itself may be compiled (docs/architecture.md), and a compiled class can
    be neither patched nor watched; the copy runs the same source, and its classes
    make the same (possibly compiled) frames."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).with_name(name.rsplit(".", 1)[1] + ".py")
    copy = importlib.util.spec_from_file_location(f"_source_of_{name}", source)
    assert copy is not None and copy.loader is not None
    module = importlib.util.module_from_spec(copy)
    copy.loader.exec_module(module)
    return module


def frame_chunks(framer: Framer, chunks: Iterable[BodyRead]) -> list[Frame]:
    """Feed every chunk to ``framer``, then eof; all frames returned, in order."""
    frames: list[Frame] = []
    for chunk in chunks:
        frames += framer.feed(chunk)
    frames += framer.eof()
    return frames


def general_path(chunks: Iterable[bytes]) -> list[bytearray]:
    """The same reads as ``bytearray`` objects, which the framers always take through
    their general (buffered) path: their fast path is for ``bytes`` reads only."""
    return [bytearray(chunk) for chunk in chunks]


def frame_until_error(framer: Framer, chunks: Iterable[BodyRead]) -> tuple[list[Frame], bool]:
    """Like :func:`frame_chunks`, but stop at a FramingError: (frames so far, raised)."""
    frames: list[Frame] = []
    try:
        for chunk in chunks:
            frames += framer.feed(chunk)
        frames += framer.eof()
    except FramingError:
        return frames, True
    return frames, False


def within_max_size(reference: Sequence[Frame], max_size: int) -> tuple[list[Frame], bool]:
    """What :func:`frame_until_error` gives with a framer of ``max_size`` for a body whose
    frames are ``reference``: the frames before the first one longer than ``max_size``,
    and whether there was one (the framer raised)."""
    too_long = [i for i, f in enumerate(reference) if len(f.raw) > max_size]
    return list(reference[: too_long[0] if too_long else None]), bool(too_long)


def cut(body: bytes, positions: Iterable[int]) -> list[bytes]:
    """``body`` cut at the given offsets (any order, duplicates give empty chunks)."""
    bounds = [0, *sorted(positions), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def frame_bounds(frames: Sequence[Frame]) -> list[int]:
    """Offsets in the body where each frame starts, plus the body length at the end."""
    bounds = [0]
    for frame in frames:
        bounds.append(bounds[-1] + len(frame.raw))
    return bounds


def fixture_bounds_window(bounds: Sequence[int], k: int) -> tuple[int, int]:
    """Frame indexes [lo, hi) around body offset ``k``: the frame holding byte ``k``
    (the last frame when ``k`` is the body's end) and the frame before it, so a cut on
    a frame boundary has a frame on either side."""
    frames = len(bounds) - 1
    holding = min(bisect.bisect_right(bounds, k) - 1, frames - 1)
    return max(0, holding - 1), holding + 1


def three_way_cuts(length: int, near: int = 3, grid_points: int = 30) -> list[tuple[int, int]]:
    """A dense, deterministic sample of cut pairs (i, j), 0 < i < j < length: every pair
    at most ``near`` bytes apart (a CRLF, a blank line or a UTF-8 character cut twice)
    and every pair of points on an evenly spaced grid (cuts far apart)."""
    pairs = {(i, j) for i in range(1, length) for j in range(i + 1, min(i + near + 1, length))}
    grid = sorted({1 + k * (length - 2) // max(1, grid_points - 1) for k in range(grid_points)})
    pairs.update(itertools.combinations([g for g in grid if 0 < g < length], 2))
    return sorted(pairs)


# --- reference parsers ---------------------------------------------------------------

_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n)")


def reference_sse_frames(body: bytes) -> list[Frame]:
    """The frames of a whole SSE body, by the book and without any incremental state."""
    content = len(BOM) if body.startswith(BOM) else 0
    frames: list[Frame] = []
    frame_start = 0
    lines: list[tuple[str, bytes]] = []  # (decoded line, its terminator)
    pos = content
    while (m := _LINE.match(body, pos)) is not None:
        text, terminator = m.group(1), m.group(2)
        pos = m.end()
        if text:
            lines.append((text.decode("utf-8", "replace"), terminator))
            continue
        newline = lines[0][1] if lines else terminator
        frames.append(_reference_sse_frame(body[frame_start:pos], lines, newline, True))
        frame_start, lines = pos, []
    if frame_start < len(body):
        if pos < len(body):
            lines.append((body[pos:].decode("utf-8", "replace"), b""))
        newline = lines[0][1] if lines else b""
        frames.append(_reference_sse_frame(body[frame_start:], lines, newline, False))
    return frames


def _reference_sse_frame(
    raw: bytes, lines: list[tuple[str, bytes]], newline: bytes, complete: bool
) -> Frame:
    data: list[str] | None = None
    event: str | None = None
    id_: str | None = None
    retry: int | None = None
    comments: list[str] = []
    for line, _ in lines:
        if line.startswith(":"):
            comments.append(line[1:])
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data = [*(data or []), value]
        elif name == "event":
            event = value
        elif name == "id" and "\x00" not in value:
            id_ = value
        elif name == "retry" and value and all(c in "0123456789" for c in value):
            retry = int(value)
    return Frame(
        raw=raw,
        data=None if data is None else "\n".join(data),
        event=event,
        id=id_,
        retry=retry,
        comments=tuple(comments),
        newline=newline,
        complete=complete,
    )


def reference_ndjson_frames(body: bytes) -> list[Frame]:
    """The frames of a whole NDJSON body: one per "\\n"-terminated line."""
    frames = []
    for piece in re.findall(rb"[^\n]*\n|[^\n]+\Z", body):
        newline = b"\r\n" if piece.endswith(b"\r\n") else b"\n" if piece.endswith(b"\n") else b""
        text = piece[: len(piece) - len(newline)].decode("utf-8", "replace")
        frames.append(
            Frame(
                raw=piece,
                data=text if text.strip(" \t\r\n\x0b\x0c") else None,
                newline=newline,
                complete=bool(newline),
            )
        )
    return frames


# --- hypothesis strategies -----------------------------------------------------------

# SSE bodies are drawn as token lists (one draw per token keeps hypothesis fast): field
# names with and without the colon and space, values with colons, spaces, NUL, digits
# with leading zeros, 2/3/4-byte UTF-8 and U+FEFF, and every line ending, alone and
# doubled (blank lines). Any sequence is a valid body; the structure emerges from it.
_SSE_TOKENS = [
    *["data: ", "data:", "data", "event: ", "event:", "id: ", "id:", "retry: ", "retry:"],
    *[": ", ":", "bogus: ", "a", '{"k": [1, 2]}', "é€😀", "\x00", "007", "1500", "  ", "\t"],
    *["\ufeff", "\n", "\n", "\n", "\r\n", "\r\n", "\r", "\n\n", "\r\n\r\n", "\r\r"],
]


# Tokens without line endings, and the usual event shapes whole, for uniform bodies.
_SSE_LINE_TOKENS = [t for t in _SSE_TOKENS if "\r" not in t and "\n" not in t]
_SSE_SHAPES = ["data: {}{nl}{nl}", "event: e{nl}data: {}{nl}{nl}", "data: a{nl}data: b{nl}{nl}"]


@st.composite
def uniform_sse_bodies(draw: st.DrawFn) -> bytes:
    """Random SSE bodies whose line endings are all LF or all CRLF: what the SSE
    framer cuts straight from a read (its fast path). Usual event shapes, any field,
    comments, stray blank lines, a BOM, an unterminated tail."""
    nl = draw(st.sampled_from(["\n", "\r\n"]))
    bom = draw(st.sampled_from(["", "", "\ufeff"]))
    token = st.one_of(
        st.sampled_from(_SSE_LINE_TOKENS),
        st.sampled_from([nl, nl, nl + nl, nl * 3]),
        st.sampled_from(_SSE_SHAPES).map(lambda shape: shape.replace("{nl}", nl)),
    )
    tokens = draw(st.lists(token, max_size=40))
    return (bom + "".join(tokens)).encode("utf-8")


@st.composite
def sse_bodies(draw: st.DrawFn) -> bytes:
    """Random SSE bodies: fields, comments, mixed line endings, UTF-8, BOMs, a tail."""
    bom = draw(st.sampled_from(["", "", "\ufeff"]))
    tokens = draw(st.lists(st.sampled_from(_SSE_TOKENS), max_size=50))
    return (bom + "".join(tokens)).encode("utf-8")


# Byte soup: the tokens that matter to an SSE or NDJSON parser, plus broken UTF-8.
byte_soup = st.lists(
    st.sampled_from(
        [
            *[b"\r", b"\n", b"\r\n", b":", b" ", b"data", b"id", b"retry", b"event", b"7"],
            *[b"x", b"\x00", BOM, b"\xef", b"\xbb", b"\xe2\x82", b"\xac", b"\xff", b"{}"],
        ]
    ),
    max_size=40,
).map(b"".join)


_NDJSON_LINES = [
    *['{"text": "a"}', '{"text": "é€😀"}', "[1, 2]", "", " ", "\t", "\r", "x\ry"],
    *[' {"a": 1}', "\x0b1", "\x0c", "\x85", "\u3000"],  # leading (non-)ASCII whitespace
]
_NDJSON_TERMINATED_LINES = [line + end for line in _NDJSON_LINES for end in ("\n", "\r\n")]


@st.composite
def ndjson_bodies(draw: st.DrawFn) -> bytes:
    """Random NDJSON bodies: JSON lines, blank lines, LF/CRLF, stray CRs, a tail."""
    lines = draw(st.lists(st.sampled_from(_NDJSON_TERMINATED_LINES), max_size=12))
    tail = draw(st.sampled_from(["", "", '{"text": "tail', "\r", " "]))
    return ("".join(lines) + tail).encode("utf-8")


def cut_points(data: st.DataObject, body: bytes, max_cuts: int = 8) -> list[int]:
    """Draw some cut offsets into ``body`` (sorted, duplicates allowed)."""
    positions = st.integers(min_value=0, max_value=len(body))
    return sorted(data.draw(st.lists(positions, max_size=max_cuts), label="cuts"))
