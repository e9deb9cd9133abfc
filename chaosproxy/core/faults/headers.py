"""``headers``: change the response headers (a wrong Content-Type, a stray
Content-Encoding). Names are matched case-insensitively; ``remove`` applies first,
then ``set`` replaces or adds."""

from __future__ import annotations

from pydantic import Field, model_validator

from chaosproxy.core.faults.base import Declaration, Fault, FaultConfig


class HeadersConfig(FaultConfig):
    set: dict[str, str] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self) -> HeadersConfig:
        if not self.set and not self.remove:
            raise ValueError("give at least one of set, remove")
        return self


class HeadersFault(Fault[HeadersConfig], name="headers", stage="http"):
    declaration = Declaration(
        needs="any",
        keeps_answer=False,
        explore=None,
        example="headers: {set: {Content-Type: text/plain}, remove: [Cache-Control]}",
    )

    edits_headers = True

    def response_headers(self, status: int, headers: dict[str, str]) -> dict[str, str]:
        drop = {name.lower() for name in (*self.config.remove, *self.config.set)}
        out = {k: v for k, v in headers.items() if k.lower() not in drop}
        out.update(self.config.set)
        if out != headers:
            self.applied += 1
        return out

    def skipped(self) -> str | None:
        if self.applied:
            return None
        return "the response had none of the headers to remove, and already had those to set"
