"""chaosproxy: a fault-injecting reverse proxy for streaming LLM APIs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from chaosproxy.api import ChaosProxy


def __getattr__(name: str) -> Any:
    # Lazy, so ``import chaosproxy`` (the pytest plugin, the CLI) stays cheap.
    if name == "ChaosProxy":
        from chaosproxy.api import ChaosProxy

        return ChaosProxy
    raise AttributeError(name)


__all__ = ["ChaosProxy", "__version__"]
