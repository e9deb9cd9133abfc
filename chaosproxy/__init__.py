"""chaosproxy: a fault-injecting reverse proxy for streaming LLM APIs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from chaosproxy.api import ChaosProxy
    from chaosproxy.client import ChaosClient


def __getattr__(name: str) -> Any:
    # Lazy, so ``import chaosproxy`` (the pytest plugin, the CLI) stays cheap.
    if name == "ChaosProxy":
        from chaosproxy.api import ChaosProxy

        return ChaosProxy
    if name == "ChaosClient":
        from chaosproxy.client import ChaosClient

        return ChaosClient
    raise AttributeError(f"module 'chaosproxy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = ["ChaosClient", "ChaosProxy", "__version__"]
