"""The frame log: one JSON line per request, per write to the client, per response end.

structlog does the binding (``request_id`` and ``scenario`` on every line) and orjson
the rendering, straight to bytes. Lines are buffered and flushed at the end of each
response and by a periodic flush, so logging a frame costs one dict and one
``orjson.dumps`` — not a syscall. On a terminal (``--log -`` on a tty) lines are
rendered for people instead, by structlog's ``ConsoleRenderer``.

Nothing here ever sees request headers. Paths are logged with credential-like query
parameters masked (:func:`redact_path`), and an ``error`` text has any URL query
credential or bearer token in it masked (:func:`redact_text`) before anything —
observer, trace, admin API, log file — sees the line.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import parse_qsl, urlencode

import orjson
import structlog

#: Query parameters whose values never reach a log (compared case-insensitively).
SECRET_PARAMS = frozenset(
    {
        "key",
        "api_key",
        "apikey",
        "api-key",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth",
        "authorization",
        "password",
        "secret",
        "client_secret",
        "signature",
        "sig",
        "code",
    }
)


def redact_path(path_qs: str) -> str:
    """``path_qs`` with the values of credential-like query parameters replaced by ***."""
    path, sep, query = path_qs.partition("?")
    if not sep:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(k.lower() in SECRET_PARAMS for k, _ in pairs):
        return path_qs
    masked = [(k, "***" if k.lower() in SECRET_PARAMS else v) for k, v in pairs]
    return path + "?" + urlencode(masked, safe="*/:,")


_SECRET_IN_TEXT = re.compile(
    r"(?P<lead>[?&;](?:" + "|".join(re.escape(p) for p in sorted(SECRET_PARAMS)) + r")=)"
    r"[^&;#\s'\"<>]*"
    r"|(?P<scheme>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """``text`` (an error message, say) with credentials in it masked: the values of
    credential-like query parameters in any URL (``?key=…`` → ``?key=***``) and bearer
    or basic tokens (``Bearer sk-…`` → ``Bearer ***``)."""
    return _SECRET_IN_TEXT.sub(_mask_match, text)


def redact_url(url: str) -> str:
    """``url`` with the password of its user info masked (``https://user:***@host``)
    and credential-like query parameters masked."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return redact_path(url)
    authority, slash, tail = rest.partition("/")
    userinfo, at, hostpart = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = userinfo.split(":", 1)[0] + ":***@" + hostpart
    return redact_path(f"{scheme}://{authority}{slash}{tail}")


def describe(exc: BaseException) -> str:
    """One line about ``exc``, safe to show: error texts may quote a URL, ``key=`` and all."""
    text = str(exc) or type(exc).__name__
    return redact_text(text.splitlines()[0])[:300]


def _mask_match(match: re.Match[str]) -> str:
    lead = match.group("lead")
    if lead is not None:
        return lead + "***"
    return match.group("scheme") + "***"


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


#: Something that wants every log line as a dict (metrics, traces, the admin API).
Observer = Callable[[dict[str, Any]], None]


class _Sink:
    """A structlog logger that appends rendered lines to a buffered binary stream."""

    __slots__ = ("_listeners", "_write")

    def __init__(self, stream: IO[bytes], listeners: list[Callable[[bytes], None]]) -> None:
        self._write = stream.write
        self._listeners = listeners

    def msg(self, line: bytes) -> None:
        self._write(line)
        for listener in self._listeners:
            listener(line)

    info = msg


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
    ) -> None:
        self.content = content
        self._stream = stream
        self._listeners: list[Callable[[bytes], None]] = []
        self._observers: list[Observer] = []
        self.observer_errors = 0
        self.pretty = fmt == "pretty" or (fmt == "auto" and _isatty(stream))
        renderer: Any = _PrettyRenderer(colors=_isatty(stream)) if self.pretty else _render
        out: IO[bytes] = stream if stream is not None else _NullStream()  # type: ignore[assignment]
        sink = _Sink(out, self._listeners)
        processors: list[Any] = [_redact_error, self._observe, renderer]
        self._logger: Any = structlog.wrap_logger(
            sink,
            processors=processors,
            # structlog's fast path (its docs/performance.md): a filtering bound logger
            # generated for the level, cached on first use; ~25 % less per line than
            # the generic BoundLogger.
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
            cache_logger_on_first_use=True,
        )

    @classmethod
    def open(
        cls, target: str | None, *, content: bool = False, fmt: LogFormat = "auto"
    ) -> FrameLog:
        """``-`` for stdout, a path to append to, or None for no log. With ``auto``,
        stdout on a terminal is rendered pretty; files and pipes get JSON lines."""
        if target is None:
            return cls(None, content=content, fmt="json" if fmt == "auto" else fmt)
        if target == "-":
            return cls(sys.stdout.buffer, content=content, fmt=fmt)
        path = Path(target)
        return cls(path.open("ab", buffering=1 << 16), content=content, fmt=fmt)

    def _observe(self, _: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        for observer in self._observers:
            try:
                observer(event_dict)
            except Exception as exc:
                # A broken observer (a full disk under the traces) must never break
                # the request being logged; say so once, count the rest.
                self.observer_errors += 1
                if self.observer_errors == 1:
                    print(
                        f"chaosproxy: warning: frame-log observer failed: {exc!r}",
                        file=sys.stderr,
                    )
        return event_dict

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer`` with every line as a dict, before it is rendered.

        Observers must not modify the dict (they may keep it: nothing changes it
        afterwards). Every line has ``event`` (request, frame, action, response_end)
        and ``request_id``. An exception in an observer is counted in
        ``observer_errors`` and otherwise ignored."""
        self._observers.append(observer)

    def remove_observer(self, observer: Observer) -> None:
        """Stop calling ``observer`` (no error if it was not added)."""
        with contextlib.suppress(ValueError):
            self._observers.remove(observer)

    def add_listener(self, listener: Callable[[bytes], None]) -> None:
        """Call ``listener`` with every rendered line (JSON unless the log is pretty)."""
        self._listeners.append(listener)

    def for_request(self, **bound: Any) -> Any:
        return self._logger.bind(**bound)

    def flush(self) -> None:
        if self._stream is not None:
            # A closed stdout must not take the proxy down.
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()

    def close(self) -> None:
        self.flush()
        if self._stream is not None and self._stream is not sys.stdout.buffer:
            self._stream.close()


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


def content_fields(data: bytes) -> dict[str, str]:
    """The payload fields a frame line carries with ``--log-content``."""
    return {
        "data": data.decode("utf-8", "replace"),
        "raw": base64.b64encode(data).decode("ascii"),
    }
