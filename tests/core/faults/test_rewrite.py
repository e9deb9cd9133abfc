"""What the content faults share (chaosproxy/core/faults/_rewrite.py), one ``Rewriter``
on literal events: an event's text found, the event cut into pieces (only the first
keeps a call's opening, only the last the SSE id, an added empty piece has ordinal
0), adjacent deltas merged into one, events reordered, and OpenAI Responses'
``sequence_number`` kept consecutive through all of it; strings written as the stream
writes its own. Each fault's own behaviour is in its test file beside this one."""

from __future__ import annotations

import random

from chaosproxy.core.events import Event
from chaosproxy.core.faults._rewrite import Rewriter
from chaosproxy.core.faults.base import FaultContext, Stream
from chaosproxy.core.frames import Frame
from chaosproxy.core.framing import parse_block
from chaosproxy.core.providers import get_profile


def rewriter(provider: str) -> Rewriter:
    context = FaultContext(random.Random(1), Stream("sse", get_profile(provider)), 1, 0)
    return Rewriter("resegment", context)


def chat(text: str, ordinal: int = 3, head: str = "") -> Event:
    raw = (
        f'{head}data: {{"id":"c1","choices":[{{"index":0,"delta":{{"content":"{text}"}},'
        '"finish_reason":null}]}\n\n'
    ).encode()
    frame = parse_block(raw, "sse")
    return Event(frame, ordinal, get_profile("openai-chat").classify(frame))


def responses(seq: int, text: str, ordinal: int | None = None) -> Event:
    raw = (
        "event: response.output_text.delta\n"
        'data: {"type":"response.output_text.delta","item_id":"m1","output_index":0,'
        f'"content_index":0,"delta":"{text}","sequence_number":{seq}}}\n\n'
    ).encode()
    frame = parse_block(raw, "sse")
    return Event(frame, seq if ordinal is None else ordinal, frozenset({"delta"}))


def seq_and_text(ev: Event) -> tuple[int, str]:
    data = ev.frame.json()
    return data["sequence_number"], data["delta"]


def test_an_events_text_is_found_where_its_provider_keeps_it() -> None:
    r = rewriter("openai-chat")
    slot = r.text(chat("Hello world"))
    assert slot is not None
    assert (slot.path, slot.value, slot.key) == (
        ("choices", 0, "delta", "content"),
        "Hello world",
        "0",
    )
    assert r.tool(chat("Hello world")) is None  # no tool fragment in it


def test_what_cannot_be_rewritten_has_no_slot() -> None:
    unfinished = Frame(b'data: {"choices":[', data='{"choices":[', complete=False)
    assert rewriter("openai-chat").text(Event(unfinished, 1, frozenset({"other"}))) is None
    comment = Frame(b": keepalive\n\n", comments=(" keepalive",))
    assert rewriter("openai-chat").text(Event(comment, 0, frozenset({"other"}))) is None
    generic = rewriter("generic")
    assert generic.slots is None
    assert generic.text(chat("Hello")) is None


def test_pieces_carry_the_text_the_last_keeps_the_id_an_added_one_carries_nothing() -> None:
    r = rewriter("openai-chat")
    ev = chat("Hello world", head="id: 7\n")
    slot = r.text(ev)
    assert slot is not None
    pieces = r.pieces(ev, slot, ["Hello", " world"], empty_after=1)
    body = '"choices":[{{"index":0,"delta":{{"content":"{}"}},"finish_reason":null}}]'
    assert [p.raw for p in pieces] == [
        b'data: {"id":"c1",' + body.format("Hello").encode() + b"}\n\n",
        b'data: {"id":"c1",' + body.format(" world").encode() + b"}\n\n",
        b'id: 7\ndata: {"id":"c1",' + body.format("").encode() + b"}\n\n",
    ]
    assert [(p.ordinal, p.group, p.faults) for p in pieces] == [
        (3, (3, 3), ("resegment",)),
        (3, (3, 3), ("resegment",)),
        (0, None, ("resegment",)),  # carries nothing of event 3
    ]
    assert [sorted(p.kinds) for p in pieces] == [["delta"], ["delta"], ["other"]]


def test_sequence_numbers_stay_consecutive_through_pieces_merges_and_reorders() -> None:
    r = rewriter("openai-responses")
    first = responses(4, "Hello world")
    slot = r.text(first)
    assert slot is not None
    assert [seq_and_text(p) for p in r.pieces(first, slot, ["Hello", " world"])] == [
        (4, "Hello"),
        (5, " world"),
    ]
    assert r.offset == 1  # one event more than upstream sent, from here on
    assert seq_and_text(r.same(responses(5, "!"))) == (6, "!")
    a, b = responses(6, "a"), responses(7, "b")
    slots = [r.text(a), r.text(b)]
    assert slots[0] is not None and slots[1] is not None
    merged = r.merged([a, b], [slots[0], slots[1]])
    assert (seq_and_text(merged), merged.group, merged.ordinal) == ((7, "ab"), (6, 7), 7)
    assert r.offset == 0  # one event fewer again
    same = responses(8, "z")
    assert r.same(same) is same  # nothing to move: the very event
    x, y = responses(8, "x"), responses(9, "y")
    out = r.reordered([x, y], [1, 0])
    assert [(seq_and_text(e), e.ordinal, e.group) for e in out] == [
        ((8, "y"), 9, (8, 9)),
        ((9, "x"), 8, (8, 9)),
    ]


def test_a_merge_or_reorder_of_events_that_are_not_one_run_has_no_group() -> None:
    r = rewriter("openai-responses")
    a, b = responses(2, "a"), responses(5, "b")
    slots = [r.text(a), r.text(b)]
    assert slots[0] is not None and slots[1] is not None
    assert r.merged([a, b], [slots[0], slots[1]]).group is None
    made = responses(6, "m", ordinal=0)  # a fault's own event
    assert [e.group for e in r.reordered([made, b], [1, 0])] == [(5, 5), (5, 5)]
    assert [e.group for e in r.reordered([a, b], [1, 0])] == [None, None]


def test_strings_are_written_as_the_stream_writes_its_own() -> None:
    raw = rewriter("openai-chat")
    assert raw.text(chat("café")) is not None
    assert raw.string("é\n") == '"é\\n"'
    escaping = rewriter("openai-chat")
    assert escaping.text(chat("caf\\u00e9")) is not None
    assert escaping.string("é\n") == '"\\u00e9\\n"'
    unknown = rewriter("openai-chat")  # nothing seen yet: raw
    assert unknown.string("é") == '"é"'
