"""Recording a real upstream's answers into mock fixtures (docs/mock.md, Recording).

:class:`AnswerRecorder` forwards one request to a real upstream with the proxy's own
upstream client (the headers forwarded as the proxy forwards them, no fault), streams
the answer back to the client as it comes, and reads it on the way with a
:class:`~chaosproxy.mock.transcript.Transcript`. When the answer is a whole stream, its
fixture is appended to the fixture file and handed to ``on_recorded`` (record-on-miss
serves it from then on); when it is not (an error status, garbage, a stream cut short),
one line on stderr says why and nothing is written. Both ``chaosproxy record`` (every
request) and ``serve --record-on-miss`` (the requests no fixture matches, from the
built-in mock) use it.

Nothing of a request's credentials is written: a fixture keeps the last user message
and the tools' names only, and what is printed goes through the proxy's redaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import orjson
from aiohttp import web

from chaosproxy.core.head import RESPONSE_DROP, UNTRUSTED_PREFIX, forwarded_request_headers
from chaosproxy.core.llm_request import read_request
from chaosproxy.core.redact import redact_path, redact_text, redact_url
from chaosproxy.mock.transcript import NotRecorded, Transcript, append_fixtures
from chaosproxy.observe.logs import describe
from chaosproxy.scenario.fixtures import Fixture
from chaosproxy.server.net import cut_connection
from chaosproxy.upstream import UpstreamError
from chaosproxy.upstream.factory import PoolSettings, pool_for

#: Reads held before the upstream is paused (the client is slower than the upstream).
_HELD = 16


class RecordSettings(PoolSettings, Protocol):
    """What a recorder takes of the settings (the server's ``Config`` has them)."""

    @property
    def head_timeout(self) -> float | None: ...
    @property
    def idle_timeout(self) -> float | None: ...


class _Sink:
    """The upstream body, queued for the request's task (the pool calls back)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | UpstreamError | None] = asyncio.Queue()

    def body_data(self, data: bytes) -> None:
        self.queue.put_nowait(bytes(data))

    def body_end(self, error: UpstreamError | None) -> None:
        self.queue.put_nowait(error)


class AnswerRecorder:
    """Forwards requests to ``url`` and records their streamed answers into ``out``."""

    def __init__(
        self,
        url: str,
        out: Path,
        settings: RecordSettings,
        *,
        on_recorded: Callable[[Fixture], None] | None = None,
    ) -> None:
        self.url = url
        self.out = out
        self._settings = settings
        self._pool = pool_for(url, settings)
        self._on_recorded = on_recorded
        #: Answers recorded, and answers passed over (each said on stderr).
        self.recorded = 0
        self.passed_over = 0

    async def close(self) -> None:
        await self._pool.close()

    async def forward(self, request: web.Request, body: bytes) -> web.StreamResponse:
        """``request`` (its ``body`` read) to the upstream; its answer to the client, and
        into the fixture file when it is a whole stream."""
        shown = f"{request.method} {redact_path(request.path_qs)}"
        headers = [
            (name, value)
            for name, value in forwarded_request_headers(request.headers.items())
            if not name.lower().startswith(UNTRUSTED_PREFIX)  # the mock's knobs
        ]
        try:
            reply = await self._pool.request(
                request.method,
                request.path_qs,
                headers,
                body,
                content_length=len(body),
                head_timeout=self._settings.head_timeout,
                idle_timeout=self._settings.idle_timeout,
            )
        except UpstreamError as exc:
            message = f"upstream {redact_url(self.url)} failed: {describe(exc)}"
            self._pass_over(shown, message)
            payload = {"error": {"type": "chaosproxy_error", "message": message}}
            return web.Response(
                status=502, body=orjson.dumps(payload), content_type="application/json"
            )
        transcript = Transcript(request.path, reply.status, reply.headers.get("Content-Type"))
        response = web.StreamResponse(status=reply.status, reason=reply.reason)
        for name, value in reply.headers.items():
            if name.lower() not in RESPONSE_DROP:
                response.headers.add(name, value)
        sink = _Sink()
        reply.start(sink)
        paused = False
        failed = False
        try:
            await response.prepare(request)
            while True:
                if paused and sink.queue.empty():
                    reply.resume_reading()
                    paused = False
                item = await sink.queue.get()
                if item is None:
                    transcript.end()
                    break
                if isinstance(item, UpstreamError):
                    transcript.fail(f"the upstream body failed: {describe(item)}")
                    failed = True
                    break
                transcript.feed(item)
                if not paused and sink.queue.qsize() >= _HELD:
                    reply.pause_reading()
                    paused = True
                await response.write(item)
            if failed:  # the client sees it failed, as the upstream's end was seen
                await cut_connection(request, "abort")
            else:
                await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            transcript.client_left()  # (after the terminal event: still a whole answer)
            reply.close()
            self._settle(shown, request.path, body, transcript)
            raise
        self._settle(shown, request.path, body, transcript)
        return response

    def _settle(self, shown: str, path: str, body: bytes, transcript: Transcript) -> None:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            self._pass_over(shown, "the request body is not JSON")
            return
        if not isinstance(payload, dict):
            self._pass_over(shown, "the request body is not a JSON object")
            return
        try:
            fixture = transcript.fixture(read_request(path, payload))
        except NotRecorded as exc:
            self._pass_over(shown, str(exc))
            return
        try:
            append_fixtures(self.out, [fixture])
        except (OSError, ValueError) as exc:
            self._pass_over(shown, f"cannot write {self.out}: {exc}")
            return
        self.recorded += 1
        _say("notice", f"recorded {shown} as fixture {fixture.name} in {self.out}")
        if self._on_recorded is not None:
            self._on_recorded(fixture)

    def _pass_over(self, shown: str, why: str) -> None:
        self.passed_over += 1
        _say("warning", f"not recorded: {shown}: {why}")


def _say(kind: str, message: str) -> None:
    """One line on stderr, credentials masked (``control/process.py``'s ``say``, which
    imports what starts a proxy, and so cannot be imported here)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"chaosproxy: {kind}: {redact_text(message)}", file=sys.stderr, flush=True)


__all__ = ["AnswerRecorder", "RecordSettings"]
