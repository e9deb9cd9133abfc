"""The proxy's own timing, on virtual time (tests/support/playbook.py): the holds of
``delay``, ``stall``, ``throttle`` and ``hang``, a ``coalesce`` window, the hold timeout,
the upstream's head and idle timeouts, a client that leaves, each an exact timeline of
what the client got and when (virtual milliseconds since the request), and the frame
log's times with it. No socket, no wall clock: a busy machine changes nothing here.

What only real sockets and clocks show stays end to end: a real client's read timeout
against a stall (tests/e2e/test_faults_live.py), the kernel's RST and FIN on the wire,
SIGTERM's grace (tests/server/test_shutdown.py), slow clients over TCP
(tests/e2e/test_hostile_client.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from chaosproxy.control.start import CLOSE_MARGIN, RunningProxy
from chaosproxy.core.faults.base import fault_rng
from chaosproxy.upstream.testing import Answer, MockUpstream, Request
from tests.support.playbook import Beat, Call, Client, Playbook, ms, sse_answer

pytestmark = pytest.mark.timeout(30)


def chunk(content: str, finish: str | None = None, role: str | None = None) -> bytes:
    delta = {"role": role, "content": content} if role else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + orjson.dumps({"id": "c1", "choices": [choice]}) + b"\n\n"


E1, E2 = chunk("He", role="assistant"), chunk("llo")  # E1: openai-chat's start event
E3, E4 = chunk(" w\u00f6rld"), chunk("!", finish="stop")
DONE = b"data: [DONE]\n\n"
EVENTS = [E1, E2, E3, E4, DONE]
BODY = b"".join(EVENTS)


def paced(gap: float, events: list[bytes] = EVENTS) -> Answer:
    """The events, ``gap`` seconds apart (the first at once)."""
    items: list[bytes | float] = [events[0]]
    for event in events[1:]:
        items += [gap, event]
    return sse_answer(*items)


def run(answer: Answer, scenario: str, call: Call | None = None, **settings: Any) -> Client:
    play = Playbook(lambda request: answer, {"s": scenario}, **settings)
    return play.play(call or Call(scenario="s"))


def bodies(client: Client) -> list[tuple[float, bytes]]:
    return [(t, detail) for t, what, detail in client.timeline if what == "body"]


def frames(client: Client) -> list[tuple[float, int]]:
    """The frame lines' (t_ms, size): when the proxy says it wrote what."""
    return [(f["t_ms"], f["size"]) for f in client.lines if f["event"] == "frame"]


def end_line(client: Client) -> dict[str, object]:
    (end,) = [line for line in client.lines if line["event"] == "response_end"]
    return end


# ---------------------------------------------------------------------------- delay


def test_delay_headers_then_first_byte_each_hold_their_time() -> None:
    client = run(paced(0.0), "faults:\n  - delay: {headers: 150ms, first_byte: 200ms}")
    assert client.timeline == [
        (150.0, "head", 200),
        (350.0, "body", E1),  # the body's pause comes after the head's
        (350.0, "body", E2),
        (350.0, "body", E3),
        (350.0, "body", E4),
        (350.0, "body", DONE),
        (350.0, "end", None),
        (350.0, "response_end", "completed"),
    ]
    assert end_line(client)["ttfb_ms"] == 350.0
    assert end_line(client)["faults_applied"] == {"delay": 2}


def test_delay_per_event_holds_each_selected_event() -> None:
    client = run(paced(0.0), "faults:\n  - delay: {per_event: 80ms, kind: delta}")
    # Each delta (events 1-4) waits 80 ms before it is written; [DONE] is no delta.
    assert bodies(client) == [(80.0, E1), (160.0, E2), (240.0, E3), (320.0, E4), (320.0, DONE)]
    assert end_line(client)["faults_applied"] == {"delay": 4}
    assert end_line(client)["max_gap_ms"] == 80.0


def test_delay_per_event_comes_after_the_upstreams_own_pause() -> None:
    client = run(paced(0.05), "faults:\n  - delay: {per_event: 80ms, nth: 3}")
    assert bodies(client) == [(0.0, E1), (50.0, E2), (180.0, E3), (180.0, E4), (200.0, DONE)]


def test_delay_jitter_draws_each_pause_from_the_seed() -> None:
    scenario = "seed: 5\nfaults:\n  - delay: {jitter: 150ms, nth: [2, 4]}"
    client = run(paced(0.0), scenario, Call(scenario="s", seed=None))  # the scenario's seed
    rng = fault_rng(5, 0, "delay")
    first, second = (rng.uniform(0.0, 0.15) for _ in range(2))
    assert bodies(client) == [
        (0.0, E1),
        (ms(first), E2),
        (ms(first), E3),
        (ms(first + second), E4),
        (ms(first + second), DONE),
    ]


# ---------------------------------------------------------------------------- stall


@pytest.mark.parametrize(("after", "n"), [("2", 2), ("start", 1), ("0", 0)])
def test_stall_for_a_duration_holds_everything_after_the_nth_event(after: str, n: int) -> None:
    client = run(paced(0.1), f"faults:\n  - stall: {{after: {after}, duration: 250ms}}")
    # The upstream's events come every 100 ms; after event n, nothing for 250 ms, and
    # what arrived meanwhile goes at its end, at once.
    arrived = [100.0 * i for i in range(len(EVENTS))]
    expected = [
        (t if i < n else max(t, 100.0 * max(n - 1, 0) + 250.0), event)
        for i, (t, event) in enumerate(zip(arrived, EVENTS, strict=True))
    ]
    assert bodies(client) == expected
    assert end_line(client)["faults_applied"] == {"stall": 1}


def test_stall_forever_holds_until_the_client_leaves() -> None:
    client = run(
        paced(0.0),
        "faults:\n  - stall: {after: 2, forever: true}",
        Call(scenario="s", leave_at=0.3),
        hold_timeout=600.0,
    )
    assert client.timeline == [
        (0.0, "head", 200),
        (0.0, "body", E1),
        (0.0, "body", E2),
        (300.0, "left", None),
        (300.0, "response_end", "client_gone"),
    ]


# ---------------------------------------------------------------------------- throttle


def test_throttle_writes_its_pieces_at_the_rate() -> None:
    rate = 2000  # bytes a second: writes of at most rate/20 = 100 bytes
    client = run(paced(0.0), f"faults:\n  - throttle: {{bytes_per_second: {rate}}}")
    assert client.body == BODY
    sizes = [len(data) for _, data in bodies(client)]
    # Each event in writes of rate/20 bytes, the last piece of each what is left of it.
    assert sizes == [min(100, len(e) - at) for e in EVENTS for at in range(0, len(e), 100)]
    # Each write waits for the one before it to have left at the rate: len/rate.
    at, expected = 0.0, []
    for size in sizes:
        expected.append(ms(at))
        at += size / rate
    assert [t for t, _ in bodies(client)] == expected
    assert frames(client) == list(zip(expected, sizes, strict=True))


# ---------------------------------------------------------------------------- coalesce


def test_coalesce_window_closes_on_its_own_before_a_late_event() -> None:
    answer = sse_answer(E1, E2, E3, 0.3, E4, DONE)
    client = run(answer, "faults:\n  - coalesce: {window: 100ms}")
    # The first window opens with E1 and closes at 100 ms, 200 ms before E4 comes.
    assert bodies(client) == [(100.0, E1 + E2 + E3), (300.0, E4 + DONE)]


# ---------------------------------------------------------------------------- hang, hold timeout


def test_a_hang_is_cut_at_the_hold_timeout_and_the_connection_aborted() -> None:
    client = run(paced(0.0), "faults:\n  - hang: {}", hold_timeout=5.0)
    assert client.timeline == [
        (0.0, "head", 200),
        (0.0, "body", E1),
        (0.0, "body", E2),
        (0.0, "body", E3),
        (0.0, "body", E4),
        (0.0, "body", DONE),
        (5000.0, "action", "cut"),
        (5000.0, "closed", "close"),  # (no last chunk: a client sees the body broken)
        (5000.0, "response_end", "cut"),
    ]
    (action,) = [line for line in client.lines if line["event"] == "action"]
    assert (action["reason"], action["fault"]) == ("hold timeout", "hang")


#: A hold that outlasts the hold timeout, what the client got before it, the fault.
HOLDS: dict[str, tuple[str, list[bytes] | None, str]] = {
    "stall-forever": ("[{stall: {after: 2, forever: true}}]", [E1, E2], "stall"),
    "stall-long": ("[{stall: {after: 2, duration: 1m}}]", [E1, E2], "stall"),
    "hang": ("[hang]", EVENTS, "hang"),
    "delay-headers": ("[{delay: {headers: 1m}}]", None, "delay"),  # None: not even the head
    "delay-first-byte": ("[{delay: {first_byte: 1m}}]", [], "delay"),
    "delay-per-event": ("[{delay: {per_event: 1m, nth: 3}}]", [E1, E2], "delay"),
    # Two holds in a row, each under the limit, with nothing sent between them.
    "two-in-a-row": (
        "[{delay: {first_byte: 200ms}}, {stall: {after: 0, duration: 200ms}}]",
        [],
        "stall",
    ),
}


@pytest.mark.parametrize("name", list(HOLDS))
def test_every_hold_ends_at_the_hold_timeout_as_an_aborted_cut(name: str) -> None:
    faults, saw, fault = HOLDS[name]
    client = run(paced(0.0), f"faults: {faults}", hold_timeout=0.3)
    got: list[Beat] = [] if saw is None else [(0.0, "head", 200)]
    got += [(0.0, "body", event) for event in saw or []]
    assert client.timeline == [
        *got,
        (300.0, "action", "cut"),
        (300.0, "closed", "close"),  # never the last chunk: the body is broken
        (300.0, "response_end", "cut"),
    ]
    (action,) = [line for line in client.lines if line["event"] == "action"]
    assert (action["how"], action["fault"], action["reason"]) == ("abort", fault, "hold timeout")
    end = end_line(client)
    assert (end["reason"], end["duration_ms"]) == ("hold timeout", 300.0)
    assert end["error"] == f"the {fault} fault held the response 0.3 s with nothing sent"


def test_holds_in_a_row_share_one_hold_timeout() -> None:
    # Three 2 s holds with nothing sent between them: 6 s in all against 5 s.
    scenario = "faults:\n  - delay: {first_byte: 2s}\n  - stall: {after: 0, duration: 2s}\n"
    scenario += "  - delay: {per_event: 2s, nth: 1}"
    client = run(paced(0.0), scenario, hold_timeout=5.0)
    assert [(t, what) for t, what, _ in client.timeline] == [
        (0.0, "head"),
        (5000.0, "action"),
        (5000.0, "closed"),
        (5000.0, "response_end"),
    ]


def test_a_hold_after_progress_gets_the_whole_hold_timeout_again() -> None:
    scenario = "faults:\n  - stall: {after: 0, duration: 4s}\n  - stall: {after: 1, duration: 4s}"
    client = run(paced(0.0), scenario, hold_timeout=5.0)
    assert bodies(client) == [(4000.0, E1), *((8000.0, event) for event in EVENTS[1:])]
    assert end_line(client)["outcome"] == "completed"


# ---------------------------------------------------------------------------- upstream timeouts


def test_an_upstream_slower_than_the_head_timeout_is_a_504_at_the_timeout() -> None:
    async def slow(request: Request) -> Answer:
        import asyncio

        await asyncio.sleep(60)
        return paced(0.0)

    play = Playbook(slow, {"s": "faults: []"}, head_timeout=2.5)
    client = play.play(Call(scenario="s"))
    assert client.timeline == [
        (2500.0, "response_end", "upstream_error"),  # (logged as the answer is made)
        (2500.0, "head", 504),
        (
            2500.0,
            "body",
            b'{"error":{"type":"chaosproxy_error","message":"upstream sent no response head'
            b' within 2.5 s: http://mock.invalid"}}',
        ),
        (2500.0, "end", None),
    ]


def test_an_upstream_silent_mid_body_for_the_idle_timeout_is_cut_then() -> None:
    client = run(sse_answer(E1, E2, 30.0, E3), "faults: []", idle_timeout=1.5)
    assert client.timeline == [
        (0.0, "head", 200),
        (0.0, "body", E1),
        (0.0, "body", E2),
        (1500.0, "closed", "close"),
        (1500.0, "response_end", "upstream_error"),
    ]


# ---------------------------------------------------------------------------- stopping


def test_a_stop_lets_streams_run_for_the_grace_then_cuts_the_rest_as_shutdown() -> None:
    def answer(request: Request) -> Answer:
        if request.target.endswith("slow"):  # done 2 s in: within the grace
            return paced(0.5)
        return paced(0.0)

    play = Playbook(answer, {"hang": "faults: [hang]"}, stop_at=1.0, grace=2.0)
    slow, hung = play.run(Call(path="/v1/chat/completions?slow"), Call(scenario="hang"))
    assert slow.timeline == [
        (0.0, "head", 200),
        *((500.0 * i, "body", event) for i, event in enumerate(EVENTS)),
        (2000.0, "end", None),
        (2000.0, "response_end", "completed"),
        (2000.0, "closed", "close"),  # stopping: no keep-alive
    ]
    assert hung.timeline[-2:] == [
        (3000.0, "closed", "close"),  # at the grace's end, 2 s after the stop
        (3000.0, "response_end", "shutdown"),
    ]
    assert [t for t, what, _ in hung.timeline if what == "body"] == [0.0] * len(EVENTS)
    assert play.problems == []


class NeverCloses(MockUpstream):
    async def close(self) -> None:
        await asyncio.Event().wait()  # honours cancellation: a plain hang


def test_a_stop_gives_up_an_upstream_that_never_closes_at_grace_plus_the_margin() -> None:
    play = Playbook(
        lambda request: paced(0.0),
        {"hang": "faults: [hang]"},
        stop_at=1.0,
        grace=0.3,
        upstream=NeverCloses,
    )
    client = play.play(Call(scenario="hang"))
    assert client.timeline[-2:] == [
        (1300.0, "closed", "close"),
        (1300.0, "response_end", "shutdown"),
    ]
    # The grace, then the hung upstream's close is given up at grace + CLOSE_MARGIN.
    assert play.stopped_at == ms(1.0 + 0.3 + CLOSE_MARGIN)
    assert play.problems == [
        "stopping the proxy (its upstream client) did not finish in time; abandoned"
    ]


# ---------------------------------------------------------------------------- the client timeout

TIMEOUT = 0.5  # --client-timeout
GET = b"GET /v1/models HTTP/1.1\r\nHost: proxy.test\r\n\r\n"


def guarded(call: Call) -> tuple[Client, list[dict[str, object]]]:
    """The client, and the ``rejected`` lines (no request's: the guard's own)."""
    play = Playbook(lambda request: paced(0.0), client_timeout=TIMEOUT)
    client = play.play(call)
    return client, [line for line in play.lines if line["event"] == "rejected"]


def test_a_head_dribbled_a_byte_at_a_time_is_answered_408_at_the_client_timeout() -> None:
    head = b"GET /v1/slow HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"p" * 100 + b"\r\n\r\n"
    dribble = [(0.15 * i, head[i : i + 1]) for i in range(len(head))]  # 25 timeouts' worth
    client, (line,) = guarded(Call(sends=dribble, until="close"))
    assert [(t, what) for t, what, _ in client.timeline] == [
        (500.0, "head"),
        (500.0, "body"),
        (500.0, "end"),
        (500.0, "closed"),
    ]
    assert client.status == 408
    # Four bytes came in time: at 0, 150, 300 and 450 ms.
    assert (line["status"], line["reason"]) == (408, "request head incomplete after 0.5s (4 bytes)")


def test_an_idle_keep_alive_connection_is_closed_without_a_word_at_the_client_timeout() -> None:
    client, rejected = guarded(Call(sends=[(0.0, GET)], until="close"))
    assert [(t, what) for t, what, _ in client.timeline] == [
        (0.0, "head"),
        *((0.0, "body") for _ in EVENTS),
        (0.0, "end"),
        (0.0, "response_end"),
        (500.0, "closed"),  # nothing sent before it
    ]
    assert rejected == []


def test_a_client_that_asks_in_time_again_and_again_is_never_cut() -> None:
    asks = [(0.3 * i, GET) for i in range(6)]  # each 300 ms after the last answer
    client, rejected = guarded(Call(sends=asks, until="close"))
    heads = [t for t, what, _ in client.timeline if what == "head"]
    assert heads == [ms(0.3 * i) for i in range(6)]
    assert client.timeline[-1] == (ms(0.3 * 5 + TIMEOUT), "closed", "close")
    assert rejected == []


def test_a_request_body_that_stalls_ends_the_request_at_the_client_timeout() -> None:
    head = b"POST /v1/stall HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"
    client, rejected = guarded(Call(sends=[(0.0, head)], until="close"))
    assert client.timeline == [
        (500.0, "closed", "close"),  # no answer: the body never came
        (500.0, "response_end", "client_gone"),
    ]
    assert [line["event"] for line in client.lines] == ["request", "response_end"]
    assert rejected == []


# ---------------------------------------------------------------------------- upstream silence


@pytest.mark.parametrize(
    ("size", "count", "gap", "resumed"),
    [
        (10, 8, 0.05, 950.0),  # events 50 ms apart: the stall, from event 2, ends at 950
        (1000, 400, 0.0, 900.0),  # 400 KB at once: past the inbox's limit meanwhile
    ],
)
def test_a_stall_over_a_healthy_upstream_is_not_upstream_silence(
    size: int, count: int, gap: float, resumed: float
) -> None:
    """The pump holds the upstream itself during a stall (or the upstream keeps sending
    into its inbox): neither is upstream silence, though the stall outlasts its limit."""
    events = [b"data: " + b"%d" % (i % 10) * size + b"\n\n" for i in range(count)]
    stall = "faults:\n  - stall: {after: 2, duration: 900ms}"
    client = run(paced(gap, events), stall, idle_timeout=0.3)
    assert bodies(client) == [
        (0.0, events[0]),
        (ms(gap), events[1]),
        *((resumed, event) for event in events[2:]),
    ]
    assert client.timeline[-1] == (resumed, "response_end", "completed")
    end = end_line(client)
    assert (end["faults_applied"], end["max_gap_ms"]) == ({"stall": 1}, 900.0)
    assert "reason" not in end


# ---------------------------------------------------------------------------- resume: retention


def test_a_kept_stream_is_read_on_after_the_cut_until_its_retention_runs_out() -> None:
    resume = "resume: {policy: resume, retention: 300ms}\nfaults:\n  - cut: {after: 2, how: reset}"
    answer = Answer(headers={"Content-Type": "text/event-stream"}, body=[E1, E2, E3], end="hold")

    def kept(proxy: RunningProxy) -> list[tuple[int, str, float]]:
        return [(s.total, s.state, s.last_activity) for s in proxy.state.resume.store.streams()]

    play = Playbook(
        lambda request: answer, {"s": resume}, stop_at=1.0, probes={0.299: kept, 0.301: kept}
    )
    client = play.play(Call(scenario="s"))
    assert [(t, what) for t, what, _ in client.timeline] == [
        (0.0, "head"),
        (0.0, "body"),
        (0.0, "body"),
        (0.0, "action"),
        (0.0, "closed"),
        (0.0, "response_end"),
    ]
    # Read on, unattended, into history (all three events), then let go when the
    # retention ran out with nobody following: 300 ms after the cut.
    assert play.probed == {0.299: [(3, "live", 0.0)], 0.301: [(3, "abandoned", 0.3)]}


def test_stopping_the_proxy_ends_the_background_readers_at_once() -> None:
    resume = "resume: {policy: resume}\nfaults:\n  - cut: {after: 2, how: close}"
    answer = Answer(headers={"Content-Type": "text/event-stream"}, body=[E1, E2, E3], end="hold")

    def readers(proxy: RunningProxy) -> int:
        return proxy.state.resume.readers

    play = Playbook(lambda request: answer, {"s": resume}, stop_at=0.5, probes={0.499: readers})
    play.play(Call(scenario="s"))
    assert play.probed == {0.499: 1}  # reading on, unattended, until the stop
    assert play.stopped_at == 500.0  # no grace to give: no request runs
    assert play.proxy is not None and play.proxy.state.resume.readers == 0


# ---------------------------------------------------------------------------- the library's timing

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios"
MANY = [chunk(f"w{i} ") for i in range(40)] + [chunk("", finish="stop"), DONE]


def library(name: str, answer: Answer) -> Client:
    play = Playbook(lambda request: answer, {name: (LIBRARY / f"{name}.yaml").read_text()})
    return play.play(Call(scenario=name))


def test_the_librarys_stall_mid_stream_is_silent_600ms_after_the_fourth_event() -> None:
    client = library("stall-mid-stream", paced(0.01, MANY))
    times = [t for t, _ in bodies(client)]
    assert times == [10.0 * i for i in range(4)] + [630.0] * (len(MANY) - 4)
    assert end_line(client)["max_gap_ms"] == 600.0


def test_the_librarys_slow_first_byte_sends_the_head_at_once_the_body_800ms_later() -> None:
    client = library("slow-first-byte", paced(0.0, MANY))
    assert client.timeline[:2] == [(0.0, "head", 200), (800.0, "body", MANY[0])]
    assert end_line(client)["ttfb_ms"] == 800.0


def test_the_librarys_throttled_stream_delivers_4_kib_a_second() -> None:
    big = [chunk(str(i % 10) * 300) for i in range(12)] + [DONE]  # 300+ bytes an event
    client = library("throttled-stream", paced(0.0, big))
    sizes = [len(data) for _, data in bodies(client)]
    piece = 4096 // 20  # each event in pieces of 204 bytes, its last what is left
    assert sizes == [min(piece, len(e) - at) for e in big for at in range(0, len(e), piece)]
    at, expected = 0.0, []
    for size in sizes:  # each write after the pause the one before it took, at the cap
        expected.append(ms(at))
        at += size / 4096
    assert [t for t, _ in bodies(client)] == expected
    assert client.body == b"".join(big)
