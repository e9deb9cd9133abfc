"""``status``: answer with this status instead of forwarding (HTTP stage)."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import Field

from chaosproxy.core.actions import HttpAction, Respond
from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig

#: Statuses whose responses must not have a body (RFC 9110).
NO_BODY = frozenset({204, 304})


class StatusConfig(FaultConfig):
    code: Annotated[int, Field(ge=100, le=599)]
    headers: dict[str, str | int] = Field(default_factory=dict)
    #: A string is sent as UTF-8 text; a mapping or list as JSON. Default: a JSON error.
    body: str | dict[str, Any] | list[Any] | None = None


def default_body(code: int) -> dict[str, Any]:
    return {
        "error": {
            "type": "chaosproxy_injected",
            "message": f"chaosproxy injected status {code}",
        }
    }


class StatusFault(Fault[StatusConfig], name="status", stage="http"):
    declaration = Declaration(
        needs="any",
        keeps_answer=False,
        explore=None,
        example="status: {code: 429, headers: {Retry-After: 2}}",
    )

    def before_upstream(self) -> list[HttpAction]:
        cfg = self.config
        headers = {k: str(v) for k, v in cfg.headers.items()}
        body = default_body(cfg.code) if cfg.body is None else cfg.body
        if isinstance(body, str):
            data = body.encode()
            content_type = "text/plain; charset=utf-8"
        else:
            data = orjson.dumps(body)
            content_type = "application/json"
        if cfg.code in NO_BODY or cfg.code < 200:
            data = b""
        elif not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = content_type
        self.applied += 1
        return [Respond(cfg.code, headers, data)]

    def skipped(self) -> str | None:
        return None if self.applied else "the request never reached the upstream"
