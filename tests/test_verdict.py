"""Verdicts: the classification of what a client concluded (chaosproxy/verdict.py), on
summaries built here in the shape ``response_end`` gives them, with exact results."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from chaosproxy.verdict import (
    FAILING,
    VERDICTS,
    ClientReport,
    VerdictInputError,
    classify,
    text_matches,
    text_sha256,
)

TEXT = "Hello, wörld ☕"
OTHER = "Hello, Hello, wörld ☕"


def framed(
    integrity: str,
    *,
    sent: str = TEXT,
    outcome: str = "completed",
    content: str | None = None,
) -> dict[str, Any]:
    """A framed ``response_end``; ``content`` is its ``content_integrity`` (by default
    ``integrity``, or, for a broken stream, ``intact`` when the text sent is right)."""
    if content is None:
        content = integrity if integrity != "broken" else "intact" if sent == TEXT else "altered"
    return {
        "request_id": "r-1",
        "outcome": outcome,
        "status": 200,
        "integrity": integrity,
        "content_integrity": content,
        "text_sha256": {"upstream": text_sha256(TEXT), "sent": text_sha256(sent)},
    }


def unframed(status: int = 200, outcome: str = "completed") -> dict[str, Any]:
    return {"request_id": "r-2", "outcome": outcome, "status": status}


def test_the_hash_is_sha256_of_the_utf8_text_without_trailing_whitespace() -> None:
    expected = hashlib.sha256("Hello, wörld ☕".encode()).hexdigest()
    assert text_sha256(TEXT) == expected
    assert text_sha256(TEXT + " \n\t\n") == expected
    assert text_sha256("  " + TEXT) != expected  # leading whitespace counts


def test_text_matches_needs_a_text_and_an_upstream_hash() -> None:
    assert text_matches(framed("intact"), TEXT + "\n") is True
    assert text_matches(framed("intact"), OTHER) is False
    assert text_matches(framed("intact"), None) is None
    assert text_matches(unframed(), TEXT) is None
    assert text_matches({"text_sha256": {"upstream": None}}, TEXT) is None


# Every row: summary, report -> (verdict, integrity, reason, text_matches).
CASES: list[tuple[str, dict[str, Any], ClientReport, tuple[str, str | None, str, bool | None]]] = [
    (
        "timed out, whatever the stream",
        framed("intact"),
        ClientReport(timed_out=True),
        ("hung", "intact", "the client timed out on a stream that was intact", None),
    ),
    (
        "timed out with a partial text",
        framed("broken", outcome="client_gone"),
        ClientReport(text="Hel", error="killed", timed_out=True),
        ("hung", "broken", "the client timed out on a stream that was broken", False),
    ),
    (
        "raised on an altered stream",
        framed("altered", sent=OTHER),
        ClientReport(error="JSONDecodeError: Expecting value"),
        ("detected", "altered", "the client raised on a stream that was altered", None),
    ),
    (
        "raised on a broken stream (a text given too)",
        framed("broken", outcome="cut"),
        ClientReport(text="Hel", error="APIConnectionError: Connection error."),
        ("detected", "broken", "the client raised on a stream that was broken", False),
    ),
    (
        "raised on an intact stream",
        framed("intact"),
        ClientReport(error="SSEError: wrong content type"),
        ("false_alarm", "intact", "the client raised on a stream that was intact", None),
    ),
    (
        "accepted an altered stream, with its changed text",
        framed("altered", sent=OTHER),
        ClientReport(text=OTHER),
        (
            "silent_corruption",
            "altered",
            "the client accepted text that differs from the upstream's (a stream that was altered)",
            False,
        ),
    ),
    (
        "accepted an intact stream but assembled another text",
        framed("intact"),
        ClientReport(text=TEXT + "!"),
        (
            "silent_corruption",
            "intact",
            "the client accepted text that differs from the upstream's (a stream that was intact)",
            False,
        ),
    ),
    (
        "accepted an incomplete stream whose text happens to be whole",
        framed("incomplete", outcome="cut"),
        ClientReport(text=TEXT),
        (
            "silent_corruption",
            "incomplete",
            "the client accepted a stream that was incomplete; its text matches the upstream's",
            True,
        ),
    ),
    (
        "accepted an altered stream without saying its text",
        framed("altered"),
        ClientReport(),
        ("silent_corruption", "altered", "the client accepted a stream that was altered", None),
    ),
    (
        "closed a never-ending body itself, with the whole text",
        framed("broken", outcome="client_gone"),
        ClientReport(text=TEXT + "\n"),
        (
            "tolerated",
            "broken",
            "the client had the upstream's whole text and closed a stream that was broken itself",
            True,
        ),
    ),
    (
        "closed the stream itself, but was sent a late delta it ignored",
        framed("broken", sent=TEXT + " late", outcome="client_gone"),
        ClientReport(text=TEXT),
        (
            "silent_corruption",
            "broken",
            "the client accepted a stream that was broken; its text matches the upstream's",
            True,
        ),
    ),
    (
        # Two [DONE]: the client stopped at the first and left before the body ended
        # (the proxy's last write failed), but it was sent the second one.
        "closed the stream itself after a duplicated terminal event",
        framed("broken", outcome="client_gone", content="altered"),
        ClientReport(text=TEXT),
        (
            "silent_corruption",
            "broken",
            "the client accepted a stream that was broken; its text matches the upstream's",
            True,
        ),
    ),
    (
        "closed the stream itself before any terminal event, with the whole text",
        framed("broken", outcome="client_gone", content="incomplete"),
        ClientReport(text=TEXT),
        (
            "silent_corruption",
            "broken",
            "the client accepted a stream that was broken; its text matches the upstream's",
            True,
        ),
    ),
    (
        "left early with part of the text",
        framed("broken", outcome="client_gone"),
        ClientReport(text="Hello"),
        (
            "silent_corruption",
            "broken",
            "the client accepted text that differs from the upstream's (a stream that was broken)",
            False,
        ),
    ),
    (
        "intact despite faults, the right text",
        framed("intact"),
        ClientReport(text=TEXT + "\n"),
        (
            "tolerated",
            "intact",
            "the client accepted a stream that was intact, with the upstream's text",
            True,
        ),
    ),
    (
        "intact, no text reported",
        framed("intact"),
        ClientReport(),
        (
            "tolerated",
            "intact",
            "the client accepted a stream that was intact (it reported no text)",
            None,
        ),
    ),
    (
        "unframed: raised on an HTTP 503",
        unframed(503),
        ClientReport(error="InternalServerError: Error code: 503"),
        ("detected", None, "the client raised on an HTTP 503 answer", None),
    ),
    (
        "unframed: accepted an HTTP 429 as an answer",
        unframed(429),
        ClientReport(text=""),
        ("silent_corruption", None, "the client accepted an HTTP 429 answer", None),
    ),
    (
        "unframed: a passthrough answer accepted",
        unframed(),
        ClientReport(text=TEXT),
        (
            "tolerated",
            None,
            "the client accepted an unframed answer passed through unchanged "
            "(no upstream text to compare)",
            None,
        ),
    ),
    (
        "unframed: raised on a passthrough answer",
        unframed(),
        ClientReport(error="ValueError: nope"),
        (
            "false_alarm",
            None,
            "the client raised on an unframed answer passed through unchanged",
            None,
        ),
    ),
    (
        "unframed: the upstream failed",
        unframed(502, outcome="upstream_error"),
        ClientReport(error="APIConnectionError"),
        ("detected", None, "the client raised on an HTTP 502 answer", None),
    ),
    (
        "unframed: cut before any status",
        {"request_id": "r-3", "outcome": "upstream_error", "status": None},
        ClientReport(text=""),
        (
            "silent_corruption",
            None,
            "the client accepted an answer that ended as upstream_error",
            None,
        ),
    ),
]


@pytest.mark.parametrize(
    ("summary", "report", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_classify(
    summary: dict[str, Any],
    report: ClientReport,
    expected: tuple[str, str | None, str, bool | None],
) -> None:
    verdict, integrity, reason, matches = expected
    assert classify(summary, report) == {
        "verdict": verdict,
        "integrity": integrity,
        "reason": reason,
        "text_matches": matches,
    }


def test_every_verdict_is_reachable_and_the_failing_ones_are_the_contracts() -> None:
    reached = {classify(c[1], c[2])["verdict"] for c in CASES}
    assert reached == set(VERDICTS)
    assert frozenset({"silent_corruption", "false_alarm", "hung"}) == FAILING


def test_the_report_from_json() -> None:
    assert ClientReport.from_json({}) == ClientReport()
    assert ClientReport.from_json(
        {"text": "hi", "error": None, "timed_out": False}
    ) == ClientReport(text="hi")
    assert ClientReport.from_json({"error": "boom", "timed_out": True}) == ClientReport(
        error="boom", timed_out=True
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "expected a JSON object"),
        ({"text": 3}, "text must be a string or null"),
        ({"error": True}, "error must be a string"),
        ({"timed_out": "no"}, "timed_out must be true or false"),
        ({"text": "x", "verdict": "tolerated"}, "unknown field(s): verdict"),
    ],
)
def test_a_bad_report_is_refused(body: Any, message: str) -> None:
    with pytest.raises(VerdictInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ClientReport.from_json(body)
