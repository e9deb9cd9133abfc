"""tests/support/playbook.py, the harness the shell's timing is tested with: its loop's
clock moves only when every task is idle, exactly to the next timer, and never with
the CPU; a run of the proxy on it is one exact timeline, the same every time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from chaosproxy.upstream.testing import Answer, Request
from tests.support.playbook import (
    Beat,
    Call,
    Deadlock,
    Playbook,
    VirtualLoop,
    ms,
    sse_answer,
    virtual_loop,
)

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")
ONE, TWO, DONE = b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"


def on_virtual_time(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=virtual_loop) as runner:
        return runner.run(coro)


# ---------------------------------------------------------------------------- the loop


def test_the_clock_starts_at_zero_and_jumps_to_each_timer_exactly() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualLoop)
        seen: list[tuple[str, float]] = [("start", loop.time())]
        loop.call_at(1.5, lambda: seen.append(("at 1.5", loop.time())))
        loop.call_later(0.25, lambda: seen.append(("later 0.25", loop.time())))
        await asyncio.sleep(3600)  # an hour, at once
        seen.append(("slept", loop.time()))
        return seen

    assert on_virtual_time(main()) == [
        ("start", 0.0),
        ("later 0.25", 0.25),
        ("at 1.5", 1.5),
        ("slept", 3600.0),
    ]


def test_the_clock_stands_still_while_a_task_computes() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        before = loop.time()
        wall = time.monotonic()
        while time.monotonic() - wall < 0.02:  # 20 ms of CPU, as a busy machine might take
            pass
        await asyncio.sleep(0)  # other tasks run; no time passes
        return before, loop.time()

    assert on_virtual_time(main()) == (0.0, 0.0)


def test_a_wait_that_nothing_can_end_is_a_deadlock_not_a_hang() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(Deadlock, match="every task waits"):
        on_virtual_time(main())


def test_a_thread_that_hands_back_its_result_wakes_a_loop_with_no_timer() -> None:
    async def main() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(None, sum, [40, 2])
        return result, loop.time()

    assert on_virtual_time(main()) == (42, 0.0)  # no deadlock, and no time


def test_ms_gives_virtual_seconds_as_milliseconds_to_the_microsecond() -> None:
    assert ms(0.1 + 0.2) == 300.0
    assert ms(1.2345678) == 1234.568


# ---------------------------------------------------------------------------- the proxy


def test_a_passthrough_timeline_is_the_upstreams_own_pace() -> None:
    play = Playbook(lambda request: sse_answer(ONE, 0.5, TWO, 0.25, DONE))
    client = play.play(Call())  # no scenario: not framed, passed through
    assert client.timeline == [
        (0.0, "head", 200),
        (0.0, "body", ONE),
        (500.0, "body", TWO),
        (750.0, "body", DONE),
        (750.0, "end", None),
        (750.0, "response_end", "completed"),
    ]
    assert client.body == ONE + TWO + DONE
    assert [line["event"] for line in client.lines] == [
        "request",
        "frame",
        "frame",
        "frame",
        "response_end",
    ]
    assert [line["t_ms"] for line in client.lines if line["event"] == "frame"] == [
        0.0,
        500.0,
        750.0,
    ]
    assert play.upstream is not None
    (request,) = play.upstream.requests
    assert (request.method, request.target) == ("POST", "/v1/chat/completions")


def test_runs_are_the_same_every_time() -> None:
    scenario = {"s": "faults:\n  - delay: {jitter: 300ms}\n  - rechunk: {size: 3}"}

    def once() -> list[list[Beat]]:
        play = Playbook(lambda request: sse_answer(ONE, 0.1, TWO, 0.1, DONE), scenario)
        return [c.timeline for c in play.run(Call(scenario="s"), Call(scenario="s", at=0.05))]

    first = once()
    assert [once() for _ in range(3)] == [first] * 3
    assert len(first[0]) > 8  # (each write a beat: there was something to compare)


def test_clients_come_and_leave_at_their_times() -> None:
    play = Playbook(lambda request: sse_answer(ONE, 1.0, TWO, 1.0, DONE), {"s": "faults: []"})
    stays, leaves = play.run(Call(scenario="s", at=0.5), Call(scenario="s", at=1.0, leave_at=1.75))
    assert [(t, what) for t, what, _ in stays.timeline] == [
        (500.0, "head"),
        (500.0, "body"),
        (1500.0, "body"),
        (2500.0, "body"),
        (2500.0, "end"),
        (2500.0, "response_end"),
    ]
    assert leaves.timeline == [
        (1000.0, "head", 200),
        (1000.0, "body", ONE),
        (1750.0, "left", None),
        (1750.0, "response_end", "client_gone"),
    ]


def test_a_client_that_gets_no_head_still_gets_its_requests_lines() -> None:
    async def refuse(request: Request) -> Answer:
        raise ValueError("no")

    play = Playbook(refuse, {"s": "faults:\n  - delay: {headers: 2s}"})
    client = play.play(Call(scenario="s", leave_at=1.0))
    assert client.timeline == [(1000.0, "left", None), (1000.0, "response_end", "client_gone")]
    assert client.request_id == play.lines[0]["request_id"]


# ---------------------------------------------------------------------------- hostile peers


def test_an_upstream_that_resets_mid_body_ends_the_response_then() -> None:
    play = Playbook(lambda request: sse_answer(ONE, 0.1, TWO, 0.1, end="reset"))
    client = play.play(Call())
    assert client.timeline == [
        (0.0, "head", 200),
        (0.0, "body", ONE),
        (100.0, "body", TWO),
        (200.0, "closed", "close"),  # no last chunk: the client sees the body broken
        (200.0, "response_end", "upstream_error"),
    ]


def test_a_head_the_proxy_cannot_parse_is_answered_400_and_logged_rejected() -> None:
    play = Playbook(lambda request: sse_answer(ONE))
    client = play.play(Call(sends=[(0.0, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")], until="close"))
    assert [(t, what) for t, what, _ in client.timeline] == [
        (0.0, "head"),
        (0.0, "body"),
        (0.0, "end"),
        (0.0, "closed"),
    ]
    assert client.status == 400
    (line,) = [x for x in play.lines if x["event"] == "rejected"]
    assert (line["status"], line["ms"]) == (400, 0.0)
    assert play.upstream is not None and play.upstream.requests == []  # never forwarded
