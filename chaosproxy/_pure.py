"""``CHAOSPROXY_PURE=1``: every module of the package from its ``.py`` source.

The wheel keeps each compiled module's source next to it, and Python prefers the
extension module when both are there. :func:`install` puts a finder at the front of
``sys.meta_path`` that answers for the package's submodules with their sources only;
``chaosproxy/__init__.py`` calls it before anything else of the package is imported,
so no compiled module is ever loaded in that process (they are compiled as one group
and cannot be mixed with their sources).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import SOURCE_SUFFIXES, FileFinder, ModuleSpec, SourceFileLoader
from types import ModuleType


class SourceFinder(MetaPathFinder):
    """Finds ``package``'s submodules as source files, never as extension modules."""

    def __init__(self, package: str) -> None:
        self.prefix = package + "."
        self._finders: dict[str, FileFinder] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith(self.prefix) or path is None:
            return None
        for entry in path:
            finder = self._finders.get(entry)
            if finder is None:
                finder = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES))
                self._finders[entry] = finder
            spec = finder.find_spec(fullname, target)
            # (A directory without __init__.py, scenarios/, is no module: left to Python.)
            if spec is not None and spec.loader is not None:
                return spec
        return None

    def invalidate_caches(self) -> None:
        for finder in self._finders.values():
            finder.invalidate_caches()


def install(package: str) -> None:
    """Answer first for ``package``'s submodules (once per process)."""
    if not any(isinstance(f, SourceFinder) and f.prefix == package + "." for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder(package))
