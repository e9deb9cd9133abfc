"""The frame log: one JSON line per request, per write to the client, per response end.

structlog does the binding (``request_id`` and ``scenario`` on every line) and orjson
the rendering, straight to bytes. Lines are buffered and flushed at the end of each
response and by a periodic flush, so logging a frame costs one dict and one
``orjson.dumps`` — not a syscall.

Nothing here ever sees request headers. Paths are logged with credential-like query
parameters masked (:func:`redact_path`).
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any
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


def _render(_: Any, __: str, event_dict: dict[str, Any]) -> bytes:
    return orjson.dumps(event_dict, option=orjson.OPT_APPEND_NEWLINE)


#: Something that wants every log line as a dict (metrics, traces, the admin API).
Observer = Callable[[dict[str, Any]], None]


class _Sink:
    """A structlog logger that appends rendered lines to a buffered binary stream."""

    __slots__ = ("_write", "_listeners")

    def __init__(self, stream: IO[bytes], listeners: list[Callable[[bytes], None]]) -> None:
        self._write = stream.write
        self._listeners = listeners

    def msg(self, line: bytes) -> None:
        self._write(line)
        for listener in self._listeners:
            listener(line)

    info = msg


class FrameLog:
    """Where frame-log lines go. One per proxy; :meth:`for_request` binds a request."""

    def __init__(self, stream: IO[bytes] | None, *, content: bool = False) -> None:
        self.content = content
        self._stream = stream
        self._listeners: list[Callable[[bytes], None]] = []
        self._observers: list[Observer] = []
        sink = _Sink(stream if stream is not None else _NullStream(), self._listeners)
        self._logger: Any = structlog.wrap_logger(
            sink,
            processors=[self._observe, _render],
            wrapper_class=structlog.BoundLogger,
            cache_logger_on_first_use=True,
        )

    @classmethod
    def open(cls, target: str | None, *, content: bool = False) -> FrameLog:
        """``-`` for stdout, a path to append to, or None for no log."""
        if target is None:
            return cls(None, content=content)
        if target == "-":
            return cls(sys.stdout.buffer, content=content)
        path = Path(target)
        return cls(path.open("ab", buffering=1 << 16), content=content)

    def _observe(self, _: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        for observer in self._observers:
            observer(event_dict)
        return event_dict

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer`` with every line as a dict, before it is rendered.

        Observers must not modify the dict. Every line has ``event`` (request, frame,
        action, response_end) and ``request_id``."""
        self._observers.append(observer)

    def add_listener(self, listener: Callable[[bytes], None]) -> None:
        """Call ``listener`` with every rendered line (tests, traces, the admin API)."""
        self._listeners.append(listener)

    def for_request(self, **bound: Any) -> Any:
        return self._logger.bind(**bound)

    def flush(self) -> None:
        if self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError):  # a closed stdout must not take the proxy down
                pass

    def close(self) -> None:
        self.flush()
        if self._stream is not None and self._stream is not sys.stdout.buffer:
            self._stream.close()


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
