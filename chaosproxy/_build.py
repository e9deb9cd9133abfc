"""Which modules the wheel compiles with mypyc, and which way this process runs them.

``setup.py`` reads :data:`COMPILED` (this file imports nothing of the package, so the
build can run it without the project's dependencies). docs/architecture.md, "Compiled
modules", says why these and what a compiled module must not do; docs/benchmark.md has
the instruction counts they were chosen by.
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from typing import Literal

#: The hot modules: what every framed or passthrough event goes through. Each is
#: compiled only together with all the others (one shared library), and none of them
#: may define a pydantic model or validator (pydantic reads what compiled code hides).
#: No package ``__init__``: mypyc gives a compiled package in a shared library inside
#: the package a wrong ``__path__`` (tests/test_compiled.py).
COMPILED: tuple[str, ...] = (
    "chaosproxy.core.frames",
    "chaosproxy.core.events",
    "chaosproxy.core.actions",
    "chaosproxy.core.selector",
    "chaosproxy.core.framing.sse",
    "chaosproxy.core.framing.ndjson",
    "chaosproxy.core.framing.eventstream",
    "chaosproxy.core.framing.raw",
    "chaosproxy.core.providers.generic_kinds",
    "chaosproxy.core.pipeline",
    "chaosproxy.core.integrity",
    "chaosproxy.core.answer",
    "chaosproxy.core.recent",
    "chaosproxy.core.lifecycle",
    "chaosproxy.core.head",
    "chaosproxy.core.body",
    "chaosproxy.core.summary",
    "chaosproxy.core.unavailable",
    "chaosproxy.core.session",
    "chaosproxy.server.pump",
    "chaosproxy.server.exchange",
    "chaosproxy.observe.logs",
    "chaosproxy.observe.metrics",
    "chaosproxy.observe.store",
    "chaosproxy.upstream.connection",
    "chaosproxy.upstream.response",
)

#: The C routines (docs/architecture.md, "Compiled modules"): each module here is a
#: ``.py`` file, the Python twin, and a ``.c`` file beside it, the same routine in C,
#: built into an extension module of the same name where the wheel is compiled (it
#: then shadows the twin, as a compiled module its source). Not compiled by mypyc.
NATIVE: tuple[str, ...] = ("chaosproxy.observe.frameline",)

#: The package's version (``chaosproxy.__version__``), here so that a module of the
#: package can say it without importing the package's ``__init__`` (an import cycle).
__version__ = "0.1.0"

#: The variable that makes ``import chaosproxy`` load every module from its source.
PURE_ENV = "CHAOSPROXY_PURE"

Build = Literal["compiled", "pure"]


def is_compiled(name: str) -> bool:
    """Whether module ``name`` (imported here if it was not) runs compiled."""
    module = importlib.import_module(name)
    return (getattr(module, "__file__", None) or "").endswith(tuple(EXTENSION_SUFFIXES))


def build() -> Build:
    """``compiled`` when this process runs the compiled modules, ``pure`` when it runs
    them from their Python sources (a pure install, or ``CHAOSPROXY_PURE=1``)."""
    return "compiled" if is_compiled(COMPILED[0]) else "pure"
