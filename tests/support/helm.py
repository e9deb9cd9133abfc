"""The Helm chart's renderer for tests: ``tools/helm-render``, built with Go from
Debian's packages of Helm's own template libraries, offline (docs/deploy.md, "Helm").

:func:`renderer` builds it once per source (a shared temporary directory keyed by the
source's hash, written by an atomic rename, so parallel workers reuse one build) and
gives its path, or skips the test when no ``go`` is installed, and fails instead when
``CHAOSPROXY_REQUIRE_GO=1`` (CI sets it: .ci/run installs golang-go and the libraries).
A build that fails fails the test, with the compiler's message.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.repo import REPO

CHART = REPO / "charts" / "chaosproxy"
SOURCE = REPO / "tools" / "helm-render"
#: Debian's Go libraries (golang-github-masterminds-sprig-dev, golang-k8s-sigs-yaml-dev).
GOPATH = Path("/usr/share/gocode")


def go_required() -> bool:
    return os.environ.get("CHAOSPROXY_REQUIRE_GO", "") not in ("", "0")


def renderer() -> Path:
    """The built ``helm-render``, or skip (fail under ``CHAOSPROXY_REQUIRE_GO=1``)."""
    go = shutil.which("go")
    if go is None:
        reason = (
            "go is not installed: the chart's renderer is built with it (on Debian: "
            "apt-get install golang-go golang-github-masterminds-sprig-dev "
            "golang-k8s-sigs-yaml-dev)"
        )
        if go_required():
            pytest.fail(f"CHAOSPROXY_REQUIRE_GO=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    digest = hashlib.sha256()
    for path in sorted(SOURCE.glob("*.go")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    where = Path(tempfile.gettempdir()) / f"chaosproxy-helm-render-{os.getuid()}"
    built = where / f"helm-render-{digest.hexdigest()[:16]}"
    if built.exists():
        return built
    where.mkdir(exist_ok=True)
    partial = where / f"partial-{os.getpid()}"
    done = subprocess.run(
        [go, "build", "-o", str(partial), "."],
        cwd=SOURCE,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(where)),
            "GO111MODULE": "off",
            "GOPATH": str(GOPATH),
            "GOCACHE": str(where / "cache"),
            "GOFLAGS": "",
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"tools/helm-render did not build:\n{done.stderr}", pytrace=False)
    os.replace(partial, built)
    return built


def render(*args: str, chart: Path = CHART, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``helm-render ARGS CHART``: as ``helm template ARGS CHART``."""
    done = subprocess.run(
        [str(renderer()), *args, str(chart)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def documents(*args: str, chart: Path = CHART) -> list[dict[str, Any]]:
    """The manifests ``helm template`` would print, parsed; every one a mapping."""
    docs = list(yaml.safe_load_all(render(*args, chart=chart).stdout))
    assert docs and all(isinstance(d, dict) and d for d in docs), docs
    return docs


def notes(*args: str, chart: Path = CHART) -> str:
    """The rendered NOTES.txt, as ``helm install`` prints it."""
    return render("--notes", *args, chart=chart).stdout


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """The documents of one kind (and name)."""
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def write_chart(root: Path, files: dict[str, str]) -> Path:
    """A chart made of ``files`` (path: text) under ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def values_of(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))
