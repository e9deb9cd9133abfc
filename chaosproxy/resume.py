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
  after ``max_bytes`` read with nobody listening, or when the proxy stops.
* :class:`HistoryReply` answers a reconnect from history: an upstream stand-in (the
  :class:`~chaosproxy.upstream.Reply` interface), so the reconnect's session frames and
  faults it like any body. It sends the kept events from a point, then follows the
  stream live until its upstream ends.
* :class:`ResumeManager` holds the store and both kinds, and closes them on stop.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from multidict import CIMultiDict

from chaosproxy.core.framing import DEFAULT_MAX_SIZE
from chaosproxy.core.history import (
    Answer,
    Decision,
    Fresh,
    HistoryStore,
    Recorder,
    Replay,
    ResumeConfig,
    StreamHistory,
)
from chaosproxy.upstream import Reply, UpstreamClosed, UpstreamError

if TYPE_CHECKING:
    from chaosproxy.upstream.response import BodySink


class ResumeManager:
    """The kept streams of one proxy, their background readers and live followers."""

    def __init__(self, max_event_size: int = DEFAULT_MAX_SIZE) -> None:
        self.store = HistoryStore()
        self.max_event_size = max_event_size
        self._keepers: set[KeptReply] = set()
        self._followers: dict[int, set[HistoryReply]] = {}
        self.closed = False

    def decide(self, scenario: str, config: ResumeConfig, last_event_id: str) -> Decision:
        return self.store.decide(scenario, config, last_event_id, time.monotonic())

    def keep(
        self,
        reply: Reply,
        scenario: str,
        config: ResumeConfig,
        request_id: str,
        *,
        provider: str = "auto",
        path: str = "",
    ) -> Reply:
        """Record ``reply`` (an SSE body) as a kept stream; the reply to pump instead.
        ``provider`` and ``path`` say how its events are read for its clean answer."""
        if self.closed:
            return reply
        stream = self.store.begin(
            scenario, config, request_id, _unframed(reply.headers), time.monotonic()
        )
        return KeptReply(self, reply, stream, provider=provider, path=path)

    def replay(self, stream: StreamHistory, start: int) -> HistoryReply:
        return HistoryReply(self, stream, start)

    def notify(self, stream: StreamHistory) -> None:
        """New events (or the end) in ``stream``: wake those following it."""
        for follower in list(self._followers.get(id(stream), ())):
            follower.deliver()

    def following(self, stream: StreamHistory) -> bool:
        return bool(self._followers.get(id(stream)))

    def follow(self, reply: HistoryReply) -> None:
        self._followers.setdefault(id(reply.stream), set()).add(reply)

    def unfollow(self, reply: HistoryReply) -> None:
        followers = self._followers.get(id(reply.stream))
        if followers is not None:
            followers.discard(reply)
            if not followers:
                del self._followers[id(reply.stream)]
                for keeper in list(self._keepers):
                    if keeper.stream is reply.stream:
                        keeper.unattended_since = time.monotonic()

    @property
    def readers(self) -> int:
        """Upstreams read in the background now (for tests and /health-like checks)."""
        return len(self._keepers)

    def forget(self) -> None:
        """``POST /reset``: the kept streams are forgotten and their background readers
        stop; connections serving a reconnect now go on to their end."""
        for keeper in list(self._keepers):
            keeper.stop()
        self.store.clear()

    def close(self) -> None:
        """The proxy stops: every background reader ends now, and the history goes."""
        self.closed = True
        for keeper in list(self._keepers):
            keeper.stop()
        for followers in list(self._followers.values()):
            for follower in list(followers):
                follower.close()
        self.store.clear()


class KeptReply:
    """An upstream SSE reply recorded into its stream's history (see the module doc)."""

    def __init__(
        self,
        manager: ResumeManager,
        upstream: Reply,
        stream: StreamHistory,
        *,
        provider: str = "auto",
        path: str = "",
    ) -> None:
        self.manager = manager
        self.upstream = upstream
        self.stream = stream
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
        """The request is over before its upstream: keep reading it, unattended."""
        if self._detached or self._stopped:
            return
        self._detached = True
        self._sink = None
        if self.stream.finished or self.manager.closed:
            self.stop()
            return
        self.manager._keepers.add(self)
        self.unattended_since = time.monotonic()
        self._arm()
        self.upstream.resume_reading()  # the pump may have paused it

    # ------------------------------------------------------------------ BodySink

    def body_data(self, data: bytes) -> None:
        now = time.monotonic()
        out = self.recorder.feed(data, now)
        self.manager.notify(self.stream)
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
        now = time.monotonic()
        tail = self.recorder.eof(now)
        self.stream.end("completed" if error is None else "failed", now)
        self.manager.notify(self.stream)
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
        now = time.monotonic()
        retention = self.stream.config.retention
        gone = not manager.store.holds(self.stream) and not manager.following(self.stream)
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
        self.stream.end("abandoned", time.monotonic())
        self.upstream.close()  # (its body_end comes back here; the stream has ended)
        self.manager.notify(self.stream)
        self._finish()

    def _finish(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.manager._keepers.discard(self)


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
    ``Last-Event-ID``: recorded) or a reconnect, with the policy's decision."""

    scenario: str
    config: ResumeConfig
    last_event_id: str | None = None
    decision: Decision | None = None

    def log_fields(self) -> dict[str, object]:
        """The ``request`` line's fields of a reconnect."""
        if self.last_event_id is None:
            return {}
        decision = self.decision
        fields: dict[str, object] = {"last_event_id": self.last_event_id[:200]}
        stream = getattr(decision, "stream", None)
        if stream is not None:
            fields["resumes"] = stream.request_id
        if isinstance(decision, Replay):
            fields["resume_answer"] = "history"
        elif isinstance(decision, Answer):
            fields["resume_answer"] = str(decision.status)
            fields["resume_reason"] = decision.reason
        elif isinstance(decision, Fresh):
            fields["resume_answer"] = "new_stream"
            fields["resume_reason"] = decision.reason
        return fields


def plan_for(
    manager: ResumeManager, scenario: str, config: ResumeConfig, last_event_id: str | None
) -> ResumePlan:
    """The plan of a request whose scenario has ``resume:`` (an empty id is none)."""
    if not last_event_id:
        return ResumePlan(scenario, config)
    return ResumePlan(
        scenario, config, last_event_id, manager.decide(scenario, config, last_event_id)
    )


__all__ = ["HistoryReply", "KeptReply", "ResumeManager", "ResumePlan", "plan_for"]
