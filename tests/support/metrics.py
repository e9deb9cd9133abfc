"""A metric's value as the proxy's Prometheus registry holds it."""

from __future__ import annotations

from chaosproxy.control.start import RunningProxy
from chaosproxy.observe.metrics import Metrics


def value(proxy_or_metrics: RunningProxy | Metrics, name: str, **labels: str) -> float:
    metrics = (
        proxy_or_metrics if isinstance(proxy_or_metrics, Metrics) else proxy_or_metrics.metrics
    )
    got = metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got
