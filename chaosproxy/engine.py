"""Wiring a scenario to a pipeline for one response: shared by the proxy and simulate."""

from __future__ import annotations

from dataclasses import dataclass, field

from chaosproxy.core.faults import Fault, build_faults
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import DEFAULT_MAX_SIZE
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import Profile, get_profile, provider_for_event, provider_for_path
from chaosproxy.scenario import Scenario

RAW_SKIP_REASON = "the response is not sse or ndjson, so it has no events"


@dataclass
class Run:
    """The faults of one request and, once the response format is known, its pipeline."""

    scenario: Scenario
    faults: list[Fault]
    provider: str = "auto"
    format: Format = "raw"
    pipeline: Pipeline | None = None
    #: Faults left out because the body has no events.
    unframed: list[Fault] = field(default_factory=list)

    @classmethod
    def start(cls, scenario: Scenario, seed: int) -> Run:
        return cls(scenario, build_faults(scenario.faults, seed, "raw", get_profile("generic")))

    def begin_body(
        self,
        fmt: Format,
        path: str,
        *,
        provider: str | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
    ) -> Pipeline:
        """Build the pipeline for a body of format ``fmt`` answering ``path``."""
        if self.scenario.format != "auto":
            fmt = self.scenario.format
        self.format = fmt
        name = provider or self.scenario.provider
        if name == "auto":
            name = provider_for_path(path.partition("?")[0]) or "auto"
        detect = None
        if name == "auto":

            def detect(frame: Frame) -> Profile:
                self.provider = provider_for_event(frame)
                return get_profile(self.provider)

            profile = get_profile("generic")
        else:
            profile = get_profile(name)
        self.provider = name
        active = []
        for fault in self.faults:
            fault.ctx.format = fmt
            fault.ctx.profile = profile
            if fmt == "raw" and fault.needs_framing(fault.config):
                self.unframed.append(fault)
            else:
                active.append(fault)
        self.pipeline = Pipeline(active, fmt, profile, detect_profile=detect, max_size=max_size)
        return self.pipeline

    def summary(self) -> tuple[dict[str, int], list[dict[str, object]]]:
        """``faults_applied`` and ``faults_skipped`` for ``response_end``."""
        if self.pipeline is not None:
            applied, skipped = self.pipeline.summary()
        else:
            applied = {}
            for fault in self.faults:
                if fault.applied:
                    applied[fault.name] = applied.get(fault.name, 0) + fault.applied
            skipped = []
        for fault in self.unframed:
            skipped.append(
                {"fault": fault.name, "position": fault.ctx.position, "reason": RAW_SKIP_REASON}
            )
        return applied, skipped
