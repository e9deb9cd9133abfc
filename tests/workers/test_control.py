"""The control protocol between the supervisor and its workers
(chaosproxy/workers/control.py): length-prefixed JSON messages decoded the same for any
split, refused over the limit or not an object; a ``Channel`` asking and a ``WorkerEnd``
answering in order, notes sent unasked, a worker gone before its hello a failed start.
The workers at work are tests/workers/test_workers_live.py's."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaosproxy.workers.control import (
    MAX_MESSAGE,
    Channel,
    ControlError,
    Decoder,
    WorkerEnd,
    encode,
)

MESSAGES = [{"id": 1, "op": "add_scenario", "body": "bmFtZTogeAo="}, {"id": 2, "op": "reset"}]


def test_every_split_of_two_messages_decodes_to_the_same_messages() -> None:
    wire = b"".join(encode(m) for m in MESSAGES)
    for cut in range(len(wire) + 1):
        decoder = Decoder()
        got = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
        assert got == MESSAGES
        assert decoder.buffered == 0


@given(st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=40))
def test_byte_by_byte_or_in_any_pieces(sizes: list[int]) -> None:
    wire = b"".join(encode(m) for m in MESSAGES) * 3
    decoder = Decoder()
    got: list[dict[str, Any]] = []
    i = 0
    while i < len(wire):
        size = sizes[i % len(sizes)]
        got += decoder.feed(wire[i : i + size])
        i += size
    assert got == MESSAGES * 3


def test_a_message_over_the_limit_or_not_an_object_is_refused() -> None:
    with pytest.raises(ControlError, match="over the limit"):
        Decoder().feed((MAX_MESSAGE + 1).to_bytes(4, "big"))
    with pytest.raises(ControlError, match="not a JSON object"):
        Decoder().feed(len(b"[1]").to_bytes(4, "big") + b"[1]")
    with pytest.raises(ControlError, match="not JSON"):
        Decoder().feed(len(b"{x").to_bytes(4, "big") + b"{x")


async def test_a_channel_asks_and_the_worker_answers_in_order() -> None:
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    worker = WorkerEnd(theirs)
    await channel.open()
    await worker.open()
    seen: list[str] = []

    async def handler(op: str, message: dict[str, Any]) -> Any:
        seen.append(op)
        if op == "slow":
            await asyncio.sleep(0)  # (answers still go back in order)
            return message["n"] * 2
        if op == "boom":
            raise ValueError("no such thing")
        return op

    worker.hello("ready", pid=7)
    serving = asyncio.create_task(worker.serve(handler))
    assert channel.hello is not None
    assert (await channel.hello)["pid"] == 7
    futures = [channel.send("slow", n=1), channel.send("fast"), channel.send("boom")]
    assert await futures[0] == 2
    assert await futures[1] == "fast"
    with pytest.raises(ControlError, match="ValueError: no such thing"):
        await futures[2]
    assert seen == ["slow", "fast", "boom"]  # one at a time, in the order sent
    assert await channel.ask("slow", n=21) == 42
    # The worker goes away: what waits fails, what is asked next fails at once.
    waiting = channel.send("never")
    serving.cancel()
    theirs.close()
    with pytest.raises(ControlError):
        await waiting
    with pytest.raises(ControlError, match="went away"):
        await channel.ask("again")
    await channel.close()


async def test_a_worker_that_dies_before_its_hello_is_a_failed_start() -> None:
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    await channel.open()
    theirs.close()
    assert channel.hello is not None
    assert (await channel.hello)["op"] == "failed"
    await channel.close()


async def test_notes_come_unasked_between_answers_and_are_read_to_the_end() -> None:
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    notes: list[dict[str, Any]] = []
    channel.on_note = notes.append
    worker = WorkerEnd(theirs)
    await channel.open()
    await worker.open()

    async def handler(op: str, message: dict[str, Any]) -> Any:
        worker.note("flights", begun=[["r-1", None, 1.5]], ended=[])
        return op

    worker.hello("ready", pid=7)
    serving = asyncio.create_task(worker.serve(handler))
    assert await channel.ask("x") == "x"
    worker.note("flights", begun=[], ended=["r-1"])
    serving.cancel()
    theirs.close()  # gone: what it wrote is still read
    assert channel.ended is not None
    await channel.ended
    assert notes == [
        {"id": -1, "op": "flights", "begun": [["r-1", None, 1.5]], "ended": []},
        {"id": -1, "op": "flights", "begun": [], "ended": ["r-1"]},
    ]
    await channel.close()
