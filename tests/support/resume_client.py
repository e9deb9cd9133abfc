"""A fetch-style client that implements resume itself, and what it saw.

It is what docs/reconnection.md asks of a correct client: read SSE events, remember the
id of the last event dispatched (never of a half-received one), and after any end of
the stream (a clean one too, as an ``EventSource`` does) reconnect with
``Last-Event-ID`` until the server answers something other than 200 (204: stop).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx_sse


@dataclass
class Connection:
    status: int
    request_id: str | None
    #: (id, data) of each event dispatched on this connection.
    events: list[tuple[str, str]] = field(default_factory=list)
    #: "clean" (the body ended properly), "error" (cut), or "" (not 200).
    end: str = ""

    @property
    def ids(self) -> list[str]:
        return [i for i, _ in self.events]


@dataclass
class Run:
    connections: list[Connection] = field(default_factory=list)

    @property
    def statuses(self) -> list[int]:
        return [c.status for c in self.connections]

    @property
    def ids(self) -> list[str]:
        return [i for c in self.connections for i in c.ids]

    @property
    def datas(self) -> list[str]:
        return [d for c in self.connections for _, d in c.events]

    def twice(self) -> list[str]:
        """Ids received more than once, in first-seen order."""
        counts = Counter(self.ids)
        return [i for i in dict.fromkeys(self.ids) if counts[i] > 1]

    def deduplicated(self) -> list[str]:
        """The datas, each event id applied once (what a deduplicating client keeps)."""
        seen: set[str] = set()
        out: list[str] = []
        for c in self.connections:
            for event_id, data in c.events:
                if event_id and event_id in seen:
                    continue
                seen.add(event_id)
                out.append(data)
        return out


async def resume_loop(
    client: httpx.AsyncClient,
    url: str,
    *,
    json: Any = None,
    headers: dict[str, str] | None = None,
    limit: int = 8,
) -> Run:
    """Connect, read, reconnect with ``Last-Event-ID`` until a non-200 answer (bounded)."""
    run = Run()
    last_id: str | None = None
    method = "POST" if json is not None else "GET"
    while len(run.connections) < limit:
        sent = dict(headers or {})
        if last_id:
            sent["Last-Event-ID"] = last_id
        try:
            async with client.stream(method, url, json=json, headers=sent) as resp:
                conn = Connection(resp.status_code, resp.headers.get("X-Chaos-Request-Id"))
                run.connections.append(conn)
                if resp.status_code != 200:
                    await resp.aread()
                    return run
                try:
                    async for sse in httpx_sse.EventSource(resp).aiter_sse():
                        conn.events.append((sse.id, sse.data))
                        if sse.id:
                            last_id = sse.id
                    conn.end = "clean"
                except (httpx.TransportError, httpx.RemoteProtocolError):
                    conn.end = "error"
        except httpx.TransportError:
            run.connections.append(Connection(0, None, end="error"))
    return run
