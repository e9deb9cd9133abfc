"""A fleet of replicas that behaves as one proxy (``--state redis://…``: docs/fleet.md)."""

from chaosproxy.fleet.shared import SharedState, Startup

__all__ = ["SharedState", "Startup"]
