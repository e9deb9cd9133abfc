"""The collectors that show what :class:`~chaosproxy.observe.metrics.Metrics` keeps as plain
counts (frames and bytes sent, the guard's empty connections) as Prometheus counters
when scraped.

A module of its own: ``Metrics`` is compiled (docs/architecture.md, Compiled modules),
and a compiled class may not subclass a dependency's class (prometheus_client's
``Collector``); these stay Python.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class Counted(Protocol):
    """What the collector reads of the proxy's client guard
    (:class:`~chaosproxy.server.guard.ClientGuard`): the server is above this room."""

    @property
    def empty(self) -> int:
        """Client connections that closed without sending a request."""
        ...


class GuardCollector(Collector):
    """``chaosproxy_empty_connections_total`` from the guard's count: connections are
    not frame-log lines, and a probe that asked nothing gets none."""

    def __init__(self, guard: Counted) -> None:
        self._guard = guard

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "chaosproxy_empty_connections",
            "Client connections that closed without sending a request (nothing, or only "
            "empty lines): health checks and port probes; not logged.",
            value=self._guard.empty,
        )


class Held(Protocol):
    """What the collector reads of the request store
    (:class:`~chaosproxy.observe.store.RequestStore`)."""

    @property
    def held(self) -> int:
        """The bytes its records hold."""
        ...

    @property
    def evicted(self) -> dict[str, int]:
        """Requests forgotten, by reason (``count``, ``bytes``)."""
        ...


class HistoryCollector(Collector):
    """``chaosproxy_history_bytes`` and ``chaosproxy_history_evicted_total{reason}``
    from the request store's own counts (kept as plain integers on the hot path)."""

    def __init__(self, store: Held) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "chaosproxy_history_bytes",
            "What the admin API's request history holds (frame lines, journal entries), "
            "in bytes, within --history-bytes.",
            value=self._store.held,
        )
        evicted = CounterMetricFamily(
            "chaosproxy_history_evicted",
            "Requests the admin API's history forgot, oldest first: reason=count (past "
            "the last 256 requests) or bytes (past --history-bytes).",
            labels=["reason"],
        )
        for reason, count in sorted(self._store.evicted.items()):
            evicted.add_metric([reason], count)
        yield evicted


class SentCollector(Collector):
    """``chaosproxy_frames_total`` and ``chaosproxy_bytes_sent_total`` from plain
    per-scenario counts (the metrics' ``SentCount``: ``frames`` and ``bytes``)."""

    def __init__(self, sent: dict[str, Any]) -> None:
        self._sent = sent

    def collect(self) -> Iterator[Metric]:
        frames = CounterMetricFamily(
            "chaosproxy_frames", "Writes to clients (frame-log frame lines).", labels=["scenario"]
        )
        sent_bytes = CounterMetricFamily(
            "chaosproxy_bytes_sent", "Body bytes written to clients.", labels=["scenario"]
        )
        for scenario, sent in list(self._sent.items()):
            frames.add_metric([scenario], sent.frames)
            sent_bytes.add_metric([scenario], sent.bytes)
        yield frames
        yield sent_bytes


__all__ = ["Counted", "GuardCollector", "SentCollector"]
