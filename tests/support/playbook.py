"""The shell in process, on virtual time: a playbook in the spirit of mitmproxy's
(``test/mitmproxy/proxy/tutils.py``), for the proxy's own timing.

:class:`Playbook` drives ``chaosproxy/server/`` whole (the guarded aiohttp server, the
handler, the exchange, the body pump), started as ``ChaosProxy`` starts it
(``start_proxy``; its listening socket is bound but unused) and stopped the same way
(``RunningProxy.close``), with no client or upstream socket and no wall clock:

- the clients are in-memory transports handed to the server's own protocol
  (:class:`Client`): a request's bytes in (or any bytes, at their times: a
  :class:`Call`), what the proxy wrote out, parsed as a client would (llhttp);
- the upstream is :class:`~chaosproxy.upstream.testing.MockUpstream`, the real upstream
  client over in-memory sockets;
- the event loop is :func:`virtual_loop`'s: its clock starts at 0 and advances only
  when every task is idle, straight to the next timer (as the ``looptime`` package
  does), so a 30 s hold takes no time and a busy machine changes no time; the proxy
  reads it through ``ProxyState.clock``.

What happened is one :attr:`Client.timeline` per connection: ``(ms, what, detail)``
in order, where ``ms`` is virtual milliseconds since the start (to the microsecond)
and ``what`` is one of

- ``head``: the response head arrived (detail: its status);
- ``body``: a body chunk arrived (detail: its bytes, one entry per chunk written);
- ``end``: the body's last chunk arrived (detail: None);
- ``closed``: the proxy closed the connection (detail: ``close`` or ``abort``);
- ``left``: the client left, as scripted (detail: None);
- ``action``, ``response_end``: the frame log's line about this request (detail: its
  ``action``, its ``outcome``); every line, whole, is in :attr:`Client.lines`.

Each run's timeline is exact: assert it with ``==``.
"""

from __future__ import annotations

import asyncio
import itertools
import selectors
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httptools
import orjson
from aiohttp import web

from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.start import RunningProxy, start_proxy
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import parse_scenario
from chaosproxy.server.config import Config
from chaosproxy.server.guard import GuardedRunner
from chaosproxy.upstream.testing import Answer, MockUpstream, Request

#: Where the proxy forwards to (the double answers whatever the address).
UPSTREAM_URL = "http://mock.invalid"

#: One entry of a timeline: (virtual ms, what, detail).
Beat = tuple[float, str, Any]


class Deadlock(RuntimeError):
    """Every task waits and no timer is set: on virtual time, nothing would ever happen."""


#: How long (wall seconds) a loop with no timer waits for a thread's wake-up (a
#: ``call_soon_threadsafe``) before it is called deadlocked.
THREAD_WAIT = 1.0


class _VirtualSelector(selectors.BaseSelector):
    """A selector whose wait takes no time: what is ready now is returned at once;
    when nothing is, the clock jumps by the wait the loop asked for (its next timer).
    The real selector still serves the loop's own self-pipe. A thread's work (an
    executor's) takes no virtual time: the clock does not wait for it while a timer is
    due, so what the playbook drives keeps to the loop (the proxy's request path does)."""

    def __init__(self) -> None:
        self.real = selectors.DefaultSelector()
        self.now = 0.0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self.real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self.real.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # only a thread could wake the loop now: give it a second
            ready = self.real.select(THREAD_WAIT)
            if ready:
                return ready
            raise Deadlock("virtual time: every task waits, and no timer would wake one")
        self.now += timeout
        return []

    def close(self) -> None:
        self.real.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self.real.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self.real.get_map()


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time (see :class:`_VirtualSelector`): ``time()`` is 0 at
    its start and moves only while every task is idle."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


def virtual_loop() -> VirtualLoop:
    return VirtualLoop()


def ms(seconds: float) -> float:
    """Virtual seconds as the timelines give them: milliseconds, to the microsecond
    (0.1 + 0.2 s is 300.0 ms, not 300.00000000000006)."""
    return round(seconds * 1000.0, 3)


def sse_answer(*items: bytes | float, end: str = "eof") -> Answer:
    """An SSE answer: events (bytes) and pauses (seconds), in order."""
    return Answer(headers={"Content-Type": "text/event-stream"}, body=items, end=end)  # type: ignore[arg-type]


class _Transport(asyncio.Transport):
    """The proxy's side of one in-memory client connection."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self.client = client
        self.protocol: asyncio.BaseProtocol | None = None
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing:  # (as a socket transport: a write after close goes nowhere)
            return
        self.client.received(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self._end("close")

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self._end("close")

    def abort(self) -> None:
        self._end("abort")

    def _end(self, how: str) -> None:
        if self.closing:
            return
        self.closing = True
        if not (self.client.gone or self.client.settled):
            self.client.beat("closed", how)
        self.client.finished()
        protocol = self.protocol
        if protocol is not None:
            asyncio.get_running_loop().call_soon(protocol.connection_lost, None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(
            name, default
        )

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (16384, 65536)

    def get_write_buffer_size(self) -> int:
        return 0  # the client reads everything at once

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return not self.closing


@dataclass
class Call:
    """One client's request, as the playbook sends it: ``at`` virtual seconds after the
    start; it leaves (closes its connection) at ``leave_at`` seconds, if given."""

    path: str = "/v1/chat/completions"
    scenario: str | None = None
    body: bytes = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    method: str = "POST"
    headers: Sequence[tuple[str, str]] = ()
    at: float = 0.0
    leave_at: float | None = None
    seed: int | None = 7
    #: What the client sends instead of the request, as (seconds after ``at``, bytes):
    #: a head dribbled, a body that stalls, a second request on the connection.
    sends: Sequence[tuple[float, bytes]] | None = None
    #: When the client is done: once it has an answer whole, or once its connection
    #: has ended (a keep-alive connection the proxy closes when idle).
    until: Literal["answer", "close"] = "answer"

    def bytes_at(self) -> list[tuple[float, bytes]]:
        """What it sends, when (virtual seconds since the start)."""
        if self.sends is None:
            return [(self.at, self.head() + self.body)]
        return [(self.at + after, data) for after, data in self.sends]

    def head(self) -> bytes:
        fields = [("Host", "proxy.test"), ("Content-Type", "application/json")]
        if self.scenario is not None:
            fields.append(("X-Chaos-Scenario", self.scenario))
        if self.seed is not None:
            fields.append(("X-Chaos-Seed", str(self.seed)))
        fields += [*self.headers, ("Content-Length", str(len(self.body)))]
        lines = "".join(f"{name}: {value}\r\n" for name, value in fields)
        return f"{self.method} {self.path} HTTP/1.1\r\n{lines}\r\n".encode()


@dataclass
class Client:
    """One in-memory client connection: what it sent, what it got and when."""

    call: Call
    timeline: list[Beat] = field(default_factory=list)
    #: The frame log's lines about its request, whole, each with its virtual ``ms``.
    lines: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    gone: bool = False
    #: The run is over: the proxy stopping closes what is left, unrecorded.
    settled: bool = False
    done: asyncio.Future[None] | None = None
    #: Numbers the beats of every client and log line of one run, in the order they came.
    order: Callable[[], int] = itertools.count().__next__

    def __post_init__(self) -> None:
        self._beats: list[tuple[int, Beat]] = []
        self._parser = httptools.HttpResponseParser(self)
        self._header = b""
        self._loop = asyncio.get_running_loop()
        self.done = self._loop.create_future()
        self.transport = _Transport(self)

    #: Its request's id when no head told it (see :meth:`Playbook.run`).
    assigned: str | None = None

    @property
    def request_id(self) -> str | None:
        return self.headers.get("x-chaos-request-id", self.assigned)

    def beat(self, what: str, detail: Any, at: tuple[int, float] | None = None) -> None:
        seq, when = at if at is not None else (self.order(), ms(self._loop.time()))
        self._beats.append((seq, (when, what, detail)))
        self.timeline[:] = [beat for _, beat in sorted(self._beats, key=lambda b: b[0])]

    def finished(self) -> None:
        assert self.done is not None
        if not self.done.done():
            self.done.set_result(None)

    def received(self, data: bytes) -> None:
        if self.gone:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:  # a broken response is a failed test
            self.beat("broken", str(exc))

    def send(self, data: bytes) -> None:
        """Bytes from the client, as a socket's read hands them to the protocol."""
        protocol = self.transport.protocol
        if self.gone or self.transport.closing or protocol is None:
            return
        assert isinstance(protocol, asyncio.Protocol)
        protocol.data_received(data)

    def leave(self) -> None:
        """The client closes its connection (as a client whose read timed out)."""
        if self.gone or self.transport.closing:
            return
        self.gone = True
        self.beat("left", None)
        self.transport.closing = True
        self.finished()
        protocol = self.transport.protocol
        if protocol is not None:
            protocol.connection_lost(None)

    # llhttp's callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode().lower()] = value.decode()

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.beat("head", self.status)

    def on_body(self, data: bytes) -> None:
        self.body += data
        self.beat("body", data)

    def on_message_complete(self) -> None:
        self.beat("end", None)
        if self.call.until == "answer":
            self.finished()

    def logged(self, seq: int, line: dict[str, Any]) -> None:
        """A frame-log line of its request (``seq``: where it came among the beats)."""
        self.lines.append(line)
        event = line["event"]
        if event == "action":
            self.beat("action", line["action"], (seq, line["ms"]))
        elif event == "response_end":
            self.beat("response_end", line["outcome"], (seq, line["ms"]))


class Playbook:
    """A proxy (``chaosproxy/server/``) whose upstream is ``handler`` (a
    :class:`MockUpstream` handler) and whose scenarios are ``scenarios`` (name: YAML
    text), started as ``ChaosProxy`` starts it (``start_proxy``, the built-in library
    left out) and run on virtual time. ``settings`` are :class:`Config` fields
    (``hold_timeout=5.0``, ``idle_timeout=...``, ``grace=...``); ``stop_at``: when to
    stop it (see :attr:`stop_at`); ``upstream``: the double's class (a subclass that
    misbehaves); ``probes``: what to read of the running proxy, and when."""

    def __init__(
        self,
        handler: Callable[[Request], Answer | Awaitable[Answer]],
        scenarios: Mapping[str, str] | None = None,
        *,
        stop_at: float | None = None,
        upstream: type[MockUpstream] = MockUpstream,
        probes: Mapping[float, Callable[[RunningProxy], Any]] | None = None,
        **settings: Any,
    ) -> None:
        self.handler = handler
        self.scenarios = {
            name: parse_scenario(text, f"<{name}>", default_name=name)
            for name, text in (scenarios or {}).items()
        }
        self.config: Config = EMBEDDED.replace(upstream=UPSTREAM_URL, seed=7, **settings)
        self.upstream_class = upstream
        self.upstream: MockUpstream | None = None
        #: The proxy of the last run (stopped by now).
        self.proxy: RunningProxy | None = None
        #: What to look at in the running proxy, when (virtual seconds), and what was
        #: seen (by the same times).
        self.probes = dict(probes or {})
        self.probed: dict[float, Any] = {}
        #: When the proxy is stopped (``RunningProxy.close``: its grace, then the cut),
        #: in virtual seconds; None: once every call is answered.
        self.stop_at = stop_at
        #: What the stop said did not go as planned (empty: a clean stop), and when it
        #: returned (virtual ms).
        self.problems: list[str] = []
        self.stopped_at: float | None = None
        #: Every frame-log line, whole, in order (each with its virtual ``ms``).
        self.lines: list[dict[str, Any]] = []

    def run(self, *calls: Call) -> list[Client]:
        """Send each call (at its time), until each has its answer whole or its
        connection ended, and its ``response_end`` line is written; then stop the
        proxy. The clients, in the calls' order."""
        with asyncio.Runner(loop_factory=virtual_loop) as runner:
            return runner.run(self._run(calls))

    def play(self, call: Call) -> Client:
        """One call's client (see :meth:`run`)."""
        (client,) = self.run(call)
        return client

    async def _run(self, calls: Sequence[Call]) -> list[Client]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualLoop), "a playbook runs on virtual time"
        log = FrameLog(None)
        clients: list[Client] = []
        ended: dict[str, asyncio.Future[None]] = {}
        order = itertools.count().__next__
        numbered: list[tuple[int, dict[str, Any]]] = []

        def listen(raw: bytes) -> None:
            line = orjson.loads(raw)
            line["ms"] = ms(loop.time())
            self.lines.append(line)
            numbered.append((order(), line))
            request_id = line.get("request_id")
            if line["event"] == "response_end":
                ended.setdefault(request_id, loop.create_future()).set_result(None)

        log.add_listener(listen)
        upstream = self.upstream = self.upstream_class(self.handler)
        proxy = self.proxy = await start_proxy(
            self.config,
            scenarios=self.scenarios,
            log=log,
            upstream_factory=lambda: upstream,
            library=False,
        )
        # (Before any request: each reads it as it goes. The kept streams' too.)
        proxy.state.clock = proxy.state.resume.clock = loop.time
        (server,) = [r.server for r in proxy.runners if isinstance(r, GuardedRunner)]
        assert isinstance(server, web.Server)
        #: The stop at ``stop_at``, once it began.
        stopping: asyncio.Future[asyncio.Task[list[str]]] = loop.create_future()
        for when, probe in self.probes.items():
            loop.call_at(when, self._probe, when, probe, proxy)
        if self.stop_at is not None:
            loop.call_at(self.stop_at, lambda: stopping.set_result(loop.create_task(proxy.close())))
        try:
            for call in calls:
                client = Client(call, order=order)
                clients.append(client)
                loop.call_at(call.at, self._connect, server, client)
                if call.leave_at is not None:
                    loop.call_at(call.leave_at, client.leave)
            for client in clients:
                assert client.done is not None
                await client.done
            # Every request has ended (a request line can come with its end: a body
            # that never came), and every one logged is logged ended. The proxy says
            # only how many run: look each virtual millisecond (no time to the proxy's
            # timers, which fire at their own times), for an hour of virtual time at most.
            give_up = loop.time() + 3600.0
            while proxy.in_flight and not stopping.done():
                if loop.time() > give_up:
                    raise Deadlock(f"{proxy.in_flight} request(s) still running after an hour")
                await asyncio.sleep(0.001)
            for request_id in [x["request_id"] for _, x in numbered if x["event"] == "request"]:
                await ended.setdefault(request_id, loop.create_future())
        finally:
            for client in clients:  # (the proxy closing idle connections is not theirs)
                client.settled = True
            if self.stop_at is None:
                self.problems = await proxy.close()
            else:  # (the stop comes at its time, whatever the clients did)
                self.problems = await (await stopping)
            self.stopped_at = ms(loop.time())
        # Whose request each is: its X-Chaos-Request-Id; a client that got no head (a
        # hold before it, a cut) takes the requests left, in the order they were logged.
        taken = {c.request_id for c in clients}
        left = [x["request_id"] for _, x in numbered if x["event"] == "request"]
        left = [request_id for request_id in left if request_id not in taken]
        for client in clients:  # its request's lines, in their places among its beats
            request_id = client.request_id
            if request_id is None and left:
                request_id = client.assigned = left.pop(0)
            for seq, line in numbered:
                if request_id is not None and line.get("request_id") == request_id:
                    client.logged(seq, line)
        return clients

    def _probe(
        self, when: float, probe: Callable[[RunningProxy], Any], proxy: RunningProxy
    ) -> None:
        self.probed[when] = probe(proxy)

    @staticmethod
    def _connect(server: web.Server, client: Client) -> None:
        protocol = server()
        client.transport.set_protocol(protocol)
        protocol.connection_made(client.transport)
        loop = asyncio.get_running_loop()
        for when, data in client.call.bytes_at():  # (what is due now, sent now)
            if when <= loop.time():
                client.send(data)
            else:
                loop.call_at(when, client.send, data)


__all__ = [
    "Beat",
    "Call",
    "Client",
    "Deadlock",
    "Playbook",
    "VirtualLoop",
    "ms",
    "sse_answer",
    "virtual_loop",
]
