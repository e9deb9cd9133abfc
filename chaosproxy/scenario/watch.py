"""Scenario files watched for changes (``--scenarios-poll``; docs/scenarios.md, Watched
files).

What the ``--scenarios`` paths look like is a *stamp*: for each path, and for each
``*.yaml``/``*.yml`` entry of a directory, its name and what ``stat`` says of the file
it leads to (device, inode, size, modification and change times; symbolic links
followed; of a directory, which one it is: other entries come and go unseen). A file
edited, added, removed or renamed changes the stamp; so does a Kubernetes ConfigMap's
update, which writes the new files in a new directory and swaps the ``..data`` link to
it in one rename (each ``name.yaml`` is a link through
``..data``: the file it leads to is another inode). A stamp is a few ``stat`` calls:
polling it every second costs nothing a proxy would notice, needs no dependency, and
works where inotify does not (a ConfigMap's atomic swap, network file systems).

:class:`ScenarioFiles` is the files of one proxy: :meth:`~ScenarioFiles.changed` says
whether the stamp moved since it last looked, :meth:`~ScenarioFiles.load` reads them
all, with every problem located (``FILE:LINE``). Applying a valid set is the caller's
(:meth:`chaosproxy.scenario.selection.ScenarioSet.rebase`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from chaosproxy.scenario.errors import Problem
from chaosproxy.scenario.loader import scan_paths
from chaosproxy.scenario.model import Scenario

#: What one file looks like: (device, inode, size, mtime ns, ctime ns); None: missing.
FileStamp = tuple[int, int, int, int, int] | None
#: What every watched path looks like (see the module's docstring).
Stamp = tuple[tuple[str, FileStamp], ...]

_SUFFIXES = (".yaml", ".yml")


def _file_stamp(path: str) -> FileStamp:
    try:
        st = os.stat(path)  # (the file a link leads to)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):  # which directory; its entries are stamped apart
        return (st.st_dev, st.st_ino, 0, 0, 0)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stamp(paths: Sequence[str | Path]) -> Stamp:
    """What the scenario files of ``paths`` look like now."""
    out: list[tuple[str, FileStamp]] = []
    for raw in paths:
        path = os.fspath(raw)
        out.append((path, _file_stamp(path)))
        if not os.path.isdir(path):
            continue
        try:
            names = sorted(os.listdir(path))
        except OSError:
            continue
        for name in names:
            if name.endswith(_SUFFIXES):
                entry = os.path.join(path, name)
                out.append((entry, _file_stamp(entry)))
    return tuple(out)


class ScenarioFiles:
    """The ``--scenarios`` paths of one proxy, and what they looked like when last
    looked at (the first time: when this was made)."""

    def __init__(self, paths: Sequence[str | Path]) -> None:
        self.paths = list(paths)
        self._stamp = stamp(self.paths)

    def changed(self) -> bool:
        """Whether the files changed since the last call (or since this was made)."""
        now = stamp(self.paths)
        if now == self._stamp:
            return False
        self._stamp = now
        return True

    def load(self) -> tuple[dict[str, Scenario], list[Problem]]:
        """Every scenario of the files now (in load order), and every problem in them
        (none: the set is valid)."""
        return scan_paths(self.paths)


__all__ = ["FileStamp", "ScenarioFiles", "Stamp", "stamp"]
