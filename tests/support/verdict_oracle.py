"""The oracle of the verdict tests: what docs/verdicts.md's rules give for one client
run, worked out here from what the client printed and its exit status, its clean
answer (the same client's text with no scenario), and the bytes the proxy logged as
sent (``log_content``), re-parsed here. It shares nothing with the proxy's own
accounting (chaosproxy/core/answer.py, verdict.py): two readings of the same rules
must agree.

Written for the OpenAI Chat clients of the tests (the mock's answer to one prompt).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chaosproxy.core.faults import registry


def benign() -> frozenset[str]:
    """The faults that keep the answer (docs/verdicts.md, "sound"): read here from each
    registered fault's own declaration (``keeps_answer``), now, not from the proxy's
    ``BENIGN`` (core/body.py), so that a wrong derivation there disagrees with this."""
    return frozenset(
        name for name, cls in registry().items() if cls.declaration.keeps_answer is True
    )


@dataclass
class Sent:
    """What one generation's connections sent, as a client that applies each event id
    once and stops at the first ``[DONE]`` reads it."""

    text: str = ""
    complete: bool = False
    error: bool = False
    #: A payload that is not JSON (nor ``[DONE]``) before the end.
    garbled: bool = False


def sse_events(body: bytes) -> list[tuple[str | None, str]]:
    """(id, data) of every complete event of an SSE body (any line ending); a BOM at the
    start is dropped, as the WHATWG parser does."""
    text = body.decode("utf-8", "replace").removeprefix("\ufeff")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = text.split("\n\n")[:-1]  # the last piece has no blank line after it
    events = []
    for block in blocks:
        event_id: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                data.append(value)
            elif field == "id":
                event_id = value
        if data:
            events.append((event_id, "\n".join(data)))
    return events


def generation(request: Mapping[str, Any]) -> str:
    """The generation a request served: the stream it resumed (from history, or a 204
    about it), else its own."""
    if request.get("resume_answer") in ("history", "204", "404") and request.get("resumes"):
        return str(request["resumes"])
    return str(request["request_id"])


def sent(bodies: Sequence[bytes]) -> Sent:
    out = Sent()
    seen: set[str] = set()
    for body in bodies:
        for event_id, data in sse_events(body):
            if event_id:
                if event_id in seen:
                    continue
                seen.add(event_id)
            if data == "[DONE]":
                out.complete = True
                return out
            try:
                chunk = json.loads(data)
            except ValueError:
                out.garbled = True
                continue
            if "error" in chunk:
                out.error = True
            for choice in chunk.get("choices") or []:
                out.text += (choice.get("delta") or {}).get("content") or ""
    return out


def expected(
    requests: Sequence[str],
    lines: Sequence[Mapping[str, Any]],
    *,
    exit_code: int | None,
    printed: str | None,
    clean: str,
) -> str:
    """The verdict the rules give for the run made of ``requests`` (in order)."""
    if exit_code is None:
        return "hung"
    by_id: dict[str, dict[str, Any]] = {}
    frames: dict[str, list[Mapping[str, Any]]] = {}
    violations: dict[str, list[Mapping[str, Any]]] = {}
    for line in lines:
        rid = line.get("request_id")
        if not isinstance(rid, str) or rid not in requests:
            continue
        if line["event"] in ("request", "response_end"):
            by_id.setdefault(rid, {}).update(line)
        elif line["event"] == "frame":
            frames.setdefault(rid, []).append(line)
        elif line["event"] == "violation" and line.get("side") == "sent":
            violations.setdefault(rid, []).append(line)
    last = by_id[requests[-1]]
    gen = generation(last)
    conns = [r for r in requests if generation(by_id[r]) == gen and frames.get(r)]
    framed = [r for r in conns if by_id[r].get("format") in ("sse", "ndjson")]
    what = sent([b"".join(base64.b64decode(f["raw"]) for f in frames[r]) for r in framed])
    exercised = any(by_id[r].get("faults_applied") for r in requests) or any(
        by_id[r].get("resume_answer") for r in requests
    )
    under_faults = any(by_id[r].get("faults_skipped") for r in requests)
    # A fault skipped or fallen back on every request under faults: not as asked.
    faulted = [by_id[r] for r in requests if "faults_applied" in by_id[r]]
    not_as_asked = (
        set.intersection(
            *(
                {
                    f["position"]
                    for f in (*s.get("faults_skipped", ()), *s.get("faults_fallback", ()))
                }
                for s in faulted
            )
        )
        if faulted
        else set()
    )
    passing = "not_exercised" if (under_faults and not exercised) or not_as_asked else None
    if not framed:  # an answer the proxy did not frame: status and outcome alone
        intact = last.get("status", 500) < 400 and last.get("outcome") == "completed"
        if exit_code != 0:
            return "false_alarm" if intact else (passing or "detected")
        return (passing or "tolerated") if intact else "silent_corruption"
    clean_content = what.complete and what.text == clean and not what.error and not what.garbled
    if exit_code == 0:
        if clean_content and (printed or "").rstrip() == clean.rstrip():
            return passing or "tolerated"
        return "silent_corruption"
    prefix = clean.startswith(what.text) and not what.error and not what.garbled
    sound, before = _sound(
        last, frames.get(requests[-1], []), violations.get(requests[-1], []), what
    )
    if prefix and sound:
        return "false_alarm"
    # It reported less text than it was sent before the defect: it gave up before it
    # (one connection; a client that reported no text cannot be placed).
    reported = len((printed or "").rstrip())
    if before is not None and len(conns) == 1 and 0 < reported < len(before.rstrip()):
        return "false_alarm"
    return passing or "detected"


def _sound(
    last: Mapping[str, Any],
    frames: Sequence[Mapping[str, Any]],
    violations: Sequence[Mapping[str, Any]],
    what: Sent,
) -> tuple[bool, str | None]:
    """Whether the last connection was sound up to the moment the client gave up, and
    up to its first ``[DONE]`` (what comes after it is no part of the answer); when it
    was not, the text of the events it sent whole before the first thing that made it
    unsound (None: not known)."""
    if last.get("status") != 200 or "headers" in (last.get("faults_applied") or {}):
        return what.complete and last.get("resume_answer") in ("204", "404"), None
    # The frames up to the one that completes the first [DONE], and its place among
    # the connection's events (re-parsed from the bytes sent).
    body = b""
    done_at = 0
    for count, frame in enumerate(frames, 1):
        body += base64.b64decode(frame["raw"])
        datas = [data for _, data in sse_events(body)]
        if "[DONE]" in datas:
            done_at = datas.index("[DONE]") + 1
            frames = frames[:count]
            break
    violations = [v for v in violations if not done_at or v["at_event"] <= done_at]

    def text_before(count: int) -> str:
        return sent([b"".join(base64.b64decode(f["raw"]) for f in frames[:count])]).text

    high = 0
    keeps = benign()
    for count, frame in enumerate(frames):
        if not set(frame.get("faults") or ()) <= keeps:
            return False, text_before(count)
        # A merge or an interleaving sends its group of events whole, in its own order.
        regrouped = bool({"resegment", "interleave_tool_calls"} & set(frame.get("faults") or ()))
        for ordinal in frame.get("events") or ():
            if not regrouped and (ordinal > high + 1 or (0 < ordinal < high)):
                return False, text_before(count)
            high = max(high, ordinal)
    if any(v["rule"] != "terminal_missing" for v in violations):
        return False, None
    if last.get("outcome") == "client_gone" or what.complete:
        return True, None
    return False, text_before(len(frames))  # ended before the answer was whole


__all__ = ["Sent", "benign", "expected", "generation", "sent", "sse_events"]
