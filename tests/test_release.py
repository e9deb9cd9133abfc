""".github/workflows/release.yml: valid against the GitHub workflow schema (vendored by
check-jsonschema, as tests/test_examples.py checks the examples), and publishing what
the README says will be published: the image for amd64 and arm64 to ghcr.io, and the
wheel to PyPI with trusted publishing, on a version tag that is pyproject.toml's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, documents, find, values_of
from tests.support.repo import REPO
from tests.support.schema_check import check_jsonschema

RELEASE = REPO / ".github" / "workflows" / "release.yml"


def workflow() -> dict[Any, Any]:
    """The release workflow as PyYAML reads it (its key ``on``: True)."""
    loaded: dict[Any, Any] = yaml.safe_load(RELEASE.read_text("utf-8"))
    return loaded


def steps(job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow()["jobs"][job]["steps"]
    return found


def uses(job: str, action: str) -> list[dict[str, Any]]:
    return [s for s in steps(job) if str(s.get("uses", "")).startswith(action + "@")]


@pytest.mark.parametrize(
    "schema", ["vendor.github-workflows", "custom.github-workflows-require-timeout"]
)
def test_valid_against_the_workflow_schema(schema: str) -> None:
    done = check_jsonschema(schema, RELEASE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_catches_a_broken_copy(tmp_path: Path) -> None:
    data = workflow()
    data["jobs"]["image"]["permisions"] = data["jobs"]["image"].pop("permissions")
    broken = tmp_path / "release.yml"
    broken.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert check_jsonschema("vendor.github-workflows", broken).returncode == 1


def test_it_runs_on_version_tags_only() -> None:
    # PyYAML reads the key `on` as True (YAML 1.1).
    assert workflow()[True] == {"push": {"tags": ["v*"]}}
    assert workflow()["permissions"] == {"contents": "read"}


def test_every_needs_reference_is_a_need() -> None:
    """A job sees ``needs.X`` only for the jobs it needs itself."""
    jobs = workflow()["jobs"]
    for name, job in jobs.items():
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        assert set(needs) <= set(jobs), name
        referenced = set(re.findall(r"needs\.([\w-]+)\.", yaml.safe_dump(job)))
        assert referenced <= set(needs), f"{name} reads needs.{referenced - set(needs)}"


def test_the_image_goes_to_ghcr_for_amd64_and_arm64_once_healthy() -> None:
    job = workflow()["jobs"]["image"]
    assert job["permissions"] == {"contents": "read", "packages": "write"}
    assert job["env"]["IMAGE"] == "ghcr.io/${{ github.repository_owner }}/chaosproxy"
    (login,) = uses("image", "docker/login-action")
    assert login["with"]["registry"] == "ghcr.io"
    assert login["with"]["password"] == "${{ secrets.GITHUB_TOKEN }}"
    check, push = uses("image", "docker/build-push-action")
    assert check["with"]["load"] is True and "push" not in check["with"]
    assert push["with"]["push"] is True
    assert push["with"]["platforms"].split(",") == ["linux/amd64", "linux/arm64"]
    names = [s.get("name", s.get("uses")) for s in steps("image")]
    assert names.index("started, and healthy") < names.index("build for amd64 and arm64, and push")
    healthy = next(s for s in steps("image") if s.get("name") == "started, and healthy")
    assert "Health.Status" in healthy["run"]
    # The README's pull line names that image.
    assert "docker pull ghcr.io/OWNER/chaosproxy:" in (REPO / "README.md").read_text()


def test_the_wheel_goes_to_pypi_with_trusted_publishing_after_the_image() -> None:
    job = workflow()["jobs"]["pypi"]
    assert set(job["needs"]) >= {"dist", "image"}  # nothing on PyPI if the image failed
    assert job["permissions"] == {"id-token": "write"}
    assert job["environment"]["name"] == "pypi"
    (publish,) = uses("pypi", "pypa/gh-action-pypi-publish")
    assert "with" not in publish  # no password, no token: trusted publishing
    assert "pip install chaosproxy==" in (REPO / "README.md").read_text()


@pytest.mark.parametrize(("offset", "code"), [(0, 0), (1, 1)])
def test_the_tag_must_be_the_version(tmp_path: Path, offset: int, code: int) -> None:
    """The version job's script, run as Actions would, on the right tag and a wrong one."""
    script = next(s["run"] for s in steps("version") if s.get("id") == "version")
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    tag = "v" + version if offset == 0 else "v" + version + ".1"
    output = tmp_path / "output"
    output.touch()
    bin_dir = tmp_path / "bin"  # python3: this one (3.11, tomllib), as on the runner
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=REPO,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "GITHUB_REF_NAME": tag,
            "GITHUB_OUTPUT": str(output),
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == code, done.stdout + done.stderr
    if code == 0:
        assert output.read_text() == f"version={version}\n"
    else:
        assert f"::error::the tag {tag} is not v{version}" in done.stdout


def test_compiled_wheels_for_311_to_313_on_linux_and_macos_each_run_before_pypi() -> None:
    """cibuildwheel builds the compiled wheels on native runners (x86_64 and aarch64
    Linux, x86_64 and arm64 macOS), installs each and runs it (pyproject.toml's
    test-command: it must say compiled); PyPI gets them with the pure wheel and the sdist,
    so that ``pip install chaosproxy`` needs no compiler where a wheel fits."""
    job = workflow()["jobs"]["wheels"]
    assert set(job["strategy"]["matrix"]["os"]) == {
        "ubuntu-24.04", "ubuntu-24.04-arm", "macos-13", "macos-14"
    }  # fmt: skip
    (build,) = uses("wheels", "pypa/cibuildwheel")
    assert build["with"]["output-dir"] == "wheelhouse"
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    assert config["build"].split() == ["cp311-*", "cp312-*", "cp313-*"]
    assert "(compiled)" in config["test-command"]
    dist = next(s for s in steps("dist") if s.get("name") == "the sdist and the pure wheel")
    assert dist["run"] == "CHAOSPROXY_PURE_BUILD=1 python -m build"
    pypi = workflow()["jobs"]["pypi"]
    assert "wheels" in pypi["needs"]
    downloads = uses("pypi", "actions/download-artifact")
    assert [d["with"].get("pattern", d["with"].get("name")) for d in downloads] == [
        "dist",
        "wheels-*",
    ]
    assert all(d["with"]["path"] == "dist/" for d in downloads)


def test_the_wheels_test_command_refuses_a_pure_build(tmp_path: Path) -> None:
    """The release's check of each wheel, run here against this checkout's install: it
    fails on a pure build, as it must (a compiled wheel that runs pure is no release)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    command = config["test-command"].replace("{package}", str(REPO))
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    pure = subprocess.run(
        ["bash", "-c", command], env={**env, "CHAOSPROXY_PURE": "1"}, cwd=tmp_path,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert pure.returncode == 1, pure.stdout + pure.stderr


def test_the_typescript_client_goes_to_npm_after_pypi_at_the_release_version() -> None:
    job = workflow()["jobs"]["npm"]
    assert set(job["needs"]) == {"version", "pypi"}
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    (node,) = uses("npm", "actions/setup-node")
    assert node["with"]["registry-url"] == "https://registry.npmjs.org"
    publish = steps("npm")[-1]
    assert publish["working-directory"] == "clients/typescript"
    assert publish["run"] == "npm publish --provenance --access public"
    assert publish["env"] == {"NODE_AUTH_TOKEN": "${{ secrets.NPM_TOKEN }}"}
    package = json.loads((REPO / "clients" / "typescript" / "package.json").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert (package["name"], package["version"]) == ("@chaosproxy/client", version)
    assert package["scripts"]["prepack"] == "npm run build"


def test_the_chart_is_linted_validated_then_pushed_next_to_the_image() -> None:
    """The real helm and kubeconform, on GitHub's runners (not here: tests/test_helm_chart.py
    validates the chart offline): lint and validation before the push, after the image."""
    job = workflow()["jobs"]["chart"]
    assert set(job["needs"]) == {"version", "image"}
    assert "chart" in workflow()["jobs"]["pypi"]["needs"]  # nothing on PyPI if it failed
    assert job["permissions"] == {"contents": "read", "packages": "write"}
    assert job["env"]["CHART"] == "charts/chaosproxy"
    (helm,) = uses("chart", "azure/setup-helm")
    assert re.fullmatch(r"v3\.\d+\.\d+", helm["with"]["version"])
    runs = [s.get("run", "") for s in steps("chart")]
    lint = next(i for i, r in enumerate(runs) if "helm lint --strict" in r)
    template = next(i for i, r in enumerate(runs) if "| kubeconform -strict" in r)
    push = next(i for i, r in enumerate(runs) if "helm push" in r)
    assert lint < template < push
    assert runs[template].startswith("set -o pipefail\n")  # a failed render fails the step
    assert "-kubernetes-version 1.29.0" in runs[template]
    assert 'helm package "$CHART" --version "$VERSION" --app-version "$VERSION"' in runs[push]
    pushed = 'helm push "dist/chaosproxy-$VERSION.tgz" "oci://ghcr.io/${OWNER,,}/charts"'
    assert pushed in runs[push]
    assert "--password-stdin" in runs[push] and "${{" not in runs[push]  # the token via env


def test_the_released_chart_names_the_released_image(tmp_path: Path) -> None:
    """The chart job's first step, run on a copy of the chart as Actions would: the
    default image becomes this owner's (lower-cased, as ghcr.io wants it), and the chart
    renders with it."""
    step = next(s for s in steps("chart") if s.get("name") == "the release's image and repository")
    chart = tmp_path / "charts" / "chaosproxy"
    shutil.copytree(CHART, chart)
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "CHART": "charts/chaosproxy",
            "OWNER": "Some-Org",
            "REPOSITORY": "Some-Org/chaosproxy",
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert values_of(chart / "Chart.yaml")["home"] == "https://github.com/Some-Org/chaosproxy"
    docs = documents(chart=chart)
    (proxy,) = find(docs, "Deployment", "release-name-chaosproxy")
    image = proxy["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "ghcr.io/some-org/chaosproxy:0.1.0"
