"""Reconnection and resume in the I/O shell (docs/reconnection.md).

The bookkeeping is sans-IO (:mod:`chaosproxy.core.history`); this module moves the
bytes:

* :class:`KeptReply` wraps an upstream SSE response framed under a scenario with
  ``resume:``. Every read goes through the stream's :class:`~chaosproxy.core.history.
  Recorder` (ids assigned, events kept) before it reaches the request's pump. When the
  request ends early (a fault cut it, the client left), the exchange closes its
  upstream: the wrapper then *detaches* instead, and keeps reading the upstream into
  the history, so that a reconnect gets what the client missed. It stops at the body's
  end, when the idle timeout ends it, when nobody has reconnected within ``retention``,
  after ``max_bytes`` read with nobody listening, when the store lets its stream go
  (beyond ``streams``, past ``retention``), or when the proxy stops; and it never
  starts when its upstream already has its share of such readers
  (:func:`reader_share`).
* :class:`HistoryReply` answers a reconnect from history: an upstream stand-in (the
  :class:`~chaosproxy.upstream.Reply` interface), so the reconnect's session frames and
  faults it like any body. It sends the kept events from a point, then follows the
  stream live until its upstream ends.
* :class:`ResumeManager` holds the store and both kinds, and closes them on stop. It
  draws each stream's token (``<token>.<n>`` ids) from :mod:`secrets`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from multidict import CIMultiDict

from chaosproxy.core.framing import DEFAULT_MAX_SIZE
from chaosproxy.core.history import (
    Decision,
    Fresh,
    HistoryStore,
    Recorder,
    Refuse,
    Resume,
    ResumeConfig,
    StreamHistory,
    shown_event_id,
)
from chaosproxy.core.providers.base import EventContent
from chaosproxy.core.tenancy import ANONYMOUS, apart
from chaosproxy.upstream import Reply, UpstreamClosed, UpstreamError

if TYPE_CHECKING:
    from chaosproxy.upstream.response import BodySink


#: Random bytes in a stream's token (``<token>.<n>`` ids): 128 bits, never derived
#: from anything the proxy shows (request ids are sequential).
TOKEN_BYTES = 16


class Mirror(Protocol):
    """A fleet's shared history (:class:`chaosproxy.fleet.history.HistoryMirror`):
    what this replica keeps is mirrored, what another keeps is brought here before a
    reconnect is decided (docs/fleet.md)."""

    def begin(self, stream: StreamHistory) -> None: ...

    def appended(self, stream: StreamHistory) -> None: ...

    def ended(self, stream: StreamHistory) -> None: ...

    def dropped(self, stream: StreamHistory) -> None: ...

    def sent(
        self, stream: StreamHistory, trail: Sequence[tuple[str | None, EventContent]]
    ) -> None: ...

    async def refresh(
        self,
        store: HistoryStore,
        scenario: str,
        config: ResumeConfig,
        last_event_id: str,
        tenant: str,
        *,
        provider: str,
        path: str,
        notify: Callable[[StreamHistory], None],
    ) -> bool | None: ...


def reader_share(max_connections: int) -> int:
    """How many background readers one upstream may have: half its connections
    (``--upstream-max-connections``), so readers of clients that left never starve
    the requests of those still here. 0 (one connection): nothing is read on."""
    return max_connections // 2


class ResumeManager:
    """The kept streams of one proxy, their background readers and live followers.

    A *background reader* is a :class:`KeptReply` whose client left before its upstream
    ended. Readers are bounded: each stops when its stream leaves the store (beyond the
    scenario's ``streams``, past ``retention``), after ``max_bytes`` read with nobody
    following the stream, at the idle timeout or the body's end; and an upstream has at
    most ``max_readers`` of them (:func:`reader_share`): a client that leaves when its
    upstream has that many is not read on (its stream ends ``abandoned``).
    """

    def __init__(
        self, max_event_size: int = DEFAULT_MAX_SIZE, max_readers: int | None = None
    ) -> None:
        self.store = HistoryStore(on_drop=self._dropped)
        self.max_event_size = max_event_size
        #: Background readers one upstream may have (None: no limit).
        self.max_readers = max_readers
        #: The background readers, by the stream they read.
        self._readers: dict[StreamHistory, KeptReply] = {}
        #: Background readers per upstream client.
        self._per_upstream: dict[object, int] = {}
        self._followers: dict[int, set[HistoryReply]] = {}
        self.closed = False
        #: Put before every stream token this manager draws: the worker that keeps the
        #: stream (``w1_``, ``serve --workers N``), so a reconnect to another worker is
        #: handed to it (chaosproxy.workers.handover). Empty in one process.
        self.token_prefix = ""
        #: The fleet's shared history (``--state redis://…``); None: this process's.
        self.mirror: Mirror | None = None
        #: The clock of the kept streams' times and their readers' retention: the
        #: proxy's (``ProxyState.clock``).
        self.clock: Callable[[], float] = time.monotonic

    def decide(
        self, scenario: str, config: ResumeConfig, last_event_id: str, tenant: str = ANONYMOUS
    ) -> Decision:
        return self.store.decide(scenario, config, last_event_id, self.clock(), tenant=tenant)

    def keep(
        self,
        reply: Reply,
        scenario: str,
        config: ResumeConfig,
        request_id: str,
        tenant: str = ANONYMOUS,
        *,
        upstream: object = None,
        provider: str = "auto",
        path: str = "",
    ) -> Reply:
        """Record ``reply`` (an SSE body from the client ``upstream``) as a kept stream of
        ``tenant``; the reply to pump instead. ``provider`` and ``path`` say how its
        events are read for its generation's clean answer. An anonymous request kept
        apart is not kept under ``ids: upstream``: only the upstream's ids would find
        its stream, and those name no anonymous user's (chaosproxy.core.tenancy)."""
        if self.closed or (config.ids == "upstream" and apart(tenant)):
            return reply
        stream = self.store.begin(
            scenario,
            config,
            request_id,
            _unframed(reply.headers),
            self.clock(),
            tenant=tenant,
            token=self.token_prefix + secrets.token_urlsafe(TOKEN_BYTES),
        )
        if self.mirror is not None:
            self.mirror.begin(stream)
        return KeptReply(self, reply, stream, upstream, provider=provider, path=path)

    async def refresh(
        self,
        scenario: str,
        config: ResumeConfig,
        last_event_id: str,
        tenant: str = ANONYMOUS,
        *,
        provider: str = "auto",
        path: str = "",
    ) -> bool | None:
        """Before a reconnect is decided: the stream its id names, as the fleet has it,
        brought here (:meth:`Mirror.refresh`); None without a fleet, or when Redis did
        not answer in time."""
        if self.mirror is None or not last_event_id or self.closed:
            return None
        return await self.mirror.refresh(
            self.store,
            scenario,
            config,
            last_event_id,
            tenant,
            provider=provider,
            path=path,
            notify=self.notify,
        )

    def sent(self, stream: StreamHistory, trail: Sequence[tuple[str | None, EventContent]]) -> None:
        """A connection of ``stream``'s generation ended, having sent ``trail`` (in its
        ledger already): the fleet's other replicas learn it too."""
        if self.mirror is not None:
            self.mirror.sent(stream, trail)

    def replay(self, stream: StreamHistory, start: int) -> HistoryReply:
        return HistoryReply(self, stream, start)

    def notify(self, stream: StreamHistory) -> None:
        """New events (or the end) in ``stream``: wake those following it."""
        for follower in list(self._followers.get(id(stream), ())):
            follower.deliver()

    def following(self, stream: StreamHistory) -> bool:
        return bool(self._followers.get(id(stream)))

    def orphaned(self, stream: StreamHistory) -> bool:
        """Nobody can get ``stream`` any more: the store let it go, nobody follows it."""
        return not self.store.holds(stream) and not self.following(stream)

    def follow(self, reply: HistoryReply) -> None:
        self._followers.setdefault(id(reply.stream), set()).add(reply)

    def unfollow(self, reply: HistoryReply) -> None:
        followers = self._followers.get(id(reply.stream))
        if followers is not None:
            followers.discard(reply)
            if not followers:
                del self._followers[id(reply.stream)]
                reader = self._readers.get(reply.stream)
                if reader is not None:
                    if self.store.holds(reply.stream):
                        reader.unattended_since = self.clock()
                    else:
                        reader.stop()

    def may_read_on(self, upstream: object) -> bool:
        """Whether ``upstream`` may have one more background reader."""
        limit = self.max_readers
        return limit is None or self._per_upstream.get(upstream, 0) < limit

    def _adopt(self, reader: KeptReply) -> None:
        self._readers[reader.stream] = reader
        key = reader.upstream_key
        self._per_upstream[key] = self._per_upstream.get(key, 0) + 1

    def _release(self, reader: KeptReply) -> None:
        if self._readers.get(reader.stream) is reader:
            del self._readers[reader.stream]
            key = reader.upstream_key
            left = self._per_upstream.get(key, 1) - 1
            if left > 0:
                self._per_upstream[key] = left
            else:
                self._per_upstream.pop(key, None)

    def _dropped(self, stream: StreamHistory) -> None:
        """The store let ``stream`` go: its reader stops, unless a reconnect follows it
        (then it stops when the last one leaves)."""
        reader = self._readers.get(stream)
        if reader is not None and not self.following(stream):
            reader.stop()
        if self.mirror is not None:
            self.mirror.dropped(stream)

    @property
    def readers(self) -> int:
        """Upstreams read in the background now (for tests and /health-like checks)."""
        return len(self._readers)

    def readers_of(self, upstream: object) -> int:
        return self._per_upstream.get(upstream, 0)

    def forget(self) -> None:
        """``POST /reset``: the kept streams are forgotten and their background readers
        stop; connections serving a reconnect now go on to their end."""
        for reader in list(self._readers.values()):
            reader.stop()
        self.store.clear()

    def close(self) -> None:
        """The proxy stops: every background reader ends now, and the history goes."""
        self.closed = True
        for reader in list(self._readers.values()):
            reader.stop()
        for followers in list(self._followers.values()):
            for follower in list(followers):
                follower.close()
        self.mirror = None  # the fleet keeps what this replica mirrored
        self.store.clear()


class KeptReply:
    """An upstream SSE reply recorded into its stream's history (see the module doc)."""

    def __init__(
        self,
        manager: ResumeManager,
        upstream: Reply,
        stream: StreamHistory,
        upstream_key: object = None,
        *,
        provider: str = "auto",
        path: str = "",
    ) -> None:
        self.manager = manager
        self.upstream = upstream
        self.stream = stream
        #: The upstream client this reply came from (whose connections a reader holds).
        self.upstream_key = upstream_key
        self.recorder = Recorder(stream, manager.max_event_size, provider=provider, path=path)
        self._sink: BodySink | None = None
        self._detached = False
        self._stopped = False
        #: Bytes read since the client went with nobody following the stream.
        self._unattended_bytes = 0
        self.unattended_since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._headers: CIMultiDict[str] = CIMultiDict(stream.headers)

    @property
    def status(self) -> int:
        return self.upstream.status

    @property
    def reason(self) -> str:
        return self.upstream.reason

    @property
    def headers(self) -> CIMultiDict[str]:
        """The upstream's, without ``Content-Length`` (the ids change the length)."""
        return self._headers

    @property
    def complete(self) -> bool:
        """True once the recorder has seen the body's clean end: until then, an early
        exit closes this reply (which then reads on), even if the upstream's body had
        all arrived but was not yet delivered."""
        return self.stream.state == "completed"

    def start(self, sink: BodySink) -> None:
        self._sink = sink
        self.upstream.start(self)

    def pause_reading(self) -> None:
        if not self._detached:
            self.upstream.pause_reading()

    def resume_reading(self) -> None:
        if not self._detached:
            self.upstream.resume_reading()

    def close(self) -> None:
        """The request is over before its upstream: keep reading it, unattended, unless
        nobody could get what it reads (the store let the stream go), or its upstream
        already has its share of background readers."""
        if self._detached or self._stopped:
            return
        self._detached = True
        self._sink = None
        manager = self.manager
        if (
            self.stream.finished
            or manager.closed
            or manager.orphaned(self.stream)
            or not manager.may_read_on(self.upstream_key)
        ):
            self.stop()
            return
        manager._adopt(self)
        self.unattended_since = self.manager.clock()
        self._arm()
        self.upstream.resume_reading()  # the pump may have paused it

    # ------------------------------------------------------------------ BodySink

    def body_data(self, data: bytes) -> None:
        now = self.manager.clock()
        out = self.recorder.feed(data, now)
        manager = self.manager
        manager.notify(self.stream)
        if manager.mirror is not None:  # (queued: written by the mirror's own task)
            manager.mirror.appended(self.stream)
        sink = self._sink
        if sink is not None:
            if out:
                sink.body_data(out)
            return
        if self.manager.following(self.stream):
            self._unattended_bytes = 0
        else:
            self._unattended_bytes += len(data)
            if self._unattended_bytes > self.stream.config.max_bytes:
                self.stop()

    def body_end(self, error: UpstreamError | None) -> None:
        now = self.manager.clock()
        tail = self.recorder.eof(now)
        self.stream.end("completed" if error is None else "failed", now)
        self.manager.notify(self.stream)
        if self.manager.mirror is not None:
            self.manager.mirror.ended(self.stream)
        sink = self._sink
        if sink is not None:
            if tail:
                sink.body_data(tail)
            sink.body_end(error)
        self._finish()

    # ------------------------------------------------------------------ background

    def _arm(self) -> None:
        retention = self.stream.config.retention
        self._timer = asyncio.get_running_loop().call_later(retention, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._stopped:
            return
        manager = self.manager
        now = self.manager.clock()
        retention = self.stream.config.retention
        gone = manager.orphaned(self.stream)
        idle = not manager.following(self.stream) and now - self.unattended_since >= retention
        if gone or idle:
            self.stop()
        else:
            self._arm()

    def stop(self) -> None:
        """Stop reading: the upstream connection is dropped (a stream still live ends
        as ``abandoned``)."""
        if self._stopped:
            return
        self._stopped = True
        self._sink = None
        self.stream.end("abandoned", self.manager.clock())
        self.upstream.close()  # (its body_end comes back here; the stream has ended)
        self.manager.notify(self.stream)
        if self.manager.mirror is not None:
            self.manager.mirror.ended(self.stream)
        self._finish()

    def _finish(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.manager._release(self)


class HistoryReply:
    """A reconnect answered from a kept stream: its events from ``start``, then live."""

    def __init__(self, manager: ResumeManager, stream: StreamHistory, start: int) -> None:
        self.manager = manager
        self.stream = stream
        self.cursor = start
        self.status = 200
        self.reason = "OK"
        self.headers: CIMultiDict[str] = CIMultiDict(stream.headers)
        self._sink: BodySink | None = None
        self._paused = False
        self._ended = False
        self._scheduled = False

    @property
    def complete(self) -> bool:
        return self._ended and self.stream.state == "completed"

    def start(self, sink: BodySink) -> None:
        self._sink = sink
        self.manager.follow(self)
        self._schedule()

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self._ended:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._deliver_soon)

    def _deliver_soon(self) -> None:
        self._scheduled = False
        self.deliver()

    def deliver(self) -> None:
        """Send what the stream has beyond the cursor; end when it has ended."""
        sink = self._sink
        if sink is None or self._halted():
            return
        stream = self.stream
        if self.cursor < stream.first:
            self._end(UpstreamClosed("the events to resume from were forgotten (max_bytes)"))
            return
        events = stream.since(self.cursor)
        if events:
            self.cursor = stream.total
            sink.body_data(b"".join(e.raw for e in events))
            if self._halted():  # (the sink paused or closed us meanwhile)
                return
        if stream.finished and self.cursor >= stream.total:
            if stream.state == "completed":
                self._end(None)
            else:
                self._end(UpstreamClosed(f"the resumed stream's upstream ended: {stream.state}"))

    def _halted(self) -> bool:
        return self._ended or self._paused

    def _end(self, error: UpstreamError | None) -> None:
        self._ended = True
        self.manager.unfollow(self)
        sink, self._sink = self._sink, None
        if sink is not None:
            sink.body_end(error)

    def close(self) -> None:
        if not self._ended:
            self._end(UpstreamClosed("the resumed stream was closed"))


def _unframed(headers: CIMultiDict[str]) -> list[tuple[str, str]]:
    """Response headers to keep for a stream whose bytes the ids change."""
    return [(k, v) for k, v in headers.items() if k.lower() != "content-length"]


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What a request of a scenario with ``resume:`` is: a first connection (no
    ``Last-Event-ID``: recorded) or a reconnect, with the policy's decision; both for
    ``tenant`` (whose history is looked up, whose stream is kept)."""

    scenario: str
    config: ResumeConfig
    last_event_id: str | None = None
    decision: Decision | None = None
    tenant: str = ANONYMOUS

    def log_fields(self) -> dict[str, object]:
        """The ``request`` line's fields of a reconnect (its id shown as
        :func:`~chaosproxy.core.history.shown_event_id` shows it: never a whole token)."""
        if self.last_event_id is None:
            return {}
        decision = self.decision
        fields: dict[str, object] = {"last_event_id": shown_event_id(self.last_event_id)}
        stream = getattr(decision, "stream", None)
        if stream is not None:
            fields["resumes"] = stream.request_id
        if isinstance(decision, Resume):
            fields["resume_answer"] = "history"
        elif isinstance(decision, Refuse):
            fields["resume_answer"] = str(decision.status)
            fields["resume_reason"] = decision.reason
        elif isinstance(decision, Fresh):
            fields["resume_answer"] = "new_stream"
            fields["resume_reason"] = decision.reason
        return fields


def plan_for(
    manager: ResumeManager,
    scenario: str,
    config: ResumeConfig,
    last_event_id: str | None,
    tenant: str = ANONYMOUS,
) -> ResumePlan:
    """The plan of a request of ``tenant`` whose scenario has ``resume:`` (an empty id
    is none)."""
    if not last_event_id:
        return ResumePlan(scenario, config, tenant=tenant)
    decision = manager.decide(scenario, config, last_event_id, tenant)
    return ResumePlan(scenario, config, last_event_id, decision, tenant)


__all__ = [
    "TOKEN_BYTES",
    "HistoryReply",
    "KeptReply",
    "Mirror",
    "ResumeManager",
    "ResumePlan",
    "plan_for",
    "reader_share",
]
