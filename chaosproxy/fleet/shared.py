"""A fleet's shared state in Redis (``--state redis://…``: docs/fleet.md).

Every replica naming the same Redis and ``--fleet`` shares, through this object:

- **counters**: the fleet's request number and each scenario's ``requests:`` ordinal,
  one round trip (a Lua script) per request; the seeds and ``rate`` draws derived from
  ``--seed`` follow from the shared number, so a fleet splits its traffic as one
  process does;
- **admin changes**: a change made on one replica is stored (the current set: the
  scenarios added, the default, the fixtures) and appended to a Redis stream that every
  replica reads and applies; the call that made it answers once every live replica
  says it applied it, or names those that did not in time. A replica that starts later
  loads the current set first;
- **the tenant secret** every tenant key is derived from, so that a tenant is the same
  tenant on every replica.

Redis is never on a stream's way for longer than ``--state-timeout``: a request whose
round trip does not answer in time uses this replica's own counters, marked
``state: "local"``, and the state stays *local* (no request waits on Redis again)
until a background probe reaches it again, with backoff. Changes made while Redis is
away are applied here and stored there on a best-effort basis (logged when not).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from chaosproxy.core.redact import redact_url
from chaosproxy.fleet.changes import (
    APPLY_WITHIN,
    BACKOFF_CAP,
    BACKOFF_FIRST,
    ChangeFeed,
    as_text,
    failure_reason,
)

HEARTBEAT_EVERY = 1.0

# KEYS: the request number, the ordinals hash; ARGV: the scenario's name ("" for none).
_COUNT = """
local n = redis.call('INCR', KEYS[1])
local o = 0
if ARGV[1] ~= '' then o = redis.call('HINCRBY', KEYS[2], ARGV[1], 1) end
return {n, o}
"""

Status = Literal["shared", "local"]
_Apply = Callable[[dict[str, Any]], Awaitable[None]]
_Say = Callable[[str], None]


def _stderr(line: str) -> None:
    print(f"chaosproxy: {line}", file=sys.stderr, flush=True)


@dataclass
class Startup:
    """What a replica finds in Redis when it starts: the fleet's current set."""

    #: The scenarios added at run time, in the order they were added: (body, name).
    scenarios: list[tuple[bytes, str | None]] = field(default_factory=list)
    #: The default set at run time ("unset": the start-up default).
    default: str | Literal["unset"] | None = "unset"
    #: Fixture bodies added at run time, in order.
    fixtures: list[bytes] = field(default_factory=list)


class SharedState:
    """One replica's handle on its fleet's state in Redis."""

    def __init__(
        self,
        url: str,
        fleet: str,
        replica: str,
        timeout: float,
        *,
        member: str | None = None,
        say: _Say = _stderr,
    ) -> None:
        from redis.asyncio import Redis

        self.url = url
        self.fleet = fleet
        #: The replica: changes it made reach it otherwise (skipped when read back).
        self.replica = replica
        #: This process among the fleet's (its heartbeat, its acknowledgements): the
        #: replica, or one of its workers (``serve --workers N``: ``pod-a/w0``).
        self.member = member or replica
        self.timeout = timeout
        self._say = say
        prefix = f"chaosproxy:{fleet}:"
        self._keys = {
            name: prefix + name
            for name in (
                "requests",
                "ordinals",
                "changes",
                "scenarios",
                "default",
                "fixtures",
                "applied",
                "replicas",
                "tenant-secret",
            )
        }
        # Commands on the request path: a short socket timeout behind asyncio's.
        self._redis = Redis.from_url(
            url,
            socket_connect_timeout=max(timeout, 1.0),
            socket_timeout=max(timeout * 4, 1.0),
            retry_on_timeout=False,
        )
        # The changes reader blocks on XREAD: a connection of its own.
        self._reader = Redis.from_url(url, socket_connect_timeout=5.0, socket_timeout=None)
        self._count = self._redis.register_script(_COUNT)
        self.status: Status = "shared"
        #: Why the state is local (None while shared).
        self.reason: str | None = None
        #: Requests that used this replica's own counters (Redis away or too slow).
        self.fallbacks = 0
        self._since = 0.0
        self._probe: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: The fleet's admin changes, published and applied.
        self.changes = ChangeFeed(
            self._redis,
            self._reader,
            self._keys,
            replica=replica,
            member=self.member,
            timeout=timeout,
            label=self.label,
            say=say,
        )

    @property
    def prefix(self) -> str:
        """Every key of the fleet starts with this."""
        return f"chaosproxy:{self.fleet}:"

    @property
    def redis(self) -> Any:
        """The client of commands a request may wait for (short timeouts)."""
        return self._redis

    @property
    def reader(self) -> Any:
        """The client of blocking reads (``XREAD BLOCK``)."""
        return self._reader

    @property
    def label(self) -> str:
        """The Redis URL as it may be shown (no password)."""
        return redact_url(self.url)

    # ------------------------------------------------------------------ start, stop

    async def start(self, apply: _Apply) -> Startup:
        """Reach Redis (raising ``OSError`` with a reason when it cannot be reached),
        read the fleet's current set, and start applying the changes other replicas
        make (``apply``) and beating this replica's heart."""
        keys = self._keys
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hgetall(keys["scenarios"])
                pipe.get(keys["default"])
                pipe.lrange(keys["fixtures"], 0, -1)
                pipe.xrevrange(keys["changes"], count=1)
                scenarios, default, fixtures, last = await asyncio.wait_for(
                    pipe.execute(), max(self.timeout * 20, 5.0)
                )
        except Exception as exc:
            await self.close()
            raise OSError(f"--state {self.label}: {failure_reason(exc)}") from None
        startup = Startup()
        entries = sorted(orjson.loads(v) for v in scenarios.values())
        startup.scenarios = [(base64.b64decode(e[1]), e[2]) for e in entries]
        if default is not None:
            startup.default = orjson.loads(default)
        startup.fixtures = [base64.b64decode(f) for f in fixtures]
        await self._beat()
        self._tasks = [
            self.changes.start(apply, as_text(last[0][0]) if last else "0-0"),
            asyncio.create_task(self._heartbeat(), name="chaosproxy fleet heartbeat"),
        ]
        return startup

    async def tenant_secret(self) -> bytes:
        """The secret every replica of the fleet derives tenant keys from: drawn by
        the first replica that asks, kept in Redis."""
        key = self._keys["tenant-secret"]
        drawn = secrets.token_hex(32)
        await asyncio.wait_for(self._redis.set(key, drawn, nx=True), 5.0)
        kept = await asyncio.wait_for(self._redis.get(key), 5.0)
        return bytes.fromhex(as_text(kept or drawn.encode()))

    async def close(self) -> None:
        for task in [*self._tasks, *([self._probe] if self._probe else [])]:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._redis.hdel(self._keys["replicas"], self.member), 0.5)
        for client in (self._redis, self._reader):
            with contextlib.suppress(Exception):
                await client.aclose()

    # ------------------------------------------------------------------ counters

    async def counts(self, scenario: str | None) -> tuple[int, int] | None:
        """The fleet's next request number and ``scenario``'s next ordinal (0 for
        none), in one round trip; None when Redis did not answer in time (the state
        is then local until it answers again)."""
        answer = await self.call(
            self._count(
                keys=[self._keys["requests"], self._keys["ordinals"]], args=[scenario or ""]
            )
        )
        if answer is None:
            return None
        number, ordinal = answer
        return int(number), int(ordinal)

    async def ordinal(self, scenario: str) -> int | None:
        """``scenario``'s next ordinal alone (after :meth:`counts` of no scenario)."""
        answer = await self.call(self._redis.hincrby(self._keys["ordinals"], scenario, 1))
        return None if answer is None else int(answer)

    async def call(self, command: Awaitable[Any]) -> Any:
        """``command``'s answer, or None when Redis did not give it within
        ``--state-timeout`` (the state is then local until a probe reaches it)."""
        if self.status == "local":
            if asyncio.iscoroutine(command):
                command.close()  # never sent
            self.fallbacks += 1
            return None
        try:
            return await asyncio.wait_for(command, self.timeout)
        except Exception as exc:  # timed out, refused, reset, an error reply
            self._lost(exc)
            self.fallbacks += 1
            return None

    def _lost(self, exc: BaseException) -> None:
        if self.status == "local":
            return
        self.status = "local"
        self.reason = failure_reason(exc)
        self._since = time.monotonic()
        self._say(
            f"warning: state: {self.label} is not answering ({self.reason}): this replica "
            "uses its own counters (state: local) until it answers again"
        )
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._reconnect(), name="chaosproxy fleet probe")

    async def _reconnect(self) -> None:
        wait = BACKOFF_FIRST
        while True:
            await asyncio.sleep(wait)
            try:
                await asyncio.wait_for(self._redis.ping(), max(self.timeout * 4, 0.5))
            except asyncio.CancelledError:
                raise
            except Exception:
                wait = min(wait * 2, BACKOFF_CAP)
                continue
            away = time.monotonic() - self._since
            self.status, self.reason = "shared", None
            with contextlib.suppress(Exception):  # live again, for the fleet's changes
                await self._beat()
            self._say(f"state: {self.label} answers again after {away:.1f} s: shared again")
            return

    # ------------------------------------------------------------------ changes

    async def publish(self, change: dict[str, Any]) -> list[str]:
        """Store a change made on this replica and wait until every live replica
        applied it (:meth:`ChangeFeed.publish`)."""
        return await self.changes.publish(change)

    async def _beat(self) -> None:
        await asyncio.wait_for(
            self._redis.hset(self._keys["replicas"], self.member, time.time() * 1000), 1.0
        )

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY)
            with contextlib.suppress(Exception):
                await self._beat()
                await self.changes.ack(self.changes.last)

    # ------------------------------------------------------------------ health

    def health(self) -> dict[str, Any]:
        """What ``/health`` says of the fleet's state."""
        shown: dict[str, Any] = {
            "state": self.status,
            "redis": self.label,
            "fleet": self.fleet,
            "replica": self.replica,
            "member": self.member,
            "fallbacks": self.fallbacks,
        }
        if self.reason is not None:
            shown["reason"] = self.reason
            shown["local_for_s"] = round(time.monotonic() - self._since, 3)
        return shown


class StateCollector(Collector):
    """The fleet's state as metrics: whether it is shared now, and how many requests
    used this replica's own counters instead."""

    def __init__(self, shared: SharedState) -> None:
        self._shared = shared

    def collect(self) -> Iterator[Metric]:
        shared = self._shared
        yield GaugeMetricFamily(
            "chaosproxy_state_shared",
            "1 while the fleet's state (--state redis://...) answers, 0 while this "
            "replica uses its own.",
            value=1 if shared.status == "shared" else 0,
        )
        yield CounterMetricFamily(
            "chaosproxy_state_fallbacks",
            "Requests numbered by this replica alone: the fleet's state did not answer "
            "within --state-timeout (response_end state: local).",
            value=shared.fallbacks,
        )


__all__ = ["APPLY_WITHIN", "SharedState", "Startup", "StateCollector"]
