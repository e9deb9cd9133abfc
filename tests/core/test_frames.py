"""Frames, events and writes as values: what their own ``__init__`` (compiled, not
the one ``@dataclass`` generates) must keep of a dataclass's behaviour."""

from __future__ import annotations

from dataclasses import replace

from chaosproxy.core.actions import Send
from chaosproxy.core.events import Event
from chaosproxy.core.frames import Frame, format_for_content_type


def test_a_frame_built_by_keywords_or_by_position_is_the_same_value() -> None:
    by_position = Frame(b'event: e\ndata: {"a": 1}\n\n', '{"a": 1}', "e", None, None, (), b"\n")
    by_name = Frame(raw=b'event: e\ndata: {"a": 1}\n\n', data='{"a": 1}', event="e")
    assert by_position == by_name
    assert hash(by_position) == hash(by_name)
    assert (by_name.id, by_name.retry, by_name.comments) == (None, None, ())
    assert (by_name.newline, by_name.complete, by_name.piece) == (b"\n", True, None)
    assert by_name.json() == {"a": 1}
    assert by_name.type == "e"


def test_the_parse_cache_and_the_content_piece_are_not_part_of_the_value() -> None:
    a, b = (
        Frame(b'data: {"type": "x"}\n\n', '{"type": "x"}'),
        Frame(b'data: {"type": "x"}\n\n', '{"type": "x"}'),
    )
    assert a.type == "x"  # parses a's JSON, b's not
    a.piece = object()
    assert a == b and hash(a) == hash(b)
    assert repr(a) == (
        'Frame(raw=b\'data: {"type": "x"}\\n\\n\', data=\'{"type": "x"}\', event=None, '
        "id=None, retry=None, comments=(), newline=b'\\n', complete=True)"
    )


def test_a_frame_without_json_data_parses_to_none_once() -> None:
    frame = Frame(b"data: [DONE]\n\n", "[DONE]")
    assert frame.json() is None
    assert frame.type is None
    assert Frame(b": keepalive\n\n", None, comments=(" keepalive",)).is_event is False


def test_an_event_and_a_send_keep_their_defaults_and_their_value() -> None:
    frame = Frame(b"data: x\n\n", "x")
    ev = Event(frame, 3, frozenset({"delta"}))
    assert (ev.faults, ev.splice_from, ev.group, ev.raw) == ((), None, None, b"data: x\n\n")
    touched = ev.touched("mutate")
    assert touched == Event(frame, 3, frozenset({"delta"}), ("mutate",))
    assert hash(touched) == hash(Event(frame, 3, frozenset({"delta"}), faults=("mutate",)))
    send = Send(b"data: x\n\n", (ev,), 1)
    assert send == Send(data=b"data: x\n\n", events=(ev,), ends=1, faults=())
    assert Send(b"").events == () and Send(b"").ends == 0


def test_the_format_follows_the_content_type() -> None:
    assert format_for_content_type("text/event-stream; charset=utf-8") == "sse"
    assert format_for_content_type("application/x-ndjson") == "ndjson"
    assert format_for_content_type("application/json") == "raw"
    assert format_for_content_type(None) == "raw"


def test_replace_keeps_what_a_frame_has_parsed() -> None:
    frame = Frame(b'data: {"a": 1}\n\n', '{"a": 1}')
    assert frame.json() == {"a": 1}
    again = replace(frame, raw=b'data: {"a": 1}\r\n\r\n', newline=b"\r\n")
    assert (again.data, again.newline, again._json) == ('{"a": 1}', b"\r\n", {"a": 1})
