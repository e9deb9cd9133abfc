// helm-render renders a Helm chart's templates the way `helm template` does, with the
// same template engine and function library: Go's text/template, sprig (Helm's
// function library) and Helm's own functions (include, tpl, required, fail, toYaml,
// fromYaml, fromYamlArray, toJson, fromJson, fromJsonArray, lookup), with Helm's values
// coalescing (subcharts' values and globals included). It is not helm: subcharts are
// read unpacked from charts/ only (no repositories, no condition, tags or alias), no
// hooks, no values.schema.json validation (tests/test_helm_chart.py validates values
// against the schema), no cluster (lookup finds nothing, as in helm template); .Files
// has Get and GetBytes only, and toToml is missing (Debian has no TOML library for it).
// It exists because the helm binary cannot be installed where chaosproxy's tests run
// offline; the release workflow runs the real helm on GitHub's runners
// (docs/deploy.md, "Helm").
//
// Build it in GOPATH mode from Debian's packages (golang-go,
// golang-github-masterminds-sprig-dev, golang-k8s-sigs-yaml-dev), offline:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o helm-render ./tools/helm-render
//
// Usage, as `helm template NAME CHART`:
//
//	helm-render [--name NAME] [--namespace NS] [--kube-version 1.29.0] [-f values.yaml]...
//	            [--set k=v]... [--set-string k=v]... [--set-file k=path]... [--notes]
//	            [--strict] CHART
//
// The manifests go to stdout, each preceded by `---` and `# Source: CHART/templates/FILE`,
// in Helm's install order of kinds; with --notes, the rendered NOTES.txt instead.
// --strict makes a missing map key an error (Helm's engine in strict mode) instead of
// an empty value. An error goes to stderr as `Error: ...`, exit status 1.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

// Values is a chart's values, as Helm keeps them (YAML read through JSON: numbers are
// float64, as in Helm).
type Values = map[string]interface{}

// Metadata is Chart.yaml, with the field names templates see as .Chart.
type Metadata struct {
	APIVersion   string              `json:"apiVersion"`
	Name         string              `json:"name"`
	Version      string              `json:"version"`
	KubeVersion  string              `json:"kubeVersion,omitempty"`
	Description  string              `json:"description,omitempty"`
	Type         string              `json:"type,omitempty"`
	Keywords     []string            `json:"keywords,omitempty"`
	Home         string              `json:"home,omitempty"`
	Sources      []string            `json:"sources,omitempty"`
	Dependencies []interface{}       `json:"dependencies,omitempty"`
	Maintainers  []map[string]string `json:"maintainers,omitempty"`
	Icon         string              `json:"icon,omitempty"`
	AppVersion   string              `json:"appVersion,omitempty"`
	Deprecated   bool                `json:"deprecated,omitempty"`
	Annotations  map[string]string   `json:"annotations,omitempty"`
}

// KubeVersion is .Capabilities.KubeVersion.
type KubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k KubeVersion) String() string { return k.Version }

// VersionSet is .Capabilities.APIVersions: the built-in API versions of the cluster.
type VersionSet []string

// Has says whether an API version (or version/Kind) is known.
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

// Capabilities is .Capabilities, for `helm template` without a cluster.
type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
}

// Release is .Release, as `helm template` (an install) gives it.
type Release struct {
	Name      string
	Namespace string
	IsUpgrade bool
	IsInstall bool
	Revision  int
	Service   string
}

// Files is .Files: the chart's files outside templates/.
type Files map[string][]byte

// Get returns a file's content, "" when there is none.
func (f Files) Get(name string) string { return string(f[name]) }

// GetBytes returns a file's bytes.
func (f Files) GetBytes(name string) []byte { return f[name] }

var defaultAPIVersions = VersionSet{
	"v1", "apps/v1", "batch/v1", "policy/v1", "networking.k8s.io/v1",
	"autoscaling/v2", "rbac.authorization.k8s.io/v1", "storage.k8s.io/v1",
}

// installOrder is Helm's InstallOrder: the order `helm template` prints kinds in.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
	"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
	"Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService",
}

const recursionMax = 1000

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %s\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	flags := flag.NewFlagSet("helm-render", flag.ContinueOnError)
	name := flags.String("name", "release-name", "the release name (helm template's default)")
	namespace := flags.String("namespace", "default", "the release namespace")
	kube := flags.String("kube-version", "1.29.0", "the Kubernetes version .Capabilities gives")
	notes := flags.Bool("notes", false, "print the rendered NOTES.txt instead of the manifests")
	strict := flags.Bool("strict", false, "a missing map key is an error (Helm's engine.Strict)")
	var valueFiles, sets, setStrings, setFiles stringList
	flags.Var(&valueFiles, "f", "a values file (repeatable; the last wins)")
	flags.Var(&valueFiles, "values", "a values file (repeatable; the last wins)")
	flags.Var(&sets, "set", "KEY=VALUE, typed as helm's --set (repeatable)")
	flags.Var(&setStrings, "set-string", "KEY=VALUE, a string (repeatable)")
	flags.Var(&setFiles, "set-file", "KEY=PATH, the file's content (repeatable)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return errors.New("one chart directory expected")
	}
	root, err := loadChart(flags.Arg(0))
	if err != nil {
		return err
	}
	meta := root.meta
	user := Values{}
	for _, file := range valueFiles {
		loaded, err := readValues(file)
		if err != nil {
			return err
		}
		mergeMaps(user, loaded)
	}
	for _, set := range sets {
		if err := applySet(user, set, parseTyped); err != nil {
			return err
		}
	}
	for _, set := range setStrings {
		if err := applySet(user, set, func(s string) interface{} { return s }); err != nil {
			return err
		}
	}
	for _, set := range setFiles {
		if err := applySet(user, set, nil); err != nil {
			return err
		}
	}
	values := coalesceChart(root, user)

	capabilities, err := capabilitiesFor(*kube)
	if err != nil {
		return err
	}
	if meta.KubeVersion != "" {
		constraint, err := semver.NewConstraint(meta.KubeVersion)
		if err != nil {
			return fmt.Errorf("Chart.yaml: kubeVersion %q: %w", meta.KubeVersion, err)
		}
		if !constraint.Check(semver.MustParse(capabilities.KubeVersion.Version)) {
			return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s",
				meta.KubeVersion, capabilities.KubeVersion.Version)
		}
	}
	release := Release{Name: *name, Namespace: *namespace, IsInstall: true, Revision: 1, Service: "Helm"}
	templates := allTemplates(root, meta.Name, values, release, capabilities)
	rendered, err := render(templates, *strict)
	if err != nil {
		return err
	}
	notesName := path.Join(meta.Name, "templates", "NOTES.txt")
	if *notes {
		fmt.Print(rendered[notesName])
		return nil
	}
	manifests, err := manifestsOf(rendered, notesName)
	if err != nil {
		return err
	}
	for _, m := range manifests {
		fmt.Printf("---\n# Source: %s\n%s\n", m.source, m.content)
	}
	return nil
}

func loadMetadata(chartDir string) (*Metadata, error) {
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("Chart.yaml file is missing: %w", err)
	}
	meta := &Metadata{}
	if err := yaml.UnmarshalStrict(data, meta); err != nil {
		return nil, fmt.Errorf("cannot load Chart.yaml: %w", err)
	}
	if meta.Name == "" {
		return nil, errors.New("validation: chart.metadata.name is required")
	}
	return meta, nil
}

func readValues(file string) (Values, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	values := Values{}
	if err := yaml.Unmarshal(data, &values); err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", file, err)
	}
	return values, nil
}

// mergeMaps merges src into dst, src winning; maps merge key by key (Helm's -f files).
func mergeMaps(dst, src Values) {
	for k, v := range src {
		if vm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				mergeMaps(dm, vm)
				continue
			}
		}
		dst[k] = v
	}
}

// coalesce gives the user's values over the chart's defaults, as Helm does: maps merge
// key by key, and a user's null removes the default's key.
func coalesce(user, defaults Values) Values {
	out := Values{}
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range user {
		if v == nil {
			delete(out, k)
			continue
		}
		um, uok := v.(map[string]interface{})
		dm, dok := out[k].(map[string]interface{})
		if uok && dok {
			out[k] = coalesce(um, dm)
		} else {
			out[k] = v
		}
	}
	return out
}

// parseTyped types a --set value as Helm's strvals does (its typedVal): true, false
// and null in any case, 0, an int64 not starting with 0, else a string; {a,b} is a list
// of such values.
func parseTyped(s string) interface{} {
	if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
		list := []interface{}{}
		inner := s[1 : len(s)-1]
		if inner == "" {
			return list
		}
		for _, item := range strings.Split(inner, ",") {
			list = append(list, parseTyped(item))
		}
		return list
	}
	switch {
	case strings.EqualFold(s, "true"):
		return true
	case strings.EqualFold(s, "false"):
		return false
	case strings.EqualFold(s, "null"):
		return nil
	case s == "0":
		return int64(0)
	}
	if len(s) != 0 && s[0] != '0' {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	}
	return s
}

// splitKey splits a --set key at its dots; `\.` is a dot in a key (a file name).
func splitKey(key string) []string {
	parts := []string{}
	var cur strings.Builder
	for i := 0; i < len(key); i++ {
		switch {
		case key[i] == '\\' && i+1 < len(key) && key[i+1] == '.':
			cur.WriteByte('.')
			i++
		case key[i] == '.':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(key[i])
		}
	}
	return append(parts, cur.String())
}

// splitPairs splits a --set argument at its commas, but not those inside a {list}.
func splitPairs(set string) []string {
	pairs := []string{}
	depth, start := 0, 0
	for i, c := range set {
		switch {
		case c == '{':
			depth++
		case c == '}' && depth > 0:
			depth--
		case c == ',' && depth == 0:
			pairs = append(pairs, set[start:i])
			start = i + 1
		}
	}
	return append(pairs, set[start:])
}

// applySet applies KEY=VALUE[,KEY=VALUE] (one pair with --set-file, whose value is a
// path read as the value). A nil typer means --set-file.
func applySet(values Values, set string, typer func(string) interface{}) error {
	pairs := []string{set}
	if typer != nil {
		pairs = splitPairs(set)
	}
	for _, pair := range pairs {
		key, raw, ok := strings.Cut(pair, "=")
		if !ok || key == "" {
			return fmt.Errorf("failed parsing --set data: key %q has no value", pair)
		}
		var value interface{}
		if typer == nil {
			data, err := os.ReadFile(raw)
			if err != nil {
				return fmt.Errorf("failed parsing --set-file data: %w", err)
			}
			value = string(data)
		} else {
			value = typer(raw)
		}
		keys := splitKey(key)
		node := values
		for _, k := range keys[:len(keys)-1] {
			next, ok := node[k].(map[string]interface{})
			if !ok {
				next = map[string]interface{}{}
				node[k] = next
			}
			node = next
		}
		node[keys[len(keys)-1]] = value
	}
	return nil
}

func capabilitiesFor(version string) (Capabilities, error) {
	v := strings.TrimPrefix(version, "v")
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return Capabilities{}, fmt.Errorf("invalid kube version %q", version)
	}
	return Capabilities{
		KubeVersion: KubeVersion{Version: "v" + v, Major: parts[0], Minor: parts[1], GitVersion: "v" + v},
		APIVersions: defaultAPIVersions,
	}, nil
}

// chart is a chart directory: its Chart.yaml, values.yaml, templates and other files,
// and its subcharts (unpacked directories under charts/).
type chart struct {
	meta      *Metadata
	defaults  Values
	templates map[string]string // templates/FILE: text
	files     Files
	subcharts []*chart
}

func loadChart(dir string) (*chart, error) {
	meta, err := loadMetadata(dir)
	if err != nil {
		return nil, err
	}
	c := &chart{meta: meta, defaults: Values{}, templates: map[string]string{}, files: Files{}}
	if _, err := os.Stat(filepath.Join(dir, "values.yaml")); err == nil {
		if c.defaults, err = readValues(filepath.Join(dir, "values.yaml")); err != nil {
			return nil, err
		}
	}
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "charts" && info.IsDir() {
			return filepath.SkipDir // below, one chart each
		}
		if info.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "templates/") {
			c.templates[rel] = string(data)
		} else {
			c.files[rel] = data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(dir, "charts"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, entry := range entries {
		sub := filepath.Join(dir, "charts", entry.Name())
		if info, err := os.Stat(sub); err != nil || !info.IsDir() {
			return nil, fmt.Errorf("%s: only unpacked subcharts (directories) are supported", sub)
		}
		loaded, err := loadChart(sub)
		if err != nil {
			return nil, err
		}
		c.subcharts = append(c.subcharts, loaded)
	}
	sort.Slice(c.subcharts, func(i, j int) bool { return c.subcharts[i].meta.Name < c.subcharts[j].meta.Name })
	return c, nil
}

// coalesceChart gives the user's values over the chart's defaults, then each subchart's
// defaults under the parent's values at the subchart's name, with the parent's globals
// (Helm's CoalesceValues).
func coalesceChart(c *chart, user Values) Values {
	values := coalesce(user, c.defaults)
	for _, sub := range c.subcharts {
		scoped, _ := values[sub.meta.Name].(map[string]interface{})
		if scoped == nil {
			scoped = Values{}
		}
		// Helm's coalesceGlobals: a subchart always has a global table, the parent's over
		// its own.
		globals, _ := values["global"].(map[string]interface{})
		mine, _ := scoped["global"].(map[string]interface{})
		if mine == nil {
			mine = Values{}
		}
		scoped["global"] = coalesce(globals, mine)
		values[sub.meta.Name] = coalesceChart(sub, scoped)
	}
	return values
}

type source struct {
	name     string
	text     string
	basePath string
	vals     map[string]interface{}
}

// allTemplates names every template of the chart and its subcharts as Helm does
// (CHART/templates/FILE, CHART/charts/SUB/templates/FILE) and gives each the objects of
// its own chart: its .Chart, its part of the values, its .Files.
func allTemplates(c *chart, id string, values Values, release Release, caps Capabilities) []source {
	vals := map[string]interface{}{
		"Values":       values,
		"Chart":        c.meta,
		"Release":      release,
		"Capabilities": caps,
		"Files":        c.files,
	}
	out := []source{}
	for rel, text := range c.templates {
		out = append(out, source{name: path.Join(id, rel), text: text, basePath: path.Join(id, "templates"), vals: vals})
	}
	for _, sub := range c.subcharts {
		scoped, _ := values[sub.meta.Name].(map[string]interface{})
		out = append(out, allTemplates(sub, path.Join(id, "charts", sub.meta.Name), scoped, release, caps)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// funcMap is Helm's: sprig's functions without env and expandenv, and Helm's own.
func funcMap(t *template.Template, missing string) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	included := map[string]int{}
	f["include"] = func(name string, data interface{}) (string, error) {
		if included[name] > recursionMax {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		included[name]++
		defer func() { included[name]-- }()
		var buf strings.Builder
		err := t.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	f["tpl"] = func(text string, vals interface{}) (string, error) {
		clone, err := t.Clone()
		if err != nil {
			return "", err
		}
		clone.Option(missing)
		name := "tpl"
		if top, ok := vals.(map[string]interface{}); ok {
			if tmpl, ok := top["Template"].(map[string]interface{}); ok {
				name, _ = tmpl["Name"].(string)
			}
		}
		if _, err := clone.New(name).Parse(text); err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var buf strings.Builder
		if err := clone.ExecuteTemplate(&buf, name, vals); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	f["required"] = func(warn string, val interface{}) (interface{}, error) {
		if val == nil {
			return val, errors.New(warn)
		}
		if s, ok := val.(string); ok && s == "" {
			return val, errors.New(warn)
		}
		return val, nil
	}
	f["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	// No cluster: lookup finds nothing, as in `helm template`.
	f["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	f["toYaml"] = func(v interface{}) string {
		data, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	f["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["fromYamlArray"] = func(s string) []interface{} {
		a := []interface{}{}
		if err := yaml.Unmarshal([]byte(s), &a); err != nil {
			a = []interface{}{err.Error()}
		}
		return a
	}
	f["toJson"] = func(v interface{}) string {
		data, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(data)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["fromJsonArray"] = func(s string) []interface{} {
		a := []interface{}{}
		if err := json.Unmarshal([]byte(s), &a); err != nil {
			a = []interface{}{err.Error()}
		}
		return a
	}
	return f
}

// render parses every template into one set (named templates are shared), then
// executes each whose name does not start with "_", as Helm's engine does.
func render(templates []source, strict bool) (map[string]string, error) {
	t := template.New("gotpl")
	missing := "missingkey=zero"
	if strict {
		missing = "missingkey=error"
	}
	t.Option(missing)
	t.Funcs(funcMap(t, missing))
	for _, s := range templates {
		if _, err := t.New(s.name).Parse(s.text); err != nil {
			return nil, fmt.Errorf("parse error at (%s): %w", s.name, err)
		}
	}
	rendered := map[string]string{}
	for _, s := range templates {
		if strings.HasPrefix(path.Base(s.name), "_") {
			continue
		}
		vals := map[string]interface{}{}
		for k, v := range s.vals {
			vals[k] = v
		}
		vals["Template"] = map[string]interface{}{"Name": s.name, "BasePath": s.basePath}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, s.name, vals); err != nil {
			return nil, err
		}
		rendered[s.name] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	return rendered, nil
}

type manifest struct {
	source  string
	content string
	kind    string
	order   int
}

var separator = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

// manifestsOf splits the rendered .yaml/.yml/.json templates into documents, skips the
// blank ones, checks each is YAML with a kind, and orders them as helm template does.
func manifestsOf(rendered map[string]string, notesName string) ([]manifest, error) {
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	out := []manifest{}
	for _, name := range names {
		if name == notesName || strings.HasSuffix(name, "/templates/NOTES.txt") {
			continue // the top chart's notes are printed by --notes; a subchart's never
		}
		ext := path.Ext(name)
		if ext != ".yaml" && ext != ".yml" && ext != ".json" {
			continue
		}
		for _, doc := range separator.Split(rendered[name], -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			head := struct {
				Kind string `json:"kind"`
			}{}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return nil, fmt.Errorf("YAML parse error on %s: %w", name, err)
			}
			order := len(installOrder)
			for i, kind := range installOrder {
				if kind == head.Kind {
					order = i
				}
			}
			out = append(out, manifest{source: name, content: strings.TrimSpace(doc), kind: head.Kind, order: order})
		}
	}
	// Helm's lessByKind: known kinds in install order, then unknown kinds by name; the
	// order of the files within one kind.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].order != out[j].order {
			return out[i].order < out[j].order
		}
		return out[i].order == len(installOrder) && out[i].kind < out[j].kind
	})
	return out, nil
}
