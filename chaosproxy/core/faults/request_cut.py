"""``request_cut``: end the connection while the client is still uploading its request
(request direction).

The proxy reads ``after_bytes`` of the request body (0: none), then closes (``close``)
or resets (``reset``) the connection, with no response; the upstream never sees the
request. A client still writing a large body gets a broken pipe or a reset; one whose
body already left gets no response (a closed or reset connection).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from chaosproxy.core.actions import CutRequest, RequestAction
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig


class RequestCutConfig(FaultConfig):
    after_bytes: Annotated[int, Field(ge=0)] = 0
    how: Literal["close", "reset"] = "reset"


class RequestCutFault(Fault[RequestCutConfig], name="request_cut", stage="http"):
    declaration = Declaration(
        needs="any",
        keeps_answer=False,
        explore=None,
        example="request_cut: {after_bytes: 65536, how: reset}",
    )

    def before_request(self) -> list[RequestAction]:
        self.applied += 1
        return [CutRequest(self.config.how, self.config.after_bytes, fault=self.name)]

    def skipped(self) -> str | None:
        return None if self.applied else "the request was never received"
