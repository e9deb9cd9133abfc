"""Happy Eyeballs (RFC 8305, the connection part): race TCP connects to a name's
addresses so an unreachable one (a blackholed IPv6, say) cannot starve the others.

- The addresses are interleaved by family, the resolver's first family first
  (``v6, v4, v6, v4, ...`` when it prefers IPv6).
- The next attempt starts ``delay`` (250 ms) after the previous one, or at once when
  every attempt so far has failed.
- Each attempt has its own timeout (``attempt_timeout``); the caller bounds the whole.
- The first connect wins; the others are cancelled and their sockets closed, even one
  that connects as it is cancelled.
- ``failed(family)`` is told of each failed attempt (the resolver drops that family's
  cached answer).

Only TCP is raced; TLS, or a proxy's tunnel, follows on the winner.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["ATTEMPT_DELAY", "connect_first", "interleave"]

#: RFC 8305's recommended "Connection Attempt Delay".
ATTEMPT_DELAY: Final = 0.25


def interleave(addrs: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """``addrs`` alternating by family, the first address's family first, each
    family's addresses in their order."""
    by_family: dict[int, list[tuple[int, str]]] = {}
    for addr in addrs:
        by_family.setdefault(addr[0], []).append(addr)
    queues = list(by_family.values())
    out: list[tuple[int, str]] = []
    while queues:
        for queue in queues:
            out.append(queue.pop(0))
        queues = [q for q in queues if q]
    return out


async def connect_first(
    loop: asyncio.AbstractEventLoop,
    addrs: Sequence[tuple[int, str]],
    port: int,
    *,
    delay: float = ATTEMPT_DELAY,
    attempt_timeout: float | None = None,
    failed: Callable[[int], None] | None = None,
) -> socket.socket:
    """A connected, non-blocking TCP socket to the first of ``addrs`` to answer.

    Raises OSError when every attempt failed (the only error, or all of them in one
    line)."""
    order = interleave(addrs)
    if not order:
        raise OSError("no address to connect to")
    pending: dict[asyncio.Task[socket.socket], int] = {}
    errors: list[OSError] = []
    started = 0
    try:
        while True:
            if started < len(order):
                family, addr = order[started]
                started += 1
                task = loop.create_task(_attempt(loop, family, addr, port, attempt_timeout))
                pending[task] = family
            if not pending:
                break
            wait = delay if started < len(order) else None
            done, _ = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            winner: socket.socket | None = None
            for task in done:
                family = pending.pop(task)
                exc = task.exception()
                if exc is None:
                    sock = task.result()
                    if winner is None:
                        winner = sock
                    else:
                        sock.close()
                    continue
                errors.append(exc if isinstance(exc, OSError) else OSError(str(exc)))
                if failed is not None:
                    failed(family)
            if winner is not None:
                return winner
            # Nothing yet: the delay passed, or attempts failed; either way, the next.
    finally:
        for task in pending:
            task.cancel()
            task.add_done_callback(_close_late)
    if len(errors) == 1:
        raise errors[0]
    seen: list[str] = []
    for exc in errors:
        text = str(exc) or type(exc).__name__
        if text not in seen:
            seen.append(text)
    raise OSError(f"all {len(errors)} addresses failed: " + "; ".join(seen))


async def _attempt(
    loop: asyncio.AbstractEventLoop, family: int, addr: str, port: int, limit: float | None
) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setblocking(False)
        try:
            async with asyncio.timeout(limit):
                await loop.sock_connect(sock, (addr, port))
        except TimeoutError:
            shown = f"[{addr}]" if ":" in addr else addr
            raise OSError(f"connect to {shown}:{port} timed out after {limit:g} s") from None
    except BaseException:
        sock.close()
        raise
    return sock


def _close_late(task: asyncio.Task[socket.socket]) -> None:
    """A loser's end: close its socket if it connected after all; its error is seen."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        task.result().close()
