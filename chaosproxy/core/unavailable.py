"""The upstream failed before its head: which answer the client gets, 502 or 504.

The shell reports the failure as plain values (the upstream error's machine-readable
``reason``, its one-line message, the upstream it was and the head timeout in force)
and :func:`unavailable` decides, as a table: a timeout is the gateway's (504), anything
else a bad gateway (502). The session then ends the request with that answer
(``Session.unavailable``). Pure, so the table is tested case by case
(tests/core/test_unavailable.py); compiled with the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The ``reason`` of each upstream error the proxy answers 504 for (the upstream
#: client's ``UpstreamTimeout`` and ``UpstreamHeadTimeout``); every other reason is a 502.
CONNECT_TIMEOUT: Final = "connect timeout"
HEAD_TIMEOUT: Final = "head timeout"
#: The reason of a connection that could not be made (``UpstreamConnectError``).
UNREACHABLE: Final = "unreachable"


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The proxy's answer to an upstream that failed before its head."""

    status: int
    #: One line for the client's error body, ``X-Chaos-Proxy-Error`` and the log.
    message: str


def unavailable(reason: str, said: str, where: str, head_timeout: float) -> Unavailable:
    """The answer to an upstream failure before its head. ``reason``: the error's
    machine-readable reason; ``said``: its message, one line, already safe to show;
    ``where``: the upstream, as it may be shown; ``head_timeout``: the seconds the
    proxy waited for a head."""
    if reason == CONNECT_TIMEOUT:
        return Unavailable(504, f"upstream timed out on connect: {where}")
    if reason == HEAD_TIMEOUT:
        return Unavailable(
            504, f"upstream sent no response head within {head_timeout:g} s: {where}"
        )
    if reason == UNREACHABLE:
        # The connect errors name their upstream (``upstream HOST:PORT unreachable: ...``).
        return Unavailable(
            502, said if said.startswith("upstream ") else f"upstream unreachable: {said}"
        )
    return Unavailable(502, f"upstream failed before responding: {said}")
