"""``chaosproxy report``: one self-contained HTML page from a frame log or a trace dir.

Per request: a header (id, scenario, seed, method and path as logged, status, outcome,
integrity, verdict), a timeline of its writes as inline SVG (cumulative bytes over time
as a step line, one mark per write coloured by the kind of its events, faulted writes
labelled with the fault, long gaps and stalls shaded, the cut and the end marked), its
contract violations and its verdict. Then, when given, the library matrix of
``chaosproxy matrix`` (scenario by verdict).

The page loads nothing: inline CSS and SVG only, no script, and a Content-Security-Policy
that forbids any fetch. Every logged string is escaped (a log written with
``--log-content`` holds payload text, which may be anything). The output is bounded:
only the newest ``limit`` requests are drawn (the page says how many were left out), and
a request with very many writes has its marks thinned, never its byte line's endpoints.

The log is read as typed records (:mod:`chaosproxy.observe.reading`; records given in
memory are checked the same way): a line that is no record of the log (not JSON, an
unknown kind, a required key missing or of the wrong type) is left out, and the page
says how many and why; an optional value of the wrong type is left out of its line.
"""

from __future__ import annotations

import bisect
import html
import itertools
import math
import re
import statistics
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import orjson

from chaosproxy.core.records import (
    ActionLine,
    FrameLine,
    LogLine,
    RejectedLine,
    RequestLine,
    ResponseEndLine,
    VerdictLine,
    ViolationLine,
)
from chaosproxy.observe.reading import Unreadable, check_line, read_line

#: Requests drawn by default (the newest ones).
DEFAULT_LIMIT = 500
#: A pause between two writes (or before the first, or after the last) at least this
#: long is shaded as a gap…
GAP_MS = 100.0
#: …and at least this long as a stall.
STALL_MS = 500.0
#: Marks drawn per request at most (faulted writes always are).
MAX_MARKS = 1500
#: Longest string shown from a log field (reasons, paths, payload text).
MAX_TEXT = 300
#: Violations listed per request (the rest are counted).
MAX_VIOLATIONS = 200
#: Rejected connections listed (the last ones; the rest are counted).
MAX_REJECTED = 200

#: Mark classes, by precedence when a write carries events of several kinds.
KIND_CLASSES = ("terminal", "error", "tool", "start", "delta", "other")
_KIND_OF = {
    "terminal": "terminal",
    "error": "error",
    "tool_delta": "tool",
    "start": "start",
    "delta": "delta",
}
#: Verdicts that fail a CI gate (drawn in red).
FAILING_VERDICTS = frozenset({"silent_corruption", "false_alarm", "hung"})

#: Shown for a value the log does not have (an en dash).
NONE = "\u2013"

# Plot geometry (SVG user units).
WIDTH, HEIGHT = 960, 190
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 30, 30


class TextSink(Protocol):
    """Where :func:`write_report` writes the page (a text file, ``sys.stdout``)."""

    def write(self, text: str, /) -> object: ...


class ReportError(ValueError):
    """The input cannot be read as a frame log."""


# ------------------------------------------------------------------------------ input


def _natural_key(path: Path) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.name)]


#: The request id of a frame-log line, found without parsing the whole line (payload text
#: is a JSON string, so an unescaped ``"request_id":"`` can only be the key itself).
_REQUEST_ID = re.compile(rb'"request_id":\s*("(?:[^"\\]|\\.)*")')
#: Unreadable lines quoted on the page (the rest are counted).
MAX_UNREAD = 5


def _line_id(line: bytes) -> str | None:
    match = _REQUEST_ID.search(line)
    if match is None:
        return None
    try:
        value = orjson.loads(match.group(1))
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def _request_ids(files: Sequence[Path]) -> list[str]:
    """Every request id, in order of first appearance (a cheap first pass)."""
    seen: dict[str, None] = {}
    for path in files:
        with path.open("rb") as stream:
            for raw in stream:
                rid = _line_id(raw)
                if rid is not None:
                    seen.setdefault(rid, None)
    return list(seen)


@dataclass
class _Unread:
    """The lines that are no record of the log (:mod:`chaosproxy.observe.reading`): how
    many, and where and why for the first ``MAX_UNREAD``."""

    count: int = 0
    first: list[str] = field(default_factory=list)
    #: Whether one of them was a JSON object (not of its record, or of no known kind).
    objects: bool = False

    def add(self, where: str, why: Unreadable) -> None:
        self.count += 1
        self.objects = self.objects or why.json_object
        if len(self.first) < MAX_UNREAD:
            self.first.append(f"{where}: {why.reason}")

    def nothing(self, read: int) -> bool:
        """Whether nothing of a log that gave ``read`` records can be drawn: no record
        and no JSON object (a console log). JSON objects that are no record still make a
        page, which says why each was not read (a hand-written or another version's log)."""
        return not read and self.count > 0 and not self.objects


def _log_lines(
    stream: BinaryIO, keep: set[str] | None, source: str, unread: _Unread
) -> Iterator[tuple[int, LogLine]]:
    """Each record of ``stream`` (only those of the requests in ``keep``, and those of no
    request, when given) and its offset; each non-empty line that is none is told to
    ``unread``."""
    offset = 0
    for number, raw in enumerate(stream, 1):
        place = offset
        offset += len(raw)
        if not raw.strip():
            continue
        if keep is not None:
            rid = _line_id(raw)
            if rid is not None and rid not in keep:
                continue
        line = read_line(raw)
        if isinstance(line, Unreadable):
            unread.add(f"{source}:{number}", line)
        else:
            yield place, line


def load_records(path: str | Path) -> list[LogLine]:
    """The frame-log records of a LOG file (JSON lines) or of a TRACE_DIR (its
    ``*.jsonl``, in natural name order), read by :func:`chaosproxy.observe.reading.read_line`.
    Lines that are none are skipped; raises :class:`ReportError` when no line is a JSON
    object, OSError when the path cannot be read."""
    return load_newest(path, None)[0]


def load_newest(path: str | Path, limit: int | None) -> tuple[list[LogLine], int]:
    """As :func:`load_records`, but only the records of the newest ``limit`` requests
    (and those of no request, such as ``rejected``); also returns how many requests were
    left out. A dense log is better drawn with :func:`write_report`, which keeps far
    less of each line."""
    source = Path(path)
    files = _files(source)
    keep, omitted = _newest(files, limit)
    records: list[LogLine] = []
    unread = _Unread()
    for file in files:
        with file.open("rb") as stream:
            records.extend(line for _, line in _log_lines(stream, keep, str(file), unread))
    if unread.nothing(len(records)):
        raise _not_json(source)
    return records, omitted


def _newest(files: Sequence[Path], limit: int | None) -> tuple[set[str] | None, int]:
    """The ids of the newest ``limit`` requests (None: every request) and how many
    requests that leaves out."""
    if limit is None:
        return None, 0
    ids = _request_ids(files)
    if len(ids) <= limit:
        return None, 0
    omitted = len(ids) - limit
    return set(ids[omitted:]), omitted


def _not_json(path: str | Path) -> ReportError:
    return ReportError(
        f"{path}: no JSON lines (--log-format json writes them; so does auto, the default, "
        "except on a terminal)"
    )


def _files(path: str | Path) -> list[Path]:
    source = Path(path)
    if source.is_dir():
        files = sorted(source.glob("*.jsonl"), key=_natural_key)
        if not files:
            raise ReportError(f"{source}: no *.jsonl trace files in this directory")
        return files
    return [source]


class _LogReader:
    """The files of a log read line by line, each line known by its position (the
    files' sizes added up before it), and read again by that position."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = list(files)
        self.bases: list[int] = []
        self._open: tuple[int, BinaryIO] | None = None

    def __enter__(self) -> _LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open is not None:
            self._open[1].close()
            self._open = None

    def fold(self, into: _Requests, keep: set[str] | None) -> int:
        """Every record into ``into`` (only those of the requests in ``keep``, and those
        of no request, when given), the lines that are none into ``into.unread``; returns
        how many records there were."""
        lines = base = 0
        for path in self.files:
            self.bases.append(base)
            with path.open("rb") as stream:
                for offset, line in _log_lines(stream, keep, str(path), into.unread):
                    into.add(line, base + offset)
                    lines += 1
                base += stream.tell()
        return lines

    def line(self, place: int) -> LogLine:
        """The record of the line at ``place`` (one that :meth:`fold` gave)."""
        index = bisect.bisect_right(self.bases, place) - 1
        if self._open is None or self._open[0] != index:
            if self._open is not None:
                self._open[1].close()
            self._open = (index, self.files[index].open("rb"))
        stream = self._open[1]
        stream.seek(place - self.bases[index])
        line = read_line(stream.readline())
        if isinstance(line, Unreadable):  # the file changed under the report
            raise ReportError(f"{self.files[index]}: changed while read ({line.reason})")
        return line


# ------------------------------------------------------------------------------ model


@dataclass
class Write:
    seq: int
    t_ms: float
    size: int
    events: list[int]
    kinds: list[str]
    faults: list[str]

    @property
    def kind_class(self) -> str:
        found = {_KIND_OF.get(k, "other") for k in self.kinds} or {"other"}
        return next(c for c in KIND_CLASSES if c in found)


@dataclass
class DrawnRequest:
    """One request as the page draws it. Its writes are kept compact (a time, a size and
    a faulted flag each); a write's details (seq, events, kinds, faults) are read back
    with :meth:`write` for the marks that are drawn only."""

    request_id: str
    request: RequestLine | None = None
    times: array[float] = field(default_factory=lambda: array("d"))
    sizes: array[int] | list[int] = field(default_factory=lambda: array("q"))
    #: 1 for a write a fault touched, else 0.
    faulted: bytearray = field(default_factory=bytearray)
    #: Its cut actions: ``(action line, t_ms or None)`` (the only actions drawn).
    actions: list[tuple[ActionLine, float | None]] = field(default_factory=list)
    end: ResponseEndLine | None = None
    #: The first ``MAX_VIOLATIONS`` violation lines, and how many there were.
    violations: list[ViolationLine] = field(default_factory=list)
    violation_count: int = 0
    verdict: VerdictLine | None = None
    #: The upstream events never written (a ``drop``, or a stream cut before them), each
    #: with the write after which it was missed: ``{ordinal: write index}``. Kept as
    #: writes come (an event written late, by a ``reorder``, leaves it again).
    unsent: dict[int, int] = field(default_factory=dict)
    #: The highest upstream ordinal written so far.
    high: int = 0
    #: Where each write's line is (an index, or a position in the log), for :meth:`write`.
    places: array[int] = field(default_factory=lambda: array("q"))
    _lines: Callable[[int], LogLine] | None = field(default=None, repr=False)

    @property
    def scenario(self) -> str | None:
        """The scenario, from the request line, else from response_end."""
        if self.request is not None:
            return self.request["scenario"]
        return None if self.end is None else self.end["scenario"]

    def write(self, i: int) -> Write:
        """The ``i``-th write, read back from its frame line."""
        assert self._lines is not None
        line = self._lines(self.places[i])
        assert line["event"] == "frame"  # (only frame lines have places)
        return _write(line)


def _write(line: FrameLine) -> Write:
    return Write(
        seq=line["seq"],
        t_ms=line["t_ms"],
        size=line["size"],
        events=line.get("events", []),
        kinds=line.get("kinds", []),
        faults=line.get("faults", []),
    )


def _ts_ms(ts: str) -> float | None:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000
    except ValueError:
        return None


def _number(value: Any, default: float = 0.0) -> float:
    """A finite number from a value of the matrix (a JSON file), else ``default``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    try:
        number = float(value)
    except OverflowError:
        return default
    return number if math.isfinite(number) else default


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


class _Requests:
    """Requests folded from frame-log records one at a time, keeping only what the page
    draws (see :class:`DrawnRequest`); records of requests not in ``keep`` are passed
    over."""

    def __init__(
        self,
        lines: Callable[[int], LogLine],
        keep: set[str] | None,
        max_rejected: int | None = MAX_REJECTED,
    ) -> None:
        self.requests: dict[str, DrawnRequest] = {}
        self.keep = keep
        self.lines = lines
        #: The last ``MAX_REJECTED`` ``rejected`` lines, and how many there were.
        self.rejected: deque[RejectedLine] = deque(maxlen=max_rejected)
        self.rejected_count = 0
        #: The lines that are no record (told by whoever reads them).
        self.unread = _Unread()
        self._started: dict[str, float | None] = {}

    def add(self, line: LogLine, place: int) -> None:
        if line["event"] == "rejected":
            self.rejected.append(line)
            self.rejected_count += 1
            return
        rid = line["request_id"]
        req = self.requests.get(rid)
        if req is None:
            if self.keep is not None and rid not in self.keep:
                return
            req = self.requests[rid] = DrawnRequest(rid, _lines=self.lines)
        if line["event"] == "request":
            req.request = line
            self._started[rid] = _ts_ms(line["ts"])
        elif line["event"] == "frame":
            req.times.append(line["t_ms"])
            _append_size(req, line["size"])
            req.faulted.append(1 if line.get("faults") else 0)
            req.places.append(place)
            _note_events(req, line.get("events", ()), len(req.times) - 1)
        elif line["event"] == "action":
            if line["action"] == "cut":
                start, at = self._started.get(rid), _ts_ms(line["ts"])
                req.actions.append(
                    (line, None if start is None or at is None else max(0.0, at - start))
                )
        elif line["event"] == "response_end":
            req.end = line
        elif line["event"] == "violation":
            if len(req.violations) < MAX_VIOLATIONS:
                req.violations.append(line)
            req.violation_count += 1
        elif line["event"] == "verdict":
            req.verdict = line


#: Unsent events noted per request at most (a hostile log's ordinals: no unbounded map).
MAX_UNSENT = 1000


def _note_events(req: DrawnRequest, events: Iterable[object], index: int) -> None:
    """The upstream ordinals of write ``index``: a jump past the highest so far leaves
    the ordinals between unsent (until a later write carries one of them)."""
    for e in events:
        if isinstance(e, bool) or not isinstance(e, int) or e <= 0:
            continue  # (an event the proxy made, not the upstream's)
        if e > req.high + 1:
            for missing in range(req.high + 1, min(e, req.high + 1 + MAX_UNSENT)):
                if len(req.unsent) < MAX_UNSENT:
                    req.unsent.setdefault(missing, index)
        req.unsent.pop(e, None)
        req.high = max(req.high, e)


def _append_size(req: DrawnRequest, size: int) -> None:
    try:
        req.sizes.append(size)
    except OverflowError:  # beyond 64 bits (a hostile log): a list takes any int
        req.sizes = [*req.sizes, size]


def _group(
    records: Iterable[Mapping[str, object]], limit: int | None
) -> tuple[list[DrawnRequest], int, _Requests]:
    """The records checked (:func:`~chaosproxy.observe.reading.check_line`), folded:
    the newest ``limit`` requests, how many were left out, and the fold (its rejected and
    unread lines)."""
    unread = _Unread()
    checked: list[LogLine] = []
    for number, value in enumerate(records, 1):
        line = check_line(value)
        if isinstance(line, Unreadable):
            unread.add(f"record {number}", line)
        else:
            checked.append(line)
    order: dict[str, None] = {}
    for line in checked:
        if line["event"] != "rejected":
            order.setdefault(line["request_id"], None)
    ids = list(order)
    omitted = 0
    if limit is not None and len(ids) > limit:
        omitted = len(ids) - limit
    folded = _Requests(checked.__getitem__, set(ids[omitted:]), max_rejected=None)
    folded.unread = unread
    folded.requests = {rid: DrawnRequest(rid, _lines=checked.__getitem__) for rid in ids[omitted:]}
    for place, line in enumerate(checked):
        folded.add(line, place)
    return list(folded.requests.values()), omitted, folded


def group_requests(
    records: Iterable[Mapping[str, object]], limit: int | None = None
) -> tuple[list[DrawnRequest], int, list[RejectedLine]]:
    """Requests in order of first appearance (the newest ``limit`` of them), how many
    were left out, and the ``rejected`` lines. Each record is checked first
    (:func:`~chaosproxy.observe.reading.check_line`): one that is no line of the log is
    left out."""
    requests, omitted, folded = _group(records, limit)
    return requests, omitted, list(folded.rejected)


# ------------------------------------------------------------------------------ output


def _e(value: Any, limit: int = MAX_TEXT) -> str:
    """Escaped text of a logged value, shortened to ``limit`` characters."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
        except (TypeError, orjson.JSONEncodeError):  # beyond JSON: huge ints, objects
            text = repr(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    return html.escape(text, quote=True)


def _slug(value: Any) -> str:
    """A CSS class fragment: the value if it is a plain word, else ``unknown``."""
    text = str(value) if value is not None else ""
    return text if re.fullmatch(r"[a-z0-9_-]{1,40}", text) else "unknown"


def _fmt_ms(ms: float) -> str:
    return f"{ms / 1000:.2f} s" if ms >= 10_000 else f"{ms:.0f} ms"


def _f(x: float) -> str:
    return f"{x:.1f}"


CSS = """
:root { --start:#2b8a3e; --delta:#1c7ed6; --tool:#7048e8; --terminal:#212529;
  --error:#e03131; --other:#868e96; --fault:#f08c00; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  margin: 0; padding: 20px 28px; color: #212529; background: #f8f9fa; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 16px; margin: 0; font-family: ui-monospace, Menlo, Consolas, monospace; }
h3 { font-size: 13px; margin: 10px 0 4px; text-transform: uppercase; color: #495057; }
.summary, .legend, .note { margin: 6px 0; color: #495057; }
.note { background: #fff3bf; padding: 6px 10px; border-radius: 4px; }
.legend span { display: inline-block; margin-right: 14px; }
.sw { display: inline-block; width: 11px; height: 11px; border-radius: 50%;
  vertical-align: -1px; margin-right: 4px; }
section.request { background: #fff; border: 1px solid #dee2e6; border-radius: 6px;
  padding: 12px 16px; margin: 14px 0; }
.head { display: flex; flex-wrap: wrap; gap: 6px 18px; align-items: baseline; }
.head .kv { color: #495057; }
.head .kv b { color: #212529; font-weight: 600; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
  font-weight: 600; background: #e9ecef; }
.outcome-completed, .integrity-intact, .verdict-tolerated, .verdict-detected {
  background: #d3f9d8; color: #2b8a3e; }
.outcome-cut, .outcome-client_gone, .outcome-shutdown, .integrity-altered,
.integrity-incomplete { background: #fff3bf; color: #e67700; }
.outcome-upstream_error, .outcome-proxy_error, .integrity-broken,
.verdict-silent_corruption, .verdict-false_alarm, .verdict-hung {
  background: #ffe3e3; color: #c92a2a; }
svg.timeline { display: block; width: 100%; max-width: 960px; height: auto; margin-top: 8px; }
svg .axis { stroke: #adb5bd; stroke-width: 1; }
svg .tick { fill: #868e96; font-size: 10px; }
svg .bytes { fill: none; stroke: #495057; stroke-width: 1.5; }
svg .gap { fill: #e9ecef; }
svg .stall { fill: #ffc9c9; opacity: .6; }
svg .mark { stroke: #fff; stroke-width: .5; }
svg .unsent { stroke: #e03131; stroke-width: 2; fill: none; }
svg .kind-start { fill: var(--start); } svg .kind-delta { fill: var(--delta); }
svg .kind-tool { fill: var(--tool); } svg .kind-terminal { fill: var(--terminal); }
svg .kind-error { fill: var(--error); } svg .kind-other { fill: var(--other); }
svg .faulted { stroke: var(--fault); stroke-width: 2.5; }
svg .fault-label { fill: var(--fault); font-size: 10px; font-weight: 600; }
svg .cut { stroke: #c92a2a; stroke-width: 2; stroke-dasharray: 5 3; }
svg .cut-label { fill: #c92a2a; font-size: 11px; font-weight: 700; }
svg .end { stroke: #212529; stroke-width: 1.5; }
svg .end-label { fill: #212529; font-size: 11px; }
table { border-collapse: collapse; margin: 4px 0; font-size: 13px; }
th, td { border: 1px solid #dee2e6; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f5; }
td.verdict { font-weight: 700; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.failed { color: #c92a2a; font-weight: 700; }
.passed { color: #2b8a3e; font-weight: 700; }
"""


class _Scale:
    def __init__(self, end_ms: float, total: int) -> None:
        self.end_ms = max(end_ms, 1.0)
        self.total = max(total, 1)
        self.w = WIDTH - LEFT - RIGHT
        self.h = HEIGHT - TOP - BOTTOM

    def x(self, t_ms: float) -> float:
        return LEFT + self.w * min(max(t_ms, 0.0), self.end_ms) / self.end_ms

    def y(self, size: float) -> float:
        return TOP + self.h - self.h * size / self.total


def _nice_ticks(end_ms: float, n: int = 5) -> list[float]:
    raw = end_ms / n
    if raw <= 0:
        return [0.0]
    magnitude = 10 ** (len(str(int(raw))) - 1) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(end_ms // step) + 1)]


def _timeline(req: DrawnRequest, gap_ms: float, stall_ms: float) -> str:
    """One request's writes over time, as an SVG: its gaps and stalls, the axes, the
    bytes written, a mark per write, the upstream events never sent, the cuts, the end."""
    times, sizes = req.times, req.sizes
    total = sum(sizes)
    last_t = max(times, default=0.0)
    duration = last_t if req.end is None else req.end["duration_ms"]
    end_ms = max(duration, last_t)
    scale = _Scale(end_ms, total)
    parts: list[str] = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'data-total-bytes="{total}" data-writes="{len(times)}" '
        f'aria-label="timeline of {_e(req.request_id)}">'
    ]
    parts += _gaps(times, end_ms, gap_ms, stall_ms, scale)
    parts += _axes(end_ms, total, scale)
    parts += _bytes_written(times, sizes, end_ms, scale)
    parts += _write_marks(req, scale)
    parts += _never_sent(req, scale)
    parts += _cuts_and_end(req, last_t, end_ms, scale)
    parts.append("</svg>")
    return "".join(parts)


def _gaps(
    times: Sequence[float], end_ms: float, gap_ms: float, stall_ms: float, scale: _Scale
) -> list[str]:
    """Gaps and stalls: before the first write, between writes, after the last one."""
    parts = []
    for a, b in itertools.pairwise(itertools.chain((0.0,), times, (end_ms,))):
        if b - a >= gap_ms:
            cls = "stall" if b - a >= stall_ms else "gap"
            parts.append(
                f'<rect class="{cls}" x="{_f(scale.x(a))}" y="{TOP}" '
                f'width="{_f(scale.x(b) - scale.x(a))}" height="{scale.h}">'
                f"<title>{cls} {_fmt_ms(b - a)} ({_fmt_ms(a)} → {_fmt_ms(b)})</title></rect>"
            )
    return parts


def _axes(end_ms: float, total: int, scale: _Scale) -> list[str]:
    """Axes and ticks."""
    base = TOP + scale.h
    parts = [
        f'<line class="axis" x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}"/>',
    ]
    for tick in _nice_ticks(end_ms):
        parts.append(
            f'<text class="tick" x="{_f(scale.x(tick))}" y="{base + 14}" text-anchor="middle">'
            f"{_fmt_ms(tick)}</text>"
        )
    parts.append(
        f'<text class="tick" x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end">{total} B</text>'
        f'<text class="tick" x="{LEFT - 6}" y="{base}" text-anchor="end">0</text>'
    )
    return parts


def _bytes_written(
    times: Sequence[float], sizes: Sequence[int], end_ms: float, scale: _Scale
) -> list[str]:
    """Cumulative bytes as a step line: flat until a write, then up by its size."""
    points = [(scale.x(0), scale.y(0))]
    cumulative = 0
    for t_ms, size in zip(times, sizes, strict=True):
        x = scale.x(t_ms)
        points.append((x, scale.y(cumulative)))
        cumulative += size
        points.append((x, scale.y(cumulative)))
    points.append((scale.x(end_ms), scale.y(cumulative)))
    # Consecutive equal points add nothing but size to a 100k-write stream.
    compact = [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]
    if len(compact) == 1:
        compact.append(compact[0])
    return [
        f'<polyline class="bytes" data-bytes="{cumulative}" points="'
        + " ".join(f"{_f(x)},{_f(y)}" for x, y in compact)
        + '"/>'
    ]


def _write_marks(req: DrawnRequest, scale: _Scale) -> list[str]:
    """One mark per write (thinned past MAX_MARKS, faulted ones always kept)."""
    sizes, n = req.sizes, len(req.times)
    stride = max(1, -(-n // MAX_MARKS))
    cumulative = 0
    last_label: tuple[str, float] | None = None
    parts = []
    for i, size in enumerate(sizes):
        cumulative += size
        if req.faulted[i] or i % stride == 0 or i == n - 1:
            w = req.write(i)
            x, y = scale.x(w.t_ms), scale.y(cumulative)
            classes = f"mark kind-{w.kind_class}" + (" faulted" if w.faults else "")
            title = (
                f"write {w.seq} at {w.t_ms:.1f} ms: {w.size} B, events {_e(w.events, 80)}, "
                f"kinds {_e(', '.join(w.kinds) or '-', 80)}"
                + (f", faults {_e(', '.join(w.faults), 80)}" if w.faults else "")
            )
            parts.append(
                f'<circle class="{classes}" cx="{_f(x)}" cy="{_f(y)}" '
                f'r="{4.5 if w.faults else 3}" data-seq="{w.seq}"><title>{title}</title></circle>'
            )
            if w.faults:
                label = ", ".join(w.faults)
                if last_label is None or last_label[0] != label or x - last_label[1] > 40:
                    parts.append(
                        f'<text class="fault-label" x="{_f(x)}" y="{_f(max(y - 8, 10))}" '
                        f'text-anchor="middle">{_e(label, 60)}</text>'
                    )
                    last_label = (label, x)
    return parts


def _never_sent(req: DrawnRequest, scale: _Scale) -> list[str]:
    """Upstream events never written: a mark on the byte line where each was missed."""
    missed: dict[int, list[int]] = {}
    for ordinal, index in sorted(req.unsent.items()):
        missed.setdefault(index, []).append(ordinal)
    if not missed:
        return []
    parts = []
    before = list(itertools.accumulate(req.sizes, initial=0))
    for index, ordinals in missed.items():
        x, y = scale.x(req.times[index]), scale.y(before[index])
        said = ", ".join(str(o) for o in ordinals[:10]) + (" …" if len(ordinals) > 10 else "")
        noun = "events" if len(ordinals) > 1 else "event"
        parts.append(
            f'<path class="unsent" data-events="{_e(said, 80)}" '
            f'd="M{_f(x - 4)},{_f(y - 4)}L{_f(x + 4)},{_f(y + 4)}M{_f(x - 4)},{_f(y + 4)}'
            f'L{_f(x + 4)},{_f(y - 4)}"><title>upstream {noun} {_e(said, 80)} never sent '
            "to the client, where later ones were</title></path>"
        )
    return parts


def _cuts_and_end(req: DrawnRequest, last_t: float, end_ms: float, scale: _Scale) -> list[str]:
    """The cut(s), then the end."""
    base = TOP + scale.h
    parts = []
    for line, at in req.actions:
        if line["action"] != "cut":
            continue
        t = last_t if at is None else min(max(at, last_t), end_ms)
        cx = _f(scale.x(t))
        how = _e(line.get("how", "?"), 40)
        after = line.get("after_event")
        where = f" after event {_e(after, 20)}" if after is not None else ""
        position = line.get("position")
        if position is not None and position != "boundary":
            where += f", {_e(position, 40)}"  # part-way into the next event
        if line.get("requested") is not None:  # a position it could not honour
            where += (
                f", at the boundary instead of {_e(line.get('requested'), 40)}: "
                f"{_e(line.get('fallback'))}"
            )
        parts.append(
            f'<line class="cut" x1="{cx}" y1="{TOP - 4}" x2="{cx}" y2="{base}">'
            f"<title>cut ({how}){where}</title></line>"
            f'<text class="cut-label" x="{cx}" y="{TOP - 8}" text-anchor="end">cut: {how}</text>'
        )
    if req.end is not None:
        ex = _f(scale.x(end_ms))
        parts.append(
            f'<line class="end" x1="{ex}" y1="{TOP}" x2="{ex}" y2="{base}"/>'
            f'<text class="end-label" x="{ex}" y="{base + 26}" text-anchor="end">'
            f"end: {_e(req.end['outcome'], 40)} at {_fmt_ms(end_ms)}</text>"
        )
    return parts


def _verdict_row(
    req: DrawnRequest, matrix_verdict: Mapping[str, Any] | None
) -> tuple[Any, Any, Any] | None:
    """The request's verdict, integrity and reason: its own ``verdict`` line, else the
    matrix's row (a JSON file of any shape), else None."""
    if req.verdict is not None:
        return req.verdict["verdict"], req.verdict["integrity"], req.verdict["reason"]
    if matrix_verdict is not None:
        return (
            matrix_verdict.get("verdict"),
            matrix_verdict.get("integrity"),
            matrix_verdict.get("reason"),
        )
    return None


def _verdict(req: DrawnRequest, matrix_verdict: Mapping[str, Any] | None) -> Any:
    """The request's verdict: its own ``verdict`` line, else the matrix's row."""
    row = _verdict_row(req, matrix_verdict)
    return None if row is None else row[0]


def _integrity(req: DrawnRequest, matrix_verdict: Mapping[str, Any] | None) -> Any:
    """The logged integrity, else the one its verdict names."""
    if req.end is not None and "integrity" in req.end:
        return req.end["integrity"]
    row = _verdict_row(req, matrix_verdict)
    return None if row is None else row[1]


def _pill(kind: str, value: Any) -> str:
    if value is None:
        return f'<span class="pill">{NONE}</span>'
    return f'<span class="pill {kind}-{_slug(value)}">{_e(value, 60)}</span>'


def _kv(label: str, value_html: str) -> str:
    return f'<span class="kv">{label} <b>{value_html}</b></span>'


def _request_section(
    index: int,
    req: DrawnRequest,
    matrix_verdict: Mapping[str, Any] | None,
    gap_ms: float,
    stall_ms: float,
) -> str:
    end, request = req.end, req.request
    verdict = _verdict_row(req, matrix_verdict)
    integrity = _integrity(req, matrix_verdict)
    method, path = (None, None) if request is None else (request["method"], request["path"])
    head = [
        f"<h2>{_e(req.request_id, 120)}</h2>",
        _kv("scenario", _e(req.scenario or NONE, 120)),
        _kv("seed", _e(None if request is None else request["seed"], 40)),
        _kv("request", f"<code>{_e(method, 20)} {_e(path)}</code>"),
        _kv("status", _e(NONE if end is None else end["status"], 20)),
        _kv("outcome", _pill("outcome", None if end is None else end["outcome"])),
        _kv("integrity", _pill("integrity", integrity)),
        _kv("verdict", _pill("verdict", None if verdict is None else verdict[0])),
    ]
    facts = []
    if end is not None:
        for key in ("provider", "format"):
            if key in end:
                facts.append(_kv(key, _e(end.get(key), 60)))
    if not req.sizes and end is not None and end["frames"] > 0:
        # A log without frame lines (--log-level requests): the end line's own count.
        facts.append(_kv("bytes", f"{_e(end['bytes'], 20)} (from response_end)"))
        facts.append(_kv("writes", f"{_e(end['frames'], 20)} (from response_end)"))
    else:
        facts.append(_kv("bytes", str(sum(req.sizes))))
        facts.append(_kv("writes", str(len(req.sizes))))
    if end is not None:
        answer = end.get("answer")
        if answer is not None and answer["content"]:
            facts.append(_kv("answer", _pill("integrity", answer["content"])))
        facts.append(_kv("duration", _fmt_ms(end["duration_ms"])))
        faults = end.get("faults_applied")
        if faults:
            facts.append(_kv("faults", _e(", ".join(f"{k}\u00d7{v}" for k, v in faults.items()))))
        for fell in _list(end.get("faults_fallback")):
            if isinstance(fell, dict):
                facts.append(
                    _kv(
                        "fell back",
                        _e(
                            f"{fell.get('fault')} at {fell.get('actual')} instead of "
                            f"{fell.get('requested')}: {fell.get('reason')}"
                        ),
                    )
                )
        for skipped in _list(end.get("faults_skipped")):
            if isinstance(skipped, dict):
                facts.append(_kv("skipped", _e(f"{skipped.get('fault')}: {skipped.get('reason')}")))
        if end.get("reason"):
            facts.append(_kv("reason", _e(end.get("reason"))))
    parts = [
        f'<section class="request" id="req-{index}" data-request-id="{_e(req.request_id, 500)}">',
        f'<div class="head">{"".join(head)}</div>',
        f'<div class="head">{"".join(facts)}</div>',
        _timeline(req, gap_ms, stall_ms),
    ]
    sha = None if end is None else end.get("text_sha256")
    if sha is not None:
        same = sha["upstream"] == sha["sent"]
        parts.append(
            '<div class="summary">text sha256: upstream '
            f"<code>{_e(sha['upstream'], 16)}</code>, sent "
            f"<code>{_e(sha['sent'], 16)}</code> "
            + ("(same)" if same else '<span class="failed">(differs)</span>')
            + "</div>"
        )
    if req.violation_count:
        rows = "".join(
            f"<tr><td>{_e(v['side'], 20)}</td><td>{_e(v['rule'], 60)}</td>"
            f"<td>{_e(v['at_event'], 20)}</td></tr>"
            for v in req.violations[:MAX_VIOLATIONS]
        )
        more = req.violation_count - MAX_VIOLATIONS
        parts.append(
            f"<h3>violations ({req.violation_count})</h3>"
            '<table class="violations"><tr><th>side</th><th>rule</th><th>at event</th></tr>'
            f"{rows}</table>" + (f'<p class="note">{more} more not shown</p>' if more > 0 else "")
        )
    if verdict is not None:
        name, judged, reason = verdict
        parts.append(
            '<h3>verdict</h3><table class="verdict"><tr><th>verdict</th><th>integrity</th>'
            f'<th>reason</th></tr><tr><td class="verdict verdict-{_slug(name)}">'
            f"{_e(name, 60)}</td><td>{_e(judged, 60)}</td>"
            f"<td>{_e(reason)}</td></tr></table>"
        )
    parts.append("</section>")
    return "\n".join(parts)


def _matrix_section(matrix: Mapping[str, Any], anchors: Mapping[str, int]) -> str:
    results = _list(matrix.get("results"))
    header = (
        "<tr><th>scenario</th><th>verdict</th><th>faults not as asked</th><th>answer</th>"
        "<th>bytes</th><th>reason</th><th>request</th><th>exit code</th><th>duration</th>"
        "<th>text matches</th></tr>"
    )
    rows = []
    for result in results:
        if not isinstance(result, dict):
            continue
        rid = result.get("request_id")
        if isinstance(rid, str) and rid in anchors:
            request = f'<a href="#req-{anchors[rid]}">{_e(rid, 120)}</a>'
        else:
            request = _e(rid, 120)
        others = [r for r in _strings(result.get("requests")) if r != rid]
        if others:
            request += f" <small>(also {_e(', '.join(others), 200)})</small>"
        verdict = result.get("verdict")
        duration = result.get("duration_ms")
        rows.append(
            f'<tr data-scenario="{_e(result.get("scenario"), 120)}">'
            f"<td>{_e(result.get('scenario'), 120)}</td>"
            f'<td class="verdict verdict-{_slug(verdict)}">{_e(verdict, 60)}</td>'
            f"<td>{_fallbacks(result.get('fallbacks'))}</td>"
            # (The answer, as matrix.md says it: a tolerated row's bytes may be altered,
            # re-chunked or re-ended, while the answer the client read is intact.)
            f"<td>{_e(result.get('content') or '-', 60)}</td>"
            f"<td>{_e(result.get('integrity'), 60)}</td><td>{_e(result.get('reason'))}</td>"
            f"<td>{request}</td><td>{_e(result.get('exit_code'), 20)}</td>"
            f"<td>{_fmt_ms(_number(duration)) if duration is not None else ''}</td>"
            f"<td>{_e(result.get('text_matches'), 10)}</td></tr>"
        )
    raw_counts = matrix.get("counts")
    counts: Mapping[str, Any] = raw_counts if isinstance(raw_counts, dict) else {}
    count_text = ", ".join(f"{_e(k, 60)}: {_e(v, 20)}" for k, v in counts.items())
    failed = matrix.get("failed")
    gate = (
        '<span class="failed">gate: FAILED</span>'
        if failed
        else ('<span class="passed">gate: passed</span>' if failed is not None else "")
    )
    return (
        '<section class="matrix" id="matrix"><h1>Library matrix</h1>'
        f'<p class="summary">client <code>{_e(matrix.get("client"))}</code>, upstream '
        f"<code>{_e(matrix.get('upstream'))}</code>. {count_text} {gate}</p>"
        f'<table class="matrix">{header}{"".join(rows)}</table></section>'
    )


def _fallbacks(value: Any) -> str:
    """A matrix row's ``fallbacks``: each fault that did not do as asked, what was asked,
    what happened and why (one line each)."""
    out = []
    for fell in _list(value):
        if not isinstance(fell, dict):
            continue
        fault, requested, actual = fell.get("fault"), fell.get("requested"), fell.get("actual")
        what = (
            f"{fault} {actual}"
            if requested is None
            else (f"{fault}: {actual} instead of {requested}")
        )
        out.append(f"<b>{_e(what, 120)}</b>: {_e(fell.get('reason'))}")
    return "<br>".join(out) or NONE


def _legend() -> str:
    kinds = "".join(
        f'<span><i class="sw" style="background:var(--{k})"></i>{k}</span>' for k in KIND_CLASSES
    )
    return (
        f'<p class="legend">{kinds}'
        '<span><i class="sw" style="border:2.5px solid var(--fault)"></i>faulted write</span>'
        '<span><i class="sw" style="background:#e9ecef;border-radius:0"></i>gap</span>'
        '<span><i class="sw" style="background:#ffc9c9;border-radius:0"></i>stall</span>'
        '<span style="color:#c92a2a">┆ cut</span><span>│ end</span></p>'
    )


def _counts(values: Iterable[Any]) -> str:
    counts = Counter(str(v) for v in values if v is not None)
    return ", ".join(f"{_e(k, 60)} {n}" for k, n in counts.most_common()) or NONE


def render_report(
    records: Iterable[Mapping[str, object]],
    matrix: Mapping[str, Any] | None = None,
    *,
    limit: int | None = DEFAULT_LIMIT,
    title: str = "chaosproxy report",
    gap_ms: float = GAP_MS,
    stall_ms: float = STALL_MS,
    omitted: int = 0,
) -> str:
    """One self-contained HTML page of the frame-log ``records`` (and the ``matrix`` of
    ``chaosproxy matrix``, when given). Only the newest ``limit`` requests are drawn;
    ``omitted`` counts requests already left out of ``records`` (by :func:`load_newest`).
    Each record is checked first (:func:`~chaosproxy.observe.reading.check_line`): one
    that is no line of the log is left out, and the page says so."""
    _, dropped, folded = _group(records, limit)
    page = _page(folded, omitted + dropped, matrix, title=title, gap_ms=gap_ms, stall_ms=stall_ms)
    return "".join(page)


def write_report(
    path: str | Path,
    out: TextSink,
    matrix: Mapping[str, Any] | None = None,
    *,
    limit: int | None = DEFAULT_LIMIT,
    title: str = "chaosproxy report",
    gap_ms: float = GAP_MS,
    stall_ms: float = STALL_MS,
) -> None:
    """The page of a LOG file or a TRACE_DIR (as :func:`load_records` reads them), written
    to ``out``: the same page as ``render_report(load_records(path), matrix, limit=…)``,
    in memory bounded by the requests it draws, not by the log. The log is read twice,
    line by line: once for the request ids, once for the lines of the newest ``limit``
    requests, of which only what the page draws is kept (a time, a size and a flag per
    write; a drawn mark's details are read back from its line). Lines that are no
    record of the log are left out, and the page says how many and why. Raises
    :class:`ReportError` when nothing can be drawn, OSError when the path cannot be
    read."""
    files = _files(path)
    keep, omitted = _newest(files, limit)
    with _LogReader(files) as reader:
        folded = _Requests(reader.line, keep)
        if folded.unread.nothing(reader.fold(folded, keep)):
            raise _not_json(path)
        for part in _page(folded, omitted, matrix, title=title, gap_ms=gap_ms, stall_ms=stall_ms):
            out.write(part)


def _page(
    folded: _Requests,
    omitted: int,
    matrix: Mapping[str, Any] | None,
    *,
    title: str,
    gap_ms: float,
    stall_ms: float,
) -> Iterator[str]:
    """The page of the ``folded`` requests (and their rejected and unread lines), in
    parts (one request's section at a time)."""
    requests = list(folded.requests.values())
    rejected_count, unread = folded.rejected_count, folded.unread
    by_request: dict[str, Mapping[str, Any]] = {}
    for result in _list((matrix or {}).get("results")):
        if isinstance(result, dict) and isinstance(result.get("request_id"), str):
            by_request[result["request_id"]] = result
    anchors = {req.request_id: i for i, req in enumerate(requests, 1)}
    total = len(requests) + omitted
    summary = (
        f"{total} request{'s' if total != 1 else ''}"
        + (f"; of the newest {len(requests)}:" if omitted else "")
        + f" · outcomes: {_counts(r.end['outcome'] for r in requests if r.end)}"
        f" · integrity: {_counts(_integrity(r, by_request.get(r.request_id)) for r in requests)}"
        f" · verdicts: {_counts(_verdict(r, by_request.get(r.request_id)) for r in requests)}"
        f" · violations: {sum(r.violation_count for r in requests)}"
        f" · rejected: {rejected_count}"
    )
    gaps = [b - a for r in requests for a, b in itertools.pairwise(r.times)]
    typical = f" (median gap between writes {statistics.median(gaps):.1f} ms)" if gaps else ""
    del gaps
    head = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="summary">{summary}</p>',
        f'<p class="summary">Gaps of {gap_ms:.0f} ms or more are shaded, stalls of '
        f"{stall_ms:.0f} ms or more in red{typical}.</p>",
        _legend(),
    ]
    if omitted:
        head.append(
            f'<p class="note">Showing the newest {len(requests)} of {total} requests; '
            f"{omitted} older ones are left out (raise --limit to see more).</p>"
        )
    frameless = requests and not any(r.sizes for r in requests)
    if frameless and any(r.end is not None and r.end["frames"] > 0 for r in requests):
        head.append(
            '<p class="note">This log has no frame lines (it was written with '
            "<code>--log-level requests</code>): each request shows the bytes and writes "
            "its <code>response_end</code> counted, without a timeline of its writes.</p>"
        )
    if unread.count:
        more = unread.count - len(unread.first)
        head.append(
            f'<p class="note">{unread.count} line{"s" if unread.count != 1 else ""} of the log '
            "could not be read as frame-log lines and "
            f"{'are' if unread.count != 1 else 'is'} left out: "
            + "; ".join(_e(u) for u in unread.first)
            + (f"; and {more} more" if more else "")
            + ".</p>"
        )
    if matrix is not None:
        head.append(_matrix_section(matrix, anchors))
    if requests:
        head.append("<h1>Requests</h1>")
    yield (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n" + "\n".join(head)
    )
    for index, req in enumerate(requests, 1):
        yield "\n" + _request_section(index, req, by_request.get(req.request_id), gap_ms, stall_ms)
    if rejected_count:
        rows = "".join(
            f"<tr><td>{_e(r['ts'], 40)}</td><td>{_e(r['status'], 10)}</td>"
            f"<td>{_e(r['reason'])}</td><td>{_e(r['peer'], 80)}</td></tr>"
            for r in list(folded.rejected)[-MAX_REJECTED:]
        )
        yield (
            f'\n<section class="rejected"><h1>Rejected ({rejected_count})</h1>'
            "<table><tr><th>time</th><th>status</th><th>reason</th><th>peer</th></tr>"
            f"{rows}</table></section>"
        )
    yield "\n</body></html>\n"


__all__ = [
    "DEFAULT_LIMIT",
    "GAP_MS",
    "STALL_MS",
    "ReportError",
    "group_requests",
    "load_newest",
    "load_records",
    "render_report",
    "write_report",
]
