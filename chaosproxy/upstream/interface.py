"""What the proxy's shell needs of an upstream client, and nothing more, so that another
client can stand in for the pool and the shell does not depend on the pool's internals
(a test scripts the pool itself instead: :mod:`.testing`).
:class:`~chaosproxy.upstream.UpstreamPool` and :class:`~chaosproxy.upstream.UpstreamResponse`
satisfy it (mypy checks that below).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import TYPE_CHECKING, Protocol

from multidict import CIMultiDict

from chaosproxy.upstream.response import BodySink

__all__ = ["Reply", "Upstream"]


class Reply(Protocol):
    """A response whose head has arrived; its body is pushed to a :class:`BodySink`.

    After :meth:`start`, the body goes to the sink as ``body_data`` calls (never empty,
    never re-entrant from :meth:`resume_reading`), then ``body_end`` exactly once: with
    ``None`` for a clean end, else the :class:`~chaosproxy.upstream.UpstreamError` that
    cut it short.
    """

    @property
    def status(self) -> int: ...

    @property
    def reason(self) -> str: ...

    @property
    def headers(self) -> CIMultiDict[str]:
        """As received, repeated headers kept; lookups ignore case."""
        ...

    @property
    def complete(self) -> bool:
        """The whole body arrived cleanly (its delivery may still be pending)."""
        ...

    def start(self, sink: BodySink) -> None:
        """Deliver the body to ``sink`` (once per response)."""

    def pause_reading(self) -> None:
        """No ``body_data`` until :meth:`resume_reading`; the upstream is held back."""

    def resume_reading(self) -> None:
        """Resume; what was held is delivered from the event loop, not from this call."""

    def close(self) -> None:
        """Abort: nothing more is delivered, except ``body_end`` to a started sink that
        has not had it. Idempotent."""


class Upstream(Protocol):
    """Sends requests to one upstream; the proxy owns it for the app's lifetime."""

    async def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None = None,
        *,
        content_length: int | None = None,
        head_timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> Reply:
        """Send a request; returns once the final response head has arrived.

        ``target`` is the path and query. Raises
        :class:`~chaosproxy.upstream.UpstreamConnectError` (the proxy answers 502),
        its subclass :class:`~chaosproxy.upstream.UpstreamTimeout` (504),
        :class:`~chaosproxy.upstream.UpstreamHeadTimeout` when no head came within
        ``head_timeout`` seconds (504), or another
        :class:`~chaosproxy.upstream.UpstreamError` (502). A body silent for
        ``idle_timeout`` seconds while read ends with
        :class:`~chaosproxy.upstream.UpstreamIdleTimeout`. ``None`` or 0: no limit.
        """
        ...

    async def close(self) -> None:
        """Close every connection; responses still streaming end with an error."""


if TYPE_CHECKING:  # the real client satisfies the interface
    from chaosproxy.upstream.pool import UpstreamPool
    from chaosproxy.upstream.response import UpstreamResponse

    def _pool(pool: UpstreamPool) -> Upstream:
        return pool

    def _reply(resp: UpstreamResponse) -> Reply:
        return resp
