"""One request through the I/O shell: the aiohttp side of a :class:`Session`.

The exchange reports what happens to its request to the session (the request cannot
be served, the upstream's head, its failure, the client left, the proxy is stopping,
a bug of ours) and carries out what the session decides: the HTTP stage's sleeps,
canned answers and cuts, the response head, the body (through the
:class:`~chaosproxy.server.pump.BodyPump`), and the log lines. It sets no outcome itself.

Errors are told apart by type: upstream failures arrive as
:class:`~chaosproxy.upstream.UpstreamError`, a client that left as a ``ConnectionError``
(or a cancelled handler), and anything else is a bug of ours (``proxy_error``: a 500
with the reason before the head, an unclean end after it; never a traceback).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterable
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web
from multidict import CIMultiDict

from chaosproxy.core.actions import Cut, CutRequest, HoldRequest, Respond, Send, Sleep
from chaosproxy.core.frames import format_for_content_type
from chaosproxy.core.history import Refuse, Resume, StreamHistory
from chaosproxy.core.records import FrameFields
from chaosproxy.core.session import Session, forwarded_request_headers, wrote_plain
from chaosproxy.core.unavailable import unavailable
from chaosproxy.observe.journal import RequestEntry
from chaosproxy.observe.logs import content_fields, describe, redact_path, redact_url
from chaosproxy.scenario.fixtures import SCENARIO_HEADER as MOCK_SCENARIO_HEADER
from chaosproxy.server.net import cut_connection
from chaosproxy.server.pump import BodyPump
from chaosproxy.server.resume import KeptReply, ResumePlan
from chaosproxy.upstream import Reply, UpstreamError

if TYPE_CHECKING:
    from chaosproxy.scenario.selection import Choice
    from chaosproxy.server.routes import Target
    from chaosproxy.server.state import ProxyState


def _is_sse(reply: Reply, choice: Choice) -> bool:
    """Whether a 200 reply's body is SSE (a scenario's ``format: sse`` says so too)."""
    if reply.status != 200:
        return False
    if reply.headers.get("Content-Encoding", "identity").lower() != "identity":
        return False  # compressed: no events to read
    scenario = choice.scenario
    if scenario is not None and scenario.format != "auto":
        return scenario.format == "sse"
    return format_for_content_type(reply.headers.get("Content-Type")) == "sse"


def _upstream_id(stream: StreamHistory, event_id: str | None) -> str | None:
    """The upstream's own id of the kept event the client sees as ``event_id``."""
    if event_id is None:
        return None
    index = stream.index_of(event_id)
    kept = None if index is None else stream.get(index)
    return None if kept is None else kept.upstream_id


#: Request bodies up to this size are read whole before they are forwarded (so a
#: request on a stale keep-alive connection can be sent again).
BUFFERED_REQUEST_BODY = 2**20


def answer(respond: Respond) -> web.Response:
    """An answer the proxy gives itself (its errors), for aiohttp to send."""
    return web.Response(status=respond.status, headers=respond.headers, body=respond.body)


class Exchange:
    """Forward one request, stream the answer back, log it."""

    def __init__(
        self,
        request: web.Request,
        state: ProxyState,
        session: Session,
        choice: Choice,
        target: Target | None = None,
        *,
        resume: ResumePlan | None = None,
    ) -> None:
        self.request = request
        self.state = state
        #: The upstream this request goes to (None: no route matched, or a test's
        #: exchange: the proxy's only upstream).
        self.target = target
        self._session = session
        self.choice = choice
        self.log = state.log.for_request(
            request_id=session.request_id,
            scenario=choice.scenario.name if choice.scenario else None,
        )
        self._content = state.log.content
        #: The response once its head is out (None before).
        self._resp: web.StreamResponse | None = None
        #: Under a scenario with ``resume:``: a first connection or a reconnect.
        self.resume = resume
        #: The kept stream this response's events come from (for ``upstream_ids``).
        self._kept: StreamHistory | None = None
        #: The kept stream whose generation this response belongs to (its ledger).
        self._joined: StreamHistory | None = None
        #: Whether the request line was logged; the action lines waiting for it.
        self._logged = False
        self._held_lines: list[dict[str, Any]] = []
        #: The request body as read (bytes, a stream of it, or None) and its length.
        self._body: bytes | AsyncIterable[bytes] | None = None
        self._length: int | None = None
        #: Seconds the faults' holds have held the response since it last made progress
        #: (``_progress``: head decided, body bytes), for the hold timeout.
        self._held = 0.0
        self._progress: tuple[bool, int] = (False, 0)
        self._hold_started = 0.0
        #: The ``response_end`` line is written (by the task, :meth:`stop` or
        #: :meth:`last_words`).
        self._end_logged = False
        self._began = state.clock()
        #: The body being streamed (upstream, kept or replayed), once its head is in.
        self._upstream: Reply | None = None

    @property
    def session(self) -> Session:
        return self._session

    # ------------------------------------------------------------------ the request

    def _log_request(self, entry: RequestEntry | None = None) -> None:
        """The ``request`` line, once: with the journal's fields when the body was read
        whole (``entry``), then any ``action`` line held back for it."""
        if self._logged:
            return
        self._logged = True
        session = self.session
        choice = self.choice
        target = self.target
        self.state.exchanges.add(self)
        self.log.info(
            "request",
            seed=session.seed,
            method=self.request.method,
            path=redact_path(session.path),
            **({"ordinal": choice.ordinal} if choice.scenario else {}),
            **({} if choice.active else {"inactive": True}),
            **({"upstream": target.label} if target is not None else {}),
            **(self.resume.log_fields() if self.resume is not None else {}),
            **({"client_choices_ignored": list(choice.ignored)} if choice.ignored else {}),
            **(entry.line_fields(self._logged_body()) if entry is not None else {}),
        )
        journal = self.state.journal
        if entry is not None and journal is not None:
            journal(session.request_id, entry)
        for fields in self._held_lines:
            self.log.info("action", **fields)
        self._held_lines.clear()

    def _logged_body(self) -> bytes | None:
        """The body, for the request line (with ``--log-content`` only)."""
        return self._body if self._content and isinstance(self._body, bytes) else None

    async def _read_request(self) -> None:
        """Read the request body (whole when small: ``_request_body``), then log the
        ``request`` line with what it asks (the journal)."""
        if self._logged:
            return
        self._body, self._length = await self._request_body()
        entry = RequestEntry.read(
            self.request.method,
            self.session.path,
            self.request.headers.items(),
            self._body if isinstance(self._body, bytes) else None,  # (not a large stream)
            keep=self.state.config.journal_entry_bytes,
            content=self._content,
        )
        self._log_request(entry)

    async def _hold_request(self, hold: HoldRequest) -> None:
        """``request_delay``: nothing of the body is read for a while."""
        await asyncio.sleep(hold.seconds)
        self._held_lines.append(self.session.request_held(hold))

    async def _cut_request(self, cut: CutRequest) -> None:
        """``request_cut``: read that much of the body, then end the connection."""
        received = 0
        if self.request.body_exists:
            while received < cut.after_bytes:
                chunk = await self.request.content.read(cut.after_bytes - received)
                if not chunk:
                    break
                received += len(chunk)
        self._log_request()
        self.log.info("action", **self.session.request_cut(cut, received))
        await cut_connection(self.request, "reset" if cut.how == "reset" else "close")

    async def run(self, refusal: str | None = None, status: int = 400) -> web.StreamResponse:
        """Forward and stream back; with ``refusal``, answer ``status`` with that reason."""
        session = self.session
        try:
            if refusal is not None:
                self._log_request()
                return answer(session.refuse(status, refusal, self.state.clock()))
            for action in session.start(self.state.clock()):
                if isinstance(action, HoldRequest):
                    await self._hold_request(action)
                    continue
                if isinstance(action, CutRequest):
                    await self._cut_request(action)
                    return web.Response(status=500)  # never sent: cut
                await self._read_request()
                if isinstance(action, Sleep):
                    await self.sleep(action.seconds, action.fault)
                    if session.ended:  # held too long: aborted
                        return self._resp or web.Response(status=500)  # never sent
                elif isinstance(action, Respond):
                    return await self._respond(action)
                else:
                    await self.cut(action)
                    return self._resp or web.Response(status=500)  # never sent: cut
            await self._read_request()
            return await self._forward()
        except asyncio.CancelledError:
            cancelled(self)
            raise
        except ConnectionError as exc:
            return await connection_lost(self, exc)
        except Exception as exc:
            return await self._bug(exc)
        finally:
            self._end()

    async def _bug(self, exc: Exception) -> web.StreamResponse:
        message = f"internal error: {type(exc).__name__}: {describe(exc)}"
        if self.session.internal_error(message):
            await self.abort()  # the head is out: all we can do is not end cleanly
            return self._resp or web.Response(status=500)
        return answer(self.session.error_answer())

    def _client_left(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def _respond(self, canned: Respond) -> web.StreamResponse:
        """A fault's canned answer (``status``), instead of forwarding."""
        head = self.session.respond(canned)
        resp = await self._prepare(web.StreamResponse(status=head.status, headers=head.headers))
        if canned.body:
            self.log_frame(Send(canned.body), self.state.clock())
            await resp.write(canned.body)
        await resp.write_eof()
        if self._client_left():  # the end went into a connection the client had left
            self.session.client_gone()
        else:
            self.session.finish()
        return resp

    async def _forward(self) -> web.StreamResponse:
        session = self.session
        request = self.request
        plan = self.resume
        decision = plan.decision if plan is not None else None
        if isinstance(decision, Refuse):  # the proxy answers itself: 204 or 404
            if decision.stream is not None:  # (an answer about that generation)
                session.join(decision.stream.ledger)
                self._joined = decision.stream
            return await self._respond(Respond(decision.status, {}, b""))
        if isinstance(decision, Resume):  # from history, then live
            self._kept = decision.stream
            session.join(decision.stream.ledger)
            self._joined = decision.stream
            replay = self.state.resume.replay(decision.stream, decision.start)
            try:
                return await self._stream(replay)
            finally:
                replay.close()
        body, length = self._body, self._length
        config = self.state.config
        target = self.target
        client = (
            self.state.upstream if target is None or target.upstream is None else target.upstream
        )
        headers = forwarded_request_headers(
            request.headers.items(), trusted=self.state.scenarios.trust_client
        )
        if plan is not None:  # the proxy plays the server that knows the ids
            headers = [(k, v) for k, v in headers if k.lower() != "last-event-id"]
        chosen = self.choice.scenario
        if chosen is not None and chosen.mock and target is not None and target.direct:
            headers.append((MOCK_SCENARIO_HEADER, chosen.name))  # its mock: fixtures first
        try:
            upstream = await client.request(
                request.method,
                session.path,
                headers,
                body,
                content_length=length,
                head_timeout=config.head_timeout,
                idle_timeout=config.idle_timeout,
            )
        except UpstreamError as exc:
            where = redact_url(target.url) if target is not None else self.state.upstream_label
            got = unavailable(exc.reason, describe(exc), where, config.head_timeout)
            return answer(session.unavailable(got.status, got.message, exc.reason))
        if plan is not None and _is_sse(upstream, self.choice):
            scenario = self.choice.scenario
            upstream = self.state.resume.keep(
                upstream,
                plan.scenario,
                plan.config,
                session.request_id,
                plan.tenant,
                upstream=client,
                provider=scenario.provider if scenario is not None else "auto",
                path=session.path,
            )
            if isinstance(upstream, KeptReply):
                self._kept = upstream.stream
                session.join(upstream.stream.ledger)
                self._joined = upstream.stream
        try:
            return await self._stream(upstream)
        finally:
            # On any early exit (client gone, cut, error) this drops the upstream
            # connection at once; a body read to its end is already back in the pool.
            if not upstream.complete:
                upstream.close()

    async def _request_body(self) -> tuple[bytes | AsyncIterable[bytes] | None, int | None]:
        """The client's request body: read whole when small, else streamed."""
        request = self.request
        if not request.body_exists:
            return None, None
        length = request.content_length
        if length is not None and length <= BUFFERED_REQUEST_BODY:
            return await request.content.read(), None
        return request.content.iter_chunked(2**16), length

    async def _stream(self, upstream: Reply) -> web.StreamResponse:
        self._upstream = upstream
        head = self.session.response_head(
            upstream.status, upstream.reason, list(upstream.headers.items())
        )
        reason = head.reason
        if reason is not None and not (reason.isascii() and reason.isprintable()):
            reason = None  # (aiohttp refuses control characters: the standard phrase)
        resp = web.StreamResponse(
            status=head.status, reason=reason, headers=CIMultiDict(head.headers)
        )
        writer = await resp.prepare(self.request)
        self._resp = resp
        transport = self.request.transport
        if writer is None or transport is None:  # the client left during prepare()
            self.session.client_gone()
            return resp
        chunked = "chunked" in resp.headers.get("Transfer-Encoding", "").lower()
        # An upstream failure mid-body (its framing broken too) is the pump's: it ends
        # the response without a clean end, once.
        await BodyPump(
            self, transport, writer, upstream, chunked=chunked, clock=self.state.clock
        ).run()
        return resp

    async def _prepare(self, resp: web.StreamResponse) -> web.StreamResponse:
        await resp.prepare(self.request)
        self._resp = resp
        return resp

    # ------------------------------------------------------------------ PumpHost

    def log_frame(self, send: Send, now: float) -> None:
        """The ``frame`` line of one write to the client."""
        if not send.events and not self._content:  # a passthrough write's: no dict
            seq, offset, size, t_ms = wrote_plain(self.session, len(send.data), now)
            self.log.plain_frame(seq, offset, size, t_ms)  # (no star-call: a generic one)
            return
        line = self.session.wrote(send, now)
        kept = self._kept
        if kept is not None and send.events:
            upstream_ids = [_upstream_id(kept, e.frame.id) for e in send.events]
            if any(u is not None for u in upstream_ids):
                line["upstream_ids"] = upstream_ids
        if self._content:
            line.update(cast(FrameFields, content_fields(send.data)))
        self.log.frame(line)

    def log_frames(self, sends: list[Send], now: float) -> None:
        """The ``frame`` lines of writes made together (one read's events), in one log write."""
        lines = [self.session.wrote(send, now) for send in sends]
        kept = self._kept
        if kept is not None:
            for send, line in zip(sends, lines, strict=True):
                if send.events:
                    upstream_ids = [_upstream_id(kept, e.frame.id) for e in send.events]
                    if any(u is not None for u in upstream_ids):
                        line["upstream_ids"] = upstream_ids
        if self._content:
            for send, line in zip(sends, lines, strict=True):
                line.update(cast(FrameFields, content_fields(send.data)))
        self.log.frames(lines)

    async def sleep(self, seconds: float, fault: str = "") -> None:
        """A fault's hold before the response's head (the HTTP stage): send nothing for
        ``seconds`` (``math.inf``: for ever), bounded by the hold timeout
        (:meth:`hold_begin`); the body pump holds with timers instead."""
        wait, expires = self.hold_begin(seconds, fault)
        try:
            if math.isinf(wait):  # no limit at all (hold_timeout=math.inf)
                await asyncio.Event().wait()
            await asyncio.sleep(wait)
        finally:
            self.hold_end()
        if expires:
            await self.hold_expired(fault)

    def hold_begin(self, seconds: float, fault: str) -> tuple[float, bool]:
        """A fault's hold of ``seconds`` (``math.inf``: a ``hang``, a ``stall`` for
        ever) begins: how long to hold, and whether the hold timeout ends it then. Holds
        in a row, with nothing sent between them, may hold the response
        ``hold_timeout`` seconds in all: then the session ends it (``cut``, ``reason:
        "hold timeout"``) and the connection is aborted (:meth:`hold_expired`)."""
        session = self.session
        session.hold(seconds)
        progress = (session.head is not None, session.bytes)
        if progress != self._progress:  # something went out since the last hold
            self._progress, self._held = progress, 0.0
        left = self.state.config.hold_timeout - self._held
        self._hold_started = self.state.clock()
        if seconds <= left:
            return seconds, False
        return max(left, 0.0), True

    def hold_end(self) -> None:
        """The hold ended (its time passed, or the response ended meanwhile)."""
        self._held += self.state.clock() - self._hold_started

    async def hold_expired(self, fault: str) -> None:
        """The hold reached the hold timeout: the session ends the response, and the
        connection is aborted (unless the response ended meanwhile)."""
        session = self.session
        if session.ended:  # ended meanwhile (the proxy stopping): nothing to time out
            return
        self.log.info("action", **session.hold_timeout(fault, self.state.config.hold_timeout))
        await self.abort()

    async def cut(self, cut: Cut) -> None:
        self.log.info("action", **self.session.cut(cut))
        if cut.how == "close" and self._resp is not None:
            await self._resp.write_eof()
        else:
            await cut_connection(self.request, cut.how)

    async def abort(self) -> None:
        await cut_connection(self.request, "abort")

    async def write_eof(self) -> None:
        assert self._resp is not None
        await self._resp.write_eof()

    # ------------------------------------------------------------------ the end

    def stop(self) -> None:
        """The proxy is stopping and cuts this request now: it ends as ``shutdown``
        (unless it had ended), its connection is closed without the body's end, and its
        ``response_end`` is logged here and now, not when its task next runs (on a busy
        loop, that can be after the process has exited). Its task, cancelled next, only
        unwinds."""
        if not self.session.ended:
            self.session.shutdown()
            transport = self.request.transport
            if transport is not None and not transport.is_closing():
                transport.close()
            upstream = self._upstream
            if upstream is not None and not upstream.complete:
                upstream.close()  # (its task would, when it next runs)
        self._end()

    def _end(self) -> None:
        # Under the lock the watchdog's last words take: one response_end, whoever
        # writes it.
        self._log_request()  # (a request that ended before its body was read)
        with self.state.ending:
            if self._end_logged:  # stop() wrote it already
                return
            self._end_logged = True
            self.state.exchanges.discard(self)
            session = self.session
            if not session.ended:  # every path above ends it: a guard against a bug
                session.internal_error("internal error: the request ended without an outcome")
            line = session.summary(self.state.clock())
            if self.choice.local:  # numbered by this replica alone: its fleet was away
                line["fleet_state"] = "local"
            joined, content = self._joined, session.content
            if joined is not None and content is not None:  # (a fleet's other replicas)
                self.state.resume.sent(joined, content.sent.trail)
            for violation in session.violations():
                self.log.info("violation", **violation.fields())
            self.log.info("response_end", **line)
        self.state.log.flush()

    def last_words(self) -> bool:
        """The process exits with this request still running, its event loop too busy to
        have cut it: write its ``response_end`` now, ``shutdown``, from what is known
        at once (the content is not compared: no time). The exit's watchdog thread
        calls this, holding ``state.ending``; it changes nothing else (the loop's thread
        may be using the session). True if it wrote the line."""
        if self._end_logged:
            return False
        self._end_logged = True
        line = self.session.watchdog_summary((self.state.clock() - self._began) * 1000.0)
        self.log.info("response_end", **line)
        return True


def cancelled(ex: Exchange) -> None:
    """The handler's task of ``ex`` was cancelled: the proxy stops, or the client left."""
    if ex.state.stopping:
        ex.session.shutdown()
    else:
        ex.session.client_gone()


async def connection_lost(ex: Exchange, exc: ConnectionError) -> web.StreamResponse:
    """The client's socket failed under ``ex``: it left, or (when it did not) a bug."""
    if not ex._client_left():
        return await ex._bug(exc)
    ex.session.client_gone()
    return ex._resp or web.Response(status=499)  # never sent: nobody to send to
