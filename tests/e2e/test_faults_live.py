"""Every fault and selector of docs/scenarios.md and docs/faults-*.md through the live proxy.

A scripted upstream sends a known OpenAI-chat stream; the proxy runs one scenario; the
tests assert what the client observes on the wire (exact bytes, how the connection
ended, when bytes arrived) and what the frame log says (write sizes, faults applied
and skipped). Expected bytes are built from the upstream events and the rules in
docs/faults-*.md, never copied from a run.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any

import aiohttp
import orjson
import pytest

from chaosproxy.control.start import RunningProxy
from chaosproxy.core.faults.base import fault_rng
from tests.support.live_faults import (
    BODY,
    E1,
    E2,
    E3,
    E4,
    E5,
    E6,
    EVENTS,
    PATH,
    Live,
    Reply,
    fetch,
    upto,
    wait_end,
    without,
    writes,
)
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.raw_http import assert_frames_cover, dechunk
from tests.support.scripted_upstream import ScriptedUpstream

# ---------------------------------------------------------------------------- the stream


#: A timer may fire this much before its time (uvloop rounds to the millisecond). Gaps
#: are measured where nothing can shorten them: at the proxy's writes (the frame log's
#: ``t_ms``), or from a moment before the cause (the request sent, the upstream's write).
#: At the client a gap looks shorter than the pause that made it when the client was
#: late to read the bytes before it (a loaded machine).
TIMER = 0.002


def data_of(event: bytes) -> bytes:
    """The data line's value of a one-data-line SSE event."""
    line = next(line for line in event.split(b"\n") if line.startswith(b"data: "))
    return line[len(b"data: ") :]


def with_data(event: bytes, data: bytes) -> bytes:
    new = b"data:" + (b" " if data else b"") + data + b"\n"
    return event.replace(b"data: " + data_of(event) + b"\n", new)


# ---------------------------------------------------------------------------- plumbing


def actions(log: LogCapture, request_id: str) -> list[dict[str, Any]]:
    return [x for x in log.for_request(request_id) if x["event"] == "action"]


@pytest.fixture
def live(upstream: ScriptedUpstream, make_proxy: ProxyFactory, log_capture: LogCapture) -> Live:
    return Live(upstream, make_proxy, log_capture)


async def raw_request(
    proxy: RunningProxy, path: str = PATH, *, limit: float = 5.0
) -> tuple[bytes, str]:
    """A request on a plain socket: (everything read, how it ended: eof|reset|timeout)."""
    port = int(proxy.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n"
    writer.write(head.encode() + b"\r\n{}")
    await writer.drain()
    data = b""
    how = "eof"
    try:
        async with asyncio.timeout(limit):
            while chunk_ := await reader.read(65536):
                data += chunk_
    except ConnectionResetError:
        how = "reset"
    except TimeoutError:
        how = "timeout"
    writer.close()
    return data, how


def split_response(raw: bytes) -> tuple[bytes, bytes, bool]:
    """(head, dechunked body, whether the terminating zero chunk came)."""
    head, _, chunked = raw.partition(b"\r\n\r\n")
    body, terminated = dechunk(chunked)
    return head, body, terminated


# ---------------------------------------------------------------------------- event faults


async def test_drop_removes_the_selected_event(live: Live, log_capture: LogCapture) -> None:
    reply, end = await live.run("faults:\n  - drop: {kind: delta, nth: 2}")
    assert reply.status == 200
    assert reply.body == without(3)
    assert end["outcome"] == "completed"
    assert end["faults_applied"] == {"drop": 1}
    assert end["events_in"] == 6
    assert end["events_out"] == 5
    assert [f["events"] for f in log_capture.frames(reply.request_id)] == [[1], [2], [4], [5], [6]]


async def test_duplicate_times_sends_adjacent_copies(live: Live, log_capture: LogCapture) -> None:
    reply, end = await live.run("faults:\n  - duplicate: {nth: 2, times: 2}")
    assert reply.body == E1 + E2 * 3 + without(1, 2)
    assert end["faults_applied"] == {"duplicate": 1}
    frames = log_capture.frames(reply.request_id)
    assert [f["events"] for f in frames[:4]] == [[1], [2], [2], [2]]
    assert [f["faults"] for f in frames[1:4]] == [[], ["duplicate"], ["duplicate"]]


async def test_reorder_reverse_holds_a_window(live: Live, log_capture: LogCapture) -> None:
    reply, end = await live.run("faults:\n  - reorder: {nth: 2, window: 3, mode: reverse}")
    assert reply.body == E1 + E4 + E3 + E2 + E5 + E6
    assert end["faults_applied"] == {"reorder": 1}
    assert [f["events"] for f in log_capture.frames(reply.request_id)] == [
        [1],
        [4],
        [3],
        [2],
        [5],
        [6],
    ]


async def test_reorder_shuffle_is_exact_for_a_seed(
    live: Live, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await live.start("faults:\n  - reorder: {nth: 1, window: 6, mode: shuffle}")
    for seed in (3, 4):
        reply = await fetch(proxy, headers={"X-Chaos-Seed": str(seed)})
        order = list(range(6))
        fault_rng(seed, 0, "reorder").shuffle(order)
        assert reply.body == b"".join(EVENTS[i] for i in order)
        assert reply.headers["X-Chaos-Seed"] == str(seed)
        await wait_end(log_capture, reply.request_id)
        assert [f["events"] for f in log_capture.frames(reply.request_id)] == [
            [i + 1] for i in order
        ]


INJECTED = b'data: {"choices":[{"index":0,"delta":{"content":"late"}}]}\n\n'


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (
            'inject: {after: 2, event: {event: extra, id: "x1", data: {"n": 1}}}',
            E1 + E2 + b'event: extra\nid: x1\ndata: {"n":1}\n\n' + without(1, 2),
        ),
        (
            'inject: {before: 2, times: 2, event: {data: "plain\\ntext"}}',
            E1 + b"data: plain\ndata: text\n\n" * 2 + without(1),
        ),
        (
            "inject: {after: terminal, event: {data: "
            '{"choices": [{"index": 0, "delta": {"content": "late"}}]}}}',
            BODY + INJECTED,
        ),
        ('inject: {after: terminal, event: {data: "[DONE]"}}', BODY + E6),
        (
            'inject: {before: start, event: {raw: "data: {\\"foreign\\":true}\\n\\n"}}',
            b'data: {"foreign":true}\n\n' + BODY,
        ),
    ],
)
async def test_inject_places_a_made_up_event(
    live: Live, log_capture: LogCapture, fault: str, expected: bytes
) -> None:
    reply, end = await live.run(f"faults:\n  - {fault}")
    assert reply.body == expected
    assert end["faults_applied"] == {"inject": 1}
    injected = [f for f in log_capture.frames(reply.request_id) if f["faults"] == ["inject"]]
    assert injected and all(f["events"] == [0] for f in injected)


async def test_inject_kind_error_sends_the_provider_error_event(live: Live) -> None:
    reply, end = await live.run("faults:\n  - inject: {after: 3, event: {kind: error}}")
    head, tail = without(4, 5, 6), without(1, 2, 3)
    assert reply.body.startswith(head) and reply.body.endswith(tail)
    error_event = reply.body[len(head) : len(reply.body) - len(tail)]
    assert error_event.startswith(b"data: ") and error_event.endswith(b"\n\n")
    assert orjson.loads(data_of(error_event))["error"]["type"] == "server_error"
    assert end["provider"] == "openai-chat"


async def test_mutate_set_and_delete(live: Live) -> None:
    reply, end = await live.run(
        "faults:\n  - mutate: {kind: delta, nth: 1, set: {id: other, choices.0.index: 3},"
        " delete: [object]}"
    )
    payload = orjson.loads(data_of(E2))
    payload["id"] = "other"
    payload["choices"][0]["index"] = 3
    del payload["object"]
    assert reply.body == E1 + b"data: " + orjson.dumps(payload) + b"\n\n" + without(1, 2)
    assert end["faults_applied"] == {"mutate": 1}


WORLD = data_of(E3)


@pytest.mark.parametrize(
    ("mode", "data"),
    [
        ("truncate_json", WORLD[: len(WORLD) // 2]),
        ("invalid_json", WORLD[:-1]),
        ("empty_data", b""),
    ],
)
async def test_corrupt_modes(live: Live, mode: str, data: bytes) -> None:
    reply, end = await live.run(f"faults:\n  - corrupt: {{match: w\u00f6rld, mode: {mode}}}")
    assert reply.body == E1 + E2 + with_data(E3, data) + without(1, 2, 3)
    assert end["faults_applied"] == {"corrupt": 1}


async def test_corrupt_invalid_utf8_inserts_one_bad_byte(live: Live) -> None:
    reply, _ = await live.run("faults:\n  - corrupt: {nth: 3, mode: invalid_utf8}")
    head, tail = E1 + E2 + b"id: 7\ndata: ", b"\n\n" + without(1, 2, 3)
    assert reply.body.startswith(head) and reply.body.endswith(tail)
    data = reply.body[len(head) : len(reply.body) - len(tail)]
    assert data.replace(b"\xff", b"", 1) == WORLD
    assert abs(data.index(b"\xff") - len(WORLD) // 2) <= 1  # the middle, at a boundary
    with pytest.raises(UnicodeDecodeError):
        data.decode()


def oversized(size: int) -> bytes:
    pad = size - len(b'{"oversize":""}')
    return b'{"oversize":"' + b"x" * pad + b'"}'


async def test_oversize_terminated(live: Live) -> None:
    reply, end = await live.run("faults:\n  - oversize: {after: 2, bytes: 70000}")
    assert reply.body == E1 + E2 + b"data: " + oversized(70000) + b"\n\n" + without(1, 2)
    assert end["faults_applied"] == {"oversize": 1}
    assert orjson.loads(oversized(70000))["oversize"] == "x" * (70000 - 15)


async def test_oversize_unterminated_is_an_endless_line(live: Live) -> None:
    reply, end = await live.run("faults:\n  - oversize: {after: 2, bytes: 5000, terminated: false}")
    assert reply.body == E1 + E2 + b"data: " + oversized(5000)
    assert end["outcome"] == "completed"


@pytest.mark.parametrize(("style", "newline"), [("crlf", b"\r\n"), ("cr", b"\r")])
async def test_line_endings_reencode_every_line(live: Live, style: str, newline: bytes) -> None:
    reply, end = await live.run(f"faults:\n  - line_endings: {{style: {style}}}")
    assert reply.body == BODY.replace(b"\n", newline)
    assert end["faults_applied"] == {"line_endings": 6}


async def test_line_endings_lf_on_a_crlf_stream(live: Live) -> None:
    crlf = [e.replace(b"\n", b"\r\n") for e in EVENTS]
    reply, end = await live.run("faults:\n  - line_endings: {style: lf}", events=crlf)
    assert reply.body == BODY
    assert end["faults_applied"] == {"line_endings": 6}


async def test_bom_prefixes_the_body(live: Live, log_capture: LogCapture) -> None:
    reply, end = await live.run("faults:\n  - bom: {}")
    assert reply.body == b"\xef\xbb\xbf" + BODY
    assert end["faults_applied"] == {"bom": 1}


async def test_comment_every_with_text(live: Live) -> None:
    reply, end = await live.run('faults:\n  - comment: {every: 2, text: "hi\\nthere"}')
    note = b": hi\n: there\n\n"
    assert reply.body == E1 + E2 + note + E3 + E4 + note + E5 + E6 + note
    assert end["faults_applied"] == {"comment": 3}


async def test_ids_start_and_retry(live: Live) -> None:
    reply, end = await live.run("faults:\n  - ids: {start: 5, retry: 3000}")
    assert reply.body == (
        b"id: 5\nretry: 3000\n"
        + E1
        + b"id: 6\n"
        + E2
        + E3
        + b"id: 7\n"
        + E4
        + b"id: 8\n"
        + E5
        + b"id: 9\n"
        + E6
    )
    assert end["faults_applied"] == {"ids": 5}


# ---------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("selectors", "dropped"),
    [
        ("kind: [usage, terminal]", (5, 6)),
        ("match: 'Hel|!'", (2, 4)),
        ("nth: [1, 6]", (1, 6)),
        ("every: 2", (2, 4, 6)),
        ("range: [2, 3]", (2, 3)),
        ("kind: delta, every: 2", (3,)),
    ],
)
async def test_selectors_pick_events_live(
    live: Live, log_capture: LogCapture, selectors: str, dropped: tuple[int, ...]
) -> None:
    reply, end = await live.run(f"faults:\n  - drop: {{{selectors}}}")
    assert reply.body == without(*dropped)
    assert end["faults_applied"] == {"drop": len(dropped)}
    kept = [i for i in range(1, 7) if i not in dropped]
    assert [f["events"] for f in log_capture.frames(reply.request_id)] == [[i] for i in kept]


async def test_selector_probability_is_exact_for_a_seed(live: Live) -> None:
    proxy = await live.start("faults:\n  - drop: {probability: 0.5}")
    bodies = set()
    for seed in (9, 10, 11):
        rng = fault_rng(seed, 0, "drop")
        dropped = [i for i in range(1, 7) if rng.random() < 0.5]
        reply = await fetch(proxy, headers={"X-Chaos-Seed": str(seed)})
        assert reply.body == without(*dropped)
        bodies.add(reply.body)
    assert len(bodies) > 1  # the seed matters


ANTHROPIC = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m1"}}\n\n',
    b'event: ping\ndata: {"type": "ping"}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hi"}}\n\n',
    b'event: ping\ndata: {"type": "ping"}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]


@pytest.mark.parametrize(
    ("selector", "dropped"),
    [("type: ping", (2, 4)), ("kind: ping", (2, 4)), ("type: [ping, message_stop]", (2, 4, 5))],
)
async def test_type_selector_uses_the_sse_event_name(
    live: Live, selector: str, dropped: tuple[int, ...]
) -> None:
    reply, end = await live.run(
        f"faults:\n  - drop: {{{selector}}}", events=ANTHROPIC, path="/v1/messages"
    )
    assert reply.body == b"".join(e for i, e in enumerate(ANTHROPIC, 1) if i not in dropped)
    assert end["provider"] == "anthropic"
    assert end["faults_applied"] == {"drop": len(dropped)}


async def test_a_fault_that_cannot_apply_is_reported_skipped(live: Live) -> None:
    reply, end = await live.run("faults:\n  - rechunk: {size: 1000}\n  - drop: {nth: 9}")
    assert reply.body == BODY
    assert end["outcome"] == "completed"
    assert end["faults_applied"] == {}
    assert end["faults_skipped"] == [
        {"fault": "rechunk", "position": 0, "reason": "no write was long enough to split"},
        {
            "fault": "drop",
            "position": 1,
            "reason": "ordinal 9 never reached: the stream had 6 events",
        },
    ]


# ---------------------------------------------------------------------------- rechunk


def pieces(lengths: list[int], sizes: Any) -> list[int]:
    """Write sizes when each write of ``lengths`` is split by the running ``sizes``."""
    out: list[int] = []
    for length in lengths:
        start, pos = 0, next(sizes)
        while pos < length:
            out.append(pos - start)
            start, pos = pos, pos + next(sizes)
        out.append(length - start)
    return out


def cycle(values: list[int]) -> Any:
    while True:
        yield from values


async def test_rechunk_size(live: Live, log_capture: LogCapture) -> None:
    reply, end = await live.run("faults:\n  - rechunk: {size: 40}")
    sizes = [f["size"] for f in log_capture.frames(reply.request_id)]
    assert sizes == pieces([len(e) for e in EVENTS], cycle([40]))
    assert reply.body == BODY
    assert end["faults_applied"] == {"rechunk": 5}  # [DONE] is shorter than 40


async def test_rechunk_sizes_cycle_across_events(live: Live, log_capture: LogCapture) -> None:
    reply, _ = await live.run("faults:\n  - rechunk: {sizes: [1, 7, 3, 50]}")
    sizes = [f["size"] for f in log_capture.frames(reply.request_id)]
    assert sizes == pieces([len(e) for e in EVENTS], cycle([1, 7, 3, 50]))
    assert reply.body == BODY
    frames = log_capture.frames(reply.request_id)
    assert all(f["faults"] == ["rechunk"] for f in frames)


async def test_rechunk_random_is_exact_for_a_seed(live: Live, log_capture: LogCapture) -> None:
    reply, _ = await live.run("seed: 11\nfaults:\n  - rechunk: {random: [5, 30]}")
    assert reply.headers["X-Chaos-Seed"] == "11"
    rng = fault_rng(11, 0, "rechunk")
    draws = iter(lambda: rng.randint(5, 30), None)
    sizes = [f["size"] for f in log_capture.frames(reply.request_id)]
    assert sizes == pieces([len(e) for e in EVENTS], draws)
    assert reply.body == BODY


async def test_rechunk_hostile_boundaries(live: Live) -> None:
    events = ['data: {"a":"\u00e9"}\r\n\r\n'.encode(), b"data: [DONE]\r\n\r\n"]
    reply, _ = await live.run("faults:\n  - rechunk: {boundaries: hostile}", events=events)
    assert writes(live.log, reply.request_id) == [
        b"data", b":", b" ", b"{", b'"a":"\xc3', b'\xa9"', b"}", b"\r", b"\n", b"\r", b"\n",
        b"data", b":", b" [DO", b"NE]\r", b"\n", b"\r", b"\n",
    ]  # fmt: skip


# ---------------------------------------------------------------------------- coalesce


@pytest.mark.parametrize(
    ("param", "groups"),
    [("events: 2", [2, 2, 2]), ("events: 4", [4, 2]), ("all: true", [6])],
)
async def test_coalesce_merges_writes(live: Live, param: str, groups: list[int]) -> None:
    reply, end = await live.run(f"faults:\n  - coalesce: {{{param}}}")
    expected, i = [], 0
    for n in groups:
        expected.append(b"".join(EVENTS[i : i + n]))
        i += n
    assert writes(live.log, reply.request_id) == expected
    assert end["faults_applied"] == {"coalesce": len(groups)}


async def test_stall_forever_until_the_client_times_out(live: Live) -> None:
    reply, end = await live.run("faults:\n  - stall: {after: 2, forever: true}", read_timeout=0.3)
    assert isinstance(reply.error, asyncio.TimeoutError)
    assert reply.body == E1 + E2
    assert end["outcome"] == "client_gone"


# ---------------------------------------------------------------------------- cut


FIRST_LINE_E2 = E2.split(b"\n")[0]
CUTS = [
    ("after: 2", upto(2), {"after_event": 2, "position": "boundary"}),
    ("after: 0", b"", {"after_event": 0, "position": "boundary"}),
    ("after: start", upto(1), {"after_event": 1, "position": "boundary"}),
    ("after: terminal", upto(6), {"after_event": 6, "position": "boundary"}),
    ("before: terminal", upto(5), {"after_event": 5, "position": "boundary"}),
    ("after_bytes: 200", BODY[:200], {"after_event": 1, "position": "after_bytes", "bytes": 200}),
    ("after: 2, position: after_id", upto(2) + b"id: 7\n",
     {"after_event": 2, "position": "after_id"}),
    ("after: 1, position: after_data", upto(1) + E2[:-1],
     {"after_event": 1, "position": "after_data"}),
    (
        "after: 2, position: mid_utf8",
        upto(2) + E3[: E3.index("\u00f6".encode()) + 1],
        {"after_event": 2, "position": "mid_utf8"},
    ),
    (
        "after: 1, position: mid_line",
        upto(1) + FIRST_LINE_E2[: len(FIRST_LINE_E2) // 2],
        {"after_event": 1, "position": "mid_line"},
    ),
    (
        "after: 3, position: after_id",  # event 4 has no id line: the cut falls on the boundary
        upto(3),
        {"after_event": 3, "position": "boundary", "requested": "after_id",
         "fallback": "the event has no id line"},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("params", "expected", "detail"), CUTS, ids=[c[0] for c in CUTS])
async def test_cut_positions_exact_bytes(
    live: Live, log_capture: LogCapture, params: str, expected: bytes, detail: dict[str, Any]
) -> None:
    proxy = await live.start(f"faults:\n  - cut: {{{params}, how: close}}")
    raw, ending = await raw_request(proxy)
    assert ending == "eof"
    head, body, terminated = split_response(raw)
    assert head.startswith(b"HTTP/1.1 200")
    assert body == expected
    assert terminated  # close: a clean, silent truncation
    request_id = head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()
    end = await wait_end(log_capture, request_id)
    assert end["outcome"] == "cut"
    assert end["faults_applied"] == {"cut": 1}
    assert_frames_cover(log_capture, request_id, body)
    [action] = actions(log_capture, request_id)
    assert action == action | {"action": "cut", "how": "close", "fault": "cut", **detail}


@pytest.mark.parametrize(("how", "ending", "terminated"), [
    ("close", "eof", True), ("abort", "eof", False), ("reset", "reset", False),
])  # fmt: skip
async def test_cut_how_is_visible_on_the_wire(
    live: Live, log_capture: LogCapture, how: str, ending: str, terminated: bool
) -> None:
    proxy = await live.start(f"faults:\n  - cut: {{after: 2, how: {how}}}")
    raw, observed = await raw_request(proxy)
    assert observed == ending
    head, body, done = split_response(raw)
    assert head.startswith(b"HTTP/1.1 200")
    assert body == upto(2)  # reset drains first: nothing the log counts is lost
    assert done is terminated
    request_id = head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()
    end = await wait_end(log_capture, request_id)
    assert end["outcome"] == "cut"
    assert_frames_cover(log_capture, request_id, body)


async def test_cut_as_seen_by_an_http_client(live: Live) -> None:
    """abort and reset are errors for aiohttp; close looks like a complete response."""
    proxy = await live.start("faults:\n  - cut: {after: 2, how: close}")
    reply = await fetch(proxy)
    assert reply.error is None and reply.body == upto(2)
    for how in ("abort", "reset"):
        proxy = await live.start(f"faults:\n  - cut: {{after: 2, how: {how}}}")
        reply = await fetch(proxy)
        assert isinstance(reply.error, aiohttp.ClientPayloadError), how


@pytest.mark.parametrize(
    ("how", "ending"), [("close", "eof"), ("abort", "eof"), ("reset", "reset")]
)
async def test_cut_before_headers(
    live: Live, upstream: ScriptedUpstream, log_capture: LogCapture, how: str, ending: str
) -> None:
    proxy = await live.start(f"faults:\n  - cut: {{before: headers, how: {how}}}")
    raw, observed = await raw_request(proxy)
    assert (raw, observed) == (b"", ending)
    assert upstream.seen == []
    [request] = [x for x in log_capture.lines if x["event"] == "request"]
    end = await wait_end(log_capture, request["request_id"])
    assert end["outcome"] == "cut"
    assert end["bytes"] == 0
    error = aiohttp.ServerDisconnectedError if how != "reset" else aiohttp.ClientOSError
    with pytest.raises(error):
        await fetch(proxy)


# ---------------------------------------------------------------------------- hang


async def test_hang_keeps_the_body_open(live: Live, log_capture: LogCapture) -> None:
    proxy = await live.start("faults:\n  - hang: {}")
    raw, how = await raw_request(proxy, limit=0.3)
    assert how == "timeout"  # the client gave up; the proxy never ended the body
    head, body, terminated = split_response(raw)
    assert body == BODY
    assert not terminated
    request_id = head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()
    end = await wait_end(log_capture, request_id)
    assert end["outcome"] == "client_gone"
    assert end["faults_applied"] == {"hang": 1}
    assert_frames_cover(log_capture, request_id, body)


# ---------------------------------------------------------------------------- compress

WBITS = {"gzip": 31, "deflate": 15}


async def compressed(live: Live, encoding: str, flush: str) -> tuple[Reply, dict[str, Any]]:
    """The upstream's body, the last event 0.3 s after the others, through ``compress``:
    the reply (said to be in ``encoding``) and its response_end line."""
    reply, end = await live.run(
        f"faults:\n  - compress: {{encoding: {encoding}, flush: {flush}}}",
        gaps=[0, 0, 0, 0, 0, 0.3],
    )
    assert reply.headers["Content-Encoding"] == encoding
    return reply, end


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compress_each_streams_decodable_events(live: Live, encoding: str) -> None:
    reply, end = await compressed(live, encoding, "each")
    assert "Content-Length" not in reply.headers
    z = zlib.decompressobj(WBITS[encoding])
    decoded = b""
    first_at = None
    for t, data in reply.arrivals:
        decoded += z.decompress(data)
        if first_at is None and decoded.startswith(E1):
            first_at = t
            assert E6 not in decoded  # the first event is readable before the last came
    assert decoded == BODY and z.eof
    assert first_at is not None
    # the first event came before the upstream began its last write (0.3 s later)
    assert first_at < live.upstream.wrote_at[-1] <= reply.arrivals[-1][0]
    assert len(writes(live.log, reply.request_id)) == 7  # one per event, then the tail
    assert end["faults_applied"] == {"compress": 6}


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compress_end_buffers_until_the_end(live: Live, encoding: str) -> None:
    reply, _ = await compressed(live, encoding, "end")
    assert zlib.decompress(reply.body, WBITS[encoding]) == BODY
    # Nothing of the body came before the upstream began writing its last event (0.3 s
    # after the others). Measured from the reply's head, a loaded client that was late
    # to read the head saw a shorter gap.
    assert reply.arrivals[0][0] >= live.upstream.wrote_at[-1]
    assert len(writes(live.log, reply.request_id)) == 1


async def test_compress_is_decoded_by_a_real_client(live: Live) -> None:
    proxy = await live.start("faults:\n  - compress: {encoding: gzip}")
    async with (
        aiohttp.ClientSession() as session,  # auto_decompress on
        session.post(proxy.url + PATH, json={}) as resp,
    ):
        assert resp.headers["Content-Encoding"] == "gzip"
        assert await resp.read() == BODY
    reply = await fetch(proxy)
    assert gzip.decompress(reply.body) == BODY


# ---------------------------------------------------------------------------- HTTP faults


async def test_status_429_with_retry_after(live: Live, upstream: ScriptedUpstream) -> None:
    reply, end = await live.run("faults:\n  - status: {code: 429, headers: {Retry-After: 2}}")
    assert reply.status == 429
    assert reply.headers["Retry-After"] == "2"
    assert reply.headers["Content-Type"] == "application/json"
    assert orjson.loads(reply.body) == {
        "error": {"type": "chaosproxy_injected", "message": "chaosproxy injected status 429"}
    }
    assert reply.headers["X-Chaos-Scenario"] == "s"
    assert upstream.seen == []
    assert end["status"] == 429
    assert end["faults_applied"] == {"status": 1}


async def test_status_503_and_a_custom_body(live: Live, upstream: ScriptedUpstream) -> None:
    reply, _ = await live.run("faults:\n  - status: {code: 503, body: upstream overloaded}")
    assert reply.status == 503
    assert reply.body == b"upstream overloaded"
    assert reply.headers["Content-Type"] == "text/plain; charset=utf-8"
    reply, _ = await live.run('faults:\n  - status: {code: 500, body: {"error": {"code": 1}}}')
    assert (reply.status, orjson.loads(reply.body)) == (500, {"error": {"code": 1}})
    assert upstream.seen == []


async def test_headers_set_and_remove(live: Live) -> None:
    reply, end = await live.run(
        "faults:\n  - headers: {set: {Content-Type: text/plain}, remove: [cache-control]}"
    )
    assert reply.headers["Content-Type"] == "text/plain"
    assert "Cache-Control" not in reply.headers
    assert reply.body == BODY
    assert end["faults_applied"] == {"headers": 1}
    # the stream is still framed as upstream labelled it (SSE): event faults still apply
    reply, _ = await live.run(
        "faults:\n  - headers: {set: {Content-Type: text/plain}}\n  - drop: {nth: 1}"
    )
    assert reply.body == without(1)


# ---------------------------------------------------------------------------- frame log


@pytest.mark.parametrize(
    ("scenario", "end", "outcome", "expected"),
    [
        ("faults:\n  - rechunk: {sizes: [7, 30]}", "eof", "completed", BODY),
        ("faults:\n  - rechunk: {size: 9}\n  - cut: {after: 3, position: mid_utf8}", "eof", "cut",
         None),
        ("faults:\n  - duplicate: {nth: 1}\n  - stall: {after: 2, forever: true}", "eof",
         "client_gone", E1 + E1 + E2),
        ("faults:\n  - rechunk: {size: 50}", "die", "upstream_error", upto(3)),
    ],
)  # fmt: skip
async def test_frame_sizes_sum_to_what_the_client_received(
    live: Live,
    log_capture: LogCapture,
    scenario: str,
    end: str,
    outcome: str,
    expected: bytes | None,
) -> None:
    events = EVENTS[:3] if end == "die" else EVENTS
    proxy = await live.start(scenario, events=events, end=end)
    raw, _ = await raw_request(proxy, limit=0.4)
    head, body, terminated = split_response(raw)
    if expected is not None:
        assert body == expected
    assert terminated is (outcome == "completed")
    request_id = head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()
    line = await wait_end(log_capture, request_id)
    assert line["outcome"] == outcome
    assert_frames_cover(log_capture, request_id, body)
    assert b"".join(writes(log_capture, request_id)) == body
    assert sum(f["size"] for f in log_capture.frames(request_id)) == line["bytes"] == len(body)


# ---------------------------------------------------------------------------- NDJSON


OLLAMA = [
    b'{"model":"m","message":{"role":"assistant","content":"Hel"},"done":false}\n',
    b'{"model":"m","message":{"role":"assistant","content":"lo"},"done":false}\n',
    b'{"model":"m","message":{"role":"assistant","content":""},"done":true}\n',
]


async def test_ndjson_event_faults_and_a_cut_inside_a_line(live: Live) -> None:
    proxy = await live.start(
        "faults:\n  - duplicate: {kind: delta, nth: 1}"
        "\n  - inject: {after: 1, event: {kind: error}}"
        "\n  - cut: {after: 4, position: after_data, how: close}",
        events=OLLAMA,
        headers={"Content-Type": "application/x-ndjson"},
        path="/api/chat",
    )
    raw, ending = await raw_request(proxy, "/api/chat")
    head, body, terminated = split_response(raw)
    assert b"application/x-ndjson" in head
    lines = body.split(b"\n")
    # event 1, the injected error line (it follows the first copy, as documented), the
    # copy, event 2: four events sent; then event 3 without its newline, a record a line
    # reader never completes
    assert lines[0] == lines[2] == OLLAMA[0][:-1]
    assert orjson.loads(lines[1]).keys() == {"error"}
    assert lines[3:] == [OLLAMA[1][:-1], OLLAMA[2][:-1]]
    assert (ending, terminated) == ("eof", True)


async def test_upstream_dying_mid_event_forwards_what_arrived(
    live: Live, log_capture: LogCapture
) -> None:
    partial = E2[:30]
    proxy = await live.start("faults:\n  - drop: {nth: 9}", events=[E1, partial], end="die")
    raw, _ = await raw_request(proxy)
    head, body, terminated = split_response(raw)
    request_id = head.split(b"X-Chaos-Request-Id: ")[1].split(b"\r\n")[0].decode()
    assert (await wait_end(log_capture, request_id))["outcome"] == "upstream_error"
    assert not terminated
    assert body == E1 + partial  # as without a scenario
