"""The ``fragment`` fault (docs/faults-websocket.md): one message in, the exact frames
out (opcode, FIN, payload), at chosen and hostile boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from chaosproxy.core.faults._websocket import WsMessage, WsOut
from chaosproxy.core.faults.fragment import FragmentConfig
from chaosproxy.core.framing.websocket import CONTINUATION, TEXT, WsFrame
from tests.support.fault_websocket import make, message

#: "é" is C3 A9 and "€" E2 82 AC: the first multi-byte character starts at byte 9.
PAYLOAD = '{"d":"ab é€"}'.encode()


def test_size_cuts_every_n_bytes_first_frame_text_then_continuations() -> None:
    fault = make("fragment", {"size": 6})
    out = fault.on_message(message(PAYLOAD))
    assert out == [
        WsFrame(TEXT, b'{"d":"', fin=False, fault="fragment"),
        WsFrame(CONTINUATION, b"ab \xc3\xa9\xe2", fin=False, fault="fragment"),
        WsFrame(CONTINUATION, b'\x82\xac"}', fin=True, fault="fragment"),
    ]
    assert fault.applied == 1


def frames(out: list[WsOut]) -> list[WsFrame]:
    assert all(isinstance(o, WsFrame) for o in out)
    return [o for o in out if isinstance(o, WsFrame)]


def test_at_cuts_at_the_given_offsets_and_ignores_those_past_the_end() -> None:
    fault = make("fragment", {"at": [10, 2, 99]})
    out = frames(fault.on_message(message(PAYLOAD)))
    assert [(f.opcode, f.payload, f.fin) for f in out] == [
        (TEXT, b'{"', False),
        (CONTINUATION, b'd":"ab \xc3', False),
        (CONTINUATION, b'\xa9\xe2\x82\xac"}', True),
    ]


def test_mid_utf8_cuts_inside_the_first_multibyte_character() -> None:
    fault = make("fragment", {"mid_utf8": True})
    first, second = frames(fault.on_message(message(PAYLOAD)))
    assert first.payload == b'{"d":"ab \xc3' and not first.fin
    assert second.payload == b'\xa9\xe2\x82\xac"}' and second.fin
    # neither frame is valid UTF-8 alone; together they are the message
    with pytest.raises(UnicodeDecodeError):
        first.payload.decode()
    assert (first.payload + second.payload).decode() == '{"d":"ab é€"}'


def test_mid_utf8_in_ascii_sends_the_message_whole_and_does_not_apply() -> None:
    fault = make("fragment", {"mid_utf8": True})
    assert fault.on_message(message(b'{"d":"abc"}')) == [WsFrame(TEXT, b'{"d":"abc"}')]
    assert fault.applied == 0
    assert fault.skipped() == "never applied"


def test_kind_selects_the_messages_it_fragments() -> None:
    fault = make("fragment", {"size": 4, "kind": "delta"})
    other = message(PAYLOAD, 1, "start")
    assert fault.on_message(other) == list(other.frames)
    assert len(fault.on_message(message(PAYLOAD, 2, "delta"))) == 4  # 15 bytes, 4 a frame


def test_a_message_fragmented_already_is_left_as_it_is() -> None:
    first = make("fragment", {"size": 5})
    second = make("fragment", {"size": 2})
    split = frames(first.on_message(message(PAYLOAD)))
    assert second.on_message(WsMessage(tuple(split), 1, frozenset({"other"}))) == split


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({}, "give exactly one of size, at, mid_utf8"),
        ({"size": 2, "mid_utf8": True}, "give exactly one of size, at, mid_utf8"),
        ({"size": 0}, "greater than or equal to 1"),
        ({"at": [0]}, "greater than or equal to 1"),
        ({"size": 3, "kind": "nope"}, "unknown kind 'nope'"),
    ],
)
def test_bad_configs_are_refused_with_a_reason(config: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        FragmentConfig.model_validate(config)


@given(
    st.binary(min_size=1, max_size=300),
    st.one_of(
        st.builds(lambda n: {"size": n}, st.integers(1, 40)),
        st.builds(lambda at: {"at": at}, st.lists(st.integers(1, 400), min_size=1, max_size=6)),
        st.just({"mid_utf8": True}),
    ),
)
def test_any_message_any_cut_the_frames_join_back_to_it(
    payload: bytes, config: dict[str, object]
) -> None:
    out = frames(make("fragment", config).on_message(message(payload)))
    assert b"".join(f.payload for f in out) == payload
    assert [f.fin for f in out] == [False] * (len(out) - 1) + [True]
    assert [f.opcode for f in out] == [TEXT] + [CONTINUATION] * (len(out) - 1)
    assert all(f.payload for f in out)  # no empty fragment
