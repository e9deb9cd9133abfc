"""The client guard's parts, each alone (server/guard.py): the held head of a hand-over
(``HeldHead``) and the guard's verdicts on a connection (``ClientGuard``: refused over
the limit, timed out, left); and through a live proxy, a head held for another worker's
stream (a hand-over that cannot send it) served as ever, whole or byte by byte, kept
alive. The guard at work, through real clients, is
tests/e2e/test_hostile_client.py's and tests/e2e/test_hostile_limits.py's."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import orjson

from chaosproxy.server.guard import HEAD_TIMEOUT, MAX_HELD_HEAD, TOO_MANY, ClientGuard, HeldHead
from chaosproxy.server.net import CLIENT_GUARD
from chaosproxy.server.proxy import STATE


def make_guard(
    timeout: float = 3.0, most: int = 2
) -> tuple[ClientGuard, list[tuple[int, str, str]]]:
    lines: list[tuple[int, str, str]] = []
    guard = ClientGuard(
        client_timeout=timeout,
        max_connections=most,
        reject=lambda status, reason, peer: lines.append((status, reason, peer)),
    )
    return guard, lines


# --------------------------------------------------------------------------- the held head


def test_a_head_is_held_until_it_ends_whatever_its_pieces() -> None:
    head = b"GET /v1/x HTTP/1.1\r\nHost: a\r\nLast-Event-ID:  tok.7 \r\n\r\nbody"
    for cut in range(1, len(head)):
        held = HeldHead()
        first = held.add(head[:cut])
        if first is not None:  # ended in the first piece: the rest is body
            assert head.index(b"\r\n\r\n") + 4 <= cut
            assert first == (head[:cut], b"tok.7")
            continue
        assert held.add(head[cut:]) == (head, b"tok.7")


def test_a_head_without_the_header_or_with_bare_newlines() -> None:
    assert HeldHead().add(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n") == (
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        None,
    )
    bare = b"GET / HTTP/1.1\nlast-event-id:x\n\n"
    assert HeldHead().add(bare) == (bare, b"x")
    # The header in the body, past the head's end, is not the head's.
    late = b"POST / HTTP/1.1\r\n\r\nLast-Event-ID: x\r\n"
    assert HeldHead().add(late) == (late, None)


def test_empty_lines_before_the_request_line_do_not_end_a_head() -> None:
    held = HeldHead()
    assert held.add(b"\r\n\r\n") is None
    assert held.add(b"GET / HTTP/1.1\r\nLast-Event-ID: y\r\n\r\n") == (
        b"\r\n\r\nGET / HTTP/1.1\r\nLast-Event-ID: y\r\n\r\n",
        b"y",
    )


def test_a_head_that_never_ends_is_let_go_at_the_bound() -> None:
    held = HeldHead()
    line = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    first = b"GET / HTTP/1.1\r\nLast-Event-ID: z\r\n"
    assert held.add(first) is None
    pieces = [first]
    while True:
        pieces.append(line)
        got = held.add(line)
        if got is not None:
            break
        assert sum(map(len, pieces)) < MAX_HELD_HEAD
    assert got == (b"".join(pieces), None)
    assert sum(map(len, pieces)) >= MAX_HELD_HEAD


def test_a_cleared_head_starts_again() -> None:
    held = HeldHead()
    assert held.add(b"GET / HT") is None
    held.clear()
    assert held.add(b"GET / HTTP/1.1\r\n\r\n") == (b"GET / HTTP/1.1\r\n\r\n", None)


# --------------------------------------------------------------------------- the verdicts


def test_a_head_wait_that_runs_out() -> None:
    guard, lines = make_guard(timeout=2.5)
    assert guard.timed_out(17, 0, "10.0.0.1:5") == HEAD_TIMEOUT
    assert guard.timed_out(0, 0, "10.0.0.2:5") == b""
    assert guard.timed_out(0, 3, "10.0.0.3:5") == b""  # keep-alive, idle: no word
    assert guard.timed_out(4, 3, "10.0.0.4:5") == HEAD_TIMEOUT
    assert lines == [
        (408, "request head incomplete after 2.5s (17 bytes)", "10.0.0.1:5"),
        (408, "no request within 2.5s", "10.0.0.2:5"),
        (408, "request head incomplete after 2.5s (4 bytes)", "10.0.0.4:5"),
    ]
    assert (guard.rejected, guard.empty) == (3, 0)


def test_a_connection_that_leaves_while_a_head_is_awaited() -> None:
    guard, lines = make_guard()
    guard.left(0, 0, "p:1")  # a probe: counted, never logged
    guard.left(0, 2, "p:2")  # keep-alive, closed between requests: nothing
    guard.left(9, 1, "p:3")
    assert lines == [(400, "client left before its request was handled", "p:3")]
    assert (guard.rejected, guard.empty) == (1, 1)


async def test_a_connection_over_the_limit_is_answered_503_then_closed() -> None:
    guard, lines = make_guard(timeout=30.0, most=4)
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    timer = guard.refuse(transport, "10.9.9.9:1", loop)
    try:
        got = b""
        while True:
            data = await loop.sock_recv(theirs, 4096)
            if not data:  # our FIN, after the whole answer
                break
            got += data
        assert got == TOO_MANY
        assert lines == [(503, "too many connections (max 4)", "10.9.9.9:1")]
        assert (guard.refused, guard.rejected, guard.open) == (1, 1, 0)
        # The linger is bounded (2 s), whatever the client timeout.
        assert 0 < timer.when() - loop.time() <= 2.0
    finally:
        timer.cancel()
        transport.abort()
        theirs.close()


# ------------------------------------------------- a head held for another worker


class _Refusing:
    """A handover that finds every id another worker's, and cannot send it."""

    def __init__(self) -> None:
        self.asked: list[bytes] = []

    def owner(self, last_event_id: bytes) -> int | None:
        self.asked.append(last_event_id)
        return 1 if last_event_id.startswith(b"w1_") else None

    def send(self, owner: int, transport: Any, data: bytes) -> bool:
        return False


async def _exchange(port: int, *requests: list[bytes]) -> bytes:
    """Each request (in pieces, sent one by one) on one connection, the next once the
    answer to the one before has ended."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = b""
    for pieces in requests:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0)
        async with asyncio.timeout(10):
            while not got.endswith(b"0\r\n\r\n"):
                data = await reader.read(65536)
                if not data:
                    break
                got += data
        got += b"|"
    writer.close()
    return got


async def test_a_held_head_is_served_as_ever_whole_byte_by_byte_and_kept_alive(
    make_proxy: Any,
) -> None:
    proxy = await make_proxy(scenarios={"framed": "faults: []\n"})
    runner = next(r for r in proxy.runners if STATE in getattr(r, "app", {}))
    refusing = _Refusing()
    runner.app[CLIENT_GUARD].handover = refusing
    port = int(proxy.url.rsplit(":", 1)[1])
    body = orjson.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Last-Event-ID: w1_abc.3\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    whole = head + body
    answered = await _exchange(port, [whole])
    assert answered.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in answered
    one_by_one = await _exchange(port, [whole[i : i + 1] for i in range(len(whole))])
    assert one_by_one.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in one_by_one
    # Two requests on one connection: the second head is held and looked at too.
    both = await _exchange(port, [whole], [b"\r\n", whole[:7], whole[7:]])
    assert both.count(b"HTTP/1.1 200") == 2
    assert refusing.asked == [b"w1_abc.3"] * 4
    assert runner.app[CLIENT_GUARD].handed_over == 0
