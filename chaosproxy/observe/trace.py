"""Per-request trace files (``--trace-dir``): one JSONL file per request.

A :class:`TraceWriter` observes the frame log and appends each line of a request to
``DIR/<request_id>.jsonl``: the ``request`` line, every ``frame`` (with
``--log-content``, its exact bytes as base64 ``raw``), ``action`` lines and the
``response_end`` line, at which the file is closed; a ``verdict`` recorded later
for one of the last :data:`ENDED_KEPT` requests is appended to its file. Lines are
JSON whatever the console log looks like. ``chaosproxy replay`` serves such a file again.

Request ids (``r-N``) start again at 1 in every process, so a file that already exists
is never overwritten: the trace goes to ``<request_id>.2.jsonl`` (then ``.3``…) instead.

Open files are bounded: at most ``max_open`` at once; beyond that, the least recently
written trace is closed and reopened (appending) when its request writes again.
"""

from __future__ import annotations

import contextlib
import sys
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

import orjson

from chaosproxy.core.records import LogLine, VerdictLine

#: Open trace files kept at once (one per request in flight, up to this).
DEFAULT_MAX_OPEN = 64
#: Ended requests whose trace a later ``verdict`` line is still appended to.
ENDED_KEPT = 256


class TraceWriter:
    """Writes one JSONL trace per request; call it with every frame-log line."""

    def __init__(self, directory: str | Path, *, max_open: int = DEFAULT_MAX_OPEN) -> None:
        if max_open < 1:
            raise ValueError("max_open must be >= 1")
        self.directory = Path(directory)
        self.max_open = max_open
        #: request_id -> trace path, for every request whose response has not ended.
        self._paths: dict[str, Path] = {}
        #: request_id -> open file, least recently written first.
        self._open: OrderedDict[str, IO[bytes]] = OrderedDict()
        #: request_id -> trace path, for the most recently ended requests (verdicts).
        self._ended: OrderedDict[str, Path] = OrderedDict()
        #: Traces written completely (closed at response_end), for tests and callers.
        self.completed = 0
        self._warned = False

    @classmethod
    def create(cls, directory: str | Path, **kw: Any) -> TraceWriter:
        """Make ``directory`` (and its parents) if needed; raises OSError if it cannot."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        if not path.is_dir():
            raise NotADirectoryError(f"not a directory: {path}")
        return cls(path, **kw)

    def path_for(self, request_id: str) -> Path | None:
        """Where the trace of a request in flight is being written."""
        return self._paths.get(request_id)

    def __call__(self, line: LogLine) -> None:
        if line["event"] == "rejected":  # (no request)
            return
        request_id = line["request_id"]
        if line["event"] == "verdict":
            self._append_verdict(request_id, line)
            return
        try:
            stream = self._stream(request_id, new=line["event"] == "request")
            if stream is None:
                return
            stream.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
            if line["event"] == "response_end":
                self._finish(request_id)
                self.completed += 1
        except OSError as exc:
            self._drop(request_id)
            if not self._warned:
                self._warned = True
                print(f"chaosproxy: warning: cannot write trace: {exc}", file=sys.stderr)

    def _stream(self, request_id: str, *, new: bool) -> IO[bytes] | None:
        stream = self._open.get(request_id)
        if stream is not None:
            self._open.move_to_end(request_id)
            return stream
        if new:
            path, stream = self._create(request_id)
            self._paths[request_id] = path
        else:
            path_or_none = self._paths.get(request_id)
            if path_or_none is None:  # a request that began before this writer
                return None
            stream = path_or_none.open("ab")
        self._open[request_id] = stream
        while len(self._open) > self.max_open:
            _, oldest = self._open.popitem(last=False)
            oldest.close()
        return stream

    def _create(self, request_id: str) -> tuple[Path, IO[bytes]]:
        """A new file for this request; never an existing one (exclusive create)."""
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in request_id)
        path = self.directory / f"{safe}.jsonl"
        n = 1
        while True:
            try:
                return path, path.open("xb")
            except FileExistsError:
                n += 1
                path = self.directory / f"{safe}.{n}.jsonl"

    def _append_verdict(self, request_id: str, line: VerdictLine) -> None:
        path = self._ended.get(request_id) or self._paths.get(request_id)
        if path is None:
            return
        with contextlib.suppress(OSError):
            stream = self._open.get(request_id)
            if stream is not None:
                stream.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
                return
            with path.open("ab") as out:
                out.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))

    def _finish(self, request_id: str) -> None:
        stream = self._open.pop(request_id, None)
        path = self._paths.pop(request_id, None)
        if path is not None:
            self._ended[request_id] = path
            while len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)
        if stream is not None:
            stream.close()

    def _drop(self, request_id: str) -> None:
        stream = self._open.pop(request_id, None)
        self._paths.pop(request_id, None)
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()

    @property
    def open_files(self) -> int:
        return len(self._open)

    def flush(self) -> None:
        """Push buffered lines of traces in flight to disk (called periodically)."""
        for stream in self._open.values():
            with contextlib.suppress(OSError):
                stream.flush()

    def close(self) -> None:
        """Close every open trace (requests still in flight keep what they wrote)."""
        for request_id in list(self._open):
            self._drop(request_id)
        self._paths.clear()


__all__ = ["DEFAULT_MAX_OPEN", "ENDED_KEPT", "TraceWriter"]
