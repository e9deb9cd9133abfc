"""The image, built and run in a real container engine (Docker 20.10 or later, and
Docker Compose v2 for the compose example).

``.ci/run`` prepares one with ``../shared/tools/container-runtime.sh`` where that exists
and sets ``CHAOSPROXY_REQUIRE_DOCKER=1``: a missing engine then fails these tests. Elsewhere
they are skipped, with a reason naming what is missing.

Everything made here carries the label ``chaosproxy.test=<session>`` and is removed at
the end of the session (containers, volumes, compose projects, the image's tag); the
stages the legacy builder keeps as untagged images stay, as the next build's cache.
Every wait polls with a deadline (``wait_until``): no fixed sleep stands for a state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.engine import (
    LABEL,
    RUNTIME_DOCKER_CONFIG,
    TAG,
    Build,
    Engine,
    build,
)
from tests.support.repo import REPO


def _missing_engine(env: dict[str, str]) -> str | None:
    """Why there is no usable container engine, or None."""
    if shutil.which("docker") is None:
        return (
            "no container engine: the docker command is not installed "
            "(bash ../shared/tools/container-runtime.sh sets up Docker here)"
        )
    try:
        done = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "no container engine: the Docker daemon does not answer (docker info timed out)"
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"no container engine: the Docker daemon does not answer ({reason})"
    return None


def _has_compose(env: dict[str, str]) -> bool:
    done = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, timeout=30, env=env, check=False
    )
    return done.returncode == 0


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    if "DOCKER_CONFIG" not in env and RUNTIME_DOCKER_CONFIG.is_dir():
        env["DOCKER_CONFIG"] = str(RUNTIME_DOCKER_CONFIG)  # where the runtime put Compose
    return env


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    env = _environment()
    missing = _missing_engine(env)
    if missing is not None:
        if os.environ.get("CHAOSPROXY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{missing}; CHAOSPROXY_REQUIRE_DOCKER=1 wants one", pytrace=False)
        pytest.skip(missing)
    found = Engine(env, compose=_has_compose(env))
    request.config.stash[FIGURES] = found.figures
    yield found
    # Whatever a failed test left behind.
    for kind in ("container", "volume"):
        listed = found.run(kind, "ls", "-q", "--filter", f"label={LABEL}", check=False)
        for name in listed.stdout.split():
            found.run(kind, "rm", "-f", name, check=False)


FIGURES = pytest.StashKey[list[tuple[str, str]]]()


@pytest.fixture(scope="session")
def image(engine: Engine) -> Iterator[Build]:
    """The repository's Dockerfile, built once for the session."""
    built = build(engine, REPO, TAG)
    engine.note("build of the checkout", f"{built.seconds:.1f}s")
    yield built
    engine.run("rmi", "-f", TAG, check=False)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    figures = config.stash.get(FIGURES, [])
    if figures:
        terminalreporter.section("container figures")
        for what, value in figures:
            terminalreporter.write_line(f"{what}: {value}")
