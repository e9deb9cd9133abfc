"""The ``line_endings`` fault (docs/faults-event.md, ``line_endings``): a real Pipeline
(framer, profile, faults) over a small literal body: the exact bytes of every write, the
upstream ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Send
from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.line_endings import LineEndingsConfig
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
        ("line_endings", LineEndingsConfig(style="lf")),
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
        (LineEndingsConfig, {}),
        (LineEndingsConfig, {"style": "crcr"}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


@pytest.mark.parametrize(("style", "nl"), [("crlf", b"\r\n"), ("cr", b"\r"), ("lf", b"\n")])
def test_line_endings_reencode_every_line(style: str, nl: bytes) -> None:
    body = b"event: a\ndata: 1\r\ndata: 2\r\r\n: c\n\n"
    r = assert_chunking_independent([("line_endings", LineEndingsConfig(style=style))], body)  # type: ignore[arg-type]
    assert r.body == nl.join([b"event: a", b"data: 1", b"data: 2", b"", b": c", b"", b""])
    assert r.data[0] == nl.join([b"event: a", b"data: 1", b"data: 2", b""]) + nl
    assert r.sends[0].events[0].frame.newline == nl
    assert r.sends[0].events[0].frame.data == "1\n2"


def test_line_endings_crlf_fixture_to_lf() -> None:
    from tests.support.repo import fixture_bytes

    body = fixture_bytes("gemini_2_5_flash_short.crlf.sse")
    r = run([("line_endings", LineEndingsConfig(style="lf"))], body)
    assert r.body == body.replace(b"\r\n", b"\n")
    assert r.applied == {"line_endings": len(r.sends)}


def test_line_endings_keeps_an_unterminated_last_line() -> None:
    r = run([("line_endings", LineEndingsConfig(style="crlf"))], E1 + b"data: [DONE]")
    assert r.data == [b'data: {"n":1}\r\n\r\n', b"data: [DONE]"]


def test_line_endings_already_in_style_is_skipped() -> None:
    r = run([("line_endings", LineEndingsConfig(style="lf"))], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.skipped[0]["reason"] == "every line already ended in lf"


def test_line_endings_ndjson() -> None:
    r = run([("line_endings", LineEndingsConfig(style="crlf"))], NDJSON, fmt="ndjson")
    assert r.body == NDJSON.replace(b"\n", b"\r\n")
    # A lone CR inside an NDJSON line is data, not a line ending.
    r = run([("line_endings", LineEndingsConfig(style="lf"))], b'{"a":"\r"}\r\n', fmt="ndjson")
    assert r.data == [b'{"a":"\r"}\n']
    r = run([("line_endings", LineEndingsConfig(style="cr"))], NDJSON, fmt="ndjson")
    assert r.body == NDJSON
    assert r.skipped[0]["reason"] == (
        "style cr is not an NDJSON line ending; the body was left unchanged"
    )


def test_an_event_stream_is_left_alone_and_the_fault_says_why() -> None:
    pipeline = bs.pipeline([("line_endings", LineEndingsConfig(style="crlf"))])
    sends = [a for a in pipeline.feed(bs.BODY, 0.0) + pipeline.end(0.0) if isinstance(a, Send)]
    assert b"".join(s.data for s in sends) == bs.BODY
    assert pipeline.summary() == (
        {},
        [
            {
                "fault": "line_endings",
                "position": 0,
                "reason": "an event stream has no line endings; the body was left unchanged",
            }
        ],
    )
