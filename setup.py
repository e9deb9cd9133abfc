"""The two things pyproject.toml cannot say: compile the hot modules with mypyc, and carry
the scenario library, which lives at the top of the repository, into the package.

Metadata, dependencies and the package's own data are all in pyproject.toml.

**The library.** ``scenarios/`` at the top of the repository is the built-in scenario
library's one home; ``build_py`` copies its files into the built package as
``chaosproxy/scenarios/`` (package data, where ``chaosproxy.scenario.library_root`` finds
it in an installed wheel). An editable install copies nothing: the loader reads the
checkout's ``scenarios/`` (next to the package's directory). The sdist carries
``scenarios/`` (MANIFEST.in), and a build without it fails rather than ship no library.

**Compiled modules.** This adds the extension modules of ``chaosproxy/_build.py``'s
``COMPILED`` list (one shared library, ``chaosproxy.__compiled__mypyc``, and a small
module per compiled one), and the C routines of its ``NATIVE`` list (each its own
extension module, built from the ``.c`` file next to its Python twin), next to their
``.py`` sources, which stay in the wheel. The
wheel is pure Python instead when:

- ``CHAOSPROXY_PURE_BUILD=1`` (a pure wheel, for a platform without a compiler);
- there is no working C compiler, or the interpreter is not CPython (said on stderr);
- the install is editable (``pip install -e .``): the sources in the tree are what
  runs, and an edit needs no rebuild.

The compilation runs when the wheel is built (``build_ext``), never when pip only asks
for the metadata. docs/architecture.md, "Compiled modules", says why these modules.
"""

from __future__ import annotations

import os
import platform
import runpy
import sys
import tempfile
import time
from pathlib import Path

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
_BUILD = runpy.run_path(str(HERE / "chaosproxy" / "_build.py"))
COMPILED: tuple[str, ...] = _BUILD["COMPILED"]
NATIVE: tuple[str, ...] = _BUILD["NATIVE"]
#: What mypyc is told: the sources it compiles, and a type check that treats the
#: dependencies as unknown (``Any``) whatever is installed, so the build needs only
#: mypy, and gives the same code in any environment. ``mypy`` itself, strict and with
#: the dependencies installed, is the type check (.ci/run); compiled code then checks
#: the types of our own annotations at run time, and never a library's claims. A
#: compiled class may not subclass a dependency's class (mypyc cannot see it: the
#: process crashed), which strict mode's "cannot subclass Any" refuses.
MYPYC_OPTIONS = [
    "--no-site-packages",
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--allow-untyped-decorators",
    "--no-warn-return-any",
    "--no-warn-unused-ignores",
]


def _pure_reason() -> str | None:
    """Why the wheel is pure Python (None: compile)."""
    if os.environ.get("CHAOSPROXY_PURE_BUILD", "") not in ("", "0"):
        return "CHAOSPROXY_PURE_BUILD is set"
    if platform.python_implementation() != "CPython":
        return f"mypyc needs CPython, not {platform.python_implementation()}"
    return _compiler_missing()


def _compiler_missing() -> str | None:
    """None when a C compiler builds a Python extension here, else what failed."""
    from setuptools._distutils import ccompiler, sysconfig

    try:
        compiler = ccompiler.new_compiler()
        sysconfig.customize_compiler(compiler)
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp, "probe.c")
            source.write_text("#include <Python.h>\nint probe(void) { return 0; }\n")
            compiler.compile(
                [str(source)], output_dir=tmp, include_dirs=[sysconfig.get_python_inc()]
            )
    except Exception as exc:
        return f"no working C compiler ({type(exc).__name__}: {exc})".splitlines()[0]
    return None


PURE_REASON = _pure_reason()
if PURE_REASON is not None and "bdist_wheel" in sys.argv:
    print(f"chaosproxy: building the pure package: {PURE_REASON}", file=sys.stderr)


class BinaryDistribution(Distribution):
    """A platform wheel unless the build is pure (decided before anything is built)."""

    def has_ext_modules(self) -> bool:
        return PURE_REASON is None


def say(line: str) -> None:
    """A line the person waiting sees: on the terminal itself where there is one (pip
    shows a build's output only when it fails), else on stderr (a log)."""
    try:
        fd = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        print(line, file=sys.stderr, flush=True)
        return
    with os.fdopen(fd, "w") as tty:
        tty.write(line + "\n")


#: What a compiled build is told it will take (measured: 2 minutes of CPU on a quiet
#: two-core machine, up to 10 minutes of wall time at load 5).
COMPILE_TIME = "2 to 10 minutes"


class BuildCompiled(build_ext):
    """Runs mypyc here, when the extensions are built, and only then, saying so: a
    compiled build takes minutes where a pure one takes seconds."""

    began = 0.0

    def finalize_options(self) -> None:
        if getattr(self, "editable_mode", False) or self.inplace:
            self.distribution.ext_modules = []  # editable: the sources run as they are
        elif PURE_REASON is not None:
            self.distribution.ext_modules = []
        else:
            from mypyc.build import mypycify

            BuildCompiled.began = time.monotonic()
            say(
                f"chaosproxy: compiling {len(COMPILED)} modules with mypyc, which takes "
                f"{COMPILE_TIME}; CHAOSPROXY_PURE_BUILD=1 builds the pure package (the "
                "same features, about twice the CPU per event) in under a minute"
            )
            paths = [_source(name) for name in COMPILED]
            self.distribution.ext_modules = [
                *mypycify(
                    [*MYPYC_OPTIONS, *paths],
                    opt_level="3",
                    group_name="chaosproxy.__compiled",
                    target_dir=str(Path(self.build_temp or "build") / "mypyc"),
                ),
                *native_extensions(),
            ]
        super().finalize_options()

    def run(self) -> None:
        super().run()
        if BuildCompiled.began:
            say(f"chaosproxy: compiled in {time.monotonic() - BuildCompiled.began:.0f} s")


#: The scenario library: its directory in the repository, and in the built package.
LIBRARY_SOURCE = HERE / "scenarios"
LIBRARY_TARGET = ("chaosproxy", "scenarios")


class BuildWithLibrary(build_py):
    """The package as setuptools builds it, and the scenario library copied into it."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # the loader reads the checkout's scenarios/ itself
        files = sorted([*LIBRARY_SOURCE.glob("*.yaml"), *LIBRARY_SOURCE.glob("*.yml")])
        if not files:
            raise RuntimeError(f"no scenario library in {LIBRARY_SOURCE}: it must be built in")
        target = Path(self.build_lib, *LIBRARY_TARGET)
        self.mkpath(str(target))
        for path in files:
            self.copy_file(str(path), str(target / path.name))


def native_extensions() -> list[Extension]:
    """The C routines of ``chaosproxy/_build.py``'s ``NATIVE``: each an extension module
    of the same name as its Python twin, which it shadows in a compiled install (the
    pure build and ``CHAOSPROXY_PURE=1`` run the twin)."""
    return [
        Extension(
            name,
            [str(Path(_source(name)).with_suffix(".c"))],
            extra_compile_args=["-O2"],
            libraries=["m"],  # (nearbyint: named, not left to the interpreter's libm)
        )
        for name in NATIVE
    ]


def _source(module: str) -> str:
    return str(Path(*module.split(".")).with_suffix(".py"))


if __name__ == "__main__":  # (as the build runs it; tests/test_compiled.py imports it)
    setup(
        distclass=BinaryDistribution,
        cmdclass={"build_ext": BuildCompiled, "build_py": BuildWithLibrary},
    )
