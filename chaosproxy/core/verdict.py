"""Verdicts: what a client concluded about an answer, judged against what the proxy
knows of it (docs/verdicts.md). Pure: no I/O.

A verdict judges one *answer*, not one connection. The requests of a client run that
belong to one answer (retries, and every reconnect of a stream kept under ``resume:``)
are judged together: :func:`judge` takes them in the order they began, and the last
one's ``answer`` summary (``response_end``'s ``answer`` object, see
:mod:`chaosproxy.core.answer`) says what the client was sent of its generation over
every connection, against the generation's clean answer. The rules, in order:

=====================  =========================================================
``hung``               the client timed out
``tolerated``          it accepted exactly the clean text, and was sent the clean
                       content with its terminal event
``silent_corruption``  it accepted anything else (the right text without a terminal
                       event, or after the proxy's 204, included)
``false_alarm``        it raised although all it had been sent, up to the moment it
                       gave up, was the clean answer so far, on a sound stream
``detected``           it raised otherwise
=====================  =========================================================

``not_exercised`` replaces ``tolerated`` and ``detected`` when the scenario's faults
did not all fire as asked for the run (:func:`shortfalls`: one never fired, or fell
back, such as a ``cut`` asked to fall inside a character that fell on a boundary):
the run is no evidence that the client handles what the scenario names, and fails no
gate. The verdicts that fail a gate stand: what the client did was wrong whatever the
faults did.

"Up to the moment it gave up" is placed by the order of the proxy's own writes and the
client's report, never by which side of a race a defect landed: a client that raised
reporting less text than was sent before the first defect (``defect_after``) gave up
before it (:func:`gave_up_before`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chaosproxy.core.answer import text_sha256
from chaosproxy.core.records import (
    AnswerFields,
    FaultShortfall,
    Judgement,
    RequestSummary,
    RunVerdict,
    Verdict,
    VerdictFields,
)

#: Every verdict, from the worst a CI gate can find to the best.
VERDICTS: tuple[Verdict, ...] = (
    "silent_corruption",
    "hung",
    "false_alarm",
    "detected",
    "tolerated",
    "not_exercised",
)

#: The verdicts that fail a CI gate by default (``chaosproxy matrix --fail-on``, the
#: JUnit test cases, ``chaos_verdict``).
FAILING: frozenset[str] = frozenset({"silent_corruption", "false_alarm", "hung"})

#: How a stream sent the clean answer's content in a form a client may object to, by
#: the answer's ``defect`` (the fault that made it so), for a verdict's reason.
SENT_AS: dict[str, str] = {
    "snapshot": "as cumulative snapshots (each text delta carrying all the text so far)",
    "headers": "under changed response headers",
}

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
        "error": str|null, "timed_out": bool}`` (each optional; ``requests`` is read by
        :func:`run_ids`; no other keys)."""
        if not isinstance(body, Mapping):
            raise VerdictInputError(
                'expected a JSON object: {"text": ..., "error": null|"...", "timed_out": false}'
            )
        unknown = sorted(set(body) - {"text", "error", "timed_out", "requests"})
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


def run_ids(body: Mapping[str, Any]) -> list[str]:
    """The other requests of the run named in a verdict body's ``requests`` (ids)."""
    ids = body.get("requests", [])
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise VerdictInputError("requests must be a list of request ids")
    return list(ids)


def text_matches(summary: RequestSummary, text: str | None) -> bool | None:
    """Whether ``text`` is the clean answer's text (trailing whitespace aside); None
    when there is no text or nothing to compare it with (an unframed request)."""
    if text is None:
        return None
    clean = _clean_hash(summary)
    return None if clean is None else text_sha256(text) == clean


def _clean_hash(summary: RequestSummary) -> str | None:
    answer = summary.get("answer")
    if answer is not None:
        return answer["text_sha256"]["clean"]
    hashes = summary.get("text_sha256")
    return None if hashes is None else hashes["upstream"]


def stream_state(summary: RequestSummary) -> tuple[bool, str]:
    """Whether a response that carries no ``answer`` (the proxy did not frame it: no
    scenario, or an answer the proxy made itself, such as an injected 429) reached the
    client as the upstream meant it, and how to say what it was: intact when it
    completed with a status below 400."""
    integrity = summary.get("integrity")
    if integrity is not None:
        return integrity == INTACT, f"a stream that was {integrity}"
    outcome = summary["outcome"]
    status = summary["status"]
    if status >= 400:
        return False, f"an HTTP {status} answer"
    if outcome == "completed":
        return True, "an unframed answer passed through unchanged"
    return False, f"an answer that ended as {outcome}"


def chain(summaries: Sequence[RequestSummary], request_id: str) -> list[RequestSummary]:
    """The requests (of ``summaries``, in the order they began) that belong to the same
    answer as ``request_id``: its generation's connections, the reconnects that resumed
    it, and, transitively, the generations those started (``new_stream``)."""
    linked = {request_id}
    members: dict[int, RequestSummary] = {}
    grew = True
    while grew:
        grew = False
        for i, summary in enumerate(summaries):
            if i in members:
                continue
            keys = _links(summary)
            if keys & linked:
                members[i] = summary
                linked |= keys
                grew = True
    return [members[i] for i in sorted(members)]


def run_of(
    summaries: Sequence[RequestSummary], request_id: str, others: Iterable[str] = ()
) -> list[RequestSummary]:
    """The finished requests (of ``summaries``, in the order they began) that a verdict
    on ``request_id`` judges: those of its answer (:func:`chain`) and ``others`` (the
    other requests of the client run, such as retries), in that order."""
    members = {id(s) for s in chain(summaries, request_id)}
    wanted = set(others)
    return [s for s in summaries if id(s) in members or s["request_id"] in wanted]


def _links(summary: RequestSummary) -> set[str]:
    keys = {summary["request_id"]}
    resumes = summary.get("resumes")
    if resumes is not None:
        keys.add(resumes)
    answer = summary.get("answer")
    if answer is not None:
        keys.add(answer["generation"])
    return keys


def exercised(run: Iterable[RequestSummary]) -> bool | None:
    """Whether the scenario's faults fired for the run: True when a fault applied or a
    reconnect was answered by the resume policy, False when the scenario had faults and
    none fired, None when no request of the run ran under faults."""
    under_faults = False
    for summary in run:
        if summary.get("faults_applied") or summary.get("resume_answer"):
            return True
        if summary.get("faults_skipped"):
            under_faults = True
    return False if under_faults else None


def shortfalls(run: Iterable[RequestSummary]) -> list[FaultShortfall]:
    """The faults of the scenario that did not do what it asked on any request of the
    run that ran under its faults (those its ``requests:`` left alone do not count):
    skipped (``faults_skipped``) or applied otherwise (``faults_fallback``) on every
    one of them, with the last one's reason; in the scenario's order."""
    missing: dict[int, FaultShortfall] | None = None
    for summary in run:
        if "faults_applied" not in summary:
            continue  # no fault ran on it: passthrough, or left alone by requests:
        notes: dict[int, FaultShortfall] = {}
        for skipped in summary.get("faults_skipped", ()):
            notes[skipped["position"]] = {
                "fault": skipped["fault"],
                "position": skipped["position"],
                "requested": None,
                "actual": "skipped",
                "reason": skipped["reason"],
            }
        for fell in summary.get("faults_fallback", ()):
            notes[fell["position"]] = {
                "fault": fell["fault"],
                "position": fell["position"],
                "requested": fell["requested"],
                "actual": fell["actual"],
                "reason": fell["reason"],
            }
        missing = notes if missing is None else {p: notes[p] for p in missing if p in notes}
    return [] if missing is None else [missing[p] for p in sorted(missing)]


def describe_shortfall(shortfall: FaultShortfall) -> str:
    """One shortfall in a few words: ``comment skipped: NDJSON has no comment
    syntax``, ``cut at boundary instead of mid_utf8: the event has no …``."""
    fault, reason = shortfall["fault"], shortfall["reason"]
    if shortfall["requested"] is None:
        return f"{fault} {shortfall['actual']}: {reason}"
    return f"{fault} at {shortfall['actual']} instead of {shortfall['requested']}: {reason}"


def judge(run: Sequence[RequestSummary], report: ClientReport) -> Judgement:
    """The verdict on one client run: the summaries of its requests, in the order they
    began (the last one's ``answer`` is the answer judged)."""
    if not run:
        raise VerdictInputError("a run without requests cannot be judged")
    last = run[-1]
    answer = last.get("answer")
    matches = text_matches(last, report.text)

    def result(verdict: Verdict, reason: str) -> Judgement:
        return {
            "verdict": verdict,
            "integrity": last.get("integrity"),
            "content": answer["content"] if answer is not None else None,
            "reason": reason,
            "text_matches": matches,
        }

    if answer is None:
        verdict, reason = _unframed(last, report, matches)
    else:
        verdict, reason = _answered(answer, last, report, matches)
    if verdict not in ("tolerated", "detected"):
        return result(verdict, reason)  # a failure stands, whatever the faults did
    missing = shortfalls(run)
    details = "; ".join(describe_shortfall(s) for s in missing)
    if exercised(run) is False:
        why = f" ({details})" if details else ""
        return result(
            "not_exercised",
            f"the scenario's faults never fired for this run{why}: it says nothing about "
            f"the client, which would be {verdict} ({reason})",
        )
    if missing:
        return result(
            "not_exercised",
            f"the scenario's faults did not all fire as asked ({details}): the run is no "
            f"evidence about what the scenario names; the client would be {verdict} "
            f"({reason})",
        )
    return result(verdict, reason)


def judge_run(run: Sequence[RequestSummary], report: ClientReport) -> RunVerdict:
    """:func:`judge`, with the run's request ids (``requests``): the verdict as it is
    recorded and answered (``POST /requests/{id}/verdict``, ``proxy.verdict``)."""
    return {**judge(run, report), "requests": [s["request_id"] for s in run]}


def _answered(
    answer: AnswerFields,
    last: RequestSummary,
    report: ClientReport,
    matches: bool | None,
) -> tuple[Verdict, str]:
    content = answer["content"]
    connections = answer["connections"]
    over = f" over {connections} connections" if connections > 1 else ""
    if report.timed_out:
        return "hung", f"the client timed out on an answer that was {content}{over}"
    if report.error is None:
        if content == INTACT and matches is not False:
            said = "" if matches else " (it reported no text)"
            return "tolerated", f"the client accepted the clean answer{over}{said}"
        if content == INTACT:
            defect = answer["defect"]
            if not answer["sound"] and defect is not None:
                form = SENT_AS.get(defect, f"in events a client may object to ({defect})")
                return (
                    "silent_corruption",
                    f"the client was sent the clean answer's content {form}{over}, and "
                    "accepted a different text",
                )
            return (
                "silent_corruption",
                f"the client was sent the clean answer{over} but accepted a different text",
            )
        if content == "incomplete":
            status = last["status"]
            if last.get("resume_answer") in ("204", "404"):
                how = f"after the proxy's {status}: the answer had no terminal event"
            else:
                how = "that never reached its terminal event"
            also = "; its text is the clean answer's" if matches else ""
            return "silent_corruption", f"the client accepted an answer {how}{over}{also}"
        also = "; its text is the clean answer's" if matches else ""
        defect = answer["defect"]
        what = f" ({defect})" if defect else ""
        return "silent_corruption", f"the client accepted an altered answer{what}{over}{also}"
    if answer["sound"] and answer["prefix"]:
        return (
            "false_alarm",
            "the client raised although all it had been sent was the clean answer so far, "
            f"on a sound stream{over}",
        )
    defect = answer["defect"]
    before = gave_up_before(answer, report)
    if before is not None:
        return (
            "false_alarm",
            f"the client raised having reported {before[0]} characters of text, fewer than "
            f"the {before[1]} it had been sent before the stream's first defect ({defect}): "
            "it gave up on the clean answer so far, before the defect",
        )
    if not answer["prefix"]:
        why = "it had been sent an altered answer" + (f" ({defect})" if defect else "")
    else:
        why = f"the stream was not sound ({defect})"
    return "detected", f"the client raised: {why}{over}"


def gave_up_before(answer: AnswerFields, report: ClientReport) -> tuple[int, int] | None:
    """Where a client that raised gave up, among the proxy's own writes: (the
    characters of text it reported, those sent before the first defect) when it
    reported fewer than were sent before the defect, so it never read the defect, else
    None. Judged from the order of the writes and the client's report, never from
    whether its disconnect reached the proxy before the defect was written. Only for an
    answer over one connection, and a client that reported some text (trailing
    whitespace aside): an empty one may be a client that assembles its text at the end."""
    after = answer.get("defect_after")
    if after is None or answer["connections"] != 1 or report.error is None:
        return None
    text = report.text
    reported = 0 if text is None else len(text.rstrip())
    if 0 < reported < after:
        return reported, after
    return None


def _unframed(
    last: RequestSummary, report: ClientReport, matches: bool | None
) -> tuple[Verdict, str]:
    intact, what = stream_state(last)
    if report.timed_out:
        return "hung", f"the client timed out on {what}"
    if report.error is not None:
        if intact:
            return "false_alarm", f"the client raised on {what}"
        return "detected", f"the client raised on {what}"
    if matches is False:
        return (
            "silent_corruption",
            f"the client accepted text that differs from the upstream's ({what})",
        )
    if not intact:
        return "silent_corruption", f"the client accepted {what}"
    return "tolerated", f"the client accepted {what}"


def classify(summary: RequestSummary, report: ClientReport) -> Judgement:
    """The verdict on a run of one request (:func:`judge`)."""
    return judge([summary], report)


def verdict_line(request_id: str, verdict: RunVerdict) -> VerdictFields:
    """The frame-log line of a recorded verdict, but for ``event`` (``verdict``) and
    ``ts``."""
    line: VerdictFields = {
        "request_id": request_id,
        "verdict": verdict["verdict"],
        "integrity": verdict["integrity"],
        "content": verdict["content"],
        "reason": verdict["reason"],
        "text_matches": verdict["text_matches"],
    }
    if verdict["requests"]:
        line["requests"] = list(verdict["requests"])
    return line


__all__ = [
    "FAILING",
    "INTACT",
    "VERDICTS",
    "ClientReport",
    "Verdict",
    "VerdictInputError",
    "chain",
    "classify",
    "describe_shortfall",
    "exercised",
    "gave_up_before",
    "judge",
    "judge_run",
    "run_ids",
    "run_of",
    "shortfalls",
    "stream_state",
    "text_matches",
    "text_sha256",
    "verdict_line",
]
