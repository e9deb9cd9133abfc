"""chaosproxy: a fault-injecting reverse proxy for streaming LLM APIs."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Any

from chaosproxy._build import PURE_ENV, __version__

# First thing: with CHAOSPROXY_PURE=1 no compiled module of this package is loaded, only
# their Python sources (chaosproxy/_pure.py; docs/architecture.md, Compiled modules).
if os.environ.get(PURE_ENV, "") not in ("", "0"):
    from chaosproxy._pure import install

    install(__name__)

#: Modules that moved into a room, under the name users still run them by: the
#: container's health check is ``python -m chaosproxy.healthcheck`` in the image's
#: HEALTHCHECK and in users' compose files (docs/deploy.md).
MOVED: dict[str, str] = {"chaosproxy.healthcheck": "chaosproxy.control.healthcheck"}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a name of :data:`MOVED` as the module it now is: ``import`` gives that
    same module object, and ``python -m`` runs its code (through ``get_code``)."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing: the module ran when it was imported under its own name."""

    def get_code(self, fullname: str) -> CodeType | None:
        spec = importlib.util.find_spec(MOVED[fullname])
        loader = spec.loader if spec is not None else None
        if not isinstance(loader, importlib.abc.InspectLoader):
            raise ImportError(f"cannot run {MOVED[fullname]} as {fullname}", name=fullname)
        return loader.get_code(MOVED[fullname])


# Last: a module of that name, if one ever comes back, is found first.
if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedFinder())

if TYPE_CHECKING:
    from chaosproxy.control.api import ChaosProxy
    from chaosproxy.control.client import ChaosClient


def __getattr__(name: str) -> Any:
    # Lazy, so ``import chaosproxy`` (the pytest plugin, the CLI) stays cheap.
    if name == "ChaosProxy":
        from chaosproxy.control.api import ChaosProxy

        return ChaosProxy
    if name == "ChaosClient":
        from chaosproxy.control.client import ChaosClient

        return ChaosClient
    raise AttributeError(f"module 'chaosproxy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = ["ChaosClient", "ChaosProxy", "__version__"]
