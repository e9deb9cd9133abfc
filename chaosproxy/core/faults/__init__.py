"""The fault registry: one module per fault in this package, found by discovery.

A module defines one :class:`~chaosproxy.core.faults.base.Fault` subclass with a
``name`` (a :class:`~chaosproxy.core.faults.base.SelectingFault` when its config has the
event selectors) and its :class:`~chaosproxy.core.faults.base.Declaration`: what the
verdicts, the explore space, the docs' fault table and the scenario schema derive from
it. Adding a fault is adding a file (and its test file, tests/core/faults/).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from functools import cache

from chaosproxy.core.faults.base import (
    Declaration,
    Fault,
    FaultConfig,
    FaultContext,
    SelectingFault,
    SelectorConfig,
    Stream,
    check_declaration,
    fault_rng,
)
from chaosproxy.core.frames import Format
from chaosproxy.core.providers import Profile
from chaosproxy.core.recent import RecentStreams
from chaosproxy.core.tenancy import ANONYMOUS


@cache
def registry() -> dict[str, type[Fault]]:
    """Fault name → class, for every fault module in this package; a TypeError that
    names the fault and the field for a fault that does not declare itself whole
    (:func:`~chaosproxy.core.faults.base.check_declaration`)."""
    found: dict[str, type[Fault]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in ("base", "drawing"):
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
                check_declaration(obj)
                found[obj.name] = obj
    return found


def keeps_answer() -> frozenset[str]:
    """The faults whose declaration says a correct client reads the same answer through
    them (what the verdicts call benign), read from the registry now."""
    return frozenset(name for name, cls in registry().items() if cls.declaration.keeps_answer)


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


__all__ = [
    "Declaration",
    "Fault",
    "FaultConfig",
    "FaultContext",
    "Stream",
    "build_faults",
    "keeps_answer",
    "registry",
]
