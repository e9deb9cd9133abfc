"""No child process outlives its test.

A pytest plugin (tests/conftest.py loads it). A test that starts ``chaosproxy serve``,
``redis-server``, HAProxy or a client and then fails on its way (a timeout, an assertion
before its ``finally``) must not leave them running: they would hold ports and CPU for
the rest of the run, and after it (three replicas were found still listening an hour
after a timed-out run). So:

- after each test's teardown, every process the test's body started (a child of this
  process, with its own children; not the standard library's resource tracker) that
  is still running is killed, and the test gets an
  error naming them: a leak is a defect of the test, said where it happens;
- at the end of the session, after every fixture's teardown, whatever is left of this
  process's children is killed too (a fixture's server whose teardown never ran).

Processes started by fixtures (a session's Node runner or Chromium) are the fixtures'
to stop; they are reaped at the end of the session only. Linux only (``/proc``);
elsewhere it does nothing. ``-p no:tests.support.reaper`` turns it off.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Generator
from pathlib import Path

import pytest

_STARTED = pytest.StashKey[set[int]]()
_PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent) of a process, or None once it is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def descendants(root: int) -> set[int]:
    """The running (not zombie) descendants of process ``root``."""
    if not _PROC.is_dir():
        return set()
    parents: dict[int, int] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found is not None and found[0] != "Z":
                parents[int(entry.name)] = found[1]
    found_ids: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found_ids
        found_ids |= frontier
    return found_ids


def children(parent: int) -> set[int]:
    """The running children of process ``parent`` that a test may leave behind: not
    Python's own per-process helpers (multiprocessing's resource tracker, started on
    first use and living as long as this process)."""
    return {
        pid
        for pid in descendants(parent)
        if (_stat(pid) or ("", 0))[1] == parent and not _helper(pid)
    }


def _helper(pid: int) -> bool:
    return pid in _SPARED or any(name in _cmdline(pid) for name in _HELPERS)


#: Processes a test helper starts once, on first use, for the rest of the session (the
#: fork server of tests/clients/zygote.py): theirs to stop, not the test's.
_SPARED: set[int] = set()


def spare(pid: int) -> None:
    """Process ``pid`` lives for the session, whichever test started it."""
    _SPARED.add(pid)


#: Processes started once for the life of this process, by the standard library.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _cmdline(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(w.decode(errors="replace") for w in raw.rstrip(b"\0").split(b"\0"))


def _describe(pid: int) -> str:
    return f"{pid} ({_cmdline(pid)[:120]})"


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    # (Its own children only: a browser or fork server a fixture started may start
    # processes of its own meanwhile; they are the fixture's to stop.)
    before = children(os.getpid())
    try:
        return (yield)
    finally:
        item.stash[_STARTED] = children(os.getpid()) - before


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    result = yield
    started = item.stash.get(_STARTED, set())
    if started:
        mine = started | {d for pid in started for d in descendants(pid)}
        # (Not a zombie, and not one exiting: its command line is gone.)
        left = {pid for pid in mine if (_stat(pid) or ("Z", 0))[0] != "Z" and _cmdline(pid)}
        if left:
            named = [_describe(pid) for pid in sorted(left)]
            _kill(left)
            raise AssertionError(f"the test left {len(left)} process(es) running: {named}")
    return result


@pytest.hookimpl(trylast=True)  # (after the session's fixtures are torn down)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # pytest-xdist's controller: its children are the workers
    _kill(descendants(os.getpid()))
