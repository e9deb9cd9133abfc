"""chaosproxy: a fault-injecting reverse proxy for streaming LLM APIs."""

__version__ = "0.1.0"

__all__ = ["__version__"]
