"""The frame log: one JSON line per request, per write to the client, per response end.

structlog does the binding (``request_id`` and ``scenario`` on every line) and orjson
the rendering, straight to bytes. Lines are buffered and flushed at the end of each
response and by a periodic flush, so logging a frame costs one dict and one
``orjson.dumps`` — not a syscall. On a terminal (``--log -`` on a tty) lines are
rendered for people instead, by structlog's ``ConsoleRenderer``.

Every line carries ``ts``, the time it was logged (ISO 8601 UTC, milliseconds:
``2026-12-01T15:36:00.123Z``); the formatted second is cached, so a line pays for one
``time.time()`` and one short concatenation (:class:`_Timestamp`).

Nothing here ever sees request headers. Paths are logged with credential-like query
parameters masked whether ``&`` or ``;`` separates them (:func:`redact_path`), and an
``error`` text has any URL password, URL query credential or bearer token in it masked
(:func:`redact_text`) before anything — observer, trace, admin API, log file — sees the
line. :func:`redact_url` is how a URL is printed (``https://user:***@host``).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final, Literal, cast

import orjson
import structlog

from chaosproxy.core.records import FrameContent, FrameFields, LogLine

# Re-exported: the masking the frame log applies is part of what it promises.
from chaosproxy.core.redact import SECRET_PARAMS as SECRET_PARAMS
from chaosproxy.core.redact import redact_path as redact_path
from chaosproxy.core.redact import redact_text as redact_text
from chaosproxy.core.redact import redact_url as redact_url
from chaosproxy.observe.frameline import frame_line


def describe(exc: BaseException) -> str:
    """One line about ``exc``, safe to show: error texts may quote a URL, ``key=`` and all."""
    text = str(exc) or type(exc).__name__
    return redact_text(text.splitlines()[0])[:300]


class _Timestamp:
    """The structlog processor that adds ``ts``: ISO 8601 UTC with milliseconds.

    The frame log is the hot path (docs/benchmark.md), so the date and time down to the
    second are formatted once per second, and the stamp as ASCII bytes (what a frame
    line is written with) once per millisecond: a line logged in the same millisecond
    as the one before costs one ``time.time()``, a multiplication and a comparison, and
    the text of the stamp is made only where a line's dict needs it."""

    __slots__ = ("_bytes", "_clock", "_ms", "_prefix", "_second", "_text")

    def __init__(self) -> None:
        #: ``time.time``, read when the log is made (a call through an attribute: no
        #: lookup of the module's ``time`` per line).
        self._clock: Callable[[], float] = time.time
        self._second = -1
        self._prefix = b""
        self._ms = -1
        self._bytes = b""
        #: The text of ``_bytes`` once made (empty: not yet, for this millisecond).
        self._text = ""

    def __call__(self, _: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        event_dict["ts"] = self.now()
        return event_dict

    def now(self) -> str:
        """The ``ts`` of a line logged now."""
        return self.text(self.now_bytes())

    def text(self, stamp: bytes) -> str:
        """The text of ``stamp``, the last one :meth:`now_bytes` gave."""
        text = self._text
        if not text:
            text = self._text = stamp.decode("ascii")
        return text

    def now_bytes(self) -> bytes:
        """The ``ts`` of a line logged now, as ASCII bytes."""
        ms = int(self._clock() * 1000)
        if ms != self._ms:
            second = ms // 1000  # (not divmod(): a generic call on boxed integers)
            millis = ms - second * 1000
            if second != self._second:
                self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)).encode()
                self._second = second
            self._bytes = self._prefix + _MILLIS[millis]
            self._text = ""
            self._ms = ms
        return self._bytes


#: ``.000Z`` … ``.999Z``: a lookup is cheaper than formatting the milliseconds.
_MILLIS: Final[tuple[bytes, ...]] = tuple(f".{i:03d}Z".encode() for i in range(1000))


def _redact_error(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    # Error texts come from aiohttp and may quote the upstream URL, query and all.
    error = event_dict.get("error")
    if error is not None:
        event_dict["error"] = redact_text(str(error))
    return event_dict


def _render(_: Any, __: str, event_dict: dict[str, Any]) -> bytes:
    return orjson.dumps(event_dict, option=orjson.OPT_APPEND_NEWLINE)


class _PrettyRenderer:
    """structlog's ConsoleRenderer, for a person at a terminal; bytes, one line each."""

    def __init__(self, colors: bool) -> None:
        self._console = structlog.dev.ConsoleRenderer(
            colors=colors, pad_event_to=14, sort_keys=False
        )

    def __call__(self, logger: Any, name: str, event_dict: dict[str, Any]) -> bytes:
        # ConsoleRenderer pops keys: give it a copy, observers may still hold the dict.
        text = self._console(logger, name, dict(event_dict))
        return (text + "\n").encode("utf-8", "replace")


#: How lines are rendered: ``json`` (one JSON object per line), ``pretty`` (for a
#: terminal), ``auto`` (pretty when the stream is a terminal, else JSON).
LogFormat = Literal["auto", "json", "pretty"]


#: What the log writes: ``frames`` every line (the default: from the log alone a test
#: can rebuild what each client received), ``requests`` every line but ``frame`` lines
#: (a busy staging run), ``off`` nothing. Observers (the admin API, metrics, traces,
#: ``ChaosProxy.lines``) see every line whatever the level.
LogLevel = Literal["frames", "requests", "off"]


def _without_frames(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    if event_dict.get("event") == "frame":
        raise structlog.DropEvent
    return event_dict


def _nothing(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    raise structlog.DropEvent


_LEVEL_FILTERS: dict[str, Any] = {"requests": _without_frames, "off": _nothing}


#: Something that wants every log line as a dict (metrics, traces, the admin API), typed
#: as the record of its kind (core/records.py; it narrows on ``line["event"]``). The
#: lines are built from those records (the session's fields, the exchange's), handed on
#: here as records by a cast, the one between the writers and the observers; the test
#: suite checks every line it makes against the schema generated from the records.
Observer = Callable[[LogLine], None]
#: An observer's optional ``frame_json(context, fields, text)``: called instead of the
#: observer for a frame line, with the request's bound fields, the write's fields (the
#: line is ``{**context, **fields, "event": "frame", "ts": …}``) and the line's JSON text
#: (``orjson.dumps(line)`` and a newline). No dict of the line is made for it.
FrameJsonObserver = Callable[[dict[str, Any], FrameFields, bytes], None]
#: An observer's optional ``frames_json(context, fields, texts)``: called instead of the
#: observer for the frame lines of one batch of writes (the events of one upstream
#: read), with the request's bound fields, each write's fields (its line is
#: ``{**context, **fields[i], "event": "frame", "ts": …}``) and each line's JSON text
#: (``orjson.dumps(line)`` and a newline). No dict of a line is made for it.
FramesJsonObserver = Callable[[dict[str, Any], list[FrameFields], list[bytes]], None]


class FrameObserver:
    """An observer compiled with the log (the admin's request store, the metrics): a
    subclass is called as any observer for every line but a frame line, and has its
    :meth:`frame_json` and :meth:`frames_json` called for those (see
    :meth:`FrameLog.add_observer`) by a direct call, not through Python's generic call
    of a bound method (about 500 instructions a line, per observer, issue 34). Such
    observers are called before the others."""

    def __call__(self, line: LogLine) -> None:
        raise NotImplementedError

    def frame_json(self, context: dict[str, Any], fields: FrameFields, text: bytes) -> None:
        raise NotImplementedError

    def frames_json(
        self, context: dict[str, Any], fields: list[FrameFields], texts: list[bytes]
    ) -> None:
        raise NotImplementedError

    def frame_plain(self, context: dict[str, Any], size: int, text: bytes) -> None:
        """The frame line of a plain write (no events, no content: its fields are
        ``seq``, ``offset``, ``size`` and ``t_ms`` only) of ``size`` bytes, given its
        JSON text: the same as :meth:`frame_json` with those fields, which are not
        made into a dict (:meth:`RequestLog.plain_frame`)."""
        raise NotImplementedError


def json_prefix(context: dict[str, Any]) -> bytes:
    """The start of the JSON text of a line carrying ``context`` first: the text of
    ``context`` without its closing brace (``b'{"request_id":"r-1","scenario":null'``)."""
    return orjson.dumps(context)[:-1]


def frame_text(prefix: bytes, fields: FrameFields, ts: bytes) -> bytes:
    """``orjson.dumps({**context, **fields, "event": "frame", "ts": ts})`` and a newline,
    from ``json_prefix(context)`` and ``ts`` as ASCII bytes, without making that dict:
    the same bytes when no key of ``fields`` is in ``context`` (a frame line's are not)
    and both are non-empty."""
    # (typed: compiled code slices bytes directly, an untyped result by a slice object)
    dumped: bytes = _dumps(fields)
    return b"".join((prefix, b",", dumped[1:-1], b',"event":"frame","ts":"', ts, b'"}\n'))


#: ``orjson.dumps``, called once per frame line (a ``Final``: compiled code calls it
#: without looking it up in the module ``orjson`` each time).
_dumps: Final = orjson.dumps

#: The frame line of a plain write from its numbers (observe/frameline.py; the C
#: routine where the package is compiled), called through a ``Final`` as ``_dumps``.
_frame_line: Final = frame_line


class _Sink:
    """A structlog logger that appends rendered lines to a buffered binary stream.

    A stream that fails (its reader went away: ``serve --log - | head``; a full disk)
    is written no more: ``failed`` is told once, and the lines still reach the
    listeners. The log is the proxy's record, never a reason for a request to fail."""

    __slots__ = ("_failed", "_listeners", "_write")

    def __init__(
        self,
        stream: IO[bytes],
        listeners: list[Callable[[bytes], None]],
        failed: Callable[[BaseException], None],
    ) -> None:
        self._write: Callable[[bytes], object] = stream.write
        self._listeners = listeners
        self._failed = failed

    def msg(self, line: bytes) -> None:
        try:
            self._write(line)
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed
            self._write = _discard
            self._failed(exc)
        for listener in self._listeners:
            listener(line)

    def info(self, line: bytes) -> None:
        """What structlog's bound logger calls for a line at ``info``. A method of its
        own: an alias in the class body (``info = msg``) is no method of a compiled
        class, and structlog would find no ``info``."""
        self.msg(line)

    def msgs(self, lines: list[bytes]) -> None:
        """Several lines in one write (the listeners still get one line a call)."""
        try:
            self._write(lines[0] if len(lines) == 1 else b"".join(lines))
        except (OSError, ValueError) as exc:
            self._write = _discard
            self._failed(exc)
        for listener in self._listeners:
            for line in lines:
                listener(line)

    def drop(self) -> None:
        """Write nothing from now on (the stream is closed)."""
        self._write = _discard


#: What ``FrameLog._frames`` hands on when nothing needs the frame lines' dicts, or
#: their texts (never read).
_NO_LINE: Final[dict[str, Any]] = {}
_NO_LINES: Final[list[dict[str, Any]]] = []
_NO_TEXTS: Final[list[bytes]] = []


def _stdout() -> IO[bytes] | None:
    return getattr(sys.stdout, "buffer", None)


def point_stdout_away() -> None:
    """Point file descriptor 1 at ``/dev/null``: stdout's reader is gone, and what is
    still buffered for it can never be written, so that no later flush (at exit)
    fails and prints a traceback."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _discard(data: bytes) -> int:
    return len(data)


class FrameLog:
    """Where frame-log lines go. One per proxy; :meth:`for_request` binds a request.

    ``fmt`` chooses the rendering (:data:`LogFormat`); ``auto`` is pretty only when
    ``stream`` is a terminal. Observers and listeners see every line either way.
    """

    def __init__(
        self,
        stream: IO[bytes] | None,
        *,
        content: bool = False,
        fmt: LogFormat = "json",
        level: LogLevel = "frames",
    ) -> None:
        self.content = content
        self.level = level
        #: Added to every line (``--replica-id``: docs/fleet.md); None: no such field.
        #: Set before the first :meth:`for_request`.
        self.replica: str | None = None
        self._stream = stream
        self._listeners: list[Callable[[bytes], None]] = []
        self._observers: list[Observer] = []
        #: How each observer is called, in the same order (:func:`_fast_call`).
        self._calls: list[Observer] = []
        #: The same for a frame line: (the call, or the observer's ``frame_json``)...
        self._frame_calls: list[tuple[Observer, FrameJsonObserver | None]] = []
        #: ... and for the frame lines of a batch (the observer's ``frames_json``).
        self._frames_calls: list[tuple[Observer, FramesJsonObserver | None]] = []
        #: The observers of those that are :class:`FrameObserver`: called directly for
        #: a frame line (and left out of the two lists above).
        self._frame_natives: list[FrameObserver] = []
        #: Whether a frame line's JSON text is made before its observers are called.
        self._frame_json = False
        #: Whether a frame line's dict is made (for an observer or a renderer that
        #: needs it).
        self._frame_dict = False
        self.observer_errors = 0
        #: Why the log stopped writing to its stream (None while it writes).
        self.write_error: str | None = None
        self.pretty = fmt == "pretty" or (fmt == "auto" and _isatty(stream))
        renderer: Any = _PrettyRenderer(colors=_isatty(stream)) if self.pretty else _render
        out: IO[bytes] = stream if stream is not None else _NullStream()  # type: ignore[assignment]
        sink = _Sink(out, self._listeners, self._write_failed)
        self._sink = sink
        # ts first: observers (traces, the admin API, ChaosProxy.lines) see it too.
        stamp = _Timestamp()
        processors: list[Any] = [stamp, _redact_error, self._observe, renderer]
        if level in _LEVEL_FILTERS:  # after the observers: they see every line
            processors.insert(3, _LEVEL_FILTERS[level])
        self._logger: Any = structlog.wrap_logger(
            sink,
            processors=processors,
            # structlog's fast path (its docs/performance.md): a filtering bound logger
            # generated for the level, cached on first use; ~25 % less per line than
            # the generic BoundLogger.
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
            cache_logger_on_first_use=True,
        )
        # Frame lines (one per write to a client: the hot path) take a shorter way to
        # the same processors: RequestLog.frame.
        self._stamp = stamp
        self._render = renderer
        self._frames_out = level == "frames"
        self._update_frame_calls()
        copy_to = os.environ.get(COPY_ENV, "")
        if copy_to:
            self.add_observer(LineCopy(copy_to))

    @classmethod
    def open(
        cls,
        target: str | None,
        *,
        content: bool = False,
        fmt: LogFormat = "auto",
        level: LogLevel = "frames",
    ) -> FrameLog:
        """``-`` for stdout, a path to append to, or None for no log. With ``auto``,
        stdout on a terminal is rendered pretty; files and pipes get JSON lines."""
        if target is None:
            return cls(None, content=content, fmt="json" if fmt == "auto" else fmt, level=level)
        if target == "-":
            return cls(sys.stdout.buffer, content=content, fmt=fmt, level=level)
        path = Path(target)
        stream = path.open("ab", buffering=1 << 16)
        return cls(stream, content=content, fmt=fmt, level=level)

    def _observe(self, _: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        line = cast("LogLine", event_dict)
        for observer in self._calls:
            try:
                observer(line)
            except Exception as exc:
                self._observer_failed(exc)
        return event_dict

    def _write_failed(self, exc: BaseException) -> None:
        to_stdout = self._stream is not None and self._stream is _stdout()
        where = "stdout" if to_stdout else getattr(self._stream, "name", "?")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        self.write_error = f"the frame log stopped: cannot write to {where}: {reason}"
        print(f"chaosproxy: warning: {self.write_error}; serving goes on", file=sys.stderr)
        if to_stdout:
            point_stdout_away()

    def _observer_failed(self, exc: Exception) -> None:
        # A broken observer (a full disk under the traces) must never break the
        # request being logged; say so once, count the rest.
        self.observer_errors += 1
        if self.observer_errors == 1:
            print(f"chaosproxy: warning: frame-log observer failed: {exc!r}", file=sys.stderr)

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer`` with every line as a dict, before it is rendered.

        Observers must not modify the dict (they may keep it: nothing changes it
        afterwards). Every line has ``event`` (request, frame, action, response_end)
        and ``request_id``. An exception in an observer is counted in
        ``observer_errors`` and otherwise ignored. An observer with the two methods
        ``frame_json(context, fields, text)`` and ``frames_json(context, fields, texts)``
        has them called instead for each ``frame`` line, and for the ``frame`` lines of
        each batch of writes, with the parts each line is made of (it is ``{**context,
        **fields, "event": "frame", "ts": …}``) and its JSON text (``orjson.dumps(line)``
        and a newline); no dict of a frame line is then made for it."""
        self._observers.append(observer)
        self._calls.append(_fast_call(observer))
        self._update_frame_calls()

    def remove_observer(self, observer: Observer) -> None:
        """Stop calling ``observer`` (no error if it was not added)."""
        with contextlib.suppress(ValueError):
            i = self._observers.index(observer)
            del self._observers[i], self._calls[i]
            self._update_frame_calls()

    def _update_frame_calls(self) -> None:
        # An observer with a ``frames_json(context, fields, texts)`` method (the admin
        # store, which keeps each frame line as its JSON text; the metrics) is given the
        # texts the log writes, made once, instead of being called with each line's
        # dict. A dict is made only when something needs it: an observer without the
        # method (traces, ChaosProxy.lines) or a renderer other than JSON.
        hooks = [getattr(o, "frame_json", None) for o in self._observers]
        batch_hooks = [getattr(o, "frames_json", None) for o in self._observers]
        if any((h is None) != (b is None) for h, b in zip(hooks, batch_hooks, strict=True)):
            raise TypeError("an observer with frame_json needs frames_json too, and back")
        natives = [isinstance(o, FrameObserver) for o in self._observers]
        self._frame_natives = [o for o in self._observers if isinstance(o, FrameObserver)]
        self._frame_calls = [
            c
            for c, native in zip(zip(self._calls, hooks, strict=True), natives, strict=True)
            if not native
        ]
        self._frames_calls = [
            c
            for c, native in zip(zip(self._calls, batch_hooks, strict=True), natives, strict=True)
            if not native
        ]
        json_out = self._frames_out and self._render is _render
        self._frame_json = json_out or any(h is not None for h in hooks)
        self._frame_dict = (self._frames_out and not json_out) or any(h is None for h in hooks)

    def add_listener(self, listener: Callable[[bytes], None]) -> None:
        """Call ``listener`` with every rendered line (JSON unless the log is pretty)."""
        self._listeners.append(listener)

    def for_request(self, **bound: Any) -> RequestLog:
        """The log of one request: every line carries ``bound`` (``request_id``,
        ``scenario``) first, then ``replica`` when the log has one."""
        if self.replica is not None:
            bound["replica"] = self.replica
        return RequestLog(self, bound)

    def _frame(self, context: dict[str, Any], fields: FrameFields, prefix: bytes) -> None:
        # What structlog's bound logger does for ``info("frame", **fields)`` with the
        # processors above, without its generic steps (keyword packing, interpolation,
        # dispatch): the same dict, in the same key order, the same bytes.
        # The processors are inlined (one Python call each saved: this runs for every
        # write); _redact_error is left out: a frame line has no ``error``.
        # The JSON text is made before the observers are called (they must not modify
        # the line: the same bytes as after) when the log writes JSON or one of them
        # takes it (``frame_json``); from the request's prefix and the write's fields,
        # without the line's dict, which is made only when something needs it.
        stamp = self._stamp
        ts_bytes = stamp.now_bytes()
        line = (
            {**context, **fields, "event": "frame", "ts": stamp.text(ts_bytes)}
            if self._frame_dict
            else _NO_LINE
        )
        text = b""
        if self._frame_json:
            if context and fields:
                text = frame_text(prefix, fields, ts_bytes)
            else:  # (no bound request: a line no request makes in the proxy)
                ts = stamp.text(ts_bytes)
                whole = line or {**context, **fields, "event": "frame", "ts": ts}
                text = orjson.dumps(whole, option=orjson.OPT_APPEND_NEWLINE)
        for native in self._frame_natives:
            try:
                native.frame_json(context, fields, text)
            except Exception as exc:
                self._observer_failed(exc)
        for observer, frame_json in self._frame_calls:
            try:
                if frame_json is None:
                    observer(cast("LogLine", line))
                else:
                    frame_json(context, fields, text)
            except Exception as exc:
                self._observer_failed(exc)
        if self._frames_out:
            if not self.pretty:  # (JSON: the text made above)
                self._sink.msg(text)
            else:
                self._sink.msg(self._render(self._sink, "info", line))

    def _frames(self, context: dict[str, Any], fields: list[FrameFields], prefix: bytes) -> None:
        # What structlog's bound logger does for ``info("frame", **f)`` for each ``f`` of
        # ``fields`` with the processors above, without its generic steps (keyword
        # packing, interpolation, dispatch): the same dicts, in the same key order, the
        # same bytes, the lines of one batch written at once. The processors are
        # inlined; _redact_error is left out: a frame line has no ``error``. The JSON
        # texts are made before the observers are called (they must not modify a line:
        # the same bytes as after) when the log writes JSON or one of them takes them
        # (``frames_json``); from the request's prefix and each write's fields, without
        # the line's dict, which is made only when something needs it.
        stamp = self._stamp
        ts_bytes = stamp.now_bytes()
        ts = stamp.text(ts_bytes) if self._frame_dict or not context else ""
        lines = (
            [{**context, **f, "event": "frame", "ts": ts} for f in fields]
            if self._frame_dict
            else _NO_LINES
        )
        texts: list[bytes] = _NO_TEXTS
        if self._frame_json:
            if context:
                texts = [
                    frame_text(prefix, f, ts_bytes)
                    if f
                    else orjson.dumps(
                        {**context, "event": "frame", "ts": stamp.text(ts_bytes)},
                        option=orjson.OPT_APPEND_NEWLINE,
                    )
                    for f in fields
                ]
            else:  # (no bound request: a line no request makes in the proxy)
                texts = [
                    orjson.dumps(
                        {**f, "event": "frame", "ts": ts}, option=orjson.OPT_APPEND_NEWLINE
                    )
                    for f in fields
                ]
        for native in self._frame_natives:
            try:
                native.frames_json(context, fields, texts)
            except Exception as exc:
                self._observer_failed(exc)
        for observer, frames_json in self._frames_calls:
            try:
                if frames_json is None:
                    for line in lines:
                        observer(cast("LogLine", line))
                else:
                    frames_json(context, fields, texts)
            except Exception as exc:
                self._observer_failed(exc)
        if self._frames_out:
            if not self.pretty:  # (JSON: the texts made above)
                self._sink.msgs(texts)
            else:
                render = self._render
                for line in lines:
                    self._sink.msg(render(self._sink, "info", line))

    def flush(self) -> None:
        if self._stream is not None and self.write_error is None:
            # A stdout whose reader left, a full disk: the log stops, the proxy goes on.
            try:
                self._stream.flush()
            except (OSError, ValueError) as exc:
                self._sink.drop()
                self._write_failed(exc)

    def close(self) -> None:
        """Flush and close the stream. A line logged afterwards (a request cut at
        shutdown still unwinding) is dropped, never an error in its request."""
        self.flush()
        self._sink.drop()
        if self._stream is not None and self._stream is not sys.stdout.buffer:
            with contextlib.suppress(OSError, ValueError):
                self._stream.close()


class RequestLog:
    """One request's frame log: ``info(event, **fields)`` logs a line through
    structlog with the request's bound fields; :meth:`frame` logs a ``frame`` line,
    the same line as ``info("frame", **fields)`` would, by a shorter way (it is logged
    once per write to the client)."""

    __slots__ = ("_bound", "_context", "_log", "_prefix")

    def __init__(self, log: FrameLog, context: dict[str, Any]) -> None:
        self._log = log
        self._context = context
        self._bound: Any = log._logger.bind(**context)
        #: The JSON text every frame line of this request starts with.
        self._prefix = json_prefix(context)

    def info(self, event: str, **fields: Any) -> None:
        self._bound.info(event, **fields)

    def bind(self, **more: Any) -> RequestLog:
        return RequestLog(self._log, {**self._context, **more})

    def frame(self, fields: FrameFields) -> None:
        """Log the ``frame`` line of one write with these fields (not kept)."""
        self._log._frame(self._context, fields, self._prefix)

    def plain_frame(self, seq: int, offset: int, size: int, t_ms: float) -> None:
        """Log the ``frame`` line of a plain write (no events, no content, nothing but
        these fields): the same line as :meth:`frame` with ``{"seq": seq, "offset":
        offset, "size": size, "t_ms": t_ms}``, made without that dict where it can
        (every write of a passthrough response, issue 34).

        When only the compiled observers (:class:`FrameObserver`: the admin store, the
        metrics) take frame lines and the log writes JSON, the line's text is rendered
        from the numbers by one routine (observe/frameline.py, C where compiled) and
        handed to them with the write's size. Otherwise, or where that routine leaves
        the line to orjson (None), the fields' dict and the general way."""
        log = self._log
        context = self._context
        if not (log._frame_dict or log._frame_calls or log.pretty) and context:
            text = _frame_line(self._prefix, seq, offset, size, t_ms, log._stamp.now_bytes())
            if text is not None:
                for native in log._frame_natives:
                    try:
                        native.frame_plain(context, size, text)
                    except Exception as exc:
                        log._observer_failed(exc)
                if log._frames_out:
                    log._sink.msg(text)
                return
        fields: FrameFields = {"seq": seq, "offset": offset, "size": size, "t_ms": t_ms}
        log._frame(context, fields, self._prefix)

    def frames(self, fields: list[FrameFields]) -> None:
        """Log the ``frame`` lines of several writes made together (one upstream read's
        events), with these fields each (not kept), in one write to the log."""
        if fields:
            self._log._frames(self._context, fields, self._prefix)

    def __getattr__(self, name: str) -> Any:
        # Anything else structlog's bound logger offers (warning, new, …) is its own.
        return getattr(self._bound, name)


def _fast_call(observer: Observer) -> Observer:
    """The same call, by a faster way: an object whose class defines ``__call__`` in
    Python (the admin store, the metrics) is called through its bound ``__call__``,
    which skips the interpreter's generic path for calling an instance (a few hundred
    instructions a line, per observer)."""
    if isinstance(type(observer).__call__, types.FunctionType):
        return observer.__call__  # type: ignore[operator,no-any-return]
    return observer


#: The variable that makes every frame log of a process (and of the processes it
#: starts) copy each line it logs, whatever its level, to ``<DIR>/<pid>.jsonl``: how the
#: test suite checks every line it makes against the shipped JSON Schema
#: (tests/support/logcheck.py). Unset in production: no cost.
COPY_ENV = "CHAOSPROXY_LOG_COPY"


class LineCopy:
    """The observer :data:`COPY_ENV` adds: appends each line, as JSON, to the file of
    the process that logs it (one file a process, shared by its logs, looked up per
    line: a forked worker writes its own). The file is opened with the first log of
    the process, not its first line, so that a test counting its descriptors around a
    request does not count it."""

    __slots__ = ("_directory",)

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._file()

    def __call__(self, line: LogLine) -> None:
        self._file().write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))

    def _file(self) -> IO[bytes]:
        key = (self._directory, os.getpid())
        out = _COPIES.get(key)
        if out is None:
            path = os.path.join(self._directory, f"{key[1]}.jsonl")
            out = _COPIES[key] = open(path, "ab", buffering=0)  # noqa: SIM115 (kept open)
        return out


#: The open copy file of each (directory, process).
_COPIES: dict[tuple[str, int], IO[bytes]] = {}


def _isatty(stream: IO[bytes] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


class _NullStream:
    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


def content_fields(data: bytes) -> FrameContent:
    """The payload fields a frame line carries with ``--log-content``."""
    return {
        "data": data.decode("utf-8", "replace"),
        "raw": base64.b64encode(data).decode("ascii"),
    }
