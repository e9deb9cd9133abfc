"""Background readers of kept streams (chaosproxy.server.resume), driven by a scripted reply.

A *background reader* is a kept stream's upstream read on after its client left. What is
proven, without sockets: a reader stops when the store lets its stream go (beyond
``streams``, past ``retention``), unless a reconnect follows it (then when the last
follower leaves); a client that leaves when the store no longer holds its stream is not
read on; one upstream has at most ``max_readers`` readers (half of
``--upstream-max-connections``), the rest end ``abandoned``; and what a reader reads is
counted in the store's bytes (events, and an event not ended yet).
"""

from __future__ import annotations

from multidict import CIMultiDict

from chaosproxy.core.history import ResumeConfig
from chaosproxy.core.tenancy import ANONYMOUS
from chaosproxy.server.resume import HistoryReply, KeptReply, ResumeManager, reader_share
from chaosproxy.upstream import UpstreamError
from chaosproxy.upstream.response import BodySink
from tests.support.scripted_upstream import until


class ScriptedReply:
    """An upstream SSE reply whose body a test pushes with :meth:`send`."""

    def __init__(self) -> None:
        self.status = 200
        self.reason = "OK"
        self.headers: CIMultiDict[str] = CIMultiDict({"Content-Type": "text/event-stream"})
        self.complete = False
        self.closed = False
        self.sink: BodySink | None = None

    def start(self, sink: BodySink) -> None:
        self.sink = sink

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def send(self, data: bytes) -> None:
        assert self.sink is not None and not self.closed
        self.sink.body_data(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.sink is not None:
                self.sink.body_end(UpstreamError("closed"))


class Sink:
    def body_data(self, data: bytes) -> None:
        pass

    def body_end(self, error: UpstreamError | None) -> None:
        pass


class Client:
    """What the exchange does with a kept reply: starts it into a sink; ``leave()`` is
    the client going (the exchange closes its upstream)."""

    def __init__(self, reply: KeptReply) -> None:
        self.reply = reply
        self.got = b""
        reply.start(self)

    def body_data(self, data: bytes) -> None:
        self.got += data

    def body_end(self, error: UpstreamError | None) -> None:
        pass

    def leave(self) -> None:
        self.reply.close()


def kept(
    manager: ResumeManager,
    config: ResumeConfig,
    n: int,
    *,
    upstream: object = "up",
    tenant: str = ANONYMOUS,
) -> tuple[ScriptedReply, Client]:
    scripted = ScriptedReply()
    reply = manager.keep(scripted, "s", config, f"r-{n}", tenant, upstream=upstream)
    assert isinstance(reply, KeptReply)
    client = Client(reply)
    scripted.send(b"data: first\n\n")
    return scripted, client


async def test_a_reader_stops_when_the_store_drops_its_stream() -> None:
    manager = ResumeManager()
    config = ResumeConfig(streams=2)
    first, client = kept(manager, config, 1)
    client.leave()
    assert manager.readers == 1 and not first.closed
    first.send(b"data: read on\n\n")  # read on, into the history
    [stream] = manager.store.streams()
    assert stream.total == 2
    kept(manager, config, 2)
    assert manager.readers == 1 and not first.closed
    kept(manager, config, 3)  # beyond streams: the first is dropped, its reader stops
    assert first.closed and manager.readers == 0
    assert stream.state == "abandoned" and not manager.store.holds(stream)


async def test_a_client_that_leaves_a_stream_already_dropped_is_not_read_on() -> None:
    manager = ResumeManager()
    config = ResumeConfig(streams=1)
    first, client = kept(manager, config, 1)
    kept(manager, config, 2)  # the first stream goes while its client is still there
    assert not first.closed  # (a client still reading is not a background reader)
    client.leave()
    assert first.closed and manager.readers == 0


async def test_a_reader_whose_stream_expires_stops() -> None:
    manager = ResumeManager()
    config = ResumeConfig.model_validate({"retention": "1ms"})
    first, client = kept(manager, config, 1)
    client.leave()
    assert manager.readers == 1
    await until(lambda: first.closed)  # (the reader's own timer: no event to await)
    assert manager.readers == 0


async def test_a_followed_stream_is_read_on_until_its_last_follower_leaves() -> None:
    manager = ResumeManager()
    config = ResumeConfig(streams=1)
    first, client = kept(manager, config, 1)
    client.leave()
    [stream] = manager.store.streams()
    follower = HistoryReply(manager, stream, 0)
    follower.start(Sink())
    kept(manager, config, 2)  # dropped from the store, but a reconnect follows it
    assert not first.closed and manager.readers == 1
    follower.close()  # the reconnect ends: nobody can get the stream any more
    assert first.closed and manager.readers == 0


def test_the_reader_share_is_half_the_upstreams_connections() -> None:
    assert [reader_share(n) for n in (1, 2, 3, 50, 4096)] == [0, 1, 1, 25, 2048]


async def test_an_upstream_has_at_most_its_share_of_readers() -> None:
    manager = ResumeManager(max_readers=2)
    config = ResumeConfig()
    replies = []
    for n in range(4):
        scripted, client = kept(manager, config, n, upstream="a")
        client.leave()
        replies.append(scripted)
    assert [r.closed for r in replies] == [False, False, True, True]
    states = [s.state for s in manager.store.streams()]
    assert states == ["live", "live", "abandoned", "abandoned"]
    assert (manager.readers, manager.readers_of("a")) == (2, 2)
    # Another upstream has a share of its own.
    other, client = kept(manager, config, 9, upstream="b")
    client.leave()
    assert not other.closed and manager.readers_of("b") == 1
    # A reader that ends frees its place.
    replies[0].sink.body_end(None)  # type: ignore[union-attr]
    assert manager.readers_of("a") == 1
    again, client = kept(manager, config, 10, upstream="a")
    client.leave()
    assert not again.closed and manager.readers_of("a") == 2


async def test_no_share_means_nothing_is_read_on() -> None:
    """``--upstream-max-connections 1``: the one connection is never held for nobody."""
    manager = ResumeManager(max_readers=reader_share(1))
    scripted, client = kept(manager, ResumeConfig(), 1)
    client.leave()
    assert scripted.closed and manager.readers == 0


async def test_what_a_reader_reads_counts_in_the_stores_bytes_and_is_bounded() -> None:
    manager = ResumeManager()
    config = ResumeConfig(max_bytes=200)
    scripted, client = kept(manager, config, 1)
    client.leave()
    store = manager.store
    before = store.bytes
    scripted.send(b"data: half an ev")
    assert store.bytes == before + len(b"data: half an ev")
    scripted.send(b"ent\n\n")
    [stream] = store.streams()
    assert stream.pending == 0 and stream.total == 2 and store.bytes == stream.bytes
    # Nobody follows: it stops once max_bytes more were read, and holds at most that.
    for _ in range(10):
        if scripted.closed:
            break
        scripted.send(b"data: " + b"x" * 50 + b"\n\n")
    assert scripted.closed and manager.readers == 0
    assert stream.bytes <= 200 and stream.state == "abandoned"
