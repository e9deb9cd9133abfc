"""The scenario library's one home is ``scenarios/`` at the top of the repository; the
build carries it into the package (``setup.py``'s ``build_py``: ``chaosproxy/scenarios/``,
package data), the sdist carries the directory (MANIFEST.in), and the loader reads the
package's copy when installed, the checkout's directory otherwise (an editable install,
these tests). ``.ci/run`` builds the real wheels and sdist and runs them from an empty
directory; tests/test_dockerfile.py has the image's side."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from chaosproxy.scenario import library_root, load_library, load_scenarios
from tests.support.repo import LIBRARY, REPO

#: Runs setup.py's build_py (with the library step) on the package alone, into argv[1].
BUILD = """
import runpy, sys
from setuptools import Distribution
build_py = runpy.run_path("setup.py", run_name="probe")["BuildWithLibrary"]
distribution = Distribution({"name": "chaosproxy", "packages": ["chaosproxy"]})
distribution.script_name = "setup.py"
command = build_py(distribution)
command.build_lib = sys.argv[1]
command.editable_mode = sys.argv[2] == "editable"
command.ensure_finalized()
command.run()
"""


def build_py(cwd: Path, build_lib: Path, mode: str = "wheel") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BUILD, str(build_lib), mode],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "CC": "false"},  # (CC: no compiler probe to wait for)
        capture_output=True,
        text=True,
        timeout=120,
    )


def library_files() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(LIBRARY.glob("*.yaml"))}


def test_the_library_has_one_home_at_the_top_of_the_repository() -> None:
    try:
        tracked = subprocess.run(
            ["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of the repository's files")
    paths = {line.split("\t", 1)[1]: line.split()[0] for line in tracked}
    library = {p for p in paths if p.startswith("scenarios/")}
    assert library == {f"scenarios/{name}" for name in library_files()}
    assert len(library) >= 40
    assert all(paths[p] == "100644" for p in library)  # files, not links
    assert not [p for p in paths if p.startswith("chaosproxy/scenarios")]  # no second copy


def test_the_loader_reads_the_package_copy_else_the_checkout() -> None:
    root = library_root()
    packaged = REPO / "chaosproxy" / "scenarios"
    # .ci/run lays the built wheel over a copy of the checkout: then the package's copy.
    assert Path(str(root)) == (packaged if packaged.is_dir() else LIBRARY)
    assert {p.name: p.read_bytes() for p in root.iterdir()} == library_files()
    library = load_library()
    assert {s.source for s in library.values()} == {str(root / n) for n in library_files()}
    checkout = load_scenarios([LIBRARY])
    assert {n: s.model_dump() for n, s in library.items()} == {  # (source: excluded)
        n: s.model_dump() for n, s in checkout.items()
    }


def test_the_build_copies_the_library_into_the_package(tmp_path: Path) -> None:
    done = build_py(REPO, tmp_path / "lib")
    assert done.returncode == 0, done.stderr
    built = tmp_path / "lib" / "chaosproxy" / "scenarios"
    assert {p.name: p.read_bytes() for p in built.iterdir()} == library_files()
    assert not (tmp_path / "lib" / "scenarios").exists()  # in the package, nowhere else


def test_an_editable_build_copies_nothing(tmp_path: Path) -> None:
    done = build_py(REPO, tmp_path / "lib", "editable")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "lib").exists()  # the loader reads the checkout's scenarios/


def test_a_build_without_the_library_fails(tmp_path: Path) -> None:
    (tmp_path / "chaosproxy").mkdir()
    for name in ("setup.py", "chaosproxy/__init__.py", "chaosproxy/_build.py"):
        shutil.copy(REPO / name, tmp_path / name)
    done = build_py(tmp_path, tmp_path / "lib")
    assert done.returncode != 0
    assert f"RuntimeError: no scenario library in {tmp_path / 'scenarios'}" in done.stderr


def test_the_sdist_carries_the_directory_and_the_package_data_lists_no_copy() -> None:
    manifest = (REPO / "MANIFEST.in").read_text().splitlines()
    assert "graft scenarios" in manifest
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"]["package-data"]["chaosproxy"]
    assert not [pattern for pattern in package_data if "scenario" in pattern.split("/")[0]]
