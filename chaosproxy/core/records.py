"""The frame log's lines, typed: one record per line kind (docs/observability.md).

The frame log is the project's main data contract: the admin API's store, the
metrics, traces, the report, verdicts, replay and users' own tools read it. Each kind
of line the proxy writes has one ``TypedDict`` here, so that the code that builds a
line and the code that reads it agree on its keys (mypy holds both to them), and the
JSON Schema shipped with the package (``chaosproxy schema log``) is generated from
these same types (:mod:`chaosproxy.tools.schema`).

A line is what the proxy logs plus the fields the log adds: ``event`` (the kind),
``ts`` (ISO 8601 UTC, milliseconds) and the request's bound fields (``request_id`` and
``scenario``). The ``...Fields`` types are what the core builds (the session: a write's
frame fields, the ``response_end`` summary); the ``...Line`` types are whole lines as a
reader gets them.

The last section types what the admin API (``GET /requests``) and the Python API
(``proxy.requests()``, ``last()``, ``summary()``, ``verdict()``) show of a request,
made of its lines: :class:`RequestSummary` (a finished request: its ``request`` line
merged with its ``response_end`` line), :class:`AdminSummary` (``GET /requests``' item,
in flight or done) and the verdict records (:class:`Judgement`, :class:`RunVerdict`,
:class:`RecordedVerdict`).

TypedDicts cost nothing at run time (a line is still a plain dict, built on the hot
path without any construction of its own); this module has no code, only types, and is
not compiled (pydantic reads it to generate the schema). Keys marked ``NotRequired``
appear only when they apply; the docstrings say when.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

# (typing_extensions: pydantic reads only its TypedDict before Python 3.12)
from typing_extensions import TypedDict

#: How a request ended (``response_end``'s ``outcome``).
Outcome = Literal[
    "completed", "cut", "client_gone", "upstream_error", "shutdown", "proxy_error", "worker_lost"
]
#: What the client was sent, compared with what the upstream meant (docs/integrity.md).
Integrity = Literal["intact", "altered", "incomplete", "broken"]
#: The content of an answer, however its connection ended.
AnswerContent = Literal["intact", "altered", "incomplete"]
#: The framing of a body.
BodyFormat = Literal["sse", "ndjson", "eventstream", "raw"]
#: A side of a framed stream the contract monitor checks.
SideName = Literal["upstream", "sent"]
#: The contract monitor's rules (docs/integrity.md).
Rule = Literal[
    "terminal_missing",
    "terminal_twice",
    "after_terminal",
    "duplicate_id",
    "invalid_json",
    "tool_args_invalid",
    "stream_changed",
    "sequence_gap",
    "sequence_repeat",
    "sequence_backwards",
]
#: What a client run is judged (docs/verdicts.md).
Verdict = Literal[
    "detected", "silent_corruption", "tolerated", "false_alarm", "hung", "not_exercised"
]
#: How a cut ends the connection.
CutHow = Literal["close", "abort", "reset"]
#: The kinds of line the proxy writes, in the order a request's lines come.
LINE_KINDS = ("request", "action", "frame", "violation", "response_end", "verdict", "rejected")


class _Bound(TypedDict):
    """The fields every line of a request carries first (bound once per request)."""

    #: The proxy's id of the request (also the response's ``X-Chaos-Request-Id``).
    request_id: str
    #: The scenario the request chose (None: none, passthrough).
    scenario: str | None
    #: The replica that wrote the line (``--replica-id``, default the host name;
    #: docs/fleet.md). Every line a proxy writes carries it.
    replica: NotRequired[str]


# --------------------------------------------------------------------------- request


class RequestFields(_Bound):
    """What a request asked and how it was chosen (the ``request`` line without
    ``event`` and ``ts``): the part of every :class:`RequestSummary` that its
    ``request`` line gives."""

    #: The request's seed (``X-Chaos-Seed``, the scenario's, or derived).
    seed: int
    method: str
    #: The path and query forwarded, credential-like query values masked (``***``).
    path: str
    #: The request's 1-based ordinal among those that chose its scenario.
    ordinal: NotRequired[int]
    #: True when the scenario's ``requests:`` leave this request alone.
    inactive: NotRequired[bool]
    #: The upstream route's label (``--upstream PREFIX=URL``).
    upstream: NotRequired[str]
    #: ``X-Chaos-*`` choices (and ``X-Mock-*`` knobs) ignored under
    #: ``--trust-client-scenarios no``.
    client_choices_ignored: NotRequired[list[str]]
    # A reconnect (``Last-Event-ID``) under ``resume:`` (docs/reconnection.md).
    #: The ``Last-Event-ID`` it sent, a stream token cut to its first 6 characters
    #: (``9GkT0v….7``: the token is the stream's capability), at most 200 characters.
    last_event_id: NotRequired[str]
    resumes: NotRequired[str]
    resume_answer: NotRequired[str]
    resume_reason: NotRequired[str | None]
    # The journal (docs/mock.md): what the body asks, when it was read whole.
    model: NotRequired[str]
    messages: NotRequired[int]
    tools: NotRequired[list[str]]
    body_bytes: NotRequired[int]
    body_sha256: NotRequired[str]
    #: The body's text, credentials masked (``--log-content`` only).
    body: NotRequired[str]


class RequestLine(RequestFields):
    """``request``: one per request, first; what was asked and how it was chosen."""

    event: Literal["request"]
    ts: str


# --------------------------------------------------------------------------- frame


class FrameContent(TypedDict):
    """The payload of a write (``--log-content`` only)."""

    #: As text (invalid UTF-8 replaced).
    data: str
    #: Exactly, base64.
    raw: str


class FrameFields(TypedDict):
    """The fields of one write to the client, as the session accounts for it (the
    ``frame`` line without the bound fields, ``event`` and ``ts``)."""

    #: 0-based number of the write in the response.
    seq: int
    #: Bytes of the body written before this write.
    offset: int
    #: Bytes in this write: the ``size`` of a request's frames sum to its body.
    size: int
    #: Milliseconds since the request began.
    t_ms: float
    #: The upstream ordinals of the events in the write (0: made up by a fault); a
    #: framed body only, as the next three.
    events: NotRequired[list[int]]
    #: The provider-neutral kinds of those events, sorted.
    kinds: NotRequired[list[str]]
    #: The faults that shaped the write.
    faults: NotRequired[list[str]]
    #: The request(s) a spliced event was taken from.
    splice_from: NotRequired[str | list[str]]
    #: The upstream's own ids of the events (``ids: upstream``), when any has one.
    upstream_ids: NotRequired[list[str | None]]
    #: The payload (``--log-content`` only), as :class:`FrameContent` says.
    data: NotRequired[str]
    raw: NotRequired[str]
    #: A WebSocket's write: the opcode of its message (``text``, ``binary``), and the
    #: frames it went out in when a fault (``fragment``) split it.
    opcode: NotRequired[str]
    fragments: NotRequired[int]


class FrameLine(FrameFields, _Bound):
    """``frame``: one per write to the client (docs/observability.md)."""

    event: Literal["frame"]
    ts: str


# --------------------------------------------------------------------------- action


class ActionLine(_Bound):
    """``action``: a fault ended or held the request (before its ``frame`` lines end)."""

    event: Literal["action"]
    ts: str
    #: ``cut`` (the response), ``request_cut`` (the upload), ``request_delay``.
    action: Literal["cut", "request_cut", "request_delay"]
    #: The fault that did it (empty when none is known).
    fault: str
    how: NotRequired[CutHow]
    #: Events the client was sent whole before the cut.
    after_event: NotRequired[int]
    #: Where in the next event the cut fell (``boundary``, ``mid_utf8``, ...).
    position: NotRequired[str]
    #: The position asked for, when it could not be honoured (and why).
    requested: NotRequired[str]
    fallback: NotRequired[str]
    #: ``after_bytes``: the byte count it cut at.
    bytes: NotRequired[int]
    #: ``headers``: nothing of the response went out.
    before: NotRequired[Literal["headers"]]
    #: ``hold timeout``: a fault's hold outlasted ``--hold-timeout``; a WebSocket's
    #: close (``ws_close``): the reason its close frame gave.
    reason: NotRequired[str]
    #: ``ws_close``: the close frame's code (1011, 1001...).
    code: NotRequired[int]
    # request_cut: the bytes it meant to let through, and those read.
    after_bytes: NotRequired[int]
    received: NotRequired[int]
    #: request_delay: how long the upload was held.
    seconds: NotRequired[float]


# --------------------------------------------------------------------------- violation


class ViolationFields(TypedDict):
    """One breach of the stream contract (:class:`~chaosproxy.core.integrity.Violation`)."""

    side: SideName
    rule: Rule
    #: 1-based ordinal of the event on its side (``terminal_missing``: the last, or 0).
    at_event: int


class ViolationLine(ViolationFields, _Bound):
    """``violation``: one per breach, just before the request's ``response_end``."""

    event: Literal["violation"]
    ts: str


# --------------------------------------------------------------------------- response_end


class SkippedFault(TypedDict):
    """A fault that never applied, and why (``nth: 9`` on a stream of 5 events)."""

    fault: str
    #: 0-based position in the scenario's ``faults``.
    position: int
    reason: str


class FallbackFault(TypedDict):
    """A fault that applied otherwise than the scenario asked: a ``cut`` asked to fall
    inside a multi-byte character that fell on the boundary, the next event having none."""

    fault: str
    #: 0-based position in the scenario's ``faults``.
    position: int
    #: What it was asked to do, and what it did instead (a ``cut``: its positions).
    requested: str
    actual: str
    reason: str


class TextDigests(TypedDict):
    """SHA-256 of the assembled text on each side of a framed body."""

    upstream: str
    sent: str


class AnswerDigests(TypedDict):
    """SHA-256 of an answer's clean text and of the text its connections sent."""

    clean: str
    sent: str


class AnswerFields(TypedDict):
    """The answer a response belongs to (docs/verdicts.md): its generation, over every
    connection of it so far."""

    #: The request id of the generation's first connection.
    generation: str
    connections: int
    content: AnswerContent
    #: Whether what was sent is a prefix of the clean answer.
    prefix: bool
    #: Whether this connection sent nothing a correct client may object to.
    sound: bool
    #: The first thing it sent that a correct client may object to.
    defect: str | None
    #: With ``defect``: the characters of text (trailing whitespace aside) this
    #: connection had sent before it, where they are known. A client that raised
    #: reporting less text than that gave up before the defect (docs/verdicts.md).
    defect_after: NotRequired[int]
    text_sha256: AnswerDigests


class ResponseEnd(TypedDict):
    """The summary of a request (the ``response_end`` line without the bound fields,
    ``event`` and ``ts``), built once, when it ended."""

    #: ``local`` when the fleet's state (``--state redis://…``) did not answer in
    #: time and this replica numbered the request alone (docs/fleet.md). Not
    #: ``state``, which a summary uses for ``in_flight``/``done``.
    fleet_state: NotRequired[Literal["local"]]

    outcome: Outcome
    #: The status the client was sent (0: none).
    status: int
    #: Body bytes written, and in how many writes.
    bytes: int
    frames: int
    content_type: NotRequired[str]
    content_encoding: NotRequired[str]
    #: Under a scenario (or a framed body): the provider profile and the framing.
    provider: NotRequired[str]
    format: NotRequired[BodyFormat]
    #: A framed body: upstream events in, and events the client was sent whole.
    events_in: NotRequired[int]
    events_out: NotRequired[int]
    #: Under an active scenario: fault name → times it applied, and those it did not.
    faults_applied: NotRequired[dict[str, int]]
    faults_skipped: NotRequired[list[SkippedFault]]
    #: Those that applied otherwise than asked, and why (only when any did).
    faults_fallback: NotRequired[list[FallbackFault]]
    #: Milliseconds to the first body write (None: nothing written).
    ttfb_ms: NotRequired[float | None]
    max_gap_ms: NotRequired[float]
    duration_ms: float
    #: A framed body: its integrity, the content's alone, and the text digests.
    integrity: NotRequired[Integrity]
    content_integrity: NotRequired[Integrity]
    text_sha256: NotRequired[TextDigests]
    answer: NotRequired[AnswerFields]
    #: What went wrong, credentials masked.
    error: NotRequired[str]
    #: Where it ended: ``request`` (a request_cut), ``connect`` or ``body``
    #: (``upstream_error``).
    stage: NotRequired[Literal["request", "connect", "body"]]
    #: Why, in a few words (``upstream_error``; ``hold timeout``; ``watchdog``).
    reason: NotRequired[str]


class ResponseEndLine(ResponseEnd, _Bound):
    """``response_end``: one per request, last; how it ended (docs/observability.md)."""

    event: Literal["response_end"]
    ts: str


# --------------------------------------------------------------------------- others


class Judgement(TypedDict):
    """What a client run is judged (:func:`chaosproxy.core.verdict.judge`,
    docs/verdicts.md): the part every verdict record shares."""

    verdict: Verdict
    #: The judged request's ``integrity`` (None: an unframed answer).
    integrity: Integrity | None
    #: Its answer's ``content`` (None: an unframed answer).
    content: AnswerContent | None
    #: Why, in a sentence.
    reason: str
    #: Whether the client's text is the clean answer's (None: no text, or nothing to
    #: compare it with).
    text_matches: bool | None


class FaultShortfall(TypedDict):
    """A fault of a run's scenario that did not do what the scenario asked on any of
    the run's requests under faults (:func:`chaosproxy.core.verdict.shortfalls`): it
    was skipped (``requested`` None, ``actual`` ``skipped``), or it applied otherwise
    (a ``cut`` asked for ``mid_utf8`` that fell on the ``boundary``), and why, as the
    frame log says (``faults_skipped``, ``faults_fallback``)."""

    fault: str
    #: 0-based position in the scenario's ``faults``.
    position: int
    requested: str | None
    actual: str
    reason: str


class RunVerdict(Judgement):
    """A verdict as it is recorded and answered (``POST /requests/{id}/verdict``,
    ``proxy.verdict(...)``)."""

    #: Every request of the client run judged together, in the order they began (the
    #: last is the one judged).
    requests: list[str]


class VerdictFields(Judgement):
    """A recorded verdict (``POST /requests/{id}/verdict``, ``proxy.verdict``), as
    logged (:func:`chaosproxy.core.verdict.verdict_line`)."""

    #: The request the verdict was recorded on.
    request_id: str
    #: Every request of the client run judged together, in the order they began
    #: (absent when the run named none).
    requests: NotRequired[list[str]]


class VerdictLine(VerdictFields):
    """``verdict``: a test's client reported what it concluded (docs/verdicts.md)."""

    event: Literal["verdict"]
    ts: str
    #: The replica that wrote the line (``--replica-id``).
    replica: NotRequired[str]


class RejectedLine(TypedDict):
    """``rejected``: a request that never reached the handler (a malformed head, a
    ``CONNECT``, a head over the limits...): no request id, one line."""

    event: Literal["rejected"]
    ts: str
    #: The replica that wrote the line (``--replica-id``).
    replica: NotRequired[str]
    status: int
    reason: str
    #: The client's address (``host:port``).
    peer: str


#: Any line of the frame log.
LogLine = (
    RequestLine
    | FrameLine
    | ActionLine
    | ViolationLine
    | ResponseEndLine
    | VerdictLine
    | RejectedLine
)


# --------------------------------------------------------------------------- summaries
# What the admin API (docs/admin-api.md) and the Python API (docs/python-api.md) show of
# a request: made of its lines, by chaosproxy.observe.store.


class JournalMessage(TypedDict):
    """One message of a request, as the journal reads it (a system prompt is one): its
    ``text`` when the journal keeps the body (``--log-content``), else how long the text
    is (``chars``) and its ``sha256`` (of its UTF-8)."""

    role: str
    text: NotRequired[str]
    chars: NotRequired[int]
    sha256: NotRequired[str]


class HeadersTruncated(TypedDict):
    """What the journal left out of a request's header fields (beyond its bound)."""

    #: The fields received, and their bytes (names and values).
    fields: int
    bytes: int
    #: Fields left out whole, and values kept cut (ending with ``…``).
    omitted: int
    cut: int


class JournalRequest(TypedDict):
    """What a client sent, parsed (docs/mock.md, The request journal): a summary's
    ``request`` (:meth:`chaosproxy.observe.journal.RequestEntry.as_dict`), credentials
    masked (``***``) wherever they are. The keys after ``headers`` are there only when
    the proxy read the body whole."""

    method: str
    #: The path and query, credential-like query values masked.
    path: str
    #: Names lower case, repeats joined by ``, ``.
    headers: dict[str, str]
    #: Only when some fields were left out or cut (``--journal-entry-bytes``).
    headers_truncated: NotRequired[HeadersTruncated]
    model: NotRequired[str | None]
    stream: NotRequired[bool | None]
    #: The names of the tools offered.
    tools: NotRequired[list[str]]
    #: Role and text each; without the body, role, length and hash each, or only how
    #: many when even those do not fit.
    messages: NotRequired[list[JournalMessage] | int]
    #: The body's JSON value (its text, when it is no JSON); absent when the journal
    #: does not keep it (``body_omitted``, and why).
    body: NotRequired[Any]
    body_omitted: NotRequired[bool]
    #: ``content``: kept only with ``--log-content``; ``size``: over the entry's bound;
    #: ``depth``: nested deeper than the journal reads (kept as its hash).
    body_omitted_reason: NotRequired[Literal["content", "size", "depth"]]
    body_bytes: NotRequired[int]
    body_sha256: NotRequired[str]


class RecordedVerdict(Judgement):
    """A summary's ``verdict``: the last verdict recorded on the request (its
    ``verdict`` line without ``event`` and ``request_id``)."""

    #: When it was logged (absent when it reached the store without a log).
    ts: NotRequired[str]
    requests: NotRequired[list[str]]


class RequestSummary(RequestFields, ResponseEnd):
    """A finished request: its ``request`` line merged with its ``response_end`` line,
    without ``event`` (:func:`chaosproxy.observe.store.request_summary`). What
    ``proxy.requests()``, ``last()``, ``summary()`` and ``verify()`` return
    (``ChaosProxy`` and ``ChaosClient`` alike), and what a verdict judges.

    Its keys are those of :class:`RequestFields` and :class:`ResponseEnd`, required
    and ``NotRequired`` as there, plus ``ts`` and the two below."""

    #: When it ended (the ``response_end`` line's).
    ts: str
    #: What the client sent, parsed, while the journal keeps it (the last ``history``
    #: requests), and when the proxy read the body.
    request: NotRequired[JournalRequest]
    #: Once a verdict was recorded on it.
    verdict: NotRequired[RecordedVerdict]


class DoneSummary(RequestSummary):
    """``GET /requests``' summary of a finished request: its :class:`RequestSummary`
    and ``state``."""

    state: Literal["done"]


class InFlightSummary(RequestFields):
    """``GET /requests``' summary of a request in flight: its ``request`` line without
    ``event``, ``state``, and what was sent so far."""

    #: When it began (the ``request`` line's).
    ts: str
    state: Literal["in_flight"]
    #: Body bytes written so far, and in how many writes.
    bytes: int
    frames: int
    request: NotRequired[JournalRequest]


#: A request as the admin API shows it (``GET /requests``, ``GET /requests/{id}``'s
#: ``summary``): told apart by ``state``.
AdminSummary = InFlightSummary | DoneSummary

__all__ = [
    "LINE_KINDS",
    "ActionLine",
    "AdminSummary",
    "AnswerFields",
    "DoneSummary",
    "FrameContent",
    "FrameFields",
    "FrameLine",
    "HeadersTruncated",
    "InFlightSummary",
    "Integrity",
    "JournalMessage",
    "JournalRequest",
    "Judgement",
    "LogLine",
    "Outcome",
    "RecordedVerdict",
    "RejectedLine",
    "RequestFields",
    "RequestLine",
    "RequestSummary",
    "ResponseEnd",
    "ResponseEndLine",
    "Rule",
    "RunVerdict",
    "SideName",
    "SkippedFault",
    "Verdict",
    "VerdictFields",
    "VerdictLine",
    "ViolationFields",
    "ViolationLine",
]
