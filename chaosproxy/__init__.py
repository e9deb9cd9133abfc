"""chaosproxy: a fault-injecting reverse proxy for streaming LLM APIs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from chaosproxy._build import PURE_ENV

# First thing: with CHAOSPROXY_PURE=1 no compiled module of this package is loaded, only
# their Python sources (chaosproxy/_pure.py; docs/architecture.md, Compiled modules).
if os.environ.get(PURE_ENV, "") not in ("", "0"):
    from chaosproxy._pure import install

    install(__name__)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from chaosproxy.control.api import ChaosProxy
    from chaosproxy.control.client import ChaosClient


def __getattr__(name: str) -> Any:
    # Lazy, so ``import chaosproxy`` (the pytest plugin, the CLI) stays cheap.
    if name == "ChaosProxy":
        from chaosproxy.control.api import ChaosProxy

        return ChaosProxy
    if name == "ChaosClient":
        from chaosproxy.control.client import ChaosClient

        return ChaosClient
    raise AttributeError(f"module 'chaosproxy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = ["ChaosClient", "ChaosProxy", "__version__"]
