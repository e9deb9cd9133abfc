"""The package's C routines built for a test run: ``chaosproxy/observe/frameline.c``
compiled here, as setup.py compiles it into the wheel, into a directory of the run's,
and loaded apart from the package, out of ``sys.modules`` (so that both twins, the C
one and the Python one, run in one process whatever build the run tests)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The C source of the frame line's routine (the installed package carries only the
#: built module: the source is the checkout's).
FRAMELINE_C = Path(__file__).resolve().parents[2] / "chaosproxy" / "observe" / "frameline.c"


def build_frameline(directory: Path) -> ModuleType:
    """``frameline.c`` compiled into ``directory`` (a shared library loaded as the
    extension module ``chaosproxy.observe.frameline``, kept out of ``sys.modules``)."""
    from setuptools._distutils import (  # type: ignore[import-untyped]
        ccompiler,
        sysconfig,
    )

    compiler = ccompiler.new_compiler()
    sysconfig.customize_compiler(compiler)
    objects = compiler.compile(
        [str(FRAMELINE_C)],
        output_dir=str(directory),
        include_dirs=[sysconfig.get_python_inc()],
        extra_postargs=["-O2", "-Wall", "-Werror"],
    )
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    library = str(directory / f"frameline{suffix}")
    compiler.link_shared_object(objects, library, libraries=["m"])  # (as setup.py)
    spec = importlib.util.spec_from_file_location("chaosproxy.observe.frameline", library)
    assert spec is not None and spec.loader is not None
    before = sys.modules.get(spec.name)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:  # (loading it puts it in sys.modules: the package's own stays)
        if before is None:
            sys.modules.pop(spec.name, None)
        else:
            sys.modules[spec.name] = before
    assert module.KIND == "native"
    return module
