"""``request_delay``: hold the request body before forwarding (request direction).

The proxy reads nothing of the body for ``duration``: a client uploading a large body
sees its upload stall once the socket buffers are full (its write timeout), and the
upstream gets the request that much later.
"""

from __future__ import annotations

from chaosproxy.core.actions import HoldRequest, RequestAction
from chaosproxy.core.faults.base import Declaration, Duration, Fault, FaultConfig


class RequestDelayConfig(FaultConfig):
    duration: Duration


class RequestDelayFault(Fault[RequestDelayConfig], name="request_delay", stage="http"):
    declaration = Declaration(
        needs="any",
        keeps_answer=True,
        explore=None,
        example="request_delay: {duration: 5s}",
    )

    def before_request(self) -> list[RequestAction]:
        if self.config.duration <= 0:
            return []
        self.applied += 1
        return [HoldRequest(self.config.duration, fault=self.name)]

    def skipped(self) -> str | None:
        if self.applied:
            return None
        return (
            "the duration was 0" if self.config.duration <= 0 else "the request was cut before it"
        )
