"""``CHAOSPROXY_PURE=1`` (chaosproxy/_pure.py): the finder answers for a package's
submodules with their ``.py`` sources where Python would load the extension module
beside them, leaves other packages and directories without ``__init__.py`` to Python,
and is installed once. The compiled build tested both ways is test_compiled.py's."""

from __future__ import annotations

import importlib
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaosproxy._pure import SourceFinder, install

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``purepkg``: ``mod`` as a source and as a (broken) extension module beside it,
    ``other`` as a source only, ``data/`` a directory with no ``__init__.py``."""
    root = tmp_path / "purepkg"
    (root / "data").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text("WHERE = 'source'\n")
    (root / f"mod{SUFFIX}").write_bytes(b"not a shared object")
    (root / "other.py").write_text("WHERE = 'other source'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in [n for n in sys.modules if n == "purepkg" or n.startswith("purepkg.")]:
        monkeypatch.delitem(sys.modules, name)
    yield root
    for name in [n for n in sys.modules if n == "purepkg" or n.startswith("purepkg.")]:
        del sys.modules[name]


def test_without_the_finder_python_prefers_the_extension_module(package: Path) -> None:
    with pytest.raises(ImportError):
        importlib.import_module("purepkg.mod")


def test_with_it_the_source_is_loaded(package: Path) -> None:
    install("purepkg")
    module = importlib.import_module("purepkg.mod")
    assert (module.WHERE, Path(module.__file__ or "").name) == ("source", "mod.py")
    assert importlib.import_module("purepkg.other").WHERE == "other source"


def test_it_answers_only_for_the_packages_submodules(package: Path) -> None:
    finder = SourceFinder("purepkg")
    path = [str(package)]
    assert finder.find_spec("purepkg", None) is None  # the package itself: Python's
    assert finder.find_spec("otherpkg.mod", path) is None
    assert finder.find_spec("purepkg.data", path) is None  # no __init__.py: Python's
    assert finder.find_spec("purepkg.missing", path) is None
    spec = finder.find_spec("purepkg.mod", path)
    assert spec is not None and spec.origin == str(package / "mod.py")
    finder.invalidate_caches()  # (its file finders forget what they listed)
    (package / "late.py").write_text("")
    assert finder.find_spec("purepkg.late", path) is not None


def test_it_is_installed_once(package: Path) -> None:
    install("purepkg")
    install("purepkg")
    install("purepkg2")
    prefixes = [f.prefix for f in sys.meta_path if isinstance(f, SourceFinder)]
    assert prefixes.count("purepkg.") == 1
    assert sys.meta_path[0].prefix == "purepkg2."  # type: ignore[attr-defined]
