"""The fault registry: one module per fault in this package, found by discovery.

A module defines one :class:`~chaosproxy.core.faults.base.Fault` subclass with a
``name`` (a :class:`~chaosproxy.core.faults.base.SelectingFault` when its config has the
event selectors); adding a fault is adding a file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from functools import cache

from chaosproxy.core.faults.base import (
    Fault,
    FaultConfig,
    FaultContext,
    SelectingFault,
    SelectorConfig,
    Stream,
    fault_rng,
)
from chaosproxy.core.frames import Format
from chaosproxy.core.providers import Profile
from chaosproxy.core.recent import RecentStreams
from chaosproxy.core.tenancy import ANONYMOUS


@cache
def registry() -> dict[str, type[Fault]]:
    """Fault name → class, for every fault module in this package."""
    found: dict[str, type[Fault]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Fault)
                and obj is not Fault
                and obj.__module__ == module.__name__
                and "name" in vars(obj)
            ):
                if issubclass(obj.Config, SelectorConfig) and not issubclass(obj, SelectingFault):
                    raise TypeError(f"{obj.__name__}: a config with selectors needs SelectingFault")
                found[obj.name] = obj
    return found


def build_faults(
    specs: Sequence[tuple[str, FaultConfig]],
    seed: int,
    fmt: Format,
    profile: Profile,
    *,
    streams: RecentStreams | None = None,
    request_id: str = "",
    tenant: str = ANONYMOUS,
) -> list[Fault]:
    """Fresh per-request instances of a scenario's faults, each with its own RNG, all
    sharing one :class:`Stream` (``fmt`` and ``profile`` until the pipeline decides);
    ``streams`` are the proxy's recent framed streams (None offline), ``tenant`` whose
    the request is."""
    faults = registry()
    stream = Stream(fmt, profile)
    return [
        faults[name](
            config,
            FaultContext(fault_rng(seed, i, name), stream, seed, i, streams, request_id, tenant),
        )
        for i, (name, config) in enumerate(specs)
    ]


__all__ = ["Fault", "FaultConfig", "FaultContext", "Stream", "build_faults", "registry"]
