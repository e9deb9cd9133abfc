"""The ``mutate`` fault (docs/faults-event.md, ``mutate``): a real Pipeline (framer,
profile, faults) over a small literal body: the exact bytes of every write, the upstream
ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.duplicate import DuplicateConfig
from chaosproxy.core.faults.mutate import MutateConfig
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
    run,
)


@pytest.mark.parametrize(
    "spec",
    [
        ("mutate", MutateConfig(nth=9, set={"a": 1})),
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
        (MutateConfig, {}),
        (MutateConfig, {"set": {}}),
        (MutateConfig, {"delete": []}),
        (MutateConfig, {"set": {"a..b": 1}}),
        (MutateConfig, {"delete": [""]}),
        (MutateConfig, {"set": {"a": 2**70}}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


CHUNK = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}],"seq":1}\n\n'


def test_mutate_set_and_delete() -> None:
    spec = MutateConfig(set={"id": "other", "choices.0.delta.content": "Yo"}, delete=["seq"])
    r = run([("mutate", spec)], CHUNK + DONE)
    assert r.data == [
        b'data: {"id":"other","choices":[{"index":0,"delta":{"content":"Yo"}}]}\n\n',
        DONE,  # not JSON: unchanged
    ]
    assert r.faults == [("mutate",), ()]
    assert r.ordinals == [1, 2]
    assert r.applied == {"mutate": 1}


def test_mutate_set_creates_missing_keys_and_takes_any_value() -> None:
    spec = MutateConfig(set={"a.b.c": [1, {"x": None}], "seq": 7, "choices.-1.index": 3})
    r = run([("mutate", spec)], CHUNK)
    assert orjson.loads(r.data[0][len(b"data: ") :]) == {
        "id": "c1",
        "choices": [{"index": 3, "delta": {"content": "Hi"}}],
        "seq": 7,
        "a": {"b": {"c": [1, {"x": None}]}},
    }


def test_mutate_keeps_other_sse_lines_and_line_endings() -> None:
    body = b'event: delta\r\nid: 4\r\n: note\r\ndata: {\r\ndata: "n": 1}\r\nretry: 10\r\n\r\n'
    r = assert_chunking_independent([("mutate", MutateConfig(set={"n": 2}))], body)
    assert r.data == [b'event: delta\r\nid: 4\r\n: note\r\ndata: {"n":2}\r\nretry: 10\r\n\r\n']
    frame = r.sends[0].events[0].frame
    assert (frame.event, frame.id, frame.retry, frame.data) == ("delta", "4", 10, '{"n":2}')


def test_mutate_out_of_range_index_fails_soft() -> None:
    spec = MutateConfig(set={"choices.3.index": 1}, delete=["nothing"])
    r = run([("mutate", spec)], CHUNK)
    assert r.data == [CHUNK]
    assert r.skipped[0]["reason"] == (
        "choices.3.index: index 3 out of range (list of 1); nothing: no key 'nothing'"
    )
    # One path failing does not stop the others.
    spec = MutateConfig(set={"choices.3.index": 1, "seq": 2})
    assert run([("mutate", spec)], CHUNK).applied == {"mutate": 1}


def test_mutate_path_through_a_scalar_fails_soft() -> None:
    r = run([("mutate", MutateConfig(set={"id.x": 1}, delete=["choices.x"]))], CHUNK)
    assert r.data == [CHUNK]
    assert r.skipped[0]["reason"] == (
        "id.x: cannot go into str at 'x'; choices.x: 'x' is not a list index"
    )


def test_mutate_non_json_is_skipped() -> None:
    r = run([("mutate", MutateConfig(set={"a": 1}))], b"data: plain text\n\n" + DONE)
    assert r.data == [b"data: plain text\n\n", DONE]
    assert r.skipped[0]["reason"] == "the 2 selected event(s) had no JSON data"


def test_mutate_ndjson_keeps_the_terminator() -> None:
    r = run([("mutate", MutateConfig(nth=2, set={"n": "two"}))], NDJSON, fmt="ndjson")
    assert r.data == [b'{"n":1}\n', b'{"n":"two"}\n', b'{"n":3,"done":true}\n']
    crlf = run([("mutate", MutateConfig(set={"m": 0}))], b'{"n":1}\r\n{"n":2}', fmt="ndjson")
    assert crlf.data == [b'{"n":1,"m":0}\r\n', b'{"n":2,"m":0}']


def test_mutate_does_not_touch_the_shared_parsed_payload() -> None:
    r = run([("duplicate", DuplicateConfig()), ("mutate", MutateConfig(nth=1, delete=["n"]))], E1)
    assert r.data == [b"data: {}\n\n", b"data: {}\n\n"]
    assert json.loads(E1[6:]) == {"n": 1}


def test_on_an_event_stream_a_mutated_message_is_re_encoded_with_right_lengths_and_crcs() -> None:
    config = MutateConfig(kind="delta", nth=3, set={"delta.text": "ünïcode"})
    sends = bs.run([("mutate", config)])
    messages = bs.decoded(b"".join(s.data for s in sends))  # no ChecksumMismatch
    assert orjson.loads(messages[3][1]) == {"contentBlockIndex": 0, "delta": {"text": "ünïcode"}}
    assert [s.data for s in sends][:3] == [bs.START, bs.D1, bs.D2]  # the others untouched
    assert sends[3].faults == ("mutate",)
