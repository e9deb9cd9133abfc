"""tools/helm-render: the chart's offline stand-in for ``helm template``, on small
made-up charts whose output is known exactly. Each test names the Helm behaviour it
holds the renderer to: which files are rendered, how values merge, how ``--set`` types
its values, Helm's own functions (include, tpl, required, fail, toYaml, fromYaml,
toJson, lookup) next to sprig's, and the errors, located as Helm locates them."""

from __future__ import annotations

from pathlib import Path

from tests.support.helm import render, write_chart

CHART_YAML = """\
apiVersion: v2
name: demo
version: 1.2.3
appVersion: "4.5"
kubeVersion: ">=1.29.0-0"
"""


def chart(tmp_path: Path, templates: dict[str, str], values: str = "") -> Path:
    files = {"Chart.yaml": CHART_YAML, "values.yaml": values}
    files.update({f"templates/{name}": text for name, text in templates.items()})
    return write_chart(tmp_path / "demo", files)


def test_each_template_is_a_source_in_install_order_and_partials_and_notes_are_not(
    tmp_path: Path,
) -> None:
    """Files starting with _ are parsed, not rendered; NOTES.txt is not a manifest; a
    file that renders blank prints nothing; kinds in Helm's install order (a Secret
    before a Service before a Deployment), whatever their files' names."""
    root = chart(
        tmp_path,
        {
            "_helpers.tpl": '{{- define "demo.name" -}}d-{{ .Release.Name }}{{- end }}',
            "a-deploy.yaml": 'kind: Deployment\nmetadata:\n  name: {{ include "demo.name" . }}\n',
            "b-service.yaml": "kind: Service\nmetadata:\n  name: s\n---\nkind: Secret\n",
            "c-blank.yaml": "{{- if false }}\nkind: Pod\n{{- end }}\n",
            "NOTES.txt": "installed {{ .Release.Name }}",
            "skipped.txt": "kind: ConfigMap",
        },
    )
    done = render("--name", "r1", chart=root)
    assert done.stdout == (
        "---\n# Source: demo/templates/b-service.yaml\nkind: Secret\n"
        "---\n# Source: demo/templates/b-service.yaml\nkind: Service\nmetadata:\n  name: s\n"
        "---\n# Source: demo/templates/a-deploy.yaml\nkind: Deployment\nmetadata:\n  name: d-r1\n"
    )
    assert render("--notes", "--name", "r1", chart=root).stdout == "installed r1"


def test_the_objects_a_template_sees(tmp_path: Path) -> None:
    root = chart(
        tmp_path,
        {
            "o.yaml": (
                "kind: ConfigMap\ndata:\n"
                "  release: {{ .Release.Name }}/{{ .Release.Namespace }}/{{ .Release.IsInstall }}"
                "/{{ .Release.Revision }}/{{ .Release.Service }}\n"
                "  chart: {{ .Chart.Name }}-{{ .Chart.Version }}-{{ .Chart.AppVersion }}\n"
                "  kube: {{ .Capabilities.KubeVersion.Version }}"
                "/{{ .Capabilities.KubeVersion.Minor }}\n"
                '  apps: {{ .Capabilities.APIVersions.Has "apps/v1" }}\n'
                "  template: {{ .Template.Name }} in {{ .Template.BasePath }}\n"
                "  missing: [{{ .Values.nothing }}]\n"
            )
        },
    )
    out = render("--namespace", "ns", "--kube-version", "1.37.0", chart=root).stdout
    assert out.splitlines()[2:] == [
        "kind: ConfigMap",
        "data:",
        "  release: release-name/ns/true/1/Helm",
        "  chart: demo-1.2.3-4.5",
        "  kube: v1.37.0/37",
        "  apps: true",
        "  template: demo/templates/o.yaml in demo/templates",
        "  missing: []",
    ]


def test_values_merge_as_helm_merges_them(tmp_path: Path) -> None:
    """values.yaml, then each -f file (the last wins), then --set; maps merge key by
    key, a null removes a default's key, numbers print as Helm prints them."""
    root = chart(
        tmp_path,
        {"v.yaml": "kind: ConfigMap\ndata: {{ toJson .Values }}\n"},
        values="a: {b: 1, c: 2, d: 3}\nnum: 3\nlist: [1, 2]\n",
    )
    first = tmp_path / "first.yaml"
    first.write_text("a: {b: 10}\nlist: [9]\n")
    second = tmp_path / "second.yaml"
    second.write_text("a: {c: 20, d: null}\n")
    out = render("-f", str(first), "-f", str(second), "--set", "a.e=x,num=4", chart=root).stdout
    assert out.splitlines()[-1] == 'data: {"a":{"b":10,"c":20,"e":"x"},"list":[9],"num":4}'


def test_set_types_its_values_as_helms_strvals(tmp_path: Path) -> None:
    root = chart(tmp_path, {"v.yaml": "kind: ConfigMap\ndata: {{ toJson .Values }}\n"})
    text = tmp_path / "s.yaml"
    text.write_text("name: s\n")
    out = render(
        "--set", "i=12,b=true,z=0,o=012,f=1.5,l={a,2},empty=",
        "--set", r"files.a\.yaml=x",
        "--set-string", "s=true",
        "--set-file", rf"files.s\.yaml={text}",
        chart=root,
    ).stdout  # fmt: skip
    assert out.splitlines()[-1] == (
        'data: {"b":true,"empty":"","f":"1.5","files":{"a.yaml":"x","s.yaml":"name: s\\n"},'
        '"i":12,"l":["a",2],"o":"012","s":"true","z":0}'
    )


def test_helms_own_functions(tmp_path: Path) -> None:
    root = chart(
        tmp_path,
        {
            "_t.tpl": '{{- define "demo.twice" -}}{{ . }}{{ . }}{{- end }}',
            "f.yaml": (
                "kind: ConfigMap\ndata:\n"
                '  include: {{ include "demo.twice" "ab" | upper }}\n'
                '  tpl: {{ tpl "{{ .Values.greeting }}, {{ .Release.Name }}" . }}\n'
                "  toYaml:\n    {{- toYaml .Values.nested | nindent 4 }}\n"
                '  fromYaml: {{ (fromYaml "x: {z: 1}").x.z }}\n'
                '  fromYamlError: {{ hasKey (fromYaml "[") "Error" }}\n'
                '  fromJson: {{ (fromJson "{\\"k\\": [1, 2]}").k | len }}\n'
                '  lookup: {{ lookup "v1" "Secret" "ns" "name" | len }}\n'
                '  sprig: {{ list 3 1 2 | sortAlpha | join "-" }} {{ b64enc "hi" }}\n'
            ),
        },
        values="greeting: hello\nnested: {k: [1, {a: b}], s: 'x: y'}\n",
    )
    assert render(chart=root).stdout.splitlines()[2:] == [
        "kind: ConfigMap",
        "data:",
        "  include: ABAB",
        "  tpl: hello, release-name",
        "  toYaml:",
        "    k:",
        "    - 1",
        "    - a: b",
        "    s: 'x: y'",
        "  fromYaml: 1",
        "  fromYamlError: true",
        "  fromJson: 2",
        "  lookup: 0",
        "  sprig: 1-2-3 aGk=",
    ]


def test_env_and_expandenv_are_not_there(tmp_path: Path) -> None:
    """Helm takes sprig's env and expandenv out: a chart cannot read the machine's."""
    root = chart(tmp_path, {"e.yaml": 'kind: ConfigMap\ndata: {{ env "HOME" }}\n'})
    done = render(chart=root, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: parse error at (demo/templates/e.yaml)")
    assert 'function "env" not defined' in done.stderr


def test_required_and_fail_stop_the_render_naming_the_template_and_line(tmp_path: Path) -> None:
    root = chart(
        tmp_path,
        {
            "r.yaml": 'kind: ConfigMap\n\ndata: {{ required "upstream is required" .Values.up }}\n',
            "s.yaml": '{{- if .Values.bad }}{{ fail "bad is bad" }}{{ end }}\nkind: Secret\n',
        },
        values="up: ''\n",
    )
    done = render(chart=root, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("Error: template: demo/templates/r.yaml:3:")
    assert done.stderr.rstrip().endswith("error calling required: upstream is required")
    done = render("--set", "up=x,bad=true", chart=root, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: template: demo/templates/s.yaml:1:")
    assert done.stderr.rstrip().endswith("error calling fail: bad is bad")


def test_a_manifest_that_is_not_yaml_is_refused(tmp_path: Path) -> None:
    root = chart(tmp_path, {"y.yaml": "kind: ConfigMap\ndata: [unclosed\n"})
    done = render(chart=root, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: YAML parse error on demo/templates/y.yaml")


def test_the_charts_kube_version_is_checked(tmp_path: Path) -> None:
    root = chart(tmp_path, {"k.yaml": "kind: ConfigMap\n"})
    assert render("--kube-version", "1.29.0", chart=root).returncode == 0
    done = render("--kube-version", "1.28.9", chart=root, check=False)
    assert done.returncode == 1
    assert done.stderr == (
        "Error: chart requires kubeVersion: >=1.29.0-0 which is incompatible with "
        "Kubernetes v1.28.9\n"
    )


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    root = chart(tmp_path, {"k.yaml": "kind: ConfigMap\n"})
    done = render("--set", "novalue", chart=root, check=False)
    assert (done.returncode, done.stderr) == (
        1,
        'Error: failed parsing --set data: key "novalue" has no value\n',
    )
    done = render("-f", str(tmp_path / "absent.yaml"), chart=root, check=False)
    assert done.returncode == 1 and "absent.yaml" in done.stderr
    done = render(chart=tmp_path, check=False)
    assert done.returncode == 1 and done.stderr.startswith("Error: Chart.yaml file is missing")


def test_strict_makes_a_missing_key_an_error(tmp_path: Path) -> None:
    """As Helm's strict engine: ``missingkey=error`` (in tpl too), where the default
    prints nothing."""
    root = chart(
        tmp_path,
        {
            "m.yaml": "kind: ConfigMap\ndata: [{{ .Values.absent }}]\n",
            "t.yaml": '{{ tpl "{{ .Values.gone }}" . }}\nkind: Secret\n',
        },
    )
    assert render(chart=root).stdout.splitlines()[-1] == "data: []"
    done = render("--strict", chart=root, check=False)
    assert done.returncode == 1
    assert 'map has no entry for key "absent"' in done.stderr
    (tmp_path / "demo" / "templates" / "m.yaml").unlink()
    done = render("--strict", chart=root, check=False)
    assert done.returncode == 1
    assert 'map has no entry for key "gone"' in done.stderr


def test_kinds_helm_does_not_know_come_last_by_name(tmp_path: Path) -> None:
    root = chart(
        tmp_path,
        {"k.yaml": "kind: Zeta\n---\nkind: Deployment\n---\nkind: Alpha\n---\nkind: Zeta\nn: 2\n"},
    )
    kinds = [line for line in render(chart=root).stdout.splitlines() if line.startswith("kind")]
    assert kinds == ["kind: Deployment", "kind: Alpha", "kind: Zeta", "kind: Zeta"]


def test_a_subchart_sees_its_values_and_chart_and_its_named_templates_are_shared(
    tmp_path: Path,
) -> None:
    """Helm's dependencies, unpacked in charts/: the subchart's defaults under the
    parent's values at its name (the parent's win), the parent's globals, its own .Chart
    and .Values in its templates, its named templates the parent's too, its notes never
    printed."""
    root = chart(
        tmp_path,
        {
            "p.yaml": (
                "kind: ConfigMap\ndata:\n"
                "  sub: {{ toJson .Values.sub }}\n"
                '  named: {{ include "sub.hello" .Values.sub }}\n'
            )
        },
        values="sub: {b: 20}\nglobal: {g: 1}\n",
    )
    write_chart(
        root / "charts" / "sub",
        {
            "Chart.yaml": "apiVersion: v2\nname: sub\nversion: 0.0.1\n",
            "values.yaml": "a: 1\nb: 2\n",
            "templates/_h.tpl": '{{- define "sub.hello" -}}hello {{ .b }}{{- end }}',
            "templates/s.yaml": (
                "kind: Secret\nmetadata:\n  name: {{ .Chart.Name }}-{{ .Values.a }}-{{ .Values.b }}"
                "-{{ .Values.global.g }}-{{ .Template.Name }}\n"
            ),
            "templates/NOTES.txt": "the subchart's notes",
        },
    )
    assert render(chart=root).stdout == (
        "---\n# Source: demo/charts/sub/templates/s.yaml\n"
        "kind: Secret\nmetadata:\n  name: sub-1-20-1-demo/charts/sub/templates/s.yaml\n"
        "---\n# Source: demo/templates/p.yaml\n"
        'kind: ConfigMap\ndata:\n  sub: {"a":1,"b":20,"global":{"g":1}}\n  named: hello 20\n'
    )
    assert render("--set", "sub.a=5", "--notes", chart=root).stdout == ""
    packed = root / "charts" / "packed-1.0.0.tgz"
    packed.write_bytes(b"")
    done = render(chart=root, check=False)
    assert done.returncode == 1
    assert done.stderr.endswith(
        "packed-1.0.0.tgz: only unpacked subcharts (directories) are supported\n"
    )
