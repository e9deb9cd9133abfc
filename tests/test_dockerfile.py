"""The Dockerfile and its build context, read (tests/container/ builds and runs them):
plain syntax that Docker 20.10's legacy builder takes, the dependencies and the compiler
before the source, the wheel compiled and installed last, and a .dockerignore that sends
the Dockerfile's inputs and nothing else."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import tomllib

import pytest

from tests.support.repo import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
INSTRUCTIONS = [
    line.strip()
    for line in DOCKERFILE.replace("\\\n", " ").splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]


def stages() -> list[list[str]]:
    found: list[list[str]] = []
    for line in INSTRUCTIONS:
        if line.startswith("FROM "):
            found.append([])
        found[-1].append(line)
    return found


def test_plain_syntax_for_old_engines() -> None:
    """No BuildKit-only feature: Docker 20.10 without BuildKit must build it."""
    assert not DOCKERFILE.startswith("# syntax")
    for line in INSTRUCTIONS:
        assert not re.search(r"--mount|--link|--chmod|--start-interval|<<", line), line


def test_three_stages_on_one_base() -> None:
    """The same base everywhere: the environment built in one stage runs in the last."""
    heads = [stage[0] for stage in stages()]
    assert heads == [
        "FROM python:3.11-slim AS dependencies",
        "FROM dependencies AS wheel",
        "FROM python:3.11-slim",
    ]


def test_the_dependencies_come_before_the_source_and_the_wheel_last() -> None:
    dependencies, wheel, image = stages()
    copies = [line for line in dependencies if line.startswith("COPY ")]
    assert copies == ["COPY pyproject.toml /build/"]  # the dependencies need nothing else
    assert any("--requirement" in line for line in dependencies)
    assert wheel[-1].startswith("RUN ") and "build_wheel" in wheel[-1]
    # In the image: the dependencies' layer first, every setting, then the wheel.
    kinds = [line.split()[0] for line in image]
    wheel_copy = image.index("COPY --from=wheel /dist /dist")
    assert image.index("COPY --from=dependencies /opt/chaosproxy /opt/chaosproxy") < wheel_copy
    assert kinds[wheel_copy:] == ["COPY", "RUN", "ENV", "USER"]
    assert "--no-deps --no-index" in image[wheel_copy + 1]
    assert image[-1] == "USER 10001:10001"


def test_the_wheel_is_built_with_the_scenario_library() -> None:
    """setup.py builds scenarios/ into the package: the wheel stage copies it before the
    build (else the build fails: there is no library to carry)."""
    _, wheel, _ = stages()
    copies = [line for line in wheel if line.startswith("COPY ")]
    assert "COPY scenarios ./scenarios" in copies
    assert wheel.index("COPY scenarios ./scenarios") < len(wheel) - 1  # before the build


def test_the_wheel_stage_compiles_and_the_image_has_no_compiler() -> None:
    """The wheel's stage gets gcc and libc6-dev, and python3-dev only where the base's
    Python has no headers (the official image has them; Debian's python3 keeps them in
    python3-dev), then the build's tools as pyproject.toml's build-system requires them
    (mypy for mypyc), both before the source is copied; a pure wheel fails the build. The
    image installs none of it."""
    _, wheel, image = stages()
    (compiler,) = [line for line in wheel if "apt-get install" in line]
    assert "apt-get install -y --no-install-recommends gcc libc6-dev " in compiler
    headers = re.search(r'if \[ ! -f "\$headers/Python\.h" \]; then ([^;]*); fi', compiler)
    assert headers is not None and headers.group(1).endswith(" python3-dev"), compiler
    assert compiler.count("python3-dev") == 1 and "rm -rf /var/lib/apt/lists/*" in compiler
    (tools,) = [line for line in wheel if "/opt/build/bin/python install --requirement" in line]
    assert "['build-system']['requires']" in tools
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert any(r.startswith("mypy") for r in requires), requires
    source = wheel.index("COPY chaosproxy ./chaosproxy")
    assert wheel.index(compiler) < source and wheel.index(tools) < source
    assert "-none-any.whl" in wheel[-1] and "exit 1" in wheel[-1]
    for line in image:
        assert not re.search(r"apt-get|gcc|python3-dev|/opt/build|mypy", line), line


def test_the_health_check_is_the_module_on_a_short_interval() -> None:
    (health,) = [line for line in INSTRUCTIONS if line.startswith("HEALTHCHECK ")]
    options = dict(re.findall(r"--([\w-]+)=(\S+)", health))
    assert options["interval"] == "2s" and int(options["start-period"].rstrip("s")) >= 10
    assert json.loads(health[health.index("CMD ") + 4 :]) == [
        "python", "-m", "chaosproxy.healthcheck",
    ]  # fmt: skip


def docker_ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` out of the context (the last matching pattern wins;
    a pattern that matches a directory matches what is in it)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        keep = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        variants = {pattern, pattern.removeprefix("**/")}
        if any(fnmatch.fnmatchcase(p, v) for p in prefixes for v in variants):
            ignored = not keep
    return ignored


def test_the_context_is_what_the_dockerfile_copies() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [x.strip() for x in lines if x.strip() and not x.startswith("#")]
    try:
        files = subprocess.run(
            ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=30
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of the repository's files")
    sent = {f for f in files if not docker_ignored(f, patterns)}
    tops = {f.split("/")[0] for f in sent}
    assert tops == {"pyproject.toml", "setup.py", "README.md", "LICENSE", "chaosproxy", "scenarios"}
    assert {f for f in files if f.startswith(("chaosproxy/", "scenarios/"))} <= sent
    assert docker_ignored("chaosproxy/__pycache__/cli.cpython-311.pyc", patterns)
    for local in (
        ".git/HEAD",
        ".venv/bin/python",
        "build/lib/x.py",
        "chaosproxy.egg-info/PKG-INFO",
    ):
        assert docker_ignored(local, patterns), local
    # Every source the Dockerfile copies from the context is sent.
    for line in INSTRUCTIONS:
        if line.startswith("COPY ") and "--from=" not in line:
            for source in line.split()[1:-1]:
                assert source in tops, line
