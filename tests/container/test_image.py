"""The image, built and run as a new user would: the compiled build (and pure on
request; the compiler left in the build's stage), the README's ``docker run`` and curl,
the health check's timing, ``docker stop`` with streams stalled, a non-root read-only
container, the admin API kept private, scenarios and logs on volumes, and a reset fault
seen as a reset (see conftest.py for the engine and its clean-up)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from chaosproxy._build import __version__
from tests.support.engine import (
    ADMIN_PORT,
    LABEL,
    PROXY_PORT,
    SESSION,
    TAG,
    Build,
    Engine,
    build,
    chat_request,
    dechunked,
    parse_time,
    stream,
    wait_serving,
    wait_until,
)
from tests.support.repo import REPO

# One worker runs them all (--dist loadgroup): one image build, no two engines' races.
pytestmark = [pytest.mark.container, pytest.mark.xdist_group("container"), pytest.mark.timeout(900)]

#: The image's promises (Dockerfile, README, docs/deploy.md). A rebuild after an edit
#: of the source is the wheel's compilation (mypyc and gcc, about a minute) and, apart
#: from it, a few seconds.
REBUILD_SECONDS = 10.0
HEALTHY_AFTER_SERVING = 5.0
GRACE = 2.0  # the default --grace: docker stop ends within it plus a second
MY_SCENARIO = (
    "description: My own scenario, from the mounted directory.\n"
    "faults:\n  - drop: {kind: delta, nth: 1}\n"
)


def scenario_dir(tmp_path: Path) -> Path:
    """A directory of one scenario file that the image's user (10001) can read."""
    mine = tmp_path / "my-scenarios"
    mine.mkdir()
    (mine / "my-scenario.yaml").write_text(MY_SCENARIO)
    mine.chmod(0o755)
    (mine / "my-scenario.yaml").chmod(0o644)
    return mine


# ------------------------------------------------------------------ the build


def test_a_one_line_change_rebuilds_only_the_wheel(
    engine: Engine, image: Build, tmp_path: Path
) -> None:
    """The dependencies, the compiler and the build's tools are layers of their own,
    before the source: an edit of one line reuses them, and rebuilds the wheel (its
    compilation) and the last layers only. Two edits, two rebuilds; apart from the
    compilation (the wheel stage's last line says how long it took) the better of them
    is held to the bound: on a machine shared with other work one build can be slowed by
    its neighbours (both are reported)."""
    context = tmp_path / "context"
    context.mkdir()
    for name in (
        "Dockerfile",
        ".dockerignore",
        "pyproject.toml",
        "setup.py",
        "README.md",
        "LICENSE",
    ):
        shutil.copy2(REPO / name, context / name)
    for folder in ("chaosproxy", "scenarios"):  # the package and the library it carries
        shutil.copytree(
            REPO / folder, context / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    tag = f"{TAG}-rebuilt"
    rebuilds: list[tuple[float, int]] = []
    try:
        # Lines never built before (the builder's cache would make a repeated run free).
        for edit in (f"# one line more ({SESSION})\n", f"# and another ({SESSION})\n"):
            with (context / "chaosproxy" / "server" / "net.py").open("a") as source:
                source.write(edit)
            rebuilt = build(engine, context, tag)
            steps = re.split(r"^Step \d+/\d+ : ", rebuilt.output, flags=re.MULTILINE)
            for layer in CACHED_ON_REBUILD:
                (step,) = [s for s in steps if layer in s.splitlines()[0]]
                assert "Using cache" in step, (layer, rebuilt.output)
            wheel, compiling = built_wheel(rebuilt.output)
            assert not wheel.endswith("-none-any.whl"), wheel
            rebuilds.append((rebuilt.seconds, compiling))
            tail = engine.run(
                "run", "--rm", "--entrypoint", "python", tag, "-c",
                "import chaosproxy.server.net as n, inspect; print(inspect.getsource(n)[-60:])",
            ).stdout  # fmt: skip
            assert tail.endswith(f"\n{edit}\n"), tail  # the edit is in the image
    finally:
        engine.run("rmi", "-f", tag, check=False)
    shown = ", ".join(f"{total:.1f}s (compiling {compiling}s)" for total, compiling in rebuilds)
    engine.note("rebuild after a one-line change (two edits)", shown)
    assert min(total - compiling for total, compiling in rebuilds) < REBUILD_SECONDS, shown


#: What a first line of a step names, for each layer that an edit of the source reuses:
#: the dependencies, the C compiler, the build backend with mypy.
CACHED_ON_REBUILD = (
    "/opt/chaosproxy/bin/python install --requirement",
    "apt-get install -y --no-install-recommends gcc libc6-dev",
    "/opt/build/bin/python install --requirement",
)


def built_wheel(output: str) -> tuple[str, int]:
    """The wheel that the wheel stage built, and the seconds it took, from its last line
    (``built chaosproxy-….whl in 52s``)."""
    found = re.findall(r"^built (chaosproxy-\S+\.whl) in (\d+)s$", output, re.MULTILINE)
    assert len(found) == 1, output[-3000:]
    return found[0][0], int(found[0][1])


def test_the_image_holds_the_installed_package_and_no_source_tree(
    engine: Engine, image: Build
) -> None:
    found = engine.run(
        "run", "--rm", "--entrypoint", "sh", TAG, "-c",
        'python -c "import chaosproxy; print(chaosproxy.__file__)"; pwd; id -u',
    ).stdout.split()  # fmt: skip
    assert found == [
        "/opt/chaosproxy/lib/python3.11/site-packages/chaosproxy/__init__.py",
        "/logs",
        "10001",
    ]
    # Looked for as root, everywhere: the installed package and its metadata are all of
    # chaosproxy in the image (no source tree, no build/, no egg-info, no tests).
    found = engine.run(
        "run", "--rm", "--user", "0", "--entrypoint", "sh", TAG, "-c",
        "find / -xdev -iname '*chaosproxy*' ! -path '/opt/chaosproxy/*' -print; "
        "ls /opt/chaosproxy/lib/python3.11/site-packages | grep -i chaos; "
        "ls -d /app /build /dist /src 2>/dev/null; true",
    ).stdout.split()  # fmt: skip
    assert found == ["/opt/chaosproxy", "chaosproxy", "chaosproxy-0.1.0.dist-info"]
    size = engine.run("image", "inspect", "--format", "{{.Size}}", TAG).stdout
    engine.note("image size", f"{int(size) / 1e6:.0f} MB")


# ------------------------------------------------------------------ the compiled build

#: Which build this process runs, and whether each module of the compiled group does.
WHICH_BUILD = (
    "from chaosproxy._build import COMPILED, build, is_compiled; "
    "print(build(), sorted({is_compiled(name) for name in COMPILED}))"
)


def test_the_image_runs_the_compiled_build(engine: Engine, image: Build) -> None:
    """The image's package is a platform wheel's; every module of the compiled group runs
    compiled, and ``CHAOSPROXY_PURE=1`` runs them all from their sources; ``chaosproxy
    --version`` says which."""
    wheel = engine.run(
        "run", "--rm", "--label", LABEL, "--entrypoint", "sh", TAG, "-c",
        "grep -h '^Root-Is-Purelib\\|^Tag' /opt/chaosproxy/lib/python3.11/site-packages/"
        f"chaosproxy-{__version__}.dist-info/WHEEL",
    ).stdout.split()  # fmt: skip
    assert wheel[:3] == ["Root-Is-Purelib:", "false", "Tag:"] and len(wheel) == 4, wheel
    assert re.fullmatch(r"cp311-cp311-linux_\w+", wheel[3]), wheel  # x86_64, aarch64
    for options, expected in (
        ((), "compiled [True]"),
        (("-e", "CHAOSPROXY_PURE=1"), "pure [False]"),
    ):
        which = engine.run(
            "run", "--rm", "--label", LABEL, *options, "--entrypoint", "python", TAG, "-c",
            WHICH_BUILD,
        )  # fmt: skip
        assert which.stdout == f"{expected}\n", which
        version = engine.run("run", "--rm", "--label", LABEL, *options, TAG, "--version")
        assert version.stdout == f"chaosproxy {__version__} ({expected.split()[0]})\n", version


def test_it_serves_compiled_and_pure_alike(engine: Engine, image: Build) -> None:
    """The serving process is the build it says at start, and a stream with a fault and
    a seed is the same through both, byte for byte (the image's mock upstream)."""
    request = chat_request(X_Chaos_Scenario="duplicate-third-delta", X_Chaos_Seed="7")
    bodies = {}
    for options, expected in ((), "compiled"), (("-e", "CHAOSPROXY_PURE=1"), "pure"):
        with engine.container(*options) as cid:
            got = stream(engine.address(cid), PROXY_PORT, request)
            start = [line for line in engine.logs(cid) if " listening on " in line]
        assert start[0].startswith(f"chaosproxy {__version__} ({expected}) listening on "), start
        assert got.end == "eof", got
        head, _, body = got.data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and b"\r\nX-Chaos-Seed: 7\r\n" in head, head
        bodies[expected] = dechunked(body)
    events = bodies["compiled"].split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""], events
    # the third delta (after the role's event) twice, as the scenario says
    assert [i for i in range(len(events) - 1) if events[i] == events[i + 1]] == [3], events
    assert bodies["compiled"] == bodies["pure"]


def test_the_image_has_no_compiler(engine: Engine, image: Build) -> None:
    """The compiler, the build's tools and the wheel stay in the wheel's stage."""
    found = engine.run(
        "run", "--rm", "--user", "0", "--entrypoint", "sh", TAG, "-c",
        "for c in gcc cc c99 cpp x86_64-linux-gnu-gcc aarch64-linux-gnu-gcc; do "
        "command -v $c; done; "
        "ls -d /opt/build /dist /build 2>/dev/null; "
        "/opt/chaosproxy/bin/python -c 'import mypy' 2>/dev/null && echo mypy; true",
    ).stdout  # fmt: skip
    assert found == ""


def test_a_wheel_stage_that_builds_pure_fails(engine: Engine, image: Build) -> None:
    """Where setup.py falls back to the pure package (here told to, with
    ``CHAOSPROXY_PURE_BUILD=1``), the wheel stage's build step fails with the reason,
    rather than make an image that is silently pure: the Dockerfile's step, run again in
    the wheel stage (which the session's build left in the builder's cache)."""
    stage = build(engine, REPO, None, target="wheel")  # untagged: it stays as the cache
    assert " ---> Running in " not in stage.output, stage.output  # all from the cache
    (step,) = [line for line in DOCKERFILE_STEPS if "build_wheel" in line]
    done = engine.run(
        "run", "--rm", "--label", LABEL, "-e", "CHAOSPROXY_PURE_BUILD=1", "--entrypoint", "sh",
        stage.tag, "-c", f"rm -rf /dist /build/build; {step.removeprefix('RUN ')}",
        check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert done.stdout.splitlines()[-2:] == [
        "chaosproxy: building the pure package: CHAOSPROXY_PURE_BUILD is set",
        "the wheel is pure: no image",
    ], done


#: The Dockerfile's instructions, continuation lines joined, comments left out.
DOCKERFILE_STEPS = [
    line.strip()
    for line in (REPO / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]


# ------------------------------------------------------------------ the README


def readme_docker_block() -> list[str]:
    """The commands of the README's Docker section, continuation lines joined."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## Docker\n") :]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None
    joined = block.group(1).replace("\\\n", " ")
    return [line.split("   #")[0].strip() for line in joined.splitlines() if line.strip()]


def test_the_readme_docker_run_and_curl(engine: Engine, image: Build, tmp_path: Path) -> None:
    """The README's commands, as written, but for the image's tag, the container's name
    and free host ports (the host's 8080 and 8478 may be taken)."""
    commands = readme_docker_block()
    env = {**engine.env, "PWD": str(tmp_path)}
    scenario_dir(tmp_path)
    name = f"chaosproxy-test-{SESSION}"
    ports: dict[int, int] = {}
    ran = []
    try:
        for command in commands:
            words = shlex.split(command)
            if words[:2] == ["docker", "build"]:
                assert words[2:] == ["-t", "chaosproxy", "."]  # as the session built TAG
            elif words[0] == "export":
                variable, _, value = words[1].partition("=")
                assert value.startswith("$(openssl rand -hex 16)") or "openssl" in command
                env[variable] = "t" + SESSION  # what openssl would give, as far as it goes
            elif words[:2] == ["docker", "run"]:
                ports = run_as_the_readme_says(engine, words, env, name, tmp_path)
            elif words[:2] == ["until", "curl"]:
                health = f"http://127.0.0.1:{ports[ADMIN_PORT]}/health"
                wait_until(
                    "the published /health",
                    functools.partial(curl_ok, health, env),
                    30,
                    every=0.2,
                )
            elif words[0] == "curl":
                local = command.replace("localhost:8080", f"127.0.0.1:{ports[PROXY_PORT]}")
                local = local.replace("localhost:8478", f"127.0.0.1:{ports[ADMIN_PORT]}")
                done = subprocess.run(
                    ["bash", "-c", local], capture_output=True, text=True, timeout=30, env=env
                )
                assert done.returncode == 0, (command, done.stderr)
                ran.append(done.stdout)
            elif words[:2] == ["docker", "stop"]:
                assert words[2:] == ["chaosproxy"]
                engine.run("stop", name, timeout=30)
                # --rm: the engine removes it once it has exited (just after stop returns)
                wait_until(
                    "the stopped container removed (--rm)",
                    lambda: engine.run("ps", "-aq", "--filter", f"name={name}").stdout == "",
                    10,
                )
            else:
                pytest.fail(f"the test does not know the README's command: {command}")
    finally:
        engine.run("rm", "-f", name, check=False)
    streamed, requests = ran
    assert streamed.rstrip().endswith("data: [DONE]")
    assert [r["scenario"] for r in json.loads(requests)["requests"]] == ["duplicate-third-delta"]


def run_as_the_readme_says(
    engine: Engine, words: list[str], env: dict[str, str], name: str, tmp_path: Path
) -> dict[int, int]:
    """``docker run`` of the README with a free host port for each published one (on
    the address the README gives); the container's ports → the host's."""
    args: list[str] = []
    published: list[int] = []
    rest = iter(words[2:])
    for word in rest:
        if word == "-p":
            spec = next(rest)
            address, _, container = spec.rpartition(":")
            host_ip = address.rpartition(":")[0] if address.count(":") else ""
            if int(container) == ADMIN_PORT:
                assert host_ip == "127.0.0.1", "the admin is published on loopback only"
            args += ["-p", f"{host_ip or '127.0.0.1'}::{container}"]
            published.append(int(container))
        elif word == "--name":
            assert next(rest) == "chaosproxy"
            args += ["--name", name]
        elif word == "-v":
            args += ["-v", os.path.expandvars(next(rest).replace("$PWD", str(tmp_path)))]
        elif word == "chaosproxy":
            args += ["--label", LABEL, TAG]
        else:
            args.append(word)
    done = subprocess.run(
        ["docker", "run", *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return {port: engine.published(name, port) for port in published}


def curl_ok(url: str, env: dict[str, str]) -> bool:
    done = subprocess.run(["curl", "-sf", url], capture_output=True, timeout=10, env=env)
    return done.returncode == 0


# ------------------------------------------------------------------ health, stop


def test_healthy_within_seconds_of_serving(engine: Engine, image: Build) -> None:
    with engine.container() as cid:
        state = engine.inspect(cid)["State"]
        started = parse_time(state["StartedAt"])
        healthy = min(
            parse_time(check["End"]) for check in state["Health"]["Log"] if check["ExitCode"] == 0
        )
        serving = next(
            parse_time(line.split(" ", 1)[0])
            for line in engine.logs(cid, timestamps=True)
            if "listening on http://0.0.0.0:8080" in line
        )
    engine.note("start to serving", f"{serving - started:.1f}s")
    engine.note("serving to healthy", f"{healthy - serving:.1f}s")
    assert 0 <= healthy - serving < HEALTHY_AFTER_SERVING


def test_docker_stop_with_three_streams_stalled(engine: Engine, image: Build) -> None:
    """Three streams held open by a fault: SIGTERM gives them the grace, then cuts them;
    the container has exited 0 within grace + 1 s of docker stop."""
    with engine.container() as cid:
        address = engine.address(cid)
        wait_serving(address, PROXY_PORT)
        clients = []
        try:
            for _ in range(3):
                sock = socket.create_connection((address, PROXY_PORT), timeout=10)
                clients.append(sock)
                sock.sendall(chat_request(X_Chaos_Scenario="hang-after-last-event"))
                received = b""
                while b"data: [DONE]" not in received:  # the last event; then it hangs
                    chunk = sock.recv(65536)
                    assert chunk, received
                    received += chunk
            start = time.monotonic()
            engine.run("stop", "--time", "10", cid, timeout=30)
            stopped = time.monotonic() - start
            for sock in clients:  # each was ended (a FIN or an RST), not left hanging
                sock.settimeout(5)
                with contextlib.suppress(ConnectionResetError):
                    while sock.recv(65536):
                        pass
        finally:
            for sock in clients:
                sock.close()
        state = engine.inspect(cid)["State"]
        lines = [line for line in engine.logs(cid) if '"event":"response_end"' in line]
    engine.note("docker stop, three streams stalled", f"{stopped:.1f}s")
    assert stopped < GRACE + 1, f"docker stop took {stopped:.2f}s"
    assert (state["Running"], state["ExitCode"], state["OOMKilled"]) == (False, 0, False)
    assert sum('"outcome":"shutdown"' in line for line in lines) == 3, lines


def test_non_root_read_only_without_capabilities(engine: Engine, image: Build) -> None:
    with engine.container(
        "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"
    ) as cid:
        assert engine.run("exec", cid, "id", "-u").stdout.strip() == "10001"
        assert engine.inspect(cid)["Config"]["User"] == "10001:10001"
        address = engine.address(cid)
        got = stream(address, PROXY_PORT, chat_request(X_Chaos_Scenario="duplicate-third-delta"))
        assert got.end == "eof" and b"data: [DONE]" in got.data
        assert b"X-Chaos-Scenario: duplicate-third-delta" in got.data


# ------------------------------------------------------------------ the admin API


def test_the_admin_api_is_unreachable_without_a_token(engine: Engine, image: Build) -> None:
    # The image's default: on loopback inside the container, even with its port published.
    with engine.container("-p", f"127.0.0.1::{ADMIN_PORT}") as cid:
        with pytest.raises(ConnectionRefusedError):
            stream(engine.address(cid), ADMIN_PORT, b"GET /health HTTP/1.1\r\n\r\n")
        try:
            got = stream(
                "127.0.0.1", engine.published(cid, ADMIN_PORT), b"GET /health HTTP/1.1\r\n\r\n"
            )
        except ConnectionError:
            pass  # refused or reset: as unreachable
        else:
            assert got.data == b"", got  # Docker's proxy accepted, found nobody, closed
    # Off loopback without a token: it refuses to start.
    done = engine.run(
        "run", "--rm", "--label", LABEL, "-e", f"CHAOSPROXY_ADMIN=0.0.0.0:{ADMIN_PORT}", TAG,
        check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert "is not on loopback and has no token" in done.stderr
    # With a token: /health for anyone, everything else for the token only.
    with engine.container(
        "-e", f"CHAOSPROXY_ADMIN=0.0.0.0:{ADMIN_PORT}", "-e", "CHAOSPROXY_ADMIN_TOKEN=s3cret"
    ) as cid:
        address = engine.address(cid)
        asked = b"GET /requests HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        assert stream(address, ADMIN_PORT, asked).data.startswith(b"HTTP/1.1 401 ")
        health = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        assert stream(address, ADMIN_PORT, health).data.startswith(b"HTTP/1.1 200 ")
        with_token = asked.replace(b"Host: x", b"Host: x\r\nAuthorization: Bearer s3cret")
        assert stream(address, ADMIN_PORT, with_token).data.startswith(b"HTTP/1.1 200 ")


# ------------------------------------------------------------------ volumes


def test_scenarios_from_a_mounted_volume(engine: Engine, image: Build, tmp_path: Path) -> None:
    mount = f"{scenario_dir(tmp_path)}:/scenarios:ro"
    listed = engine.run("run", "--rm", "--label", LABEL, "-v", mount, TAG, "scenarios").stdout
    assert re.search(r"^my-scenario +My own scenario", listed, re.MULTILINE), listed
    assert "duplicate-third-delta" in listed  # and the library
    valid = engine.run("run", "--rm", "--label", LABEL, "-v", mount, TAG, "validate").stdout
    assert valid == "1 scenario OK\n"
    with engine.container("-v", mount) as cid:
        got = stream(engine.address(cid), PROXY_PORT, chat_request(X_Chaos_Scenario="my-scenario"))
        assert b"X-Chaos-Scenario: my-scenario" in got.data
        ends = [json.loads(x) for x in engine.logs(cid) if '"event":"response_end"' in x]
    assert [end["faults_applied"] for end in ends] == [{"drop": 1}]


def test_the_frame_log_and_traces_on_named_volumes(engine: Engine, image: Build) -> None:
    """Named volumes start as copies of the image's /logs and /traces, which belong to
    its user: writable, even with a read-only root."""
    with engine.volume() as logs, engine.volume() as traces:
        settings = [
            "-v", f"{logs}:/logs", "-v", f"{traces}:/traces",
            "-e", "CHAOSPROXY_LOG=/logs/frames.jsonl", "-e", "CHAOSPROXY_TRACE_DIR=/traces",
        ]  # fmt: skip
        with engine.container("--read-only", *settings) as cid:
            got = stream(engine.address(cid), PROXY_PORT, chat_request())
            assert got.end == "eof"
            engine.run("stop", cid, timeout=30)  # the log flushed and closed
        read = ["run", "--rm", "--label", LABEL, *settings, "--entrypoint"]
        log = engine.run(*read, "cat", TAG, "/logs/frames.jsonl").stdout
        events = [json.loads(line)["event"] for line in log.splitlines()]
        assert events.count("request") == events.count("response_end") == 1, events
        assert "frame" in events
        listed = engine.run(*read, "ls", TAG, "/traces").stdout.split()
        assert len(listed) == 1 and listed[0].endswith(".jsonl"), listed
        # The report from the same volume: `report` reads CHAOSPROXY_LOG, writes in /logs.
        report = engine.run("run", "--rm", "--label", LABEL, *settings, TAG, "report")
        assert "wrote report.html" in report.stderr
        page = engine.run(*read, "head", TAG, "-c", "15", "/logs/report.html").stdout
        assert page.lower().startswith("<!doctype html")


# ------------------------------------------------------------------ network


def test_a_reset_reaches_a_client_on_the_containers_address(engine: Engine, image: Build) -> None:
    """On the container's own address a reset is a reset (through a port published on
    the host, Docker's userland proxy makes it a plain close: docs/deploy.md)."""
    with engine.container() as cid:
        address = engine.address(cid)
        path = "/_chaos/{}/v1/chat/completions"
        reset = stream(address, PROXY_PORT, chat_request(path.format("cut-before-terminal-reset")))
        abort = stream(address, PROXY_PORT, chat_request(path.format("cut-before-terminal-abort")))
    assert (reset.end, abort.end) == ("reset", "eof")
    assert b"data: [DONE]" not in reset.data and b"data: [DONE]" not in abort.data


def test_localhost_and_the_ipv6_wildcard_in_a_container_without_ipv6(
    engine: Engine, image: Build
) -> None:
    ipv6 = engine.run(
        "run", "--rm", "--entrypoint", "cat", TAG, "/proc/sys/net/ipv6/conf/all/disable_ipv6",
        check=False,
    ).stdout.strip()  # fmt: skip
    if ipv6 != "1":
        pytest.skip(f"this engine gives containers IPv6 (disable_ipv6={ipv6 or '?'})")
    # localhost is 127.0.0.1 alone here: it starts, and is healthy.
    with engine.container(
        "-e", "CHAOSPROXY_LISTEN=localhost:8080", "-e", "CHAOSPROXY_ADMIN=localhost:8478"
    ) as cid:
        first = engine.logs(cid)[0]
        assert (
            "listening on http://127.0.0.1:8080 " in first
            and "admin: http://127.0.0.1:8478" in first
        )
    # [::] binds, IPv6 only: nothing reaches it here. A warning at start, and unhealthy.
    with engine.container(
        "-e", "CHAOSPROXY_ADMIN=[::]:8478", "-e", "CHAOSPROXY_ADMIN_TOKEN=t", healthy=False
    ) as cid:
        warning = wait_until(
            "the start-up warning",
            lambda: next((x for x in engine.logs(cid) if "chaosproxy: warning:" in x), None),
            30,
        )
        failed = wait_until(
            "a failed health check",
            lambda: [c for c in engine.inspect(cid)["State"]["Health"]["Log"] if c["ExitCode"]],
            30,
        )
    assert "health check cannot reach it" in warning and "0.0.0.0:8478" in warning, warning
    assert "[::1]:8478" in failed[0]["Output"]
