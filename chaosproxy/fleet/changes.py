"""A fleet's admin changes in Redis (docs/fleet.md): one replica's change stored (the
fleet's current set: the scenarios added, the default, the fixtures) and appended to a
Redis stream that every replica reads and applies, in order; the call that made it
answers once every live replica says it applied it (its acknowledgement), or names
those that did not in time. :class:`~chaosproxy.fleet.shared.SharedState` holds one
:class:`ChangeFeed` and starts it with the fleet's current set.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from chaosproxy.core.redact import redact_url

#: How long a change may take to reach every live replica before its call answers
#: anyway, naming those that had not applied it.
APPLY_WITHIN = 2.0
#: A replica is live while its heartbeat is younger than this (it beats every second).
LIVE_FOR = 3.0
#: The changes stream keeps about this many entries (a late replica loads the set).
CHANGES_KEPT = 1000
#: Reconnect backoff once Redis failed: first try after this, doubling up to the cap.
BACKOFF_FIRST = 0.1
BACKOFF_CAP = 2.0

_Apply = Callable[[dict[str, Any]], Awaitable[None]]
_Say = Callable[[str], None]


class ChangeFeed:
    """One member's side of the fleet's changes: what it publishes, what it reads and
    applies of the others', and its acknowledgements."""

    def __init__(
        self,
        redis: Any,
        reader: Any,
        keys: Mapping[str, str],
        *,
        replica: str,
        member: str,
        timeout: float,
        label: str,
        say: _Say,
    ) -> None:
        #: The client of short commands, and the one of blocking reads (``XREAD``).
        self._redis = redis
        self._reader = reader
        self._keys = keys
        #: The replica (its changes are skipped when read back: its workers have them
        #: from their supervisor) and this process among the fleet's.
        self.replica = replica
        self.member = member
        self.timeout = timeout
        self.label = label
        self._say = say
        #: The last change read (applied or skipped): reading goes on after it.
        self.last = "0-0"
        self._apply: _Apply | None = None
        #: Changes this member published, not yet read back.
        self._mine: set[str] = set()

    def start(self, apply: _Apply, last: str) -> asyncio.Task[None]:
        """Read and ``apply`` the changes after ``last``, as a task."""
        self._apply = apply
        self.last = last
        return asyncio.create_task(self.read(), name="chaosproxy fleet changes")

    async def publish(self, change: dict[str, Any]) -> list[str]:
        """Store a change made on this replica (already applied here) and wait until
        every live replica applied it: the replicas that had not after
        :data:`APPLY_WITHIN` (empty: all did). Raises ``OSError`` when Redis cannot
        take it."""
        keys = self._keys
        op = change["op"]
        entry = dict(change)
        if isinstance(entry.get("body"), bytes):
            entry["body"] = base64.b64encode(entry["body"]).decode()
        entry["from"] = self.replica
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                if op == "add_scenario":
                    stored = [time.time_ns(), entry["body"], entry.get("name")]
                    pipe.hset(keys["scenarios"], entry["scenario"], orjson.dumps(stored))
                    pipe.hdel(keys["ordinals"], entry["scenario"])  # counts from 1 again
                elif op == "remove_scenario":
                    pipe.hdel(keys["scenarios"], entry["scenario"])
                    pipe.hdel(keys["ordinals"], entry["scenario"])
                elif op == "set_default":
                    pipe.set(keys["default"], orjson.dumps(entry.get("scenario")))
                elif op == "add_fixtures":
                    pipe.rpush(keys["fixtures"], entry["body"])
                elif op == "clear_fixtures":
                    pipe.delete(keys["fixtures"])
                elif op == "reset":
                    pipe.delete(
                        keys["scenarios"],
                        keys["default"],
                        keys["fixtures"],
                        keys["requests"],
                        keys["ordinals"],
                    )
                pipe.xadd(
                    keys["changes"],
                    {"change": orjson.dumps(entry)},
                    maxlen=CHANGES_KEPT,
                    approximate=True,
                )
                results = await asyncio.wait_for(pipe.execute(), max(self.timeout * 20, 1.0))
        except Exception as exc:
            raise OSError(f"--state {self.label}: {failure_reason(exc)}") from None
        change_id = as_text(results[-1])
        self._mine.add(change_id)
        return await self._wait_applied(change_id)

    async def _wait_applied(self, change_id: str) -> list[str]:
        deadline = time.monotonic() + APPLY_WITHIN
        keys = self._keys
        pending: list[str] = []
        while True:
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.hgetall(keys["replicas"])
                    pipe.hgetall(keys["applied"])
                    beats, applied = await asyncio.wait_for(pipe.execute(), 1.0)
            except Exception:
                return sorted(pending) or ["(Redis stopped answering)"]
            now_ms = time.time() * 1000
            live = {
                as_text(r) for r, beat in beats.items() if now_ms - float(beat) < LIVE_FOR * 1000
            }
            live.discard(self.member)
            done = {as_text(r) for r, at in applied.items() if _after(as_text(at), change_id)}
            pending = sorted(live - done)
            if not pending or time.monotonic() >= deadline:
                return pending
            await asyncio.sleep(0.01)

    async def read(self) -> None:
        """Apply the changes other replicas make, in the order Redis took them (a
        task, until cancelled)."""
        assert self._apply is not None
        stream = self._keys["changes"]
        wait = BACKOFF_FIRST
        while True:
            try:
                answer: Any = await self._reader.xread({stream: self.last}, block=1000)
                wait = BACKOFF_FIRST
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(wait)
                wait = min(wait * 2, BACKOFF_CAP)
                continue
            for _, entries in answer or []:
                for raw_id, fields in entries:
                    change_id = as_text(raw_id)
                    self.last = change_id
                    if change_id in self._mine:
                        self._mine.discard(change_id)
                    else:
                        await self._apply_one(fields)
                    await self.ack(change_id)

    async def _apply_one(self, fields: dict[bytes, bytes]) -> None:
        assert self._apply is not None
        try:
            change = orjson.loads(fields[b"change"])
            if change.get("from") == self.replica:
                return  # made by this replica: its workers have it from their supervisor
            if isinstance(change.get("body"), str):
                change["body"] = base64.b64decode(change["body"])
            await self._apply(change)
        except Exception as exc:
            self._say(f"warning: state: a change from the fleet was not applied here: {exc}")

    async def ack(self, change_id: str) -> None:
        """Say in Redis that this member applied every change up to ``change_id``."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                self._redis.hset(self._keys["applied"], self.member, change_id), 1.0
            )


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _after(applied: str, change: str) -> bool:
    """Whether stream id ``applied`` is ``change`` or later."""
    a_ms, _, a_seq = applied.partition("-")
    c_ms, _, c_seq = change.partition("-")
    return (int(a_ms), int(a_seq or 0)) >= (int(c_ms), int(c_seq or 0))


def failure_reason(exc: BaseException) -> str:
    """Why a Redis command failed, in a few words that may be shown (no password)."""
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "no answer in time"
    text = str(exc) or type(exc).__name__
    return redact_url(text)


__all__ = ["APPLY_WITHIN", "ChangeFeed", "as_text", "failure_reason"]
