"""The upstream's addresses: resolved once per five minutes, not once per connect, and
one lookup shared by a burst of connects (like aiohttp's ``ttl_dns_cache``); an IP
literal is never looked up."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from typing import Final

__all__ = ["Resolver"]

_DNS_TTL: Final = 300.0


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
