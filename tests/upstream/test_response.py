"""A response whose head has arrived (chaosproxy/upstream/response.py), driven from the
connection's side by hand, without a socket: what arrived before ``start`` delivered at
once in one call, then each read as one call and one end; the socket paused past 64 KiB
held before ``start``, and while the caller pauses; what was held delivered from the
loop after ``resume_reading``, never from inside it; ``close`` ending a body not
delivered whole with ``UpstreamClosed`` (once, dropping the connection) and leaving a
clean end clean. Over real sockets: test_connection.py; the contract it shares with
the in-memory double: test_interface.py."""

from __future__ import annotations

import asyncio

import pytest
from multidict import CIMultiDict

from chaosproxy.upstream.errors import UpstreamClosed, UpstreamError
from chaosproxy.upstream.response import UpstreamResponse

LIMIT = 65536


class Conn:
    """The connection's side: what the response asked of it."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.reading: list[bool] = []
        self.abandoned = 0

    def abandon(self) -> None:
        self.abandoned += 1

    def set_reading(self, on: bool) -> None:
        self.reading.append(on)


class Sink:
    def __init__(self) -> None:
        self.calls: list[bytes] = []
        self.ends: list[UpstreamError | None] = []

    def body_data(self, data: bytes) -> None:
        self.calls.append(data)

    def body_end(self, error: UpstreamError | None) -> None:
        self.ends.append(error)


def response(conn: Conn, length: int | None = None) -> UpstreamResponse:
    headers = CIMultiDict([("Content-Type", "text/event-stream")])
    return UpstreamResponse(conn, 200, "OK", (1, 1), headers, length, "upstream.test:443")


async def test_what_came_before_start_is_one_call_then_one_call_a_read() -> None:
    conn = Conn()
    resp = response(conn)
    resp._body(b"a")
    resp._body(b"b")
    sink = Sink()
    resp.start(sink)
    assert sink.calls == [b"ab"]
    resp._body(b"c")
    resp._end(None)
    assert (sink.calls, sink.ends, resp.body_bytes, resp.complete) == (
        [b"ab", b"c"],
        [None],
        3,
        True,
    )
    resp._end(UpstreamClosed("late"))  # (an end after the end changes nothing)
    assert sink.ends == [None] and resp.complete
    with pytest.raises(RuntimeError, match="called twice"):
        resp.start(Sink())


async def test_before_start_the_socket_is_paused_past_64_kib() -> None:
    conn = Conn()
    resp = response(conn)
    resp._body(b"x" * LIMIT)
    assert conn.reading == []
    resp._body(b"y")
    assert conn.reading == [False]
    sink = Sink()
    resp.start(sink)
    assert (sink.calls, conn.reading) == ([b"x" * LIMIT + b"y"], [False, True, True])


async def test_paused_the_body_is_held_and_resumed_from_the_loop() -> None:
    conn = Conn()
    resp = response(conn)
    sink = Sink()
    resp.start(sink)
    resp.pause_reading()
    resp.pause_reading()  # (once)
    resp._body(b"a")
    resp._body(b"b")
    resp._end(None)
    assert (sink.calls, sink.ends, conn.reading[-1]) == ([], [], False)
    resp.resume_reading()
    assert sink.calls == []  # not from inside resume_reading()
    await asyncio.sleep(0)
    assert (sink.calls, sink.ends) == ([b"ab"], [None])
    resp.resume_reading()  # (not paused: nothing)
    await asyncio.sleep(0)
    assert sink.calls == [b"ab"]


async def test_a_sink_that_pauses_inside_body_data_gets_nothing_more_meanwhile() -> None:
    conn = Conn()
    resp = response(conn)
    sink = Sink()
    resp._body(b"first")
    resp._end(None)

    def pausing(data: bytes) -> None:
        sink.calls.append(data)
        resp.pause_reading()

    sink.body_data = pausing  # type: ignore[method-assign]
    resp.start(sink)
    assert (sink.calls, sink.ends) == ([b"first"], [])  # its end waits for the resume
    resp.resume_reading()
    await asyncio.sleep(0)
    assert sink.ends == [None]


async def test_close_mid_body_ends_it_once_and_drops_the_connection() -> None:
    conn = Conn()
    resp = response(conn, length=10)
    sink = Sink()
    resp.start(sink)
    resp._body(b"abc")
    resp.close()
    resp.close()
    (end,) = sink.ends
    assert isinstance(end, UpstreamClosed)
    assert (str(end), end.body_bytes) == (
        "response from upstream upstream.test:443 closed by the caller after 3 body bytes",
        3,
    )
    assert (conn.abandoned, resp.complete) == (1, False)


async def test_close_after_a_clean_end_leaves_it_clean_unless_bytes_were_held() -> None:
    conn = Conn()
    clean = response(conn)
    sink = Sink()
    clean.start(sink)
    clean._body(b"all")
    clean._end(None)
    clean.close()
    assert (sink.ends, clean.complete, conn.abandoned) == ([None], True, 0)

    held = response(Conn())
    paused = Sink()
    held.start(paused)
    held.pause_reading()
    held._body(b"undelivered")
    held._end(None)
    held.close()
    (end,) = paused.ends
    assert isinstance(end, UpstreamClosed) and end.body_bytes == 11
    assert (paused.calls, held.complete) == ([], False)


async def test_a_cut_body_says_how_much_of_it_came() -> None:
    sized = response(Conn(), length=10)
    sized._body(b"abc")
    assert str(sized._cut("closed")) == "closed after 3 of 10 body bytes"
    unsized = response(Conn())
    unsized._body(b"abcd")
    cut = unsized._cut("reset")
    assert (str(cut), cut.body_bytes) == ("reset after 4 body bytes", 4)
    assert repr(sized) == "<UpstreamResponse 200 'OK' from upstream.test:443>"
