"""``chaosproxy report``: render_report on built records (exact geometry, labels,
escaping, no network), load_records, the CLI, and a real proxy run over library
scenarios whose report is opened in headless Chromium and read through its DOM."""

from __future__ import annotations

import argparse
import itertools
import os
import re
import struct
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy.cli.main import build_parser, main
from chaosproxy.control.api import ChaosProxy
from chaosproxy.tools.report import (
    BOTTOM,
    HEIGHT,
    LEFT,
    MAX_MARKS,
    RIGHT,
    TOP,
    WIDTH,
    ReportError,
    load_newest,
    load_records,
    render_report,
)
from tests.support.browser import Chromium, chromium_path
from tests.support.cli import chaosproxy_argv
from tests.support.properties import examples
from tests.support.scripted_upstream import until

__all__ = ["chromium_path"]  # the fixture, imported for the browser test

REPO = Path(__file__).resolve().parents[2]
PLOT_W = WIDTH - LEFT - RIGHT
BASE = HEIGHT - BOTTOM  # the y of zero bytes


# ----------------------------------------------------------------------- building records


def ts(ms: float) -> str:
    """An ISO timestamp ``ms`` after 12:00:00.000 (the log's ``ts`` format)."""
    seconds, millis = divmod(int(ms), 1000)
    return f"2026-01-01T12:{seconds // 60:02d}:{seconds % 60:02d}.{millis:03d}Z"


#: A write of a stream: ``(t_ms, size, kinds, faults)``.
Write = tuple[float, int, list[str], list[str]]


def stream(
    rid: str,
    writes: list[Write],
    *,
    scenario: str = "s",
    cut: tuple[float, str] | None = None,
    outcome: str = "completed",
    duration_ms: float | None = None,
    extra_end: dict[str, Any] | None = None,
    path: str = "/v1/chat/completions",
) -> list[dict[str, Any]]:
    """The lines of one request, as the proxy logs them (each of its record in
    chaosproxy/core/records.py): writes are ``(t_ms, size, kinds, faults)``."""
    lines: list[dict[str, Any]] = [
        {
            "event": "request",
            "request_id": rid,
            "scenario": scenario,
            "seed": 7,
            "method": "POST",
            "path": path,
            "ts": ts(0),
        }
    ]
    offset = 0
    for seq, (t, size, kinds, faults) in enumerate(writes):
        lines.append(
            {
                "event": "frame",
                "request_id": rid,
                "scenario": scenario,
                "seq": seq,
                "offset": offset,
                "size": size,
                "t_ms": t,
                "events": [seq + 1],
                "kinds": kinds,
                "faults": faults,
                "ts": ts(t),
            }
        )
        offset += size
    if cut is not None:
        at, how = cut
        lines.append(
            {
                "event": "action",
                "request_id": rid,
                "scenario": scenario,
                "action": "cut",
                "how": how,
                "fault": "cut",
                "after_event": len(writes),
                "ts": ts(at),
            }
        )
    end = duration_ms if duration_ms is not None else max((w[0] for w in writes), default=0)
    lines.append(
        {
            "event": "response_end",
            "request_id": rid,
            "scenario": scenario,
            "outcome": outcome,
            "status": 200,
            "bytes": offset,
            "frames": len(writes),
            "duration_ms": end,
            "faults_applied": {},
            **(extra_end or {}),
            "ts": ts(end),
        }
    )
    return lines


D = ["delta"]
SIMPLE: list[Write] = [(10.0, 100, ["start"], []), (20.0, 50, D, []), (30.0, 25, ["terminal"], [])]


def points(page: str, nth: int = 0) -> list[tuple[float, float]]:
    found = re.findall(r'<polyline class="bytes" data-bytes="\d+" points="([^"]*)"', page)
    return [(float(x), float(y)) for x, y in (p.split(",") for p in found[nth].split())]


def sections(page: str) -> list[str]:
    return re.findall(r'<section class="request".*?</section>', page, flags=re.S)


# ------------------------------------------------------------------------ render_report


def test_one_section_and_one_svg_per_request_in_order() -> None:
    records = stream("r-1", SIMPLE) + stream("r-2", SIMPLE[:1]) + stream("r-3", [])
    page = render_report(records)
    assert page.startswith("<!doctype html>")
    assert page.count("<svg") == page.count("</svg>") == 3
    assert re.findall(r'data-request-id="([^"]*)"', page) == ["r-1", "r-2", "r-3"]
    assert [s.count("<svg") for s in sections(page)] == [1, 1, 1]
    assert 'id="req-1"' in page and 'id="req-3"' in page


def test_the_bytes_step_line_ends_at_the_sum_of_the_frame_sizes() -> None:
    page = render_report(stream("r-1", SIMPLE, duration_ms=40.0))
    assert 'data-total-bytes="175"' in page and 'data-bytes="175"' in page
    pts = points(page)
    # From (0 ms, 0 B) to (the end, every byte): the top of the plot at its right edge.
    assert pts[0] == (LEFT, BASE)
    assert pts[-1] == (LEFT + PLOT_W, TOP)
    # A step per write: a vertical rise at the write's time, by its size.
    scale_y = (BASE - TOP) / 175
    rises = [(a, b) for a, b in itertools.pairwise(pts) if a[0] == b[0] and a[1] != b[1]]
    assert [round(b[0], 1) for _, b in rises] == [
        round(LEFT + PLOT_W * t / 40.0, 1) for t in (10, 20, 30)
    ]
    assert [round((a[1] - b[1]) / scale_y) for a, b in rises] == [100, 50, 25]
    # The y axis says the total.
    assert ">175 B</text>" in page


def test_marks_are_coloured_by_kind_with_precedence() -> None:
    writes: list[Write] = [
        (1.0, 1, ["start"], []),
        (2.0, 1, ["delta"], []),
        (3.0, 1, ["tool_delta"], []),
        (4.0, 1, ["usage"], []),
        (5.0, 1, [], []),
        (6.0, 1, ["error"], []),
        (7.0, 1, ["delta", "terminal"], []),  # coalesced: the terminal wins
    ]
    page = render_report(stream("r-1", writes))
    kinds = re.findall(r'<circle class="mark kind-(\w+)', page)
    assert kinds == ["start", "delta", "tool", "other", "other", "error", "terminal"]


def test_faulted_writes_are_highlighted_and_labelled() -> None:
    writes: list[Write] = [
        (10.0, 10, D, []),
        (20.0, 10, D, ["duplicate"]),
        (30.0, 10, D, ["reorder", "delay"]),
        (40.0, 10, ["terminal"], []),
    ]
    page = render_report(stream("r-1", writes))
    assert len(re.findall(r'class="mark kind-delta faulted"', page)) == 2
    labels = re.findall(r'<text class="fault-label"[^>]*>([^<]*)</text>', page)
    assert labels == ["duplicate", "reorder, delay"]
    assert "faults duplicate</title>" in page


def test_the_cut_is_marked_where_and_how_it_happened() -> None:
    writes: list[Write] = [(100.0, 10, D, []), (400.0, 10, D, [])]
    page = render_report(
        stream("r-1", writes, cut=(500.0, "reset"), outcome="cut", duration_ms=600.0)
    )
    x = f"{LEFT + PLOT_W * 500 / 600:.1f}"
    assert f'<line class="cut" x1="{x}" y1="{TOP - 4}" x2="{x}" y2="{BASE}">' in page
    assert "cut: reset</text>" in page and "<title>cut (reset) after event 2</title>" in page
    assert "end: cut at 600 ms</text>" in page
    assert 'class="pill outcome-cut"' in page


def test_a_cut_and_faults_not_as_asked_say_what_was_asked_and_why() -> None:
    """A cut that fell back to the boundary says so on its mark and in the request's
    facts, as does a fault that was skipped; a cut inside a character names where."""
    writes: list[Write] = [(100.0, 10, D, []), (400.0, 10, D, [])]
    why = "the event has no multi-byte UTF-8 character"
    fell_back = {"position": "boundary", "requested": "mid_utf8", "fallback": why}
    skipped = {"fault": "comment", "position": 1, "reason": "NDJSON has no comment syntax"}
    fallback = {
        "fault": "cut",
        "position": 0,
        "requested": "mid_utf8",
        "actual": "boundary",
        "reason": why,
    }
    lines = stream(
        "r-1",
        writes,
        cut=(500.0, "abort"),
        outcome="cut",
        extra_end={"faults_skipped": [skipped], "faults_fallback": [fallback]},
    )
    [cut] = [x for x in lines if x["event"] == "action"]
    cut.update(fell_back)
    inside = stream("r-2", writes, cut=(500.0, "abort"), outcome="cut")
    [other] = [x for x in inside if x["event"] == "action"]
    other["position"] = "mid_utf8"
    page = render_report(lines + inside)
    assert (
        f"<title>cut (abort) after event 2, at the boundary instead of mid_utf8: {why}</title>"
    ) in page
    assert "<title>cut (abort) after event 2, mid_utf8</title>" in page
    assert f"fell back <b>cut at boundary instead of mid_utf8: {why}</b>" in page
    assert "skipped <b>comment: NDJSON has no comment syntax</b>" in page


def test_gaps_and_stalls_are_shaded() -> None:
    writes: list[Write] = [
        (10.0, 1, D, []),
        (20.0, 1, D, []),
        (220.0, 1, D, []),
        (1020.0, 1, D, []),
    ]
    page = render_report(stream("r-1", writes, duration_ms=1030.0))
    shaded = re.findall(r'<rect class="(gap|stall)" x="([\d.]+)"[^>]*><title>([^<]*)', page)
    assert [(cls, title) for cls, _, title in shaded] == [
        ("gap", "gap 200 ms (20 ms → 220 ms)"),
        ("stall", "stall 800 ms (220 ms → 1020 ms)"),
    ]
    assert float(shaded[0][1]) == pytest.approx(LEFT + PLOT_W * 20 / 1030, abs=0.05)


def test_integrity_violations_and_verdict_are_shown_when_logged() -> None:
    records = stream(
        "r-1",
        SIMPLE,
        extra_end={
            "integrity": "altered",
            "text_sha256": {"upstream": "ab" * 32, "sent": "cd" * 32},
        },
    )
    records += [
        {
            "event": "violation",
            "request_id": "r-1",
            "scenario": "s",
            "side": "sent",
            "rule": "duplicate_id",
            "at_event": 4,
            "ts": ts(31),
        },
        {
            "event": "violation",
            "request_id": "r-1",
            "scenario": "s",
            "side": "upstream",
            "rule": "terminal_missing",
            "at_event": 9,
            "ts": ts(31),
        },
        {
            "event": "verdict",
            "request_id": "r-1",
            "verdict": "silent_corruption",
            "integrity": "altered",
            "content": "altered",
            "reason": "accepted a duplicated delta",
            "text_matches": False,
            "ts": ts(40),
        },
    ]
    page = render_report(records)
    assert 'class="pill integrity-altered"' in page
    assert 'class="pill verdict-silent_corruption"' in page
    assert "<h3>violations (2)</h3>" in page
    assert "<tr><td>sent</td><td>duplicate_id</td><td>4</td></tr>" in page
    assert "<tr><td>upstream</td><td>terminal_missing</td><td>9</td></tr>" in page
    assert '<td class="verdict verdict-silent_corruption">silent_corruption</td>' in page
    assert "accepted a duplicated delta" in page
    assert "(differs)" in page
    # None of it is required: a plain log has none of these and still renders.
    plain = render_report(stream("r-1", SIMPLE))
    assert "violations (" not in plain and "<h3>verdict</h3>" not in plain


MATRIX: dict[str, Any] = {
    "client": "python examples/clients/openai_python.py",
    "upstream": "mock",
    "results": [
        {
            "scenario": "duplicate-third-delta",
            "verdict": "silent_corruption",
            "integrity": "altered",
            "reason": "accepted",
            "request_id": "r-1",
            "requests": ["r-1"],
            "exit_code": 0,
            "duration_ms": 812.0,
            "text_matches": False,
        },
        {
            "scenario": "cut-before-terminal-reset",
            "verdict": "detected",
            "integrity": "broken",
            "reason": "raised",
            "request_id": "r-9",
            "requests": ["r-8", "r-9"],
            "exit_code": 1,
            "duration_ms": 700.0,
            "text_matches": False,
        },
        {
            "scenario": "throttled-stream",
            "verdict": "tolerated",
            "integrity": "intact",
            "reason": "",
            "request_id": None,
            "requests": [],
            "exit_code": 0,
            "duration_ms": 90.0,
            "text_matches": True,
        },
    ],
    "counts": {"silent_corruption": 1, "detected": 1, "tolerated": 1},
    "failed": True,
}


def test_the_matrix_is_a_table_with_a_class_per_verdict() -> None:
    page = render_report(stream("r-1", SIMPLE), MATRIX)
    cells = re.findall(r'<td class="verdict verdict-(\w+)">(\w+)</td>', page)
    # The matrix rows, then the request's own verdict table (taken from the matrix).
    assert cells[:3] == [
        ("silent_corruption", "silent_corruption"),
        ("detected", "detected"),
        ("tolerated", "tolerated"),
    ]
    assert re.findall(r'<tr data-scenario="([^"]*)">', page) == [
        "duplicate-third-delta",
        "cut-before-terminal-reset",
        "throttled-stream",
    ]
    assert '<a href="#req-1">r-1</a>' in page  # in the report: linked
    assert "r-9 <small>(also r-8)</small>" in page  # a retry: the others listed
    assert "gate: FAILED" in page
    assert "silent_corruption: 1, detected: 1, tolerated: 1" in page
    section = sections(page)[0]
    assert 'class="pill verdict-silent_corruption"' in section


def test_the_matrix_says_the_answer_as_matrix_md_does_and_the_bytes_apart() -> None:
    """A tolerated row whose bytes were altered (CRLF endings, say) reads ``intact`` in
    the answer column, as in matrix.md; the bytes' integrity has its own column."""
    row = {**MATRIX["results"][2], "content": "intact", "integrity": "altered"}
    page = render_report(stream("r-1", SIMPLE), {**MATRIX, "results": [row]})
    assert "<th>answer</th><th>bytes</th>" in page
    assert (
        '<td class="verdict verdict-tolerated">tolerated</td><td>\u2013</td><td>intact</td>'
        "<td>altered</td>"
    ) in page


def test_an_event_never_sent_is_marked_where_it_was_missed() -> None:
    """A dropped event leaves no write: the byte line gets a mark at the write after
    which it was missed; an event sent late (reordered) leaves none."""
    writes: list[Write] = [
        (10.0, 10, D, []),
        (20.0, 10, D, []),
        (30.0, 10, D, []),
        (40.0, 10, D, []),
    ]
    lines = stream("r-1", writes)
    frames = [line for line in lines if line["event"] == "frame"]
    for line, events in zip(frames, ([1], [2], [4], [5]), strict=True):
        line["events"] = events  # (event 3 dropped)
    page = render_report(lines)
    marks = re.findall(r'<path class="unsent" data-events="([^"]*)" d="M([\d.]+),', page)
    x = LEFT + PLOT_W * 30 / 40
    assert marks == [("3", f"{x - 4:.1f}")]
    assert "upstream event 3 never sent to the client, where later ones were" in page
    for line, events in zip(frames, ([1], [3], [2], [4]), strict=True):
        line["events"] = events  # (2 and 3 swapped: both sent)
    assert 'class="unsent"' not in render_report(lines)


def test_the_newest_requests_are_kept_under_the_limit() -> None:
    records = [line for n in range(1, 11) for line in stream(f"r-{n}", SIMPLE)]
    page = render_report(records, limit=3)
    assert re.findall(r'data-request-id="([^"]*)"', page) == ["r-8", "r-9", "r-10"]
    assert "Showing the newest 3 of 10 requests; 7 older ones are left out" in page
    assert "10 requests" in page
    assert "Showing the newest" not in render_report(records, limit=10)


def test_a_long_stream_has_its_marks_thinned_but_every_byte_counted() -> None:
    writes: list[Write] = [(float(i), 3, D, ["delay"] if i == 4321 else []) for i in range(20_000)]
    page = render_report(stream("r-1", writes))
    marks = page.count("<circle")
    assert MAX_MARKS // 2 < marks <= MAX_MARKS + 2
    assert 'data-seq="4321"' in page  # a faulted write is always drawn
    assert 'data-bytes="60000"' in page and points(page)[-1] == (LEFT + PLOT_W, TOP)
    assert len(page) < 2_000_000


HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "</svg></section><iframe src=https://evil.example/>",
    "javascript:alert(3)",
    "' onmouseover='alert(4)",
]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.extend(attrs)


def parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    return parser


def test_hostile_strings_are_escaped_everywhere() -> None:
    bad = " | ".join(HOSTILE)
    records = stream(
        bad,
        [(1.0, 5, [bad], [bad]), (2.0, 5, D, [])],
        scenario=bad,
        path="/v1/x?q=" + bad,
        cut=(3.0, bad),
        outcome=bad,
        extra_end={"reason": bad, "integrity": bad, "text_sha256": {"upstream": bad}},
    )
    records += [
        {"event": "violation", "request_id": bad, "side": bad, "rule": bad, "at_event": bad},
        {"event": "verdict", "request_id": bad, "verdict": bad, "integrity": bad, "reason": bad},
        {"event": "rejected", "status": 400, "reason": bad, "peer": bad, "ts": bad},
        {"event": bad, "request_id": bad},
    ]
    matrix = {
        "client": bad,
        "upstream": bad,
        "results": [{"scenario": bad, "verdict": bad, "request_id": bad, "reason": bad}],
        "counts": {bad: 1},
        "failed": True,
    }
    page = render_report(records, matrix, title=bad)
    tags = parse(page)
    assert tags.tags <= {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "h1",
        "h2",
        "h3",
        "p",
        "span",
        "b",
        "i",
        "code",
        "small",
        "section",
        "div",
        "svg",
        "rect",
        "line",
        "text",
        "polyline",
        "circle",
        "table",
        "tr",
        "th",
        "td",
        "a",
    }
    assert not [name for name, _ in tags.attrs if name.startswith("on")]
    for value in HOSTILE:
        if set(value) & set("<>\"'"):  # markup: only ever escaped
            assert value not in page
    # Text, never a link: the only hrefs are the report's own anchors.
    assert all((v or "").startswith("#req-") for name, v in tags.attrs if name == "href")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # A verdict, an outcome, a side or a rule is one of a few words: a line with another
    # is not read (its record says so), and the page says which and why, escaped.
    assert "4 lines of the log could not be read as frame-log lines" in page
    assert (
        "record 5: response_end line: outcome &#x27;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    )
    assert "record 9: unknown event &#x27;&lt;script&gt;" in page
    # The matrix is a file of any shape: a hostile verdict there is never a class name.
    assert "verdict-unknown" in page
    assert re.findall(r'data-request-id="([^"]*)"', page) == [
        bad.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#x27;")
    ]


def test_no_network_references_and_no_script() -> None:
    records = stream("r-1", SIMPLE, path="/v1/chat?next=https://example.com/a.png")
    page = render_report(records, MATRIX | {"upstream": "https://api.openai.com"})
    tags = parse(page)
    assert "script" not in tags.tags and "img" not in tags.tags and "link" not in tags.tags
    refs = [v or "" for name, v in tags.attrs if name in {"src", "href", "xlink:href", "srcset"}]
    assert refs and all(ref.startswith("#req-") for ref in refs)
    assert "url(" not in page and "@import" not in page and "@font-face" not in page
    assert "content=\"default-src 'none'; style-src 'unsafe-inline'\"" in page


def test_rejected_lines_are_listed() -> None:
    records = [
        {
            "event": "rejected",
            "status": 400,
            "reason": "malformed head",
            "peer": "127.0.0.1:5",
            "ts": ts(0),
        },
        *stream("r-1", SIMPLE),
    ]
    page = render_report(records)
    assert "<h1>Rejected (1)</h1>" in page and "malformed head" in page
    assert "rejected: 1" in page


# ------------------------------------------------------------------------ load_records


def write_lines(path: Path, lines: list[dict[str, Any]], junk: str = "") -> None:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines) + junk.encode())


def test_load_records_from_a_log_and_from_a_trace_dir(tmp_path: Path) -> None:
    log = tmp_path / "frames.jsonl"
    write_lines(log, stream("r-1", SIMPLE), junk="not json\n\n[1, 2]\n")
    assert [r["event"] for r in load_records(log)] == [
        "request",
        "frame",
        "frame",
        "frame",
        "response_end",
    ]
    traces = tmp_path / "traces"
    traces.mkdir()
    for n in (10, 2, 1):
        write_lines(traces / f"r-{n}.jsonl", stream(f"r-{n}", SIMPLE[:1]))
    (traces / "notes.txt").write_text("ignored")
    ids = [r["request_id"] for r in load_records(traces) if r["event"] == "request"]
    assert ids == ["r-1", "r-2", "r-10"]  # natural order


def test_load_newest_keeps_only_the_newest_requests(tmp_path: Path) -> None:
    log = tmp_path / "frames.jsonl"
    rejected = {"event": "rejected", "status": 400, "reason": "bad head", "peer": "p", "ts": ts(1)}
    # Interleaved, as concurrent requests are; an id with an escaped quote.
    lines = [*stream("r-1", SIMPLE), rejected, *stream('r-"2"', SIMPLE), *stream("r-3", SIMPLE)]
    lines.insert(2, stream("r-3", SIMPLE)[0])  # r-3 starts before r-2
    write_lines(log, lines)
    records, omitted = load_newest(log, 2)
    assert omitted == 1
    assert {r.get("request_id") for r in records} == {"r-3", 'r-"2"', None}
    assert rejected in records
    page = render_report(records, limit=2, omitted=omitted)
    assert re.findall(r'data-request-id="([^"]*)"', page) == ["r-3", "r-&quot;2&quot;"]
    assert "Showing the newest 2 of 3 requests; 1 older ones are left out" in page
    assert "3 requests; of the newest 2:" in page
    assert load_newest(log, 5) == (load_records(log), 0)


def test_load_records_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_records(tmp_path / "missing.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match=r"no \*\.jsonl trace files"):
        load_records(tmp_path / "empty")
    console = tmp_path / "console.log"
    console.write_text("2026-01-01 request r-1 scenario=x\n")
    with pytest.raises(ReportError, match="--log-format json"):
        load_records(console)


def test_lines_that_are_no_record_are_left_out_and_the_page_says_why(tmp_path: Path) -> None:
    log = tmp_path / "frames.jsonl"
    lines = stream("r-1", SIMPLE)
    edited = {**lines[2], "size": "50"}  # hand-edited: a required key of the wrong type
    newer = {**lines[-1], "outcome": "timeout"}  # a later version's outcome
    write_lines(log, [*lines[:2], edited, lines[3], newer], junk='{"event":"frame","seq":')
    out = tmp_path / "report.html"
    assert main(["report", str(log), "-o", str(out)]) == 0
    page = out.read_text()
    note = re.findall(r'<p class="note">([^<]*)</p>', page)
    assert note == [
        "3 lines of the log could not be read as frame-log lines and are left out: "
        f"{log}:3: frame line: size &#x27;50&#x27;: Input should be a valid integer; "
        f"{log}:5: response_end line: outcome &#x27;timeout&#x27;: Input should be "
        "&#x27;completed&#x27;, &#x27;cut&#x27;, &#x27;client_gone&#x27;, &#x27;upstrea…; "
        f"{log}:6: not JSON (EOF while parsing a value at line 1 column 23)."
    ]
    assert 'data-total-bytes="125"' in page  # the two frames read
    assert load_records(log) == [*lines[:2], lines[3]]
    # Only JSON objects that are no record (a hand-written log): a page that says why.
    write_lines(log, [edited])
    assert load_records(log) == []
    assert main(["report", str(log), "-o", str(out)]) == 0
    assert f"{log}:1: frame line: size &#x27;50&#x27;" in out.read_text()


# ------------------------------------------------------------------------------- CLI


def test_report_options_have_help_text() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    report = sub.choices["report"]
    missing = [
        a.option_strings or [a.dest]
        for a in report._actions
        if not isinstance(a, argparse._HelpAction) and not a.help
    ]
    assert missing == []


def test_cli_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "frames.jsonl"
    write_lines(log, [line for n in range(1, 5) for line in stream(f"r-{n}", SIMPLE)])
    matrix = tmp_path / "matrix.json"
    matrix.write_bytes(orjson.dumps(MATRIX))
    out = tmp_path / "report.html"
    assert main(["report", str(log), "-o", str(out), "--matrix", str(matrix), "--limit", "2"]) == 0
    page = out.read_text()
    assert re.findall(r'data-request-id="([^"]*)"', page) == ["r-3", "r-4"]
    assert "Library matrix" in page
    assert capsys.readouterr().err == f"chaosproxy: wrote {out}\n"
    assert main(["report", str(log), "-o", "-", "--limit", "0"]) == 0
    assert capsys.readouterr().out.count("<svg") == 4


def test_a_log_without_frame_lines_shows_the_counts_of_response_end(tmp_path: Path) -> None:
    """``--log-level requests`` keeps every line but the frame lines: the report says
    so, and takes each response's bytes and writes from its ``response_end``."""
    log = tmp_path / "requests.jsonl"
    with ChaosProxy(log=str(log), log_level="requests", mock_interval=0.001) as proxy:
        for scenario in ("one-event-per-read", "duplicate-third-delta"):
            with proxy.scenario(scenario):
                httpx.post(
                    proxy.url + "/v1/chat/completions",
                    json={"model": "m", "stream": True, "messages": []},
                ).raise_for_status()
        ends = proxy.requests()
    lines = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert not [line for line in lines if line["event"] == "frame"]
    out = tmp_path / "report.html"
    assert main(["report", str(log), "-o", str(out)]) == 0
    page = out.read_text()
    assert "This log has no frame lines" in page and "--log-level requests" in page
    for end in ends:
        assert f"{end['bytes']} (from response_end)" in page
        assert f"{end['frames']} (from response_end)" in page
    # A log with its frame lines says nothing of the kind.
    write_lines(log, [line for n in range(1, 3) for line in stream(f"r-{n}", SIMPLE)])
    assert main(["report", str(log), "-o", str(out)]) == 0
    assert "no frame lines" not in out.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["/nonexistent/frames.jsonl"],
            "chaosproxy: error: /nonexistent/frames.jsonl: No such file",
        ),
        (
            ["LOG", "-o", "/nonexistent/dir/r.html"],
            "chaosproxy: error: /nonexistent/dir/r.html: No such file",
        ),
        (
            ["LOG", "--matrix", "/nonexistent/m.json"],
            "chaosproxy: error: /nonexistent/m.json: No such file",
        ),
        (["LOG", "--matrix", "LOG"], "chaosproxy: error: LOG: not JSON"),
        (["LOG", "--limit", "-1"], "chaosproxy: error: --limit must be >= 0"),
        (["LOG", "--limit", "x"], "chaosproxy report: error: argument --limit: invalid int value"),
    ],
)
def test_cli_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    log = tmp_path / "frames.jsonl"
    write_lines(log, stream("r-1", SIMPLE))
    argv = [str(log) if a == "LOG" else a for a in args]
    result = subprocess.run(
        [*chaosproxy_argv(), "report", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].replace(str(log), "LOG").startswith(message)


# --------------------------------------------------- a real proxy, the CLI, and Chromium

#: Library scenarios run through the proxy, and what the client saw.
LIVE = [
    "cut-before-terminal-reset",
    "duplicate-third-delta",
    "stall-mid-stream",
    "reverse-two-deltas",
    "error-mid-stream",
    "service-unavailable",
]


async def run_library(tmp_path: Path) -> dict[str, tuple[str, bool]]:
    """Each LIVE scenario once through a proxy logging to a file and a trace dir:
    scenario -> (request id, whether the client's read raised)."""
    seen: dict[str, tuple[str, bool]] = {}
    async with ChaosProxy(
        log=str(tmp_path / "frames.jsonl"),
        trace_dir=tmp_path / "traces",
        mock_tokens=8,
        mock_interval=0.01,
        grace=0,
    ) as proxy:
        async with aiohttp.ClientSession() as http:
            for scenario in LIVE:
                body = {
                    "model": "gpt-4o",
                    "stream": True,
                    "messages": [{"role": "user", "content": "hi"}],
                }
                raised = False
                try:
                    async with http.post(
                        proxy.url + "/v1/chat/completions",
                        json=body,
                        headers={"X-Chaos-Scenario": scenario},
                    ) as response:
                        rid = response.headers["X-Chaos-Request-Id"]
                        await response.read()
                except aiohttp.ClientPayloadError:
                    raised = True
                seen[scenario] = (rid, raised)
        # The client has the last byte a moment before the proxy logs the end.
        await until(lambda: sum(x["event"] == "response_end" for x in proxy.lines) == len(LIVE))
    return seen


#: What each LIVE scenario does to the stream's content.
INTEGRITY = {
    "cut-before-terminal-reset": "broken",
    "duplicate-third-delta": "altered",
    "stall-mid-stream": "intact",
    "reverse-two-deltas": "altered",
    "error-mid-stream": "altered",
    "service-unavailable": None,
}


def verdict_of(scenario: str, raised: bool) -> str:
    if scenario == "service-unavailable":
        return "detected"  # a 503 status, which the client checks
    if INTEGRITY[scenario] == "intact":
        return "false_alarm" if raised else "tolerated"
    return "detected" if raised else "silent_corruption"


def report_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*chaosproxy_argv(), "report", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


@pytest.mark.browser
async def test_a_live_run_reported_and_read_in_chromium(chromium_path: str, tmp_path: Path) -> None:
    seen = await run_library(tmp_path)
    ids = [rid for rid, _ in seen.values()]
    assert seen["cut-before-terminal-reset"][1]  # the reset reached the client

    # A matrix.json as `chaosproxy matrix` writes it, for this raw aiohttp client: it
    # raises only on the reset, so every altered stream went through unnoticed (sample
    # input: the report only draws it).
    verdicts = {s: verdict_of(s, raised) for s, (_, raised) in seen.items()}
    matrix = {
        "client": "aiohttp (raw)",
        "upstream": "mock",
        "results": [
            {
                "scenario": s,
                "verdict": verdicts[s],
                "integrity": INTEGRITY[s],
                "reason": "raised" if raised else "accepted",
                "request_id": rid,
                "requests": [rid],
                "exit_code": int(raised),
                "duration_ms": 1.0,
                "text_matches": not raised and INTEGRITY[s] == "intact",
            }
            for s, (rid, raised) in seen.items()
        ],
        "counts": dict(Counter(verdicts.values())),
        "failed": True,
    }
    (tmp_path / "matrix.json").write_bytes(orjson.dumps(matrix))
    html_path = tmp_path / "report.html"
    done = report_cli(
        str(tmp_path / "frames.jsonl"),
        "-o",
        str(html_path),
        "--matrix",
        str(tmp_path / "matrix.json"),
    )
    assert done.returncode == 0, done.stderr
    from_traces = report_cli(str(tmp_path / "traces"), "-o", str(tmp_path / "traces.html"))
    assert from_traces.returncode == 0, from_traces.stderr
    by_trace = (tmp_path / "traces.html").read_text()
    assert re.findall(r'data-request-id="([^"]*)"', by_trace) == ids

    # The log's own sums: what the step lines must end at.
    records = load_records(tmp_path / "frames.jsonl")
    sent = {
        rid: sum(r["size"] for r in records if r.get("request_id") == rid and r["event"] == "frame")
        for rid in ids
    }

    async with Chromium(executable=chromium_path, window_size=(1100, 1500)) as browser:
        page = await browser.open(html_path.as_uri())
        await page.wait_for("document.querySelectorAll('section.request svg').length >= 6")
        shown = await page.evaluate(
            """[...document.querySelectorAll('section.request')].map(s => ({
                id: s.dataset.requestId,
                svgs: s.querySelectorAll('svg.timeline').length,
                bytes: Number(s.querySelector('polyline.bytes').dataset.bytes),
                marks: s.querySelectorAll('circle.mark').length,
                faults: [...s.querySelectorAll('text.fault-label')].map(t => t.textContent),
                cuts: [...s.querySelectorAll('text.cut-label')].map(t => t.textContent),
                stalls: s.querySelectorAll('rect.stall').length,
                outcome: s.querySelector('.pill[class*=outcome-]').textContent,
                visible: s.getBoundingClientRect().height > 100,
            }))"""
        )
        cells = await page.evaluate(
            """[...document.querySelectorAll('table.matrix td.verdict')].map(td =>
                [td.parentElement.dataset.scenario, td.className, td.textContent])"""
        )
        png = await page.screenshot(full_page=False)
        assert page.errors == []
    by_id = {s["id"]: s for s in shown}
    assert [s["id"] for s in shown] == ids
    assert all(s["svgs"] == 1 and s["visible"] for s in shown)
    for rid in ids:
        assert by_id[rid]["bytes"] == sent[rid]
    cut = by_id[seen["cut-before-terminal-reset"][0]]
    assert cut["cuts"] == ["cut: reset"] and cut["outcome"] == "cut"
    assert by_id[seen["duplicate-third-delta"][0]]["faults"] == ["duplicate"]
    assert by_id[seen["reverse-two-deltas"][0]]["faults"] == ["reorder"]
    assert by_id[seen["stall-mid-stream"][0]]["stalls"] == 1
    assert by_id[seen["service-unavailable"][0]]["marks"] == 1
    assert cells == [[s, f"verdict verdict-{v}", v] for s, v in verdicts.items()]
    assert png_size(png) == (1100, 1500)


def test_the_docs_screenshot_is_a_small_png() -> None:
    png = (REPO / "docs" / "report.png").read_bytes()
    assert png_size(png)[0] >= 800
    assert len(png) < 300_000


@pytest.mark.browser
async def test_hostile_text_stays_text_in_chromium(chromium_path: str, tmp_path: Path) -> None:
    bad = (
        "<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>"
        "<svg onload='window.pwned = 3'></svg>\"'&amp;"
    )
    records = stream(bad, SIMPLE, scenario=bad, path="/v1/x?q=" + bad, outcome=bad)
    records.append({"event": "verdict", "request_id": bad, "verdict": bad, "reason": bad})
    html_path = tmp_path / "hostile.html"
    html_path.write_text(render_report(records, {"results": [{"scenario": bad}]}, title=bad))
    async with Chromium(executable=chromium_path) as browser:
        page = await browser.open(html_path.as_uri())
        seen = await page.evaluate(
            """({
                pwned: typeof window.pwned,
                foreign: document.querySelectorAll('script, img, iframe, object, embed').length,
                svgs: document.querySelectorAll('svg').length,
                id: document.querySelector('section.request').dataset.requestId,
                heading: document.querySelector('section.request h2').textContent,
                title: document.title,
                scenario: document.querySelector('tr[data-scenario]').dataset.scenario,
            })"""
        )
        assert page.errors == []
    assert seen == {
        "pwned": "undefined",
        "foreign": 0,
        "svgs": 1,
        "id": bad,
        "heading": bad,
        "title": bad,
        "scenario": bad,
    }


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
LOG_KEYS = [
    "event",
    "request_id",
    "t_ms",
    "size",
    "kinds",
    "faults",
    "events",
    "seq",
    "ts",
    "action",
    "how",
    "outcome",
    "duration_ms",
    "integrity",
    "text_sha256",
    "verdict",
    "side",
    "rule",
    "at_event",
    "status",
    "reason",
    "faults_applied",
]
LOG_LINES = st.lists(
    st.fixed_dictionaries(
        {
            "event": st.sampled_from(
                [
                    "request",
                    "frame",
                    "action",
                    "response_end",
                    "violation",
                    "verdict",
                    "rejected",
                    "x",
                ]
            ),
            "request_id": st.sampled_from(["r-1", "r-2"]) | JSON_VALUES,
        },
        optional={key: JSON_VALUES for key in LOG_KEYS[2:]},
    ),
    max_size=25,
)


RESULT_KEYS = ["scenario", "verdict", "integrity", "reason", "request_id", "requests",
               "exit_code", "duration_ms", "text_matches"]  # fmt: skip
MATRICES = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "results": st.lists(
            st.fixed_dictionaries(
                {}, optional={k: JSON_VALUES | st.sampled_from(["r-1", "r-2"]) for k in RESULT_KEYS}
            )
            | JSON_VALUES,
            max_size=4,
        ),
        "counts": JSON_VALUES,
        "failed": JSON_VALUES,
        "client": JSON_VALUES,
    },
)


@settings(max_examples=examples(150), deadline=None)
@given(records=LOG_LINES, matrix=MATRICES)
def test_any_log_lines_render(records: list[dict[str, Any]], matrix: dict[str, Any] | None) -> None:
    # Lines of any shape (other branches add fields; logs get edited): a page, never a crash.
    page = render_report(records, matrix, limit=1)
    assert page.endswith("</body></html>\n")
    assert page.count("<svg") == len(sections(page)) <= 1
