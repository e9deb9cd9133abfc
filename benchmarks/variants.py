"""Benchmark-only experiments: run ``chaosproxy`` with proposed hot-path changes patched in.

    python benchmarks/run.py --variant fastlog --targets direct,passthrough,framed
    python benchmarks/variants.py fastlog,merge serve --upstream … # what run.py starts

Nothing here changes the package: each variant monkeypatches ``chaosproxy.server.proxy`` /
``chaosproxy.observe.logs`` in this process only, then hands over to ``chaosproxy.cli.main``.
They exist to measure a proposed change before anyone makes it (docs/benchmark.md has
the numbers). They lean on private names (``_Pump._feed``, ``FrameLog._observers``);
when those change, a variant may need updating — ``baseline`` never does. (``pipe``,
forwarding from the upstream protocol's callback, was measured here and is now how the
proxy works.)

Variants (comma-separate to combine):

- ``baseline``: no change (checks the wrapper costs nothing).
- ``fastlog``: frame-log lines without structlog's per-line machinery: the request's
  bound fields are kept in a plain dict and each line is one dict merge, the same
  processors (error redaction, observers) and the same orjson bytes. Output identical.
- ``merge``: when the pipeline has no transport fault, the ``Send`` actions produced by
  one upstream read are written as one write (one frame-log line listing all their
  events), like passthrough mirrors upstream reads. Changes the frame granularity.
- ``nolog``: no frame-log lines at all (``Exchange.log_frame`` does nothing): what the
  log costs per write. Breaks the product's promise; a measurement only.
- ``wroteonly``: ``Exchange.log_frame`` does the session's accounting of the write
  (``Session.wrote``: its counters, timings and the integrity of what was sent) and no
  line: with ``nolog`` and the baseline, it splits the log's cost into the accounting
  and the line (with its observers and the file).
- ``nocore``: framed requests skip the sans-IO core: each read is cut at ``\n\n`` and
  every piece written on its own. With ``nolog``, the floor of "one write per event" in
  this I/O shell: what no change to the core or the log can go below.
- ``deferlog``: frame-log lines are queued and rendered in a batch at the end of the
  event-loop iteration (``call_soon``), in order, instead of inside each write.
- ``nogc``: Python's cyclic garbage collector off (measures what its passes cost).
- ``nofreeze``: ``serve`` does not freeze its start-up objects out of the collector.
- ``gcslow``: a full collection at most every 1,000 second-generation ones
  (``gc.set_threshold(700, 10, 1000)``) after start-up (serve's own is 100).
- ``gcdefault``: Python's default thresholds (700, 10, 10) after start-up.
- ``noobservers``: detach the frame-log observers (admin request store, metrics):
  shows what they cost. Not a proposal by itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import orjson


def _fastlog() -> None:
    from chaosproxy.observe import logs

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
    from chaosproxy.core.actions import Action, Send
    from chaosproxy.core.session import Session

    original = Session.feed

    def feed(self: Session, data: bytes, now: float) -> list[Action]:
        actions = original(self, data, now)
        pipeline = self.pipeline
        if (
            len(actions) < 2
            or pipeline is None
            or pipeline._transport_faults
            or not all(type(a) is Send for a in actions)
        ):
            return actions
        sends = [a for a in actions if isinstance(a, Send)]
        merged = Send(
            b"".join(s.data for s in sends),
            tuple(e for s in sends for e in s.events),
            sum(s.ends for s in sends),
            tuple(dict.fromkeys(f for s in sends for f in s.faults)),
        )
        return [merged]

    Session.feed = feed  # type: ignore[method-assign]


def _nolog() -> None:
    from chaosproxy.core.actions import Send
    from chaosproxy.server.exchange import Exchange

    def log_frame(self: Exchange, send: Send, now: float) -> None:
        return None

    Exchange.log_frame = log_frame  # type: ignore[method-assign]


def _wroteonly() -> None:
    from chaosproxy.core.actions import Send
    from chaosproxy.server.exchange import Exchange

    def log_frame(self: Exchange, send: Send, now: float) -> None:
        self.session.wrote(send, now)

    Exchange.log_frame = log_frame  # type: ignore[method-assign]


def _nocore() -> None:
    from chaosproxy.core.actions import Action, Send
    from chaosproxy.core.session import Session

    original = Session.feed

    def feed(self: Session, data: bytes, now: float) -> list[Action]:
        if self.pipeline is None:
            return original(self, data, now)
        out: list[Action] = []
        start = 0
        while (end := data.find(b"\n\n", start)) >= 0:
            out.append(Send(data[start : end + 2]))
            start = end + 2
        if start < len(data):
            out.append(Send(data[start:]))
        return out

    Session.feed = feed  # type: ignore[method-assign]


def _nogc() -> None:
    import gc

    gc.disable()


def _deferlog() -> None:
    import asyncio

    from chaosproxy.observe import logs

    pending: list[tuple[Any, str, dict[str, Any]]] = []

    def drain() -> None:
        batch = pending[:]
        pending.clear()
        for logger, event, fields in batch:
            logger.info(event, **fields)

    class Deferred:
        __slots__ = ("_logger",)

        def __init__(self, logger: Any) -> None:
            self._logger = logger

        def bind(self, **more: Any) -> Deferred:
            return Deferred(self._logger.bind(**more))

        def info(self, event: str, **fields: Any) -> None:
            if not pending:
                asyncio.get_running_loop().call_soon(drain)
            pending.append((self._logger, event, fields))

    original = logs.FrameLog.for_request
    original_flush = logs.FrameLog.flush

    def for_request(self: logs.FrameLog, **bound: Any) -> Any:
        return Deferred(original(self, **bound))

    def flush(self: logs.FrameLog) -> None:
        drain()
        original_flush(self)

    logs.FrameLog.for_request = for_request  # type: ignore[method-assign]
    logs.FrameLog.flush = flush  # type: ignore[method-assign]


def _noobservers() -> None:
    from chaosproxy.observe import logs

    def add_observer(self: logs.FrameLog, observer: Any) -> None:
        return None

    logs.FrameLog.add_observer = add_observer  # type: ignore[method-assign]


def _nofreeze() -> None:
    from chaosproxy.cli import main as cli

    cli.settle_gc = lambda: None


def _gc_threshold(oldest: int) -> Callable[[], None]:
    """A variant: serve settles its GC as it does, then collects its oldest generation
    after ``oldest`` collections of the middle one (Python's default is 10)."""

    def variant() -> None:
        import gc

        from chaosproxy.cli import main as cli

        original = cli.settle_gc

        def settle() -> None:
            original()
            gc.set_threshold(700, 10, oldest)

        cli.settle_gc = settle

    return variant


VARIANTS: dict[str, Callable[[], None]] = {
    "nofreeze": _nofreeze,
    "gcdefault": _gc_threshold(10),
    "gcslow": _gc_threshold(1000),
    "baseline": lambda: None,
    "fastlog": _fastlog,
    "merge": _merge,
    "deferlog": _deferlog,
    "nocore": _nocore,
    "nogc": _nogc,
    "nolog": _nolog,
    "wroteonly": _wroteonly,
    "noobservers": _noobservers,
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
    from chaosproxy.cli.main import main as cli_main

    return cli_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
