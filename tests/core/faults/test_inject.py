"""The ``inject`` fault (docs/faults-event.md, ``inject``): a real Pipeline (framer,
profile, faults) over a small literal body: the exact bytes of every write, the upstream
ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.faults.duplicate import DuplicateConfig
from chaosproxy.core.faults.inject import InjectConfig
from chaosproxy.core.framing.eventstream import event_message, exception_message
from chaosproxy.core.providers import get_profile
from tests.support import bedrock_stream as bs
from tests.support.fault_events import (
    BODY,
    DONE,
    E1,
    E2,
    E3,
    NDJSON,
    ORDINALS,
    PING,
    Spec,
    assert_chunking_independent,
    inject_cfg,
    run,
)

ANTHROPIC = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hi"}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


@pytest.mark.parametrize(
    "spec",
    [
        ("inject", inject_cfg(after=9, event={"data": "x"})),
    ],
    ids=lambda s: s[0],
)
def test_a_fault_that_never_applies_forwards_every_byte(spec: Spec) -> None:
    r = run([spec], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.ordinals == ORDINALS
    assert r.faults == [()] * 5
    assert r.applied == {}
    [skip] = r.skipped
    assert skip["fault"] == spec[0] and skip["reason"]


@pytest.mark.parametrize(
    ("config", "values"),
    [
        (InjectConfig, {"event": {"data": "x"}}),
        (InjectConfig, {"after": 1, "before": 2, "event": {"data": "x"}}),
        (InjectConfig, {"after": 0, "event": {"data": "x"}}),
        (InjectConfig, {"after": "middle", "event": {"data": "x"}}),
        (InjectConfig, {"after": 1}),
        (InjectConfig, {"after": 1, "event": {}}),
        (InjectConfig, {"after": 1, "event": {"data": "x", "raw": "y"}}),
        (InjectConfig, {"after": 1, "event": {"raw": "y", "event": "e"}}),
        (InjectConfig, {"after": 1, "event": {"kind": "error", "id": "1"}}),
        (InjectConfig, {"after": 1, "event": {"kind": "delta"}}),
        (InjectConfig, {"after": 1, "event": {"data": 42}}),
        (InjectConfig, {"after": 1, "event": {"data": "x", "event": "a\nb"}}),
        (InjectConfig, {"after": 1, "event": {"data": {"big": 2**70}}}),
        (InjectConfig, {"after": 1, "times": 0, "event": {"data": "x"}}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


X = b"data: x\n\n"


def test_inject_after_ordinal() -> None:
    r = run([("inject", inject_cfg(after=2, event={"data": "x"}))], BODY)
    assert r.data == [E1, PING, E2, X, E3, DONE]
    assert r.ordinals == [1, 0, 2, 0, 3, 4]
    assert r.faults == [(), (), (), ("inject",), (), ()]
    assert r.sends[3].events[0].kinds == {"other"}
    assert r.applied == {"inject": 1}


def test_inject_before_ordinal_with_fields_and_times() -> None:
    spec = inject_cfg(before=1, times=2, event={"event": "note", "id": "7", "data": "a\nb"})
    r = run([("inject", spec)], BODY)
    made = b"event: note\nid: 7\ndata: a\ndata: b\n\n"
    assert r.data == [made, made, E1, PING, E2, E3, DONE]
    assert r.ordinals == [0, 0, 1, 0, 2, 3, 4]
    assert r.applied == {"inject": 1}


def test_inject_a_delta_after_completion() -> None:
    spec = inject_cfg(after="terminal", event={"data": {"n": 5, "text": "é"}})
    r = assert_chunking_independent([("inject", spec)], BODY)
    assert r.data == [E1, PING, E2, E3, DONE, 'data: {"n":5,"text":"é"}\n\n'.encode()]


def test_inject_a_second_terminal_classified_by_the_profile() -> None:
    r = run([("inject", inject_cfg(after="terminal", event={"data": "[DONE]"}))], BODY)
    assert r.data[-2:] == [DONE, DONE]
    assert r.sends[-1].events[0].kinds == {"terminal"}
    assert r.sends[-1].events[0].ordinal == 0


def test_inject_before_start_in_the_stream_line_ending() -> None:
    crlf = ANTHROPIC.replace(b"\n", b"\r\n")
    spec = inject_cfg(before="start", event={"event": "ping", "data": {"type": "ping"}})
    r = run([("inject", spec)], crlf, provider="anthropic")
    assert r.data[0] == b'event: ping\r\ndata: {"type":"ping"}\r\n\r\n'
    assert r.sends[0].events[0].kinds == {"ping"}
    assert r.body[len(r.data[0]) :] == crlf


def test_inject_raw_is_sent_verbatim() -> None:
    raw = 'data: {"foreign":true}\r\nid: 9\n\n'
    r = run([("inject", inject_cfg(after=1, event={"raw": raw}))], BODY)
    assert r.data == [E1, raw.encode(), PING, E2, E3, DONE]
    frame = r.sends[1].events[0].frame
    assert (frame.data, frame.id, frame.complete) == ('{"foreign":true}', "9", True)


def test_inject_the_providers_own_error_event() -> None:
    spec = inject_cfg(after=2, event={"kind": "error"})
    r = run([("inject", spec)], ANTHROPIC, provider="anthropic")
    error = get_profile("anthropic").error_event("sse", b"\n")
    assert r.data[2] == error
    assert r.sends[2].events[0].kinds == {"error"}
    assert r.body == ANTHROPIC.replace(
        b"\n\nevent: message_stop", b"\n\n" + error + b"event: message_stop"
    )


def test_inject_error_event_ndjson() -> None:
    spec = inject_cfg(before="terminal", event={"kind": "error"})
    r = run([("inject", spec)], NDJSON, fmt="ndjson", provider="ollama")
    error = get_profile("ollama").error_event("ndjson")
    assert r.data == [b'{"n":1}\n', b'{"n":2}\n', error, b'{"n":3,"done":true}\n']
    assert r.sends[2].events[0].kinds == {"error"}


def test_inject_ndjson_data_is_one_line() -> None:
    spec = inject_cfg(after=1, event={"data": {"extra": [1, 2]}, "event": "ignored"})
    r = run([("inject", spec)], NDJSON, fmt="ndjson")
    assert r.data[:2] == [b'{"n":1}\n', b'{"extra":[1,2]}\n']


def test_inject_never_reached_is_skipped_with_a_reason() -> None:
    spec = inject_cfg(after="terminal", event={"data": "x"})
    r = run([("inject", spec)], E1 + E2)
    assert r.data == [E1, E2]
    assert (
        r.skipped[0]["reason"] == "after: terminal never reached: the stream had no terminal event"
    )
    r = run([("inject", inject_cfg(before=5, event={"data": "x"}))], BODY)
    assert r.skipped[0]["reason"] == "before: 5 never reached: the stream had 4 events"


def test_inject_after_an_event_an_earlier_fault_dropped() -> None:
    # Event 2 is gone: the injection goes where it was, before event 3.
    specs: list[Spec] = [
        ("drop", DropConfig(nth=2)),
        ("inject", inject_cfg(after=2, event={"data": "x"})),
    ]
    assert run(specs, BODY).data == [E1, PING, X, E3, DONE]
    # The last event is gone: the injection goes at the end.
    specs = [
        ("drop", DropConfig(kind="terminal")),
        ("inject", inject_cfg(after="terminal", event={"data": "x"})),
    ]
    assert run(specs, BODY).data == [E1, PING, E2, E3, X]


def test_inject_after_a_duplicated_event_goes_after_the_first_copy() -> None:
    specs: list[Spec] = [
        ("duplicate", DuplicateConfig(nth=1)),
        ("inject", inject_cfg(after=1, event={"data": "x"})),
    ]
    assert run(specs, BODY).data == [E1, X, E1, PING, E2, E3, DONE]


def test_injected_events_pass_through_later_faults() -> None:
    specs: list[Spec] = [
        ("inject", inject_cfg(after=1, event={"data": "x"})),
        ("duplicate", DuplicateConfig(nth=1)),
    ]
    r = run(specs, BODY)
    # The injected event has ordinal 0, so selectors never pick it.
    assert r.data == [E1, E1, X, PING, E2, E3, DONE]
    assert r.faults[:3] == [(), ("duplicate",), ("inject",)]


def test_on_an_event_stream_the_providers_exception_and_a_named_event() -> None:
    sends = bs.run(
        [
            ("inject", InjectConfig.model_validate({"after": 2, "event": {"kind": "error"}})),
            (
                "inject",
                InjectConfig.model_validate(
                    {"after": "terminal", "event": {"event": "metadata", "data": {"late": True}}}
                ),
            ),
        ]
    )
    data = [s.data for s in sends]
    assert data[2] == get_profile("bedrock").error_event("eventstream")
    assert data[2] == exception_message(
        "throttlingException",
        b'{"message":"Too many requests, please wait before trying again."}',
    )
    assert sorted(sends[2].events[0].kinds) == ["error"]
    assert data[-1] == event_message("metadata", b'{"late":true}')
    assert bs.names(b"".join(data)) == [
        "messageStart",
        "contentBlockDelta",
        "throttlingException",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "metadata",
    ]
