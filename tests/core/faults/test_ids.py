"""The ``ids`` fault (docs/faults-event.md, ``ids``): a real Pipeline (framer, profile,
faults) over a small literal body: the exact bytes of every write, the upstream ordinal
of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.ids import IdsConfig
from tests.support.fault_events import BOM, E1, E3, NDJSON, PING, assert_chunking_independent, run


@pytest.mark.parametrize(
    ("config", "values"),
    [
        (IdsConfig, {"start": -1}),
        (IdsConfig, {"retry": -5}),
        (IdsConfig, {"retry": "1s"}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


def test_ids_number_events_without_one() -> None:
    body = E1 + PING + b"id: own\ndata: 2\n\n" + E3
    r = assert_chunking_independent([("ids", IdsConfig(start=5, retry=3000))], body)
    assert r.data == [
        b'id: 5\nretry: 3000\ndata: {"n":1}\n\n',
        PING,
        b"id: own\ndata: 2\n\n",
        b'id: 6\ndata: {"n":3}\n\n',
    ]
    assert r.faults == [("ids",), (), (), ("ids",)]
    frames = [s.events[0].frame for s in r.sends]
    assert [(f.id, f.retry) for f in frames] == [
        ("5", 3000),
        (None, None),
        ("own", None),
        ("6", None),
    ]
    assert r.applied == {"ids": 2}


def test_ids_default_start_crlf_and_bom() -> None:
    body = BOM + E1.replace(b"\n", b"\r\n") + b"retry: 1\r\ndata: 2\r\n\r\n"
    r = run([("ids", IdsConfig(retry=10))], body)
    assert r.data == [
        BOM + b'id: 0\r\nretry: 10\r\ndata: {"n":1}\r\n\r\n',
        b"id: 1\r\nretry: 1\r\ndata: 2\r\n\r\n",
    ]


def test_ids_retry_not_added_when_the_first_event_has_one() -> None:
    r = run([("ids", IdsConfig(retry=10))], b"id: a\nretry: 5\ndata: 1\n\n" + E1)
    assert r.data == [b"id: a\nretry: 5\ndata: 1\n\n", b'id: 0\ndata: {"n":1}\n\n']


def test_ids_skipped() -> None:
    r = run([("ids", IdsConfig())], NDJSON, fmt="ndjson")
    assert r.body == NDJSON
    assert r.skipped[0]["reason"] == "ids need SSE; NDJSON has no id field"
    r = run([("ids", IdsConfig())], b"id: 1\ndata: x\n\n")
    assert r.skipped[0]["reason"] == "no event lacked an id"
