"""Where each provider keeps an event's content, read from the registry
(chaosproxy/core/slots.py): which providers have text and tool fragments to rewrite
(and why not, in words), and the new events made from a template event: its JSON
values replaced in place (the rest of its bytes the upstream's), from a changed payload,
its SSE ``id:`` left out of a piece that is not the last; numbers read at a path; the
stream's way of writing non-ASCII characters. The providers' own slots are tested in
tests/core/providers/."""

from __future__ import annotations

import pytest

from chaosproxy.core.framing import parse_block
from chaosproxy.core.providers.base import Slot
from chaosproxy.core.slots import (
    fragments_problem,
    number_at,
    rebuild,
    slots_for,
    string_json,
    string_style,
    text_problem,
)

EVENT = parse_block(b'id: 9\nevent: x\ndata: {"a":{"b":[1,"q\\u00e9"]},"n":5,"t":true}\n\n', "sse")


@pytest.mark.parametrize(
    ("provider", "fragments", "text"),
    [
        ("openai-chat", None, None),
        ("openai-responses", None, None),
        ("anthropic", None, None),
        ("gemini", "gemini sends each tool call whole: there are no argument fragments", None),
        ("ollama", "ollama sends each tool call whole: there are no argument fragments", None),
        (
            "generic",
            "a generic stream's tool calls are unknown: there are no argument fragments",
            "a generic stream's text is unknown: there are no text deltas to rewrite",
        ),
        (
            "no-such",
            "a no-such stream's tool calls are unknown: there are no argument fragments",
            "a no-such stream's text is unknown: there are no text deltas to rewrite",
        ),
    ],
)
def test_what_each_provider_offers_to_rewrite(
    provider: str, fragments: str | None, text: str | None
) -> None:
    assert (fragments_problem(provider), text_problem(provider)) == (fragments, text)
    assert (slots_for(provider) is None) == (text is not None)


def test_only_the_sequence_of_openai_responses_is_declared() -> None:
    declared = {
        p: getattr(slots_for(p), "sequence", None)
        for p in ("openai-chat", "openai-responses", "anthropic")
    }
    assert declared == {
        "openai-chat": None,
        "openai-responses": ("sequence_number",),
        "anthropic": None,
    }


def test_a_new_event_is_the_template_with_its_values_replaced_in_place() -> None:
    assert rebuild(EVENT, "sse", [(("n",), "6")]).raw == (
        b'id: 9\nevent: x\ndata: {"a":{"b":[1,"q\\u00e9"]},"n":6,"t":true}\n\n'
    )
    assert rebuild(EVENT, "sse", [(("n",), "6"), (("a", "b", 1), '"r"')]).raw == (
        b'id: 9\nevent: x\ndata: {"a":{"b":[1,"r"]},"n":6,"t":true}\n\n'
    )
    assert rebuild(EVENT, "sse", []).raw == EVENT.raw


def test_a_piece_that_is_not_the_last_leaves_out_the_id() -> None:
    piece = rebuild(EVENT, "sse", [(("n",), "6")], keep_id=False)
    assert piece.raw == b'event: x\ndata: {"a":{"b":[1,"q\\u00e9"]},"n":6,"t":true}\n\n'
    assert (piece.id, piece.event) == (None, "x")
    line = parse_block(b'{"n":1}\r\n', "ndjson")  # no ids in NDJSON: the same either way
    assert rebuild(line, "ndjson", [(("n",), "2")], keep_id=False).raw == b'{"n":2}\r\n'


def test_a_new_event_from_a_changed_payload_is_written_compactly() -> None:
    made = rebuild(EVENT, "sse", [(("z",), "2")], payload={"z": 1, "w": [1, 2]})
    assert made.raw == b'id: 9\nevent: x\ndata: {"z":2,"w":[1,2]}\n\n'


@pytest.mark.parametrize(
    ("path", "number"),
    [
        (("n",), 5),
        (("a", "b", 0), 1),
        (("t",), None),
        (("a", "b", 1), None),
        (("a", "b", 5), None),
        (("x",), None),
        (("n", "deeper"), None),
    ],
)
def test_a_number_is_an_integer_at_the_path_not_a_boolean(
    path: tuple[str | int, ...], number: int | None
) -> None:
    assert number_at(EVENT, path) == number


def test_the_streams_way_with_non_ascii_is_read_from_a_string_that_tells() -> None:
    assert string_style(EVENT, Slot(("a", "b", 1), "qé", "0")) is True
    plain = parse_block('data: {"t":"café","u":"abc"}\n\n'.encode(), "sse")
    assert string_style(plain, Slot(("t",), "café", "0")) is False
    assert string_style(plain, Slot(("missing",), "", "0")) is None  # nowhere to tell
    assert string_json("é\t", True) == '"\\u00e9\\t"'
    assert string_json("é\t", False) == string_json("é\t", None) == '"é\\t"'
