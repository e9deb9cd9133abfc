"""The collectors of plain counts (chaosproxy/observe/metrics_collector.py), scraped
through a real prometheus_client registry: the guard's empty connections, the request
store's held bytes and evictions by reason, frames and bytes sent per scenario; each
read at scrape time, not when registered."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from chaosproxy.observe.metrics import SentCount
from chaosproxy.observe.metrics_collector import GuardCollector, HistoryCollector, SentCollector


def scrape(collector: Collector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


@dataclass
class Guard:
    empty: int = 0


@dataclass
class Store:
    held: int = 0
    evicted: dict[str, int] = field(default_factory=dict)


def test_the_guards_empty_connections_are_read_at_each_scrape() -> None:
    guard = Guard()
    collector = GuardCollector(guard)
    assert scrape(collector) == {("chaosproxy_empty_connections_total", ()): 0}
    guard.empty = 3
    assert scrape(collector) == {("chaosproxy_empty_connections_total", ()): 3}


def test_the_history_is_its_bytes_and_its_evictions_by_reason() -> None:
    store = Store(held=4096)
    collector = HistoryCollector(store)
    assert scrape(collector) == {("chaosproxy_history_bytes", ()): 4096}
    store.held = 100
    store.evicted = {"count": 2, "bytes": 5}
    assert scrape(collector) == {
        ("chaosproxy_history_bytes", ()): 100,
        ("chaosproxy_history_evicted_total", (("reason", "bytes"),)): 5,
        ("chaosproxy_history_evicted_total", (("reason", "count"),)): 2,
    }


def counted(frames: int, sent: int) -> SentCount:
    count = SentCount()
    count.frames, count.bytes = frames, sent
    return count


def test_frames_and_bytes_sent_per_scenario() -> None:
    sent: dict[str, SentCount] = {}
    collector = SentCollector(sent)
    assert scrape(collector) == {}
    sent["dup"] = counted(3, 120)
    sent["none"] = counted(1, 7)
    assert scrape(collector) == {
        ("chaosproxy_frames_total", (("scenario", "dup"),)): 3,
        ("chaosproxy_frames_total", (("scenario", "none"),)): 1,
        ("chaosproxy_bytes_sent_total", (("scenario", "dup"),)): 120,
        ("chaosproxy_bytes_sent_total", (("scenario", "none"),)): 7,
    }


def test_a_scenario_added_while_collecting_does_not_break_the_scrape() -> None:
    """The counts are a live dict the proxy writes to: the collector iterates a copy."""
    sent: dict[str, SentCount] = {"a": counted(1, 1)}
    collector = SentCollector(sent)
    families = collector.collect()
    frames = next(families)
    sent["b"] = counted(2, 2)  # (between the two families of one scrape)
    assert [s.labels["scenario"] for s in frames.samples] == ["a"]
    assert [s.labels["scenario"] for s in next(families).samples] == ["a"]
