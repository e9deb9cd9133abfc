"""Answers (``core/answer.py``): trails folded into content, each id applied once, up to
the first terminal event; prefixes; a generation's ledger over several connections.
Exact expectations, no I/O."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaosproxy.core.answer import Content, Ledger, fold, text_sha256
from chaosproxy.core.providers.base import ERROR_PIECE, NOTHING, TERMINAL_PIECE, EventContent


def text(t: str, channel: int = 0) -> EventContent:
    return EventContent(text=((channel, t),))


def tool(key: str, args: str) -> EventContent:
    return EventContent(tools=((key, args),))


DONE = EventContent(terminal=True, finish=((0, "stop"),))


def test_a_trail_folds_into_text_tools_finish_and_terminal() -> None:
    trail = [
        (None, text("Hel")),
        (None, tool("0/0", '{"ci')),
        (None, text("lo")),
        (None, text("!", channel=1)),
        (None, tool("0/0", 'ty":"Paris"}')),
        (None, tool("", '{"a":1}')),
        (None, tool("", '{"b":2}')),
        (None, DONE),
    ]
    assert fold(trail, dedup=True) == Content(
        texts=((0, "Hello"), (1, "!")),
        tools=(("0/0", '{"city":"Paris"}'), ("#1", '{"a":1}'), ("#2", '{"b":2}')),
        finish=((0, "stop"),),
        errors=0,
        terminal=True,
    )
    assert fold(trail, dedup=True).text == "Hello!"


def test_the_fold_stops_at_the_first_terminal_event() -> None:
    trail = [(None, text("a")), (None, DONE), (None, text(" late")), (None, DONE)]
    assert fold(trail, dedup=True) == Content(
        texts=((0, "a"),), finish=((0, "stop"),), terminal=True
    )


def test_each_id_is_applied_once_and_events_without_ids_always() -> None:
    trail = [
        ("g.1", text("a")),
        ("g.2", text("b")),
        ("g.2", text("b")),  # a replay of the seam
        (None, text("c")),
        (None, text("c")),  # no id: two events
        ("g.1", text("a")),
    ]
    assert fold(trail, dedup=True).text == "abcc"
    assert fold(trail, dedup=False).text == "abbcca"


def test_errors_are_counted() -> None:
    assert fold([(None, text("a")), (None, ERROR_PIECE)], dedup=True).errors == 1


@pytest.mark.parametrize(
    ("part", "whole", "prefix"),
    [
        (Content(), Content(texts=((0, "ab"),), terminal=True), True),
        (Content(texts=((0, "a"),)), Content(texts=((0, "ab"),), terminal=True), True),
        (Content(texts=((0, "b"),)), Content(texts=((0, "ab"),), terminal=True), False),
        (Content(texts=((1, "a"),)), Content(texts=((0, "a"),)), False),  # a foreign channel
        (Content(tools=(("k", '{"a'),)), Content(tools=(("k", '{"a":1}'),)), True),
        (Content(tools=(("j", "{"),)), Content(tools=(("k", "{"),)), False),
        (Content(errors=1), Content(), False),
        (Content(finish=((0, "length"),)), Content(finish=((0, "stop"),)), False),
        # A terminal event makes it whole: only the whole answer is its own prefix.
        (
            Content(texts=((0, "a"),), terminal=True),
            Content(texts=((0, "ab"),), terminal=True),
            False,
        ),
        (
            Content(texts=((0, "ab"),), terminal=True),
            Content(texts=((0, "ab"),), terminal=True),
            True,
        ),
    ],
)
def test_prefix(part: Content, whole: Content, prefix: bool) -> None:
    assert part.is_prefix_of(whole) is prefix


@given(st.lists(st.text(min_size=1, max_size=5), max_size=20), st.integers(0, 20))
def test_what_was_sent_so_far_is_a_prefix_of_the_answer(pieces: list[str], sent: int) -> None:
    trail = [(f"g.{i}", text(p)) for i, p in enumerate(pieces)] + [(None, DONE)]
    whole = fold(trail, dedup=True)
    assert fold(trail[:sent], dedup=True).is_prefix_of(whole)
    assert fold(trail, dedup=True).is_prefix_of(whole)


def test_a_ledger_folds_every_connection_of_a_generation() -> None:
    ledger = Ledger("r-1")
    for event_id, t in (("g.1", "a"), ("g.2", "b"), ("g.3", "c")):
        ledger.add_clean(event_id, text(t))
    ledger.add_clean("g.4", DONE)
    ledger.add_clean("g.5", NOTHING)  # nothing to keep
    assert len(ledger.clean) == 4
    ledger.add_sent([("g.1", text("a")), ("g.2", text("b"))])  # cut after two
    state = ledger.state()
    assert (state.content, state.prefix, state.connections) == ("incomplete", True, 1)
    # replay_last: the second connection starts at the seam again.
    ledger.add_sent([("g.2", text("b")), ("g.3", text("c")), ("g.4", DONE)])
    state = ledger.state()
    assert (state.content, state.prefix, state.connections) == ("intact", True, 2)
    assert state.fields(sound=True, defect=None) == {
        "generation": "r-1",
        "connections": 2,
        "content": "intact",
        "prefix": True,
        "sound": True,
        "defect": None,
        "text_sha256": {"clean": text_sha256("abc"), "sent": text_sha256("abc")},
    }


def test_an_altered_answer_is_not_a_prefix() -> None:
    ledger = Ledger("r-1")
    for event_id, piece in (("1", text("a")), ("2", text("b")), ("3", DONE)):
        ledger.add_clean(event_id, piece)
    ledger.add_sent([(None, text("a")), (None, text("a")), (None, text("b")), (None, DONE)])
    state = ledger.state()
    assert (state.content, state.prefix) == ("altered", False)


def test_a_ledger_keeps_at_most_its_limit_of_clean_content() -> None:
    ledger = Ledger("r-1", limit=4)
    ledger.add_clean(None, text("abc"))
    ledger.add_clean(None, text("de"))  # 5 > 4: not kept, and nothing after it
    ledger.add_clean(None, TERMINAL_PIECE)
    assert (ledger.overflow, fold(ledger.clean, dedup=False).text) == (True, "abc")


def test_the_hash_is_sha256_of_the_utf8_text_without_trailing_whitespace() -> None:
    expected = hashlib.sha256("Hello, wörld ☕".encode()).hexdigest()
    assert text_sha256("Hello, wörld ☕ \n\t\n") == expected
    assert text_sha256("  Hello, wörld ☕") != expected  # leading whitespace counts
