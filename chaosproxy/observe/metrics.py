"""Prometheus metrics, fed by the frame log (an observer), one registry per proxy.

Every number here is derived from frame-log lines, so the metrics can never disagree
with the log: ``request`` opens a request, each ``frame`` counts one write, and
``response_end`` gives the outcome, the faults and the timings. Each proxy has its own
:class:`~prometheus_client.CollectorRegistry` (never the global one), so several
proxies in one process (tests, the Python API) keep separate counts.

Counters are never reset (``POST /reset`` on the admin API forgets request history,
not metrics): Prometheus expects them to only grow.
"""

from __future__ import annotations

from typing import Any, Final, cast

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from chaosproxy.core.records import FrameFields, LogLine, ResponseEndLine
from chaosproxy.observe.logs import FrameObserver
from chaosproxy.observe.metrics_collector import (
    Counted,
    GuardCollector,
    Held,
    HistoryCollector,
    SentCollector,
)
from chaosproxy.scenario.selection import IGNORED_HEADER, IGNORED_MOCK, IGNORED_PATH, IGNORED_SEED

#: The ``scenario`` label of a request that selected no scenario.
NO_SCENARIO: Final = "none"
#: The ``what`` labels of ``chaosproxy_client_choices_ignored_total``.
IGNORABLE = (IGNORED_HEADER, IGNORED_SEED, IGNORED_PATH, IGNORED_MOCK)

#: Time to first byte: fast local upstreams to slow first tokens.
TTFB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Whole responses: streams last seconds to minutes.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

#: Upstream failures answered by the proxy itself before any body byte (502, 504).


class SentCount:
    """Writes to clients and their body bytes, of one scenario (native integers,
    counted per frame line; ``chaosproxy_frames_total``, ``chaosproxy_bytes_sent_total``)."""

    __slots__ = ("bytes", "frames")

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0


class Metrics(FrameObserver):
    """The proxy's metrics; call it with every frame-log line (``log.add_observer``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "chaosproxy_requests",
            "Requests answered, by scenario and outcome "
            "(completed, cut, client_gone, upstream_error, shutdown, proxy_error, "
            "worker_lost).",
            ["scenario", "outcome"],
            registry=r,
        )
        self.in_flight = Gauge(
            "chaosproxy_requests_in_flight", "Requests being answered now.", registry=r
        )
        self.faults_applied = Counter(
            "chaosproxy_faults_applied",
            "Times a fault acted, by scenario and fault.",
            ["scenario", "fault"],
            registry=r,
        )
        self.faults_skipped = Counter(
            "chaosproxy_faults_skipped",
            "Faults that could not apply to a response, by scenario and fault.",
            ["scenario", "fault"],
            registry=r,
        )
        # Frames and bytes are counted in plain integers (a frame line is the hot path)
        # and exposed as counters when scraped.
        self._sent: dict[str, SentCount] = {}
        r.register(SentCollector(self._sent))
        self.client_disconnects = Counter(
            "chaosproxy_client_disconnects",
            "Responses ended because the client went away (outcome client_gone).",
            ["scenario"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "chaosproxy_upstream_errors",
            "Upstream failures: stage=connect (unreachable, timed out or broken before "
            "the response) or stage=body (broke mid-body).",
            ["scenario", "stage"],
            registry=r,
        )
        self.contract_violations = Counter(
            "chaosproxy_contract_violations",
            "Breaches of the stream contract, by side (upstream: what the upstream sent; "
            "sent: what the client was sent) and rule (docs/integrity.md).",
            ["side", "rule"],
            registry=r,
        )
        self.client_choices_ignored = Counter(
            "chaosproxy_client_choices_ignored",
            "What clients asked for and were not given, clients not being trusted "
            "(--trust-client-scenarios no): what=header (X-Chaos-Scenario), seed "
            "(X-Chaos-Seed) or path (a /_chaos/NAME/ prefix, forwarded as sent).",
            ["what"],
            registry=r,
        )
        for what in IGNORABLE:  # at 0 from the start, so an alert can rely on them
            self.client_choices_ignored.labels(what)
        self.ttfb = Histogram(
            "chaosproxy_ttfb_seconds",
            "Time from the request to the first body byte written to the client.",
            ["scenario"],
            buckets=TTFB_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "chaosproxy_request_duration_seconds",
            "Time from the request to the end of its response.",
            ["scenario"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )

    def frame_json(self, context: dict[str, Any], fields: FrameFields, text: bytes) -> None:
        """A ``frame`` line, from its parts (the frame log's hook: no dict of the line)."""
        scenario = context.get("scenario") or NO_SCENARIO
        sent = self._sent.get(scenario)
        if sent is None:
            sent = self._sent[scenario] = SentCount()
        sent.frames += 1
        sent.bytes += fields["size"]

    def frame_plain(self, context: dict[str, Any], size: int, text: bytes) -> None:
        """The ``frame`` line of a plain write of ``size`` bytes (the frame log's hook:
        no dict of its fields)."""
        scenario = context.get("scenario") or NO_SCENARIO
        sent = self._sent.get(scenario)
        if sent is None:
            sent = self._sent[scenario] = SentCount()
        sent.frames += 1
        sent.bytes += size

    def frames_json(
        self, context: dict[str, Any], fields: list[FrameFields], texts: list[bytes]
    ) -> None:
        """A batch of ``frame`` lines, from their parts (the frame log's hook: no dict
        of a line)."""
        scenario = context.get("scenario") or NO_SCENARIO
        sent = self._sent.get(scenario)
        if sent is None:
            sent = self._sent[scenario] = SentCount()
        sent.frames += len(fields)
        for f in fields:
            sent.bytes += f["size"]

    def __call__(self, line: LogLine) -> None:
        if line["event"] == "frame":
            # (the line holds its context and its fields)
            self.frame_json(cast("dict[str, Any]", line), line, b"")
        elif line["event"] == "request":
            self.in_flight.inc()
            for what in line.get("client_choices_ignored", ()):
                self.client_choices_ignored.labels(what).inc()
        elif line["event"] == "response_end":
            self.in_flight.dec()
            self._end(line)
        elif line["event"] == "violation":
            self.contract_violations.labels(line["side"], line["rule"]).inc()

    def _end(self, line: ResponseEndLine) -> None:
        scenario = line["scenario"] or NO_SCENARIO
        outcome = line["outcome"]
        self.requests.labels(scenario, outcome).inc()
        for fault, count in line.get("faults_applied", {}).items():
            self.faults_applied.labels(scenario, fault).inc(count)
        for skipped in line.get("faults_skipped", ()):
            self.faults_skipped.labels(scenario, skipped["fault"]).inc()
        if outcome == "client_gone":
            self.client_disconnects.labels(scenario).inc()
        elif outcome == "upstream_error":
            self.upstream_errors.labels(scenario, line.get("stage", "body")).inc()
        ttfb = line.get("ttfb_ms")
        if ttfb is not None:
            self.ttfb.labels(scenario).observe(ttfb / 1000.0)
        self.duration.labels(scenario).observe(line["duration_ms"] / 1000.0)

    def count_connections(self, guard: Counted) -> None:
        """Expose the counts of the proxy's client guard (``chaosproxy_empty_connections``)."""
        self.registry.register(GuardCollector(guard))

    #: Added as a label to every sample :meth:`render` gives (``--replica-id``:
    #: docs/fleet.md); None: no such label.
    replica: str | None = None

    def count_history(self, store: Held) -> None:
        """Expose what the request store holds and forgot (``chaosproxy_history_*``)."""
        self.registry.register(HistoryCollector(store))

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return with_replica(generate_latest(self.registry), self.replica)


def with_replica(exposition: bytes, replica: str | None) -> bytes:
    """A Prometheus text exposition with ``replica="NAME"`` on every sample: a
    fleet's replicas scraped through one Service stay apart (docs/fleet.md)."""
    if replica is None:
        return exposition
    label = b'replica="' + _label_value(replica) + b'"'
    out: list[bytes] = []
    for line in exposition.split(b"\n"):
        if line and not line.startswith(b"#"):
            brace, space = line.find(b"{"), line.find(b" ")
            if 0 <= brace < space:  # name{labels} value
                line = (
                    line[: brace + 1]
                    + label
                    + (b"," if line[brace + 1] != ord("}") else b"")
                    + line[brace + 1 :]
                )
            else:  # name value
                line = line[:space] + b"{" + label + b"}" + line[space:]
        out.append(line)
    return b"\n".join(out)


def _label_value(value: str) -> bytes:
    """A label value as the exposition format escapes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").encode()


__all__ = ["CONTENT_TYPE_LATEST", "NO_SCENARIO", "Metrics", "with_replica"]
