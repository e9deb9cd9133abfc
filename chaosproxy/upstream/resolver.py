"""The upstream's addresses: one lookup shared by a burst of connects; an IP literal is
never looked up.

getaddrinfo gives no TTL, so an answer is kept only briefly (``_DNS_TTL``, a few
seconds: enough to share one lookup among a burst of connects, too short to outlive a
DNS change by much), and a family's addresses are dropped from the cached answer as
soon as connecting to one of them fails (:meth:`Resolver.forget`): the next connect
looks the name up again rather than retrying a stale address."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from typing import Final

__all__ = ["Resolver"]

_DNS_TTL: Final = 5.0


class Resolver:
    """The ``(family, address)`` pairs of one host, in the resolver's order."""

    def __init__(self, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self._static_addrs: list[tuple[int, str]] | None = None
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(host)
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            self._static_addrs = [(family, host)]
        self._dns: tuple[float, list[tuple[int, str]]] | None = None
        self._dns_task: asyncio.Task[list[tuple[int, str]]] | None = None

    async def resolve(self, loop: asyncio.AbstractEventLoop) -> list[tuple[int, str]]:
        if self._static_addrs is not None:
            return self._static_addrs
        cached = self._dns
        if cached is not None and cached[0] > loop.time():
            return cached[1]
        task = self._dns_task
        if task is None:
            task = self._dns_task = loop.create_task(self._lookup(loop))
            task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    def forget(self, family: int) -> None:
        """Connecting to an address of ``family`` failed: drop that family's addresses
        from the cached answer (none left: the next connect asks DNS again)."""
        cached = self._dns
        if cached is None:
            return
        left = [addr for addr in cached[1] if addr[0] != family]
        self._dns = (cached[0], left) if left else None

    async def _lookup(self, loop: asyncio.AbstractEventLoop) -> list[tuple[int, str]]:
        try:
            infos = await loop.getaddrinfo(
                self._host, self._port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        finally:
            self._dns_task = None
        addrs: list[tuple[int, str]] = []
        for family, _, _, _, sockaddr in infos:
            addr = (int(family), str(sockaddr[0]))
            if addr not in addrs:
                addrs.append(addr)
        self._dns = (loop.time() + _DNS_TTL, addrs)
        return addrs


def _retrieve(task: asyncio.Task[list[tuple[int, str]]]) -> None:
    """Mark a shared lookup's failure as seen (its waiters may all have been cancelled)."""
    if not task.cancelled():
        task.exception()
