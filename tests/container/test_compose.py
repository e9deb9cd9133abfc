"""examples/docker-compose.yml, as docs/deploy.md runs it: up (built by Compose, from
the repository's Dockerfile), its client service passing, and down."""

from __future__ import annotations

import time

import pytest

from tests.support.engine import SESSION, TAG, Engine, compose_runner
from tests.support.repo import REPO

# One worker runs them all (--dist loadgroup): one image build, no two engines' races.
pytestmark = [pytest.mark.container, pytest.mark.xdist_group("container"), pytest.mark.timeout(900)]

COMPOSE = REPO / "examples" / "docker-compose.yml"


def test_the_compose_example_up_its_client_passing_and_down(engine: Engine) -> None:
    if not engine.compose:
        pytest.skip("no Docker Compose v2 (docker compose): the example needs v2.3.3 or later")
    project = f"chaosproxy-test-{SESSION}"
    # Its own tag, so that the user's `chaosproxy` image is left alone.
    env = {**engine.env, "CHAOS_IMAGE": f"{TAG}-compose"}

    compose = compose_runner(project, COMPOSE, env)

    try:
        start = time.monotonic()
        up = compose("up", "-d", "--wait", "chaosproxy", timeout=600)
        assert up.returncode == 0, up.stderr[-3000:]
        engine.note("compose up --wait (build included)", f"{time.monotonic() - start:.1f}s")
        smoke = compose("run", "--rm", "smoke", timeout=120)
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr[-3000:]
        assert "smoke: ok," in smoke.stdout
    finally:
        down = compose("down", "--volumes", "--rmi", "local", "--timeout", "10", timeout=120)
        engine.run("rmi", "-f", env["CHAOS_IMAGE"], check=False)
    assert down.returncode == 0, down.stderr
    left = engine.run("ps", "-aq", "--filter", f"label=com.docker.compose.project={project}")
    assert left.stdout == ""
