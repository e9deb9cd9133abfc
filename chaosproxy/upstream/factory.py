"""The upstream client the proxy uses for one upstream URL, built from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chaosproxy.upstream.pool import UpstreamPool

if TYPE_CHECKING:
    from chaosproxy.config import Config


def pool_for(url: str, config: Config) -> UpstreamPool:
    """A keep-alive pool to ``url`` with the upstream settings of ``config``."""
    return UpstreamPool(url, connect_timeout=config.connect_timeout)
