"""charts/chaosproxy, validated offline (docs/deploy.md, "Helm").

What is checked here, with no network and no helm binary:

- the chart's metadata and values (Chart.yaml's fields, values.yaml and each
  ``ci/*-values.yaml`` against values.schema.json, as Helm validates them; a bad value
  refused by the schema at its location);
- the chart rendered by ``tools/helm-render`` (Helm's template engine and function
  library, not helm itself: tests/helm.py) for every kind of install: the fleet, the
  sidecar's pieces and an app chart that includes the sidecar, Redis made or external,
  the admin token drawn, given or from an existing Secret, scenarios from values or an
  existing ConfigMap;
- every rendered document against the Kubernetes 1.29 and 1.37 schemas, strictly
  (``kubernetes-validate``), and the lint-like checks (names, labels, no empty document,
  selectors that select what they should);
- against chaosproxy itself: every ``CHAOSPROXY_*`` it sets is a real setting whose value
  parses, and ``chaosproxy serve`` started with exactly the rendered container's
  arguments and environment serves, answers its probes and guards its admin API (with a
  real Redis for the fleet).

The real ``helm lint``, ``helm template | kubeconform -strict`` and ``helm package`` run on
GitHub's runners, in the release workflow (tests/test_release.py checks its shape).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
import yaml

from chaosproxy.scenario import parse_scenario
from chaosproxy.server.config import flags, from_environment
from tests.support.cli import chaosproxy_argv, stop_serve
from tests.support.fleet_parts import free_port, needs_redis, redis_server
from tests.support.helm import CHART, documents, find, notes, render, values_of, write_chart
from tests.support.repo import REPO

SCHEMA = CHART / "values.schema.json"
FLEET_VALUES = CHART / "ci" / "fleet-values.yaml"
SIDECAR_VALUES = CHART / "ci" / "sidecar-values.yaml"
EXAMPLES = REPO / "examples" / "kubernetes"
DEPLOY_DOC = REPO / "docs" / "deploy.md"
KUBE_VERSIONS = ("1.29.0", "1.37.0")
SETTINGS = {flag.env for _, flag, _ in flags()}
TOKEN = "a-token-given-in-the-values-0123"

#: The include lines docs/deploy.md gives an app's chart, used as they are written there.
SIDECAR_INCLUDES = re.findall(
    r'^ *\{\{- include "chaosproxy\.sidecar\w+" .*\}\}$',
    DEPLOY_DOC.read_text("utf-8"),
    flags=re.MULTILINE,
)
#: An app's chart with chaosproxy as its dependency (in charts/), as docs/deploy.md says.
APP_CHART_YAML = """\
apiVersion: v2
name: app
version: 1.0.0
dependencies:
  - name: chaosproxy
    version: 0.1.0
    repository: oci://ghcr.io/OWNER/charts
"""
APP_TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-app
spec:
  replicas: 1
  selector:
    matchLabels: {app: {{ .Release.Name }}-app}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}-app}
    spec:
      initContainers:
%s
      containers:
        - name: app
          image: your-app:latest
          env:
            - name: OPENAI_BASE_URL
              value: http://127.0.0.1:{{ .Values.chaosproxy.proxyPort }}/v1
      volumes:
%s
"""

#: (id, helm-render arguments): each kind of install.
CASES: dict[str, tuple[str, ...]] = {
    "default": (),
    "fleet": ("-f", str(FLEET_VALUES)),
    "sidecar": ("-f", str(SIDECAR_VALUES)),
    "external-redis": ("--set", "redis.enabled=false,redis.url=redis://redis.example:6379/0"),
    "redis-from-a-secret": ("--set", "redis.enabled=false,redis.existingSecret=chaos-redis"),
    "existing-configmap": ("--set", "scenarios.existingConfigMap=my-scenarios"),
    "token-given": ("--set", f"admin.token={TOKEN}"),
    "existing-secret": ("--set", "admin.existingSecret=chaosproxy-admin"),
    "liveness-and-pretty-logs": (
        "--set",
        "livenessProbe.periodSeconds=10,logFormat=pretty,trustClientScenarios=true",
    ),
    "single-replica-no-admin-port": ("--set", "replicas=1,admin.exposed=false"),
}


@pytest.fixture(scope="module")
def app_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An app's chart, its values for chaosproxy ci/sidecar-values.yaml's, whose
    Deployment includes the sidecar with docs/deploy.md's own lines."""
    container, volumes = SIDECAR_INCLUDES
    assert "sidecarContainer" in container and "sidecarVolumes" in volumes
    root = tmp_path_factory.mktemp("app-chart") / "app"
    shutil.copytree(CHART, root / "charts" / "chaosproxy")
    values = yaml.safe_dump({"chaosproxy": values_of(SIDECAR_VALUES)})
    return write_chart(
        root,
        {
            "Chart.yaml": APP_CHART_YAML,
            "values.yaml": values,
            "templates/deployment.yaml": APP_TEMPLATE % (container, volumes),
            # What Helm validates against chaosproxy's schema: the dependency's values.
            "templates/NOTES.txt": "{{ toJson .Values.chaosproxy }}",
        },
    )


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc["spec"]
    found: list[dict[str, Any]] = spec.get("initContainers", []) + spec["containers"]
    return found


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = (
        doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc["spec"]
    )
    return spec


def chaosproxy_containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        c
        for d in docs
        if d["kind"] in ("Deployment", "Pod")
        for c in containers(d)
        if c["name"] == "chaosproxy"
    ]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


def merged(base: Any, over: Any) -> Any:
    """Helm's coalescing of values: maps key by key, a null removes the key."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return copy.deepcopy(over)
    out = copy.deepcopy(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


def schema_errors(values: Any) -> list[jsonschema.ValidationError]:
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text("utf-8")))
    return list(validator.iter_errors(values))


def kube_validate(doc: dict[str, Any], version: str) -> None:
    if importlib.util.find_spec("kubernetes_validate") is None:
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[test]' installs it)")
    import kubernetes_validate

    kubernetes_validate.validate(doc, version, strict=True)


# --------------------------------------------------------------------------- the chart


def test_chart_yaml_has_what_helm_lint_requires_and_chaosproxys_version() -> None:
    chart = values_of(CHART / "Chart.yaml")
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == CHART.name == "chaosproxy"
    assert chart["type"] == "application"
    assert chart["description"].strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    # The chart, its appVersion and its default image tag are the release's version.
    assert chart["version"] == chart["appVersion"] == version
    assert values_of(CHART / "values.yaml")["image"]["tag"] == version
    assert chart["kubeVersion"] == ">=1.29.0-0"


def test_the_schema_is_a_valid_draft_7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(json.loads(SCHEMA.read_text("utf-8")))


@pytest.mark.parametrize(
    "path", [CHART / "values.yaml", FLEET_VALUES, SIDECAR_VALUES], ids=lambda p: p.name
)
def test_each_values_file_is_valid_against_the_schema(path: Path) -> None:
    defaults = values_of(CHART / "values.yaml")
    assert schema_errors(merged(defaults, values_of(path))) == []


@pytest.mark.parametrize(
    ("override", "where", "says"),
    [
        ({"mode": "flet"}, "$.mode", "'flet' is not one of ['fleet', 'sidecar']"),
        ({"replcas": 3}, "$", "'replcas' was unexpected"),
        ({"replicas": 0}, "$.replicas", "0 is less than the minimum of 1"),
        ({"settings": {"LOG": "x"}}, "$.settings", "'LOG' does not match"),
        ({"settings": {"CHAOSPROXY_SEED": True}}, "$.settings.CHAOSPROXY_SEED", "True is not"),
        ({"scenarios": {"files": {"flaky.txt": "x"}}}, "$.scenarios.files", "'flaky.txt'"),
        ({"admin": {"token": "short"}}, "$.admin.token", "'short' does not match"),
        ({"admin": {"port": 70000}}, "$.admin.port", "70000 is greater than the maximum"),
        ({"settings": {"CHAOSPROXY_SEED": 7}}, "$.settings.CHAOSPROXY_SEED", "7 is not"),
        ({"trustClientScenarios": "no"}, "$.trustClientScenarios", "'no' is not of type"),
        ({"redis": {"url": "http://redis"}}, "$.redis.url", "'http://redis' does not match"),
        ({"readinessProbe": {"perodSeconds": 5}}, "$.readinessProbe", "'perodSeconds'"),
        ({"image": {"pullPolicy": "always"}}, "$.image.pullPolicy", "'always' is not one of"),
    ],
)
def test_a_bad_value_is_refused_where_it_is(
    override: dict[str, Any], where: str, says: str
) -> None:
    values = merged(values_of(CHART / "values.yaml"), override)
    best = jsonschema.exceptions.best_match(schema_errors(values))
    assert best is not None
    assert (best.json_path, says in best.message) == (where, True), best.message


def test_check_jsonschema_checks_a_values_file_of_ones_own(tmp_path: Path) -> None:
    """As docs/deploy.md says: an override file alone, each problem at its place."""
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[test]' installs it)")
    mine = tmp_path / "my-values.yaml"
    mine.write_text("mode: flet\nadmin: {token: short}\nimage: {tag: '0.1.0'}\n")
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA), str(mine)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert sorted(done.stdout.splitlines()[1:]) == [
        f"  {mine}::$.admin.token: 'short' does not match " + repr("^(\\S{16,})?$"),
        f"  {mine}::$.mode: 'flet' is not one of ['fleet', 'sidecar']",
    ]
    mine.write_text(FLEET_VALUES.read_text("utf-8"))
    assert (
        subprocess.run(
            [sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA), str(mine)],
            capture_output=True,
            timeout=120,
            check=False,
        ).returncode
        == 0
    )


# --------------------------------------------------------------------------- rendered


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_document_is_valid_kubernetes(case: str, version: str) -> None:
    docs = documents("--kube-version", version, *CASES[case])
    for doc in docs:
        kube_validate(doc, version)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_the_app_chart_with_the_sidecar_is_valid_kubernetes(app_chart: Path, version: str) -> None:
    docs = documents("--kube-version", version, chart=app_chart)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Secret", "release-name-chaosproxy-admin"),
        ("ConfigMap", "release-name-chaosproxy-scenarios"),
        ("Deployment", "release-name-app"),
    ]  # the subchart's pieces, and the app with its sidecar
    for doc in docs:
        kube_validate(doc, version)


@pytest.mark.parametrize("case", [*CASES, "app-chart"])
def test_no_template_reads_a_value_that_is_not_there(app_chart: Path, case: str) -> None:
    """Rendered strictly (a missing key an error, as Helm's strict engine), the same
    documents: the chart never relies on a missing value printing as nothing, and the
    sidecar's include does not need the .Chart an app's chart cannot give."""
    args, chart = ((), app_chart) if case == "app-chart" else (CASES[case], CHART)
    token = "chaosproxy.admin.token" if case == "app-chart" else "admin.token"
    pinned = ("--set", f"{token}={TOKEN}") if "admin.existingSecret" not in str(args) else ()
    lenient = render(*args, *pinned, chart=chart).stdout
    assert render("--strict", *args, *pinned, chart=chart).stdout == lenient


def test_the_values_helm_gives_chaosproxy_as_a_dependency_are_valid(app_chart: Path) -> None:
    """Helm validates a dependency's values (with the global table every dependency
    gets) against its schema."""
    values = json.loads(notes("--set", "global.imageRegistry=registry.example", chart=app_chart))
    assert values["global"] == {"imageRegistry": "registry.example"}
    assert values["mode"] == "sidecar" and values["replicas"] == 3  # the chart's defaults
    assert schema_errors(values) == []


def test_the_strict_validation_catches_a_misspelt_field(app_chart: Path) -> None:
    import kubernetes_validate

    (app,) = find(documents(chart=app_chart), "Deployment")
    pod_spec(app)["initContainers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kube_validate(app, KUBE_VERSIONS[-1])


def test_older_clusters_are_refused_by_the_charts_kube_version() -> None:
    done = render("--kube-version", "1.28.0", check=False)
    assert done.returncode == 1
    assert "chart requires kubeVersion: >=1.29.0-0" in done.stderr


DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize("release", ["chaos", "chaosproxy-staging", "r" * 60])
def test_names_and_labels_are_kubernetes_names_whatever_the_release(release: str) -> None:
    """Every object named as a DNS label (at most 63), each with the standard labels."""
    docs = documents("--name", release, "-f", str(FLEET_VALUES))
    names = [d["metadata"]["name"] for d in docs]
    named = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(set(named)) == len(named) == 5 and len(set(names)) == 3
    for doc in docs:
        name = doc["metadata"]["name"]
        assert DNS_LABEL.fullmatch(name) and len(name) <= 63, name
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == release
        assert labels["app.kubernetes.io/name"] == "chaosproxy"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
    if release == "chaosproxy-staging":  # a release that says chaosproxy is the name
        assert "chaosproxy-staging" in names


@pytest.mark.parametrize("case", [*(c for c in CASES if c != "sidecar"), "app-chart"])
def test_the_charts_containers_meet_the_restricted_pod_security_standard(
    app_chart: Path, case: str
) -> None:
    """Each container the chart makes (chaosproxy's, Redis's; not the app's) meets the
    restricted profile with its pod's context, the sidecar with its own alone (it
    joins a pod the chart does not make)."""
    docs = documents(chart=app_chart) if case == "app-chart" else documents(*CASES[case])
    checked = 0
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Pod"):
            continue
        pod = pod_spec(doc).get("securityContext", {}) if case != "app-chart" else {}
        for container in containers(doc):
            if container["name"] == "app":
                continue
            context = {**pod, **container["securityContext"]}
            assert context["runAsNonRoot"] is True, container["name"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            assert context.get("runAsUser", 1) != 0
            checked += 1
    assert checked >= 1


def test_bad_values_the_schema_cannot_see_stop_the_render_with_a_message() -> None:
    cases = {
        ("--set", "mode=fleet,redis.enabled=false"): (
            "error calling required: mode fleet needs a Redis: redis.enabled, redis.url or "
            "redis.existingSecret"
        ),
        ("--set", "settings.CHAOSPROXY_ADMIN=0.0.0.0:1"): (
            "error calling fail: settings.CHAOSPROXY_ADMIN: the chart sets CHAOSPROXY_ADMIN "
            "itself (see values.yaml)"
        ),
        ("--set", "redis.url=redis://redis.example:6379/0"): (
            "error calling fail: redis.url or redis.existingSecret names your Redis: set "
            "redis.enabled=false too (or drop them for the chart's own Redis)"
        ),
        ("--set", "mode=daemonset"): (
            "error calling fail: mode: daemonset is neither fleet nor sidecar"
        ),
        ("--set", r"scenarios.files.flaky\.txt=x"): (
            "error calling fail: scenarios.files.flaky.txt: a scenario file's key is its file "
            "name, NAME.yaml"
        ),
    }
    for args, message in cases.items():
        done = render(*args, check=False)
        assert done.returncode == 1 and done.stdout == "", args
        assert done.stderr.startswith("Error: template: chaosproxy/templates/"), done.stderr
        assert done.stderr.rstrip().endswith(message), done.stderr


# --------------------------------------------------------------------------- the fleet


def test_the_fleet_is_replicas_sharing_the_charts_redis() -> None:
    docs = documents("-f", str(FLEET_VALUES))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ConfigMap", "release-name-chaosproxy-scenarios"),
        ("Service", "release-name-chaosproxy-redis"),
        ("Service", "release-name-chaosproxy"),
        ("Deployment", "release-name-chaosproxy"),
        ("Deployment", "release-name-chaosproxy-redis"),
    ]  # no Secret: the token is the existing chaosproxy-admin's
    proxy, redis = find(docs, "Deployment")
    assert proxy["spec"]["replicas"] == 3
    (container,) = containers(proxy)
    assert container["args"] == ["serve", "--listen", "0.0.0.0:8080"]
    env = env_of(container)
    assert env["CHAOSPROXY_STATE"]["value"] == "redis://release-name-chaosproxy-redis:6379/0"
    assert env["CHAOSPROXY_FLEET"]["value"] == "staging"
    assert env["CHAOSPROXY_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["CHAOSPROXY_TRUST_CLIENT_SCENARIOS"]["value"] == "no"
    assert env["CHAOSPROXY_SEED"]["value"] == "7"
    assert env["CHAOSPROXY_UPSTREAM"]["value"] == "https://your-gateway.example"
    # Each Service selects its own pods, and only them: the proxies' selector does not
    # take the Redis pod, nor the other way round.
    proxy_service, redis_service = (
        find(docs, "Service", "release-name-chaosproxy")[0],
        find(docs, "Service", "release-name-chaosproxy-redis")[0],
    )
    for service, mine, other in (
        (proxy_service, proxy, redis),
        (redis_service, redis, proxy),
    ):
        selector = service["spec"]["selector"].items()
        assert selector <= mine["spec"]["template"]["metadata"]["labels"].items()
        assert not selector <= other["spec"]["template"]["metadata"]["labels"].items()
        assert mine["spec"]["selector"]["matchLabels"].items() <= selector
        ports = {p["name"] for c in containers(mine) for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    assert [p["port"] for p in proxy_service["spec"]["ports"]] == [8080, 8478]
    assert redis_service["spec"]["ports"][0]["port"] == 6379
    (redis_container,) = containers(redis)
    assert redis_container["args"] == ["redis-server", "--save", "", "--appendonly", "no"]
    assert redis_container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_fleet_on_your_redis() -> None:
    docs = documents(*CASES["external-redis"])
    assert find(docs, "Deployment", "release-name-chaosproxy-redis") == []
    assert [d["metadata"]["name"] for d in find(docs, "Service")] == ["release-name-chaosproxy"]
    env = env_of(chaosproxy_containers(docs)[0])
    assert env["CHAOSPROXY_STATE"] == {
        "name": "CHAOSPROXY_STATE",
        "value": "redis://redis.example:6379/0",
    }
    assert env["CHAOSPROXY_FLEET"]["value"] == "release-name-chaosproxy"
    docs = documents(*CASES["redis-from-a-secret"])
    env = env_of(chaosproxy_containers(docs)[0])
    assert env["CHAOSPROXY_STATE"]["valueFrom"] == {
        "secretKeyRef": {"name": "chaos-redis", "key": "url"}
    }


# --------------------------------------------------------------------------- the sidecar


def test_sidecar_mode_makes_no_workload() -> None:
    docs = documents("-f", str(SIDECAR_VALUES))
    assert [d["kind"] for d in docs] == ["Secret", "ConfigMap"]


def test_the_included_sidecar_is_the_examples_native_sidecar(app_chart: Path) -> None:
    """What examples/kubernetes/pod.yaml's sidecar is, the chart's include gives."""
    (app,) = find(documents(chart=app_chart), "Deployment")
    (sidecar,) = pod_spec(app)["initContainers"]
    example = values_of(EXAMPLES / "pod.yaml")["spec"]["initContainers"][0]
    assert sidecar["restartPolicy"] == example["restartPolicy"] == "Always"
    assert sidecar["args"] == example["args"] == ["serve", "--listen", "127.0.0.1:8080"]
    assert sidecar["ports"] == example["ports"]  # the admin port only: the proxy is the app's
    for probe in ("startupProbe", "readinessProbe"):
        assert sidecar[probe] == example[probe]
    assert "livenessProbe" not in sidecar
    assert sidecar["volumeMounts"] == [
        {"name": "chaosproxy-scenarios", "mountPath": "/scenarios", "readOnly": True}
    ]
    assert pod_spec(app)["volumes"] == [
        {"name": "chaosproxy-scenarios", "configMap": {"name": "release-name-chaosproxy-scenarios"}}
    ]
    assert sidecar["securityContext"].items() >= example["securityContext"].items()
    assert sidecar["image"] == "ghcr.io/OWNER/chaosproxy:0.1.0"
    env, example_env = env_of(sidecar), env_of(example)
    assert set(env) == set(example_env)
    for name in ("CHAOSPROXY_UPSTREAM", "CHAOSPROXY_SCENARIOS", "CHAOSPROXY_ADMIN"):
        assert env[name] == example_env[name]
    assert env["CHAOSPROXY_ADMIN_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "release-name-chaosproxy-admin", "key": "token"}
    }


def test_a_plain_sidecar_container_for_older_clusters(app_chart: Path) -> None:
    docs = documents("--set", "chaosproxy.sidecar.native=false", chart=app_chart)
    (app,) = find(docs, "Deployment")
    assert "restartPolicy" not in pod_spec(app)["initContainers"][0]


# --------------------------------------------------------------------------- the token


def secret_token(docs: list[dict[str, Any]]) -> str:
    (secret,) = find(docs, "Secret")
    assert secret["metadata"]["name"] == "release-name-chaosproxy-admin"
    assert list(secret["data"]) == ["token"]
    return base64.b64decode(secret["data"]["token"]).decode()


def test_with_no_token_given_the_chart_draws_one() -> None:
    """32 letters and digits, a new one at each install (lookup keeps it on an upgrade,
    against a cluster: not here)."""
    drawn = [secret_token(documents()) for _ in range(2)]
    for token in drawn:
        assert re.fullmatch(r"[A-Za-z0-9]{32}", token), token
    assert drawn[0] != drawn[1]
    env = env_of(chaosproxy_containers(documents())[0])
    assert env["CHAOSPROXY_ADMIN_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "release-name-chaosproxy-admin", "key": "token"}
    }


def test_a_token_given_goes_into_the_secret_and_nowhere_else() -> None:
    docs = documents(*CASES["token-given"])
    assert secret_token(docs) == TOKEN
    rendered = render(*CASES["token-given"]).stdout
    assert TOKEN not in rendered  # only its base64, in the Secret
    assert rendered.count(base64.b64encode(TOKEN.encode()).decode()) == 1


def test_an_existing_secret_is_referenced_not_made() -> None:
    docs = documents("--set", "admin.existingSecret=team-chaos,admin.existingSecretKey=admin-token")
    assert find(docs, "Secret") == []
    env = env_of(chaosproxy_containers(docs)[0])
    assert env["CHAOSPROXY_ADMIN_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "team-chaos", "key": "admin-token"}
    }


@pytest.mark.parametrize("case", ["default", "fleet", "sidecar", "token-given"])
def test_the_notes_tell_where_the_token_is_never_the_token(case: str) -> None:
    text = notes(*CASES[case])
    secret = "chaosproxy-admin" if case == "fleet" else "release-name-chaosproxy-admin"
    assert (
        f"TOKEN=$(kubectl -n default get secret {secret} -o jsonpath='{{.data.token}}' | base64 -d)"
    ) in text
    assert TOKEN not in text and base64.b64encode(TOKEN.encode()).decode() not in text
    assert "<no value>" not in text
    if case == "sidecar":
        assert 'include "chaosproxy.sidecarContainer"' in text
    else:
        assert "http://release-name-chaosproxy.default:8080" in text


# --------------------------------------------------------------------------- scenarios


@pytest.mark.parametrize("values", [FLEET_VALUES, SIDECAR_VALUES], ids=lambda p: p.name)
def test_scenarios_from_values_are_a_configmap_of_valid_scenarios(values: Path) -> None:
    docs = documents("-f", str(values))
    (configmap,) = find(docs, "ConfigMap")
    files = values_of(values)["scenarios"]["files"]
    assert configmap["data"] == files
    for key, text in configmap["data"].items():
        assert parse_scenario(text, key).name == Path(key).stem


def test_an_existing_configmap_is_mounted_not_made() -> None:
    docs = documents(*CASES["existing-configmap"])
    assert find(docs, "ConfigMap") == []
    (proxy,) = find(docs, "Deployment", "release-name-chaosproxy")
    assert pod_spec(proxy)["volumes"] == [
        {"name": "chaosproxy-scenarios", "configMap": {"name": "my-scenarios"}}
    ]
    assert env_of(containers(proxy)[0])["CHAOSPROXY_SCENARIOS"]["value"] == "/scenarios"


def test_without_scenarios_nothing_is_mounted() -> None:
    (proxy,) = find(documents(), "Deployment", "release-name-chaosproxy")
    (container,) = containers(proxy)
    assert "volumes" not in pod_spec(proxy) and "volumeMounts" not in container
    assert "CHAOSPROXY_SCENARIOS" not in env_of(container)


# --------------------------------------------------------------------------- chaosproxy


STAND_INS = {
    "secretKeyRef": "a-token-from-the-secret-0123456789",
    "fieldRef": "release-name-chaosproxy-7d9f-x2x4q",
}


def settings_of(container: dict[str, Any]) -> dict[str, str]:
    """The container's CHAOSPROXY_* variables and its --listen, as serve reads them (a
    value from a Secret or the downward API given a stand-in)."""
    env: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            (source,) = entry["valueFrom"]
            env[entry["name"]] = (
                "redis://redis.example:6379/0"
                if entry["name"] == "CHAOSPROXY_STATE"
                else STAND_INS[source]
            )
    args = container["args"]
    assert args[:2] == ["serve", "--listen"] and len(args) == 3, args
    return {**env, "CHAOSPROXY_LISTEN": args[2]}


def rendered_containers(app_chart: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for case, args in CASES.items():
        for container in chaosproxy_containers(documents(*args)):
            yield case, container
    for container in chaosproxy_containers(documents(chart=app_chart)):
        yield "app-chart", container


def test_every_chaosproxy_variable_rendered_is_a_real_setting_that_parses(
    app_chart: Path,
) -> None:
    seen = 0
    for case, container in rendered_containers(app_chart):
        settings = settings_of(container)
        assert set(settings) <= SETTINGS, (case, set(settings) - SETTINGS)
        assert len(from_environment(settings)) == len(settings), case  # ConfigError if bad
        # A non-loopback admin API always has a token.
        assert settings["CHAOSPROXY_ADMIN"].startswith("0.0.0.0:")
        assert "CHAOSPROXY_ADMIN_TOKEN" in settings
        seen += 1
    assert seen == len(CASES)  # one chaosproxy container per install, sidecar mode's in the app


def test_every_value_is_documented() -> None:
    """Each value of values.yaml (its path) is named in docs/deploy.md's Helm section."""
    doc = DEPLOY_DOC.read_text("utf-8")
    section = doc[doc.index("\n## Helm\n") :]
    section = section[: section.index("\n## ", 1)]

    def paths(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, value in values.items():
            if isinstance(value, dict) and value and key not in (
                "resources", "podSecurityContext", "securityContext", "startupProbe",
                "readinessProbe",
            ):  # fmt: skip
                yield from paths(value, f"{prefix}{key}.")
            else:
                yield prefix + key

    missing = [p for p in paths(values_of(CHART / "values.yaml")) if f"`{p}`" not in section]
    assert missing == []


# --------------------------------------------------------------------------- serve


async def serve_rendered(
    container: dict[str, Any], files: dict[str, str], token: str, tmp: Path
) -> tuple[asyncio.subprocess.Process, str]:
    """``chaosproxy serve`` with exactly the container's args and env: a Secret's value
    is ``token``, the downward API's the pod name, the ConfigMap's files in a directory
    standing for /scenarios."""
    scenarios = tmp / "scenarios"
    scenarios.mkdir()
    for name, text in files.items():
        (scenarios / name).write_text(text, encoding="utf-8")
    # The settings are the container's alone; the rest (CHAOSPROXY_PURE: the build) stays.
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    for entry in container["env"]:
        value = entry.get("value")
        if value is None:
            value = token if "secretKeyRef" in entry["valueFrom"] else STAND_INS["fieldRef"]
        env[entry["name"]] = str(scenarios) if value == "/scenarios" else value
    proc = await asyncio.create_subprocess_exec(
        *chaosproxy_argv(), *container["args"],
        cwd=tmp,
        env={**env, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    async with asyncio.timeout(30):
        line = (await proc.stderr.readline()).decode()
    return proc, line


async def probe(container: dict[str, Any], admin_port: int) -> None:
    """The container's startup probe, as the kubelet sends it: GET its path on its port."""
    get = container["startupProbe"]["httpGet"]
    assert get["port"] == "admin"
    url = f"http://127.0.0.1:{admin_port}{get['path']}"
    async with aiohttp.ClientSession() as http, http.get(url) as answer:
        assert answer.status == 200


async def test_serve_runs_the_rendered_sidecar(app_chart: Path, tmp_path: Path) -> None:
    """The app chart's sidecar, upstream the built-in mock: it starts, passes its probe,
    refuses the admin API without the Secret's token, and applies the ConfigMap's
    scenario to a request that names it."""
    proxy_port, admin_port = free_port(), free_port()
    docs = documents(
        "--set", f"chaosproxy.upstream=,chaosproxy.proxyPort={proxy_port}",
        "--set", f"chaosproxy.admin.port={admin_port}",
        chart=app_chart,
    )  # fmt: skip
    (sidecar,) = chaosproxy_containers(docs)
    token = secret_token(docs)
    (configmap,) = find(docs, "ConfigMap")
    proc, line = await serve_rendered(sidecar, configmap["data"], token, tmp_path)
    try:
        assert f"listening on http://127.0.0.1:{proxy_port} → mock" in line, line
        assert f"admin: http://0.0.0.0:{admin_port} (bearer token)" in line, line
        await probe(sidecar, admin_port)
        admin = f"http://127.0.0.1:{admin_port}/scenarios/gateway-replays-a-delta"
        async with aiohttp.ClientSession() as http:
            async with http.get(admin) as answer:
                assert answer.status == 401
            bearer = {"Authorization": f"Bearer {token}"}
            async with http.get(admin, headers=bearer) as answer:
                assert answer.status == 200
            async with http.post(
                f"http://127.0.0.1:{proxy_port}/v1/chat/completions",
                headers={"X-Chaos-Scenario": "gateway-replays-a-delta"},
                json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
            ) as answer:
                assert answer.status == 200
                assert answer.headers["X-Chaos-Scenario"] == "gateway-replays-a-delta"
                assert (await answer.read()).endswith(b"data: [DONE]\n\n")
    finally:
        stderr = await stop_serve(proc)
    assert token not in line + stderr


@needs_redis
async def test_serve_runs_a_rendered_fleet_replica_on_redis(tmp_path: Path) -> None:
    """The fleet's container with redis.url naming a real Redis: the replica joins the
    fleet under its pod's name and passes its probe."""
    proxy_port, admin_port = free_port(), free_port()
    with redis_server(tmp_path) as redis:
        docs = documents(
            "-f", str(FLEET_VALUES),
            "--set", f"redis.enabled=false,redis.url={redis.url},proxyPort={proxy_port}",
            "--set", f"admin.port={admin_port},upstream=",
        )  # fmt: skip
        (container,) = chaosproxy_containers(docs)
        (configmap,) = find(docs, "ConfigMap")
        proc, line = await serve_rendered(container, configmap["data"], TOKEN, tmp_path)
        try:
            assert f"listening on http://0.0.0.0:{proxy_port}" in line, line
            assert f"replica: {STAND_INS['fieldRef']}; state: {redis.url}, fleet staging" in line
            await probe(container, admin_port)
        finally:
            await stop_serve(proc)
