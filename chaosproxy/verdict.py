"""Verdicts: what a client concluded about a stream, judged against what the proxy
knows of it (docs/verdicts.md).

A test (or ``chaosproxy matrix``) reports its client's conclusion — the text it
assembled, the error it raised, or that it timed out — and :func:`classify` compares
it with the request's summary: its ``integrity`` and ``text_sha256`` (framed requests),
or its ``outcome`` and ``status`` (requests the proxy did not frame). Pure: no I/O.

=====================  =========================================================
``hung``               the client timed out (whatever the stream was)
``detected``           it raised on a stream that was not intact
``false_alarm``        it raised on an intact stream
``silent_corruption``  it accepted a stream that was not intact, or its text
                       differs from the upstream's
``tolerated``          the stream was intact (despite faults) and its text is right
=====================  =========================================================
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["detected", "silent_corruption", "tolerated", "false_alarm", "hung"]

#: Every verdict, from the worst a CI gate can find to the best.
VERDICTS: tuple[Verdict, ...] = (
    "silent_corruption",
    "hung",
    "false_alarm",
    "detected",
    "tolerated",
)

#: The verdicts that fail a CI gate by default (``chaosproxy matrix --fail-on``, the
#: JUnit test cases).
FAILING: frozenset[str] = frozenset({"silent_corruption", "false_alarm", "hung"})

#: What ``integrity`` says when the stream reached the client as the upstream meant it.
INTACT = "intact"


class VerdictInputError(ValueError):
    """A client report that cannot be judged (a text that is not a string, say)."""


@dataclass(frozen=True, slots=True)
class ClientReport:
    """What a client concluded: ``text`` (what it assembled; None when it did not say),
    ``error`` (what it raised; None when it raised nothing), ``timed_out``."""

    text: str | None = None
    error: str | None = None
    timed_out: bool = False

    @classmethod
    def from_json(cls, body: Any) -> ClientReport:
        """The body of ``POST /requests/{id}/verdict``: ``{"text": str|null,
        "error": str|null, "timed_out": bool}`` (each optional, no other keys)."""
        if not isinstance(body, Mapping):
            raise VerdictInputError(
                'expected a JSON object: {"text": ..., "error": null|"...", "timed_out": false}'
            )
        unknown = sorted(set(body) - {"text", "error", "timed_out"})
        if unknown:
            raise VerdictInputError(f"unknown field(s): {', '.join(unknown)}")
        text, error, timed_out = body.get("text"), body.get("error"), body.get("timed_out", False)
        if text is not None and not isinstance(text, str):
            raise VerdictInputError("text must be a string or null")
        if error is not None and not isinstance(error, str):
            raise VerdictInputError("error must be a string (what the client raised) or null")
        if not isinstance(timed_out, bool):
            raise VerdictInputError("timed_out must be true or false")
        return cls(text=text, error=error, timed_out=timed_out)


def text_sha256(text: str) -> str:
    """The hash ``response_end``'s ``text_sha256`` carries: sha256 of the UTF-8 text with
    trailing whitespace removed, in hex."""
    return hashlib.sha256(text.rstrip().encode("utf-8", "surrogatepass")).hexdigest()


def text_matches(summary: Mapping[str, Any], text: str | None) -> bool | None:
    """Whether ``text`` is the upstream's text (trailing whitespace aside); None when
    there is no text or the summary has no upstream hash (an unframed request)."""
    hashes = summary.get("text_sha256")
    upstream = hashes.get("upstream") if isinstance(hashes, Mapping) else None
    if text is None or not isinstance(upstream, str):
        return None
    return text_sha256(text) == upstream


def stream_state(summary: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the stream the client was sent is intact, and how to say what it was.

    A framed request's ``integrity`` decides. A request the proxy did not frame (no
    scenario, or an answer the proxy made itself, such as an injected 429) has none:
    the proxy passed the upstream's answer through unchanged, so it counts as intact
    when it completed with a status below 400, and as not intact otherwise (an HTTP
    error answer, a cut, an upstream failure)."""
    integrity = summary.get("integrity")
    if isinstance(integrity, str):
        return integrity == INTACT, f"a stream that was {integrity}"
    outcome = summary.get("outcome")
    status = summary.get("status")
    if isinstance(status, int) and status >= 400:
        return False, f"an HTTP {status} answer"
    if outcome == "completed":
        return True, "an unframed answer passed through unchanged"
    return False, f"an answer that ended as {outcome or 'unknown'}"


def classify(summary: Mapping[str, Any], report: ClientReport) -> dict[str, Any]:
    """The verdict on one request: ``{"verdict", "integrity", "reason",
    "text_matches"}`` (``integrity`` is None for an unframed request; ``text_matches``
    None when it could not be compared)."""
    integrity = summary.get("integrity")
    integrity = integrity if isinstance(integrity, str) else None
    intact, what = stream_state(summary)
    matches = text_matches(summary, report.text)

    def result(verdict: Verdict, reason: str) -> dict[str, Any]:
        return {
            "verdict": verdict,
            "integrity": integrity,
            "reason": reason,
            "text_matches": matches,
        }

    if report.timed_out:
        return result("hung", f"the client timed out on {what}")
    if report.error is not None:
        if intact:
            return result("false_alarm", f"the client raised on {what}")
        return result("detected", f"the client raised on {what}")
    if matches is False:
        return result(
            "silent_corruption",
            f"the client accepted text that differs from the upstream's ({what})",
        )
    if not intact:
        if (
            matches
            and summary.get("outcome") == "client_gone"
            and summary.get("content_integrity") == INTACT
        ):
            # The client had the whole text and closed the stream itself (it stopped at
            # the terminal event of a body that never ended), and what it was sent up to
            # then was the upstream's content, its terminal event included, once: what
            # made the stream end uncleanly was the client, not a fault it let through.
            return result(
                "tolerated",
                f"the client had the upstream's whole text and closed {what} itself",
            )
        also = "; its text matches the upstream's" if matches else ""
        return result("silent_corruption", f"the client accepted {what}{also}")
    if report.text is None:
        return result("tolerated", f"the client accepted {what} (it reported no text)")
    if matches is None:
        return result("tolerated", f"the client accepted {what} (no upstream text to compare)")
    return result("tolerated", f"the client accepted {what}, with the upstream's text")


def verdict_line(request_id: str, verdict: Mapping[str, Any]) -> dict[str, Any]:
    """The frame-log line of a recorded verdict (its ``event`` is ``verdict``)."""
    return {
        "request_id": request_id,
        "verdict": verdict["verdict"],
        "integrity": verdict["integrity"],
        "reason": verdict["reason"],
        "text_matches": verdict["text_matches"],
    }


__all__ = [
    "FAILING",
    "INTACT",
    "VERDICTS",
    "ClientReport",
    "Verdict",
    "VerdictInputError",
    "classify",
    "stream_state",
    "text_matches",
    "text_sha256",
    "verdict_line",
]
