"""Benchmark-only experiments: run ``chaosproxy`` with proposed hot-path changes patched in.

    python benchmarks/run.py --variant fastlog --targets direct,passthrough,framed
    python benchmarks/variants.py fastlog,merge serve --upstream … # what run.py starts

Nothing here changes the package: each variant monkeypatches ``chaosproxy.proxy`` /
``chaosproxy.logs`` in this process only, then hands over to ``chaosproxy.cli.main``.
They exist to measure a proposed change before anyone makes it (docs/benchmark.md has
the numbers). They copy the shape of today's ``Exchange._write``/``_execute``; when
those change, a variant may need updating — ``baseline`` never does.

Variants (comma-separate to combine):

- ``baseline``: no change (checks the wrapper costs nothing).
- ``fastlog``: frame-log lines without structlog's per-line machinery: the request's
  bound fields are kept in a plain dict and each line is one dict merge, the same
  processors (error redaction, observers) and the same orjson bytes. Output identical.
- ``merge``: when the pipeline has no transport fault, the ``Send`` actions produced by
  one upstream read are written as one write (one frame-log line listing all their
  events), like passthrough mirrors upstream reads. Changes the frame granularity.
- ``pipe``: passthrough forwards each upstream read from inside aiohttp's client
  protocol callback (no ``readany()`` coroutine wake-up per read); a prototype that
  leans on aiohttp internals, to measure what the await-per-read design costs.
- ``noobservers``: detach the frame-log observers (admin request store, metrics):
  shows what they cost. Not a proposal by itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import orjson


def _fastlog() -> None:
    from chaosproxy import logs

    class FastBound:
        """What ``FrameLog.for_request`` returns: ``info(event, **fields)`` only."""

        __slots__ = ("_ctx", "_log")

        def __init__(self, log: logs.FrameLog, ctx: dict[str, Any]) -> None:
            self._log = log
            self._ctx = ctx

        def bind(self, **more: Any) -> FastBound:
            return FastBound(self._log, {**self._ctx, **more})

        def info(self, event: str, **fields: Any) -> None:
            line = self._ctx.copy()
            line.update(fields)
            line["event"] = event  # structlog puts it last, so do we
            log = self._log
            if "error" in line:
                line["error"] = logs.redact_text(str(line["error"]))
            for observer in log._observers:
                try:
                    observer(line)
                except Exception:  # as FrameLog._observe: never break the request
                    log.observer_errors += 1
            data = orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
            log._fast_write(data)  # type: ignore[attr-defined]
            for listener in log._listeners:
                listener(data)

    original_init = logs.FrameLog.__init__

    def init(self: logs.FrameLog, stream: Any, **kw: Any) -> None:
        original_init(self, stream, **kw)
        out = stream if stream is not None else logs._NullStream()
        self._fast_write = out.write  # type: ignore[attr-defined]

    def for_request(self: logs.FrameLog, **bound: Any) -> Any:
        if self.pretty:  # people at a terminal: keep structlog's console renderer
            return self._logger.bind(**bound)
        return FastBound(self, dict(bound))

    logs.FrameLog.__init__ = init  # type: ignore[method-assign]
    logs.FrameLog.for_request = for_request  # type: ignore[method-assign]


def _merge() -> None:
    from chaosproxy import proxy
    from chaosproxy.core.actions import Action, Send, Sleep

    original = proxy.Exchange._execute

    async def execute(self: proxy.Exchange, resp: Any, actions: list[Action]) -> bool:
        pipeline = self.run_.pipeline if self.run_ is not None else None
        if (
            len(actions) < 2
            or pipeline is None
            or pipeline._transport_faults
            or not all(type(a) is Send for a in actions)
        ):
            return await original(self, resp, actions)
        sends = [a for a in actions if isinstance(a, Send)]
        merged = Send(
            b"".join(s.data for s in sends),
            tuple(e for s in sends for e in s.events),
            sum(s.ends for s in sends),
            tuple(dict.fromkeys(f for s in sends for f in s.faults)),
        )
        await self._write(resp, merged)
        return False

    proxy.Exchange._execute = execute  # type: ignore[method-assign]
    del Sleep


def _pipe() -> None:
    """Passthrough without a coroutine wake-up per upstream read (a prototype).

    aiohttp's client parser hands each decoded body piece to ``StreamReader.feed_data``;
    for a passthrough response we forward it to the client right there (frame-log line
    and chunk write, synchronously, inside the upstream protocol's ``data_received``)
    instead of buffering it and waking the ``readany()`` loop. Back-pressure: above 64
    KiB unsent, upstream reading pauses until the client side drains. Relies on
    aiohttp internals (``StreamReader`` methods, ``_payload_writer``): a measurement,
    not production code."""
    import asyncio
    import time

    from aiohttp import streams

    from chaosproxy import proxy
    from chaosproxy.logs import content_fields

    forwarders: dict[int, Callable[[bytes], None]] = {}
    feed_data = streams.StreamReader.feed_data
    end_chunk = streams.StreamReader.end_http_chunk_receiving

    def patched_feed(self: streams.StreamReader, data: bytes, size: int = 0) -> bool:
        forward = forwarders.get(id(self))
        if forward is None or not data:
            return feed_data(self, data, size)
        self.total_bytes += len(data)
        forward(data)
        return False

    def patched_end_chunk(self: streams.StreamReader) -> None:
        if id(self) not in forwarders:
            end_chunk(self)

    streams.StreamReader.feed_data = patched_feed  # type: ignore[method-assign]
    streams.StreamReader.end_http_chunk_receiving = patched_end_chunk  # type: ignore[method-assign]
    original = proxy.Exchange._pump_raw

    async def pump_raw(self: proxy.Exchange, resp: Any, upstream: Any) -> None:
        writer = resp._payload_writer
        content = upstream.content
        transport = self.request.transport
        if writer is None or writer.length is not None or transport is None:
            return await original(self, resp, upstream)
        protocol = content._protocol
        log_content = self.settings.log.content
        paused = False

        async def resume() -> None:
            nonlocal paused
            try:
                await writer.drain()
            finally:
                paused = False
                protocol.resume_reading()

        loop = asyncio.get_running_loop()
        pending: list[bytes] = []
        resumer: list[asyncio.Task[None]] = []

        def forward(data: bytes) -> None:
            # Pieces decoded from one socket read go out as one write, like readany().
            if not pending:
                loop.call_soon(flush)
            pending.append(data)

        def flush() -> None:
            nonlocal paused
            if not pending:
                return
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            pending.clear()
            now = time.monotonic()
            result = self.result
            t_ms = (now - self.started) * 1000.0
            if self._last_write is None:
                result.ttfb_ms = round(t_ms, 3)
            else:
                gap = (now - self._last_write) * 1000.0
                if gap > result.max_gap_ms:
                    result.max_gap_ms = gap
            self._last_write = now
            line: dict[str, Any] = {
                "seq": result.frames,
                "offset": result.bytes,
                "size": len(data),
                "t_ms": round(t_ms, 3),
            }
            if log_content:
                line.update(content_fields(data))
            result.frames += 1
            result.bytes += len(data)
            self.log.info("frame", **line)
            try:
                if writer.chunked:
                    writer._write_chunked_payload(data)
                else:
                    writer._write(data)
            except Exception as exc:  # the client went away: end the pump
                forwarders.pop(id(content), None)
                content.set_exception(ConnectionResetError(str(exc)))
                return
            if not paused and transport.get_write_buffer_size() > 65536:
                paused = True
                protocol.pause_reading()
                resumer[:] = [asyncio.ensure_future(resume())]

        forwarders[id(content)] = forward
        try:
            buffered = content.read_nowait(-1)
            if buffered:
                forward(buffered)
            await content.wait_eof()
            flush()
            if content.exception() is not None:
                raise content.exception()
        finally:
            forwarders.pop(id(content), None)
        await resp.write_eof()

    proxy.Exchange._pump_raw = pump_raw  # type: ignore[method-assign]


def _noobservers() -> None:
    from chaosproxy import logs

    def add_observer(self: logs.FrameLog, observer: Any) -> None:
        return None

    logs.FrameLog.add_observer = add_observer  # type: ignore[method-assign]


VARIANTS: dict[str, Callable[[], None]] = {
    "baseline": lambda: None,
    "fastlog": _fastlog,
    "merge": _merge,
    "noobservers": _noobservers,
    "pipe": _pipe,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    names = [n for n in argv[0].split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    for name in names:
        VARIANTS[name]()
    from chaosproxy.cli import main as cli_main

    return cli_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
