"""Shared by the fault tests that were tests/core/test_faults_http.py, now one file per
fault in tests/core/faults/: their streams, configs and runners."""

from __future__ import annotations

from chaosproxy.core.faults import build_faults
from chaosproxy.core.faults.base import Fault, FaultConfig
from chaosproxy.core.providers import get_profile

GENERIC = get_profile("generic")

UPSTREAM_HEADERS = {
    "Content-Type": "text/event-stream",
    "content-length": "44",
    "Cache-Control": "no-cache",
    "X-Request-Id": "abc",
}


def fault(name: str, config: FaultConfig) -> Fault:
    return build_faults([(name, config)], 1, "sse", GENERIC)[0]


__all__ = ["GENERIC", "UPSTREAM_HEADERS", "fault"]
