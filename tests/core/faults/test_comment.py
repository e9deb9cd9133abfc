"""The ``comment`` fault (docs/faults-event.md, ``comment``): a real Pipeline (framer,
profile, faults) over a small literal body: the exact bytes of every write, the upstream
ordinal of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.comment import CommentConfig
from chaosproxy.core.faults.duplicate import DuplicateConfig
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
    run,
)


@pytest.mark.parametrize(
    "spec",
    [
        ("comment", CommentConfig(every=9)),
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
        (CommentConfig, {"every": 0}),
        (CommentConfig, {"text": 5}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


KEEPALIVE = b": keepalive\n\n"


def test_comment_after_every_event() -> None:
    r = run([("comment", CommentConfig())], BODY)
    assert r.data == [E1, KEEPALIVE, PING, E2, KEEPALIVE, E3, KEEPALIVE, DONE, KEEPALIVE]
    assert r.ordinals == [1, 0, 0, 2, 0, 3, 0, 4, 0]
    assert r.faults[1] == ("comment",)
    assert r.sends[1].events[0].kinds == frozenset()
    assert r.applied == {"comment": 4}


def test_comment_every_and_text_in_the_stream_line_ending() -> None:
    body = BODY.replace(b"\n", b"\r\n")
    r = run([("comment", CommentConfig(every=2, text="hi\nthere"))], body)
    c = b": hi\r\n: there\r\n\r\n"
    assert r.body == body.replace(b'"n":2}\r\n\r\n', b'"n":2}\r\n\r\n' + c) + c
    # The parsed view is the framer's: a comment's text is kept verbatim.
    assert r.sends[-1].events[0].frame.comments == (" hi", " there")


def test_comment_once_per_ordinal_after_a_duplicate() -> None:
    specs: list[Spec] = [("duplicate", DuplicateConfig(nth=1)), ("comment", CommentConfig(every=4))]
    assert run(specs, BODY).data == [E1, E1, PING, E2, E3, DONE, KEEPALIVE]
    # Copies come one by one: the comment follows the first; listed first, it follows all.
    specs = [("duplicate", DuplicateConfig(nth=1)), ("comment", CommentConfig(every=1))]
    assert run(specs, E1).data == [E1, KEEPALIVE, E1]
    specs = [("comment", CommentConfig(every=1)), ("duplicate", DuplicateConfig(nth=1))]
    assert run(specs, E1).data == [E1, E1, KEEPALIVE]


def test_comment_not_after_an_unterminated_event() -> None:
    r = run([("comment", CommentConfig())], E1 + b"data: [DONE]")
    assert r.data == [E1, KEEPALIVE, b"data: [DONE]"]


def test_comment_on_ndjson_is_skipped() -> None:
    r = run([("comment", CommentConfig())], NDJSON, fmt="ndjson")
    assert r.body == NDJSON
    assert r.skipped[0]["reason"] == "comments need SSE; NDJSON has no comment syntax"
