"""The admin API's request store: recent requests, rebuilt from frame-log lines.

An observer of the frame log (:meth:`RequestStore.frame_json` is called for every
write to a client), so it is compiled with the hot path (docs/architecture.md,
Compiled modules); :mod:`chaosproxy.control.admin` answers from it. Memory is bounded: the
store keeps the most recent ``history`` requests, at most ``max_frames`` frame and
action lines each, and at most ``max_content`` characters of payload
(``--log-content``) per request; and all of it together holds at most ``max_bytes``
(``--history-bytes``), counted as what is really held: each kept line's text plus what
its string object costs, each record's own objects, its journal entry's
:attr:`~chaosproxy.observe.journal.RequestEntry.held`. Past it, the oldest requests
are forgotten (``evicted``, by reason, for ``chaosproxy_history_evicted_total``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, cast

import orjson

from chaosproxy.core.records import (
    AdminSummary,
    DoneSummary,
    FrameFields,
    InFlightSummary,
    LogLine,
    RecordedVerdict,
    RequestLine,
    RequestSummary,
    ResponseEndLine,
    VerdictLine,
    ViolationLine,
)
from chaosproxy.core.verdict import run_of
from chaosproxy.observe.journal import RequestEntry
from chaosproxy.observe.logs import FrameObserver

#: Recent requests kept by default (in flight and finished).
DEFAULT_HISTORY = 256
#: Frame (and action) lines kept per request by default; the rest are counted.
DEFAULT_MAX_FRAMES = 1000
#: Payload characters (``data`` + ``raw``) kept per request by default.
DEFAULT_MAX_CONTENT = 256 * 1024
#: What the whole store holds at most by default (``--history-bytes``).
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
#: What a kept line costs besides its characters: its ``bytes`` object (33 bytes of
#: header, rounded up by the allocator) and its slot in a list.
LINE_OVERHEAD: Final = 64
#: What a record costs besides its lines and its journal entry: the record, its
#: ``request`` line and (once ended) its summary, as dicts (measured with
#: tracemalloc: tests/observe/test_store.py).
RECORD_OVERHEAD = 2048
#: What each kept ``violation`` line costs (a dict of a dozen short fields).
VIOLATION_BYTES = 1024
_FRAME_SKIP = frozenset({"event", "request_id", "scenario"})
_CONTENT = frozenset({"data", "raw"})


@dataclass
class RequestRecord:
    """What the admin API knows of one request: its frame-log lines, as logged.

    Frame and action lines are kept compact, each as its JSON text and a newline
    (``bytes``): a busy proxy keeps a few hundred thousand of them, and as dicts (with
    their ``events``, ``kinds`` and ``faults`` lists) every one would be four more
    objects for each pass of Python's garbage collector to walk, with the loop held
    meanwhile (docs/benchmark.md). They are decoded when the API shows them. A frame
    line is kept as the very object the frame log wrote (nothing is copied per write,
    issue 34); a line the store makes itself is copied out of orjson's result, which
    would keep orjson's whole initial buffer, about 4 KB, however short the line."""

    #: Its ``request`` line, as logged.
    line: RequestLine
    #: Its summary (:func:`request_summary`), once its ``response_end`` line came.
    summary: RequestSummary | None = None
    #: Frame lines, each its JSON text and a newline (:meth:`detail` decodes them).
    frames: list[bytes] = field(default_factory=list)
    #: Action lines, likewise.
    actions: list[bytes] = field(default_factory=list)
    #: Its ``violation`` lines (contract breaches; at most 100 per side).
    violations: list[ViolationLine] = field(default_factory=list)
    #: Frame/action lines not kept (beyond ``max_frames``).
    omitted: int = 0
    #: Payload characters kept so far.
    content: int = 0
    #: Frames and bytes sent so far (the summary of a request in flight shows them).
    sent_frames: int = 0
    sent_bytes: int = 0
    #: The last verdict recorded (``POST /requests/{id}/verdict``), as logged
    #: (:func:`recorded_verdict`).
    verdict: RecordedVerdict | None = None
    #: What the client sent (the journal), when its body was read.
    request: RequestEntry | None = None
    #: ``time.monotonic()`` when its request line came: the order requests began in,
    #: across the processes of one machine too (``serve --workers N``).
    started: float = field(default_factory=time.monotonic)
    #: Its place in the order the store saw requests begin (a listing's cursor).
    seq: int = 0
    #: What it holds, in bytes (counted as the store's docstring says).
    held: int = RECORD_OVERHEAD

    @property
    def done(self) -> bool:
        """Whether it has ended (its ``response_end`` line came)."""
        return self.summary is not None

    def view(self) -> AdminSummary:
        """The summary, as ``GET /requests`` shows it (with the parsed ``request``)."""
        summary = self.summary
        if summary is None:
            flight = cast("InFlightSummary", {k: v for k, v in self.line.items() if k != "event"})
            if self.request is not None:
                flight["request"] = self.request.as_dict()
            flight["state"] = "in_flight"
            flight["bytes"] = self.sent_bytes
            flight["frames"] = self.sent_frames
            return flight
        done = cast("DoneSummary", summary.copy())
        if self.request is not None:
            done["request"] = self.request.as_dict()
        done["state"] = "done"
        if self.verdict is not None:
            done["verdict"] = self.verdict
        return done

    def detail(self) -> dict[str, Any]:
        """Summary, frames, actions and violations, as ``GET /requests/{id}`` shows them."""
        return {
            "summary": self.view(),
            "frames": [_strip(orjson.loads(f)) for f in self.frames],
            "actions": [_strip(orjson.loads(a)) for a in self.actions],
            "violations": [_strip(dict(v)) for v in self.violations],
            "omitted_lines": self.omitted,
        }


def _strip(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k not in _FRAME_SKIP}


def request_summary(request: RequestLine | None, end: ResponseEndLine) -> RequestSummary:
    """The summary of a finished request: its ``request`` line (None: not seen) merged
    with its ``response_end`` line, without ``event`` (so its ``ts`` is the end's)."""
    merged = {**(request or {}), **end}
    del merged["event"]
    return cast("RequestSummary", merged)


def recorded_verdict(line: VerdictLine) -> RecordedVerdict:
    """A ``verdict`` line as a summary shows it: without ``event``, ``request_id`` (and
    ``scenario``, which a verdict line does not carry)."""
    return cast("RecordedVerdict", {k: v for k, v in line.items() if k not in _FRAME_SKIP})


class RequestStore(FrameObserver):
    """Recent requests, rebuilt from frame-log lines; call it with every line."""

    def __init__(
        self,
        *,
        history: int = DEFAULT_HISTORY,
        max_frames: int = DEFAULT_MAX_FRAMES,
        max_content: int = DEFAULT_MAX_CONTENT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        content: bool = False,
    ) -> None:
        if history < 1 or max_frames < 0 or max_content < 0 or max_bytes < 1:
            raise ValueError("history and max_bytes must be >= 1, max_frames and max_content >= 0")
        self.history = history
        self.max_frames = max_frames
        self.max_content = max_content
        self.max_bytes = max_bytes
        #: Whether the journal keeps the prompts (``--log-content``): ``contains=``
        #: can search them only then.
        self.content = content
        #: What every record kept holds, in bytes.
        self.held = 0
        #: Requests forgotten to stay within ``history`` (``count``) or ``max_bytes``
        #: (``bytes``), since start (a reset forgets, it evicts nothing).
        self.evicted: dict[str, int] = {"count": 0, "bytes": 0}
        self._seq = 0
        #: Requests in flight counted elsewhere, when this store keeps none of them
        #: (``serve --workers N``: the supervisor's admin asks its workers); None:
        #: counted here.
        self.elsewhere: int | None = None
        #: Told of each ``request`` and ``response_end`` line (a worker of ``serve
        #: --workers N`` tells its supervisor which requests it has in flight); never
        #: of a frame line.
        self.flights: Callable[[LogLine], None] | None = None
        #: request_id -> record, oldest request first.
        self._records: OrderedDict[str, RequestRecord] = OrderedDict()

    def __call__(self, line: LogLine) -> None:
        # The log never changes a line after its observers saw it: the request line is
        # kept as it is, frame and action lines as their JSON text (RequestRecord).
        if line["event"] == "rejected":  # (no request)
            return
        request_id = line["request_id"]
        flights = self.flights
        if flights is not None and line["event"] in ("request", "response_end"):
            flights(line)
        if line["event"] == "request":
            self._seq += 1
            # (its line's JSON size: the path, the tools' names... vary; the rest is
            # RECORD_OVERHEAD)
            began = RequestRecord(line, seq=self._seq)
            began.held += len(orjson.dumps(line))
            replaced = self._records.pop(request_id, None)
            if replaced is not None:
                self.held -= replaced.held
            self._records[request_id] = began
            self.held += began.held
            while len(self._records) > self.history:
                self._forget_oldest("count")
            self._fit(began, 0)
            return
        record = self._records.get(request_id)
        if record is None:  # forgotten (reset, or pushed out of the history)
            return
        if line["event"] == "frame":
            record.sent_frames += 1
            record.sent_bytes += line["size"]
            self._keep(record, record.frames, dict(line))
        elif line["event"] == "response_end":
            record.summary = request_summary(record.line, line)
        elif line["event"] == "verdict":
            record.verdict = recorded_verdict(line)
        elif line["event"] == "violation":
            if self._fit(record, VIOLATION_BYTES):
                record.violations.append(line)
                self._hold(record, VIOLATION_BYTES)
        else:
            self._keep(record, record.actions, dict(line))

    def keep_request(self, request_id: str, entry: RequestEntry) -> None:
        """Keep what a request sent (its journal entry), after its ``request`` line."""
        record = self._records.get(request_id)
        if record is not None and self._fit(record, entry.held):
            if record.request is not None:
                self._hold(record, -record.request.held)
            record.request = entry
            self._hold(record, entry.held)

    def _hold(self, record: RequestRecord, size: int) -> None:
        record.held += size
        self.held += size

    def _fit(self, record: RequestRecord, size: int) -> bool:
        """Make room for ``size`` more bytes of ``record``: forget the oldest other
        requests until the store holds at most ``max_bytes`` with them; False when even
        that is not enough (``record`` is the oldest left), and they are not kept."""
        while self.held + size > self.max_bytes:
            oldest = next(iter(self._records.values()))
            if oldest is record:
                return False
            self._forget_oldest("bytes")
        return True

    def _forget_oldest(self, reason: str) -> None:
        _, record = self._records.popitem(last=False)
        self.held -= record.held
        self.evicted[reason] += 1

    def frame_json(self, context: dict[str, Any], fields: FrameFields, text: bytes) -> None:
        """The same as calling it with a ``frame`` line, given the parts the line is made
        of and its JSON text and a newline (the frame log makes it once, for itself and
        for this store; no dict of the line is made)."""
        record = self._record_of(context)
        if record is not None:
            record.sent_frames += 1
            self._frame(record, fields, text)

    def frame_plain(self, context: dict[str, Any], size: int, text: bytes) -> None:
        """The same as :meth:`frame_json` for the line of a plain write of ``size``
        bytes (no content), given its JSON text and a newline (no dict of its fields
        is made: :meth:`~chaosproxy.observe.logs.RequestLog.plain_frame`)."""
        record = self._record_of(context)
        if record is not None:
            record.sent_frames += 1
            record.sent_bytes += size
            if len(record.frames) + len(record.actions) >= self.max_frames:
                record.omitted += 1
            else:
                self._keep_text(record, text)

    def frames_json(
        self, context: dict[str, Any], fields: list[FrameFields], texts: list[bytes]
    ) -> None:
        """The same as calling it with each ``frame`` line of a batch, given the parts
        the lines are made of and their JSON texts, each with a newline (the frame log
        makes them once, for itself and for this store; no dict of a line is made)."""
        record = self._record_of(context)
        if record is not None:
            record.sent_frames += len(fields)
            for f, text in zip(fields, texts, strict=True):
                self._frame(record, f, text)

    def _record_of(self, context: dict[str, Any]) -> RequestRecord | None:
        """The record of the request a line is bound to (None: no request line, or
        forgotten)."""
        request_id = context.get("request_id")
        return self._records.get(request_id) if isinstance(request_id, str) else None

    def _frame(self, record: RequestRecord, fields: FrameFields, text: bytes) -> None:
        record.sent_bytes += fields.get("size", 0)
        if len(record.frames) + len(record.actions) >= self.max_frames:
            record.omitted += 1
        elif "raw" not in fields:
            self._keep_text(record, text)
        else:  # with content, which the store may have to leave out
            self._keep(record, record.frames, orjson.loads(text), text)

    def _keep_text(self, record: RequestRecord, text: bytes) -> None:
        """Keep a frame line without content, as the log wrote it, if it fits."""
        size = len(text) + LINE_OVERHEAD
        # (the budget's check inlined: this is every write of every stream)
        if self.held + size <= self.max_bytes or self._fit(record, size):
            record.frames.append(text)  # the usual line: kept as it is
            record.held += size
            self.held += size
        else:
            record.omitted += 1

    def _keep(
        self, record: RequestRecord, into: list[bytes], line: dict[str, Any], text: bytes = b""
    ) -> None:
        if len(record.frames) + len(record.actions) >= self.max_frames:
            record.omitted += 1
            return
        raw = line.get("raw")
        if raw is not None:
            size = len(raw) + len(line.get("data", ""))
            if record.content + size > self.max_content:
                line = {k: v for k, v in line.items() if k not in _CONTENT}
                line["content_omitted"] = True
                text = b""
            else:
                record.content += size
        # The line's JSON and a newline, as orjson.dumps(line) would make it (joined:
        # a copy the size of the line, not orjson's buffer).
        kept = text if text else b"".join((orjson.dumps(line), b"\n"))
        size = len(kept) + LINE_OVERHEAD
        if self._fit(record, size):
            into.append(kept)
            self._hold(record, size)
        else:
            record.omitted += 1

    def get(self, request_id: str) -> RequestRecord | None:
        return self._records.get(request_id)

    def run(self, request_id: str, others: Iterable[str] = ()) -> list[RequestSummary]:
        """The summaries of the finished requests that belong to the answer of
        ``request_id`` (:func:`~chaosproxy.core.verdict.chain`) and of ``others``, in the
        order they began: what a verdict judges."""
        done: list[RequestSummary] = []
        for record in self._records.values():
            summary = record.summary
            if summary is not None:
                done.append(summary)
        return run_of(done, request_id, others)

    def in_flight(self) -> int:
        """Requests begun and not ended: those kept here, or :attr:`elsewhere`."""
        if self.elsewhere is not None:
            return self.elsewhere
        return sum(1 for r in self._records.values() if not r.done)

    def records(self) -> list[RequestRecord]:
        """Every request kept, oldest first."""
        return list(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    def newest_first(self, before: int | None = None) -> list[RequestRecord]:
        """The records kept, newest first: those that began before the one numbered
        ``before`` (a listing's cursor: :attr:`RequestRecord.seq`), or all."""
        records = list(self._records.values())
        records.reverse()
        if before is None:
            return records
        return [r for r in records if r.seq < before]

    def reset(self) -> None:
        """Forget every request, including those in flight (their later lines are
        ignored)."""
        self._records.clear()
        self.held = 0


__all__ = [
    "DEFAULT_HISTORY",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_CONTENT",
    "DEFAULT_MAX_FRAMES",
    "RequestRecord",
    "RequestStore",
    "recorded_verdict",
    "request_summary",
]
