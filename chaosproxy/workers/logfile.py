"""One frame log for every worker of ``serve --workers N``, of whole lines.

Each worker renders its own lines (as one process does) and writes them through a
:class:`LineWriter`: a buffer that only ever holds whole lines (every write the frame
log makes is one line or several) and hands them on in one ``write`` each time.

- ``--log PATH``, or ``--log -`` with stdout a regular file: every worker writes to the
  file itself, opened ``O_APPEND`` (stdout: the descriptor all share). On a local file
  system one ``write`` of an appending descriptor is never interleaved with another's,
  so the file is whole lines, each worker's in its own order. Nothing crosses processes.
- ``--log -`` with stdout a pipe or a terminal: a write over ``PIPE_BUF`` (4 KiB) to a
  pipe may be interleaved, so each worker writes into a socket of its own and the
  supervisor copies whole lines from them to stdout (:class:`Relay`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import Callable

#: A worker's buffer is written once it holds this much (and by the periodic flush).
FLUSH_AT = 1 << 16


class LineWriter:
    """A binary stream over a file descriptor for the frame log, each ``write`` one or
    more whole lines, written on in whole lines only."""

    def __init__(self, fd: int, *, name: str = "?", owns: bool = True) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._owns = owns
        self.name = name
        self.closed = False

    def write(self, data: bytes) -> int:
        if self.closed:
            raise ValueError("write to a closed log")
        self._buffer += data
        if len(self._buffer) >= FLUSH_AT:
            self.flush()
        return len(data)

    def flush(self) -> None:
        buffer = self._buffer
        if not buffer:
            return
        view = memoryview(buffer)
        try:
            written = 0
            while written < len(buffer):  # (short only on a full disk or a signal)
                written += os.write(self._fd, view[written:])
        finally:
            view.release()
            buffer.clear()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.closed = True
            if self._owns:
                os.close(self._fd)


def is_regular(fd: int) -> bool:
    """Whether ``fd`` is a regular file (appends of whole lines never interleave)."""
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


def open_append(path: str) -> int:
    """``path`` opened for appending (created if need be), as every worker opens it."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)


class Relay(asyncio.Protocol):
    """The supervisor's copy of one worker's log to stdout: whole lines only (a line cut
    by a read waits for its end)."""

    def __init__(self, out: Callable[[bytes], None]) -> None:
        self._out = out
        self._tail = b""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        data = self._tail + data
        cut = data.rfind(b"\n") + 1
        self._tail = data[cut:]
        if cut:
            self._out(data[:cut])

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._tail:  # (a worker killed mid-line: what it wrote, ended)
            self._out(self._tail + b"\n")
            self._tail = b""
        if not self.done.done():
            self.done.set_result(None)


def stdout_writer() -> Callable[[bytes], None]:
    """Writes to stdout's descriptor, whole (blocking: the workers wait for a slow
    reader, as one process would); a reader gone means nothing is written any more."""
    fd = sys.stdout.fileno()
    broken = False

    def write(data: bytes) -> None:
        nonlocal broken
        if broken:
            return
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                try:
                    written += os.write(fd, view[written:])
                except BlockingIOError:
                    import select

                    select.select([], [fd], [], 1.0)
        except OSError:
            broken = True
            with contextlib.suppress(Exception):
                from chaosproxy.observe.logs import point_stdout_away

                point_stdout_away()

    return write


__all__ = ["FLUSH_AT", "LineWriter", "Relay", "is_regular", "open_append", "stdout_writer"]
