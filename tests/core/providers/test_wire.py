"""The provider profiles' shared helpers (chaosproxy/core/providers/_wire.py): kind sets
by bit mask, shared where a profile returns one per event; the ``[DONE]`` sentinel; an
event encoded for SSE, NDJSON or, without framing, the provider's own format."""

from __future__ import annotations

import pytest

from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.providers._wire import (
    DELTA,
    OTHER,
    TERMINAL,
    TOOL_DELTA,
    encode_event,
    is_done_marker,
    mask_table,
)


def test_a_mask_table_has_every_combination_by_bit() -> None:
    table = mask_table("delta", "usage", "terminal")
    assert table == (
        frozenset({"other"}),
        frozenset({"delta"}),
        frozenset({"usage"}),
        frozenset({"delta", "usage"}),
        frozenset({"terminal"}),
        frozenset({"delta", "terminal"}),
        frozenset({"usage", "terminal"}),
        frozenset({"delta", "usage", "terminal"}),
    )


def test_the_empty_and_single_kind_sets_are_the_shared_ones() -> None:
    table = mask_table("delta", "terminal", "tool_delta")
    assert table[0] is OTHER
    assert table[1] is DELTA
    assert table[2] is TERMINAL
    assert table[4] is TOOL_DELTA


def test_no_names_is_one_set_other() -> None:
    assert mask_table() == (OTHER,)


@pytest.mark.parametrize(
    ("data", "done"),
    [
        ("[DONE]", True),
        (" [DONE] ", True),
        ("[DONE]\n", True),
        ("[done]", False),
        ('{"x": "[DONE]"}', False),
        ("", False),
        (None, False),
    ],
)
def test_the_done_marker_allows_blanks_around_it_only(data: str | None, done: bool) -> None:
    assert is_done_marker(Frame(b"raw", data=data)) is done


@pytest.mark.parametrize(
    ("fmt", "newline", "event", "native", "wire"),
    [
        ("sse", b"\n", None, "sse", b"data: {}\n\n"),
        ("sse", b"\r\n", "ping", "sse", b"event: ping\r\ndata: {}\r\n\r\n"),
        ("sse", b"", None, "sse", b"data: {}\n\n"),  # no terminator known: \n
        ("ndjson", b"\n", "ignored", "sse", b"{}\n"),
        ("ndjson", b"\r\n", None, "sse", b"{}\r\n"),
        ("raw", b"\n", "e", "sse", b"event: e\ndata: {}\n\n"),
        ("raw", b"\n", "e", "ndjson", b"{}\n"),
    ],
)
def test_an_event_is_framed_for_the_stream(
    fmt: Format, newline: bytes, event: str | None, native: Format, wire: bytes
) -> None:
    assert encode_event(fmt, newline, b"{}", event=event, native=native) == wire
