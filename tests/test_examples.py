"""examples/: the Docker Compose files, the Kubernetes Pod and ConfigMap, and the GitHub
Actions workflow, checked offline against their published schemas, and against
chaosproxy itself (every ``CHAOSPROXY_*`` they set is a real setting; a non-loopback
admin API always comes with a token; the probes use the admin port; the scenarios they
ship are valid).

The schemas come from PyPI packages that vendor them, so nothing is downloaded at test
time: ``check-jsonschema`` (its built-in ``vendor.compose-spec`` and
``vendor.github-workflows``) and ``kubernetes-validate`` (the Kubernetes OpenAPI schemas,
strict: unknown fields are errors). Both are in the ``test`` extra; a test whose tool is
missing is skipped, saying which.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaosproxy._build import PURE_ENV
from chaosproxy.control import healthcheck
from chaosproxy.scenario import parse_scenario
from chaosproxy.server.config import flags, from_environment
from tests.support.schema_check import check_jsonschema, need_module

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
COMPOSE = EXAMPLES / "docker-compose.yml"
COMPOSE_ADMIN = EXAMPLES / "docker-compose.admin.yml"
COMPOSE_FLEET = EXAMPLES / "docker-compose.fleet.yml"
WORKFLOW = EXAMPLES / "github-actions.yml"
KUBE = EXAMPLES / "kubernetes"
POD = KUBE / "pod.yaml"
CONFIGMAP = KUBE / "configmap.yaml"
FLEET = KUBE / "fleet.yaml"
DEPLOY_DOC = REPO / "docs" / "deploy.md"
#: The oldest Kubernetes the Pod is meant for (native sidecars), and the newest schema.
KUBE_VERSIONS = ("1.29.0", "1.37.0")
#: The admin port and proxy port the examples use (the image's command: see Dockerfile).
ADMIN_PORT = 8478
PROXY_PORT = 8080

SETTINGS = {flag.env for _, flag, _ in flags()}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- schemas


@pytest.mark.parametrize(
    ("schema", "paths"),
    [
        ("vendor.compose-spec", (COMPOSE, COMPOSE_ADMIN, COMPOSE_FLEET)),
        ("vendor.github-workflows", (WORKFLOW,)),
        ("custom.github-workflows-require-timeout", (WORKFLOW,)),
    ],
)
def test_valid_against_the_vendored_schema(schema: str, paths: tuple[Path, ...]) -> None:
    done = check_jsonschema(schema, *paths)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("schema", "source", "breakage"),
    [
        ("vendor.compose-spec", COMPOSE, lambda d: d["services"]["chaosproxy"].update(prots=[1])),
        ("vendor.github-workflows", WORKFLOW, lambda d: d["jobs"]["chaos"].pop("runs-on")),
    ],
)
def test_the_schema_check_catches_a_broken_copy(
    tmp_path: Path, schema: str, source: Path, breakage: Any
) -> None:
    data = load(source)
    breakage(data)
    broken = tmp_path / source.name
    broken.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = check_jsonschema(schema, broken)
    assert done.returncode == 1, done.stdout + done.stderr


def kube_validate(data: dict[str, Any], version: str) -> None:
    need_module("kubernetes_validate", "kubernetes-validate")
    import kubernetes_validate

    kubernetes_validate.validate(data, version, strict=True)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("path", [POD, CONFIGMAP, FLEET], ids=lambda p: p.name)
def test_kubernetes_manifests_are_valid(path: Path, version: str) -> None:
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        kube_validate(document, version)


def test_kubernetes_strict_validation_catches_a_misspelt_field() -> None:
    need_module("kubernetes_validate", "kubernetes-validate")
    import kubernetes_validate

    pod = load(POD)
    pod["spec"]["initContainers"][0]["readinesProbe"] = pod["spec"]["initContainers"][0].pop(
        "readinessProbe"
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, KUBE_VERSIONS[-1], strict=True)


# --------------------------------------------------------------------------- chaosproxy


def environments() -> Iterator[tuple[str, dict[str, str]]]:
    """(where, env) for every environment the examples give chaosproxy."""
    for path in (COMPOSE, COMPOSE_ADMIN):
        env = load(path)["services"]["chaosproxy"]["environment"]
        yield f"{path.name}:chaosproxy", {k: str(v) for k, v in env.items()}
    pod = load(POD)
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        env = {e["name"]: e.get("value", "<from a secret>") for e in container.get("env", [])}
        yield f"pod.yaml:{container['name']}", env
    services = load(WORKFLOW)["jobs"]["chaos"]["services"]
    yield (
        "github-actions.yml:chaosproxy",
        {k: str(v) for k, v in services["chaosproxy"]["env"].items()},
    )


def test_every_chaosproxy_variable_set_is_a_real_setting() -> None:
    found = 0
    for where, env in environments():
        for name in env:
            if name.startswith("CHAOSPROXY_"):
                found += 1
                assert name in SETTINGS, f"{where}: {name} is not a chaosproxy setting"
    assert found >= 8


@pytest.mark.parametrize(
    "path",
    [COMPOSE, COMPOSE_ADMIN, COMPOSE_FLEET, WORKFLOW, POD, CONFIGMAP, FLEET, DEPLOY_DOC],
    ids=lambda p: p.name,
)
def test_every_chaosproxy_variable_mentioned_is_a_real_setting(path: Path) -> None:
    """A setting, or the variable that chooses the build (``CHAOSPROXY_PURE``)."""
    mentioned = set(re.findall(r"\bCHAOSPROXY_[A-Z0-9_]*[A-Z0-9]\b", path.read_text("utf-8")))
    assert mentioned - SETTINGS - {PURE_ENV} == set()


def _resolved(value: str) -> str:
    """A value as the tool would hand it over: compose's ``${VAR:-default}`` gives its
    default, ``${VAR:?message}`` and a GitHub ``${{ expression }}`` some text."""
    value = re.sub(r"\$\{\{.*?\}\}", "from-the-workflow", value)
    value = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)
    return re.sub(r"\$\{\w+:\?[^}]*\}", "set-by-the-user", value)


def test_every_chaosproxy_value_set_parses() -> None:
    for where, env in environments():
        settings = {k: _resolved(v) for k, v in env.items() if k.startswith("CHAOSPROXY_")}
        parsed = from_environment(settings)  # ConfigError on a bad value
        assert len(parsed) == len(settings), where


def _loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def test_a_published_admin_api_always_has_a_token() -> None:
    base = load(COMPOSE)["services"]["chaosproxy"]["environment"]
    assert _loopback(base["CHAOSPROXY_ADMIN"]) and "CHAOSPROXY_ADMIN_TOKEN" not in base
    override = load(COMPOSE_ADMIN)["services"]["chaosproxy"]
    assert not _loopback(override["environment"]["CHAOSPROXY_ADMIN"])
    assert "CHAOSPROXY_ADMIN_TOKEN" in override["environment"]
    assert override["ports"] == [f"127.0.0.1:{ADMIN_PORT}:{ADMIN_PORT}"]
    sidecar = load(POD)["spec"]["initContainers"][0]
    env = {e["name"]: e for e in sidecar["env"]}
    assert not _loopback(env["CHAOSPROXY_ADMIN"]["value"])
    assert env["CHAOSPROXY_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "token"
    # A service container keeps the image's command (admin on 0.0.0.0), so: a token,
    # and the admin port not published.
    service = load(WORKFLOW)["jobs"]["chaos"]["services"]["chaosproxy"]
    assert service["env"]["CHAOSPROXY_ADMIN_TOKEN"]
    assert [p for p in service["ports"] if str(ADMIN_PORT) in str(p)] == []


def test_health_checks_use_the_admin_port() -> None:
    url = f"http://127.0.0.1:{ADMIN_PORT}/health"
    compose = load(COMPOSE)["services"]["chaosproxy"]
    # The image's check, which asks CHAOSPROXY_ADMIN's /health (a wildcard on loopback).
    assert compose["healthcheck"]["test"] == ["CMD", "python", "-m", "chaosproxy.healthcheck"]
    admin = healthcheck.parse(compose["environment"]["CHAOSPROXY_ADMIN"])
    assert admin is not None and healthcheck.target(*admin) == ("127.0.0.1", ADMIN_PORT)
    sidecar = load(POD)["spec"]["initContainers"][0]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar
    assert sidecar["ports"] == [{"name": "admin", "containerPort": ADMIN_PORT}]
    for probe in ("startupProbe", "readinessProbe"):
        assert sidecar[probe]["httpGet"] == {"path": "/health", "port": "admin"}
    service = load(WORKFLOW)["jobs"]["chaos"]["services"]["chaosproxy"]
    assert url in service["options"]
    assert service["ports"] == [f"{PROXY_PORT}:{PROXY_PORT}"]


def test_the_app_and_tests_go_through_the_proxy() -> None:
    services = load(COMPOSE)["services"]
    for name in ("app", "tests"):
        env = services[name]["environment"]
        assert env["OPENAI_BASE_URL"] == f"http://chaosproxy:{PROXY_PORT}/v1"
        assert services[name]["depends_on"]["chaosproxy"]["condition"] == "service_healthy"
    assert services["chaosproxy"]["volumes"] == ["./scenarios:/scenarios:ro"]
    app = load(POD)["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in app["env"]}
    assert env["OPENAI_BASE_URL"] == f"http://127.0.0.1:{PROXY_PORT}/v1"


def test_the_scenarios_the_examples_ship_are_valid() -> None:
    files = sorted((EXAMPLES / "scenarios").glob("*.yaml"))
    assert files
    for path in files:
        assert parse_scenario(path.read_text("utf-8"), str(path)).name == path.stem
    configmap = load(CONFIGMAP)
    mounted = load(POD)["spec"]["volumes"][0]["configMap"]["name"]
    assert configmap["metadata"]["name"] == mounted
    for key, text in configmap["data"].items():
        assert parse_scenario(text, f"{CONFIGMAP.name}:{key}").name == Path(key).stem
