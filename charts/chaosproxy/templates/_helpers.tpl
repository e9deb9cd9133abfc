{{/*
chaosproxy's named templates. Each takes a context with .Values (this chart's values)
and .Release; .Chart is optional, so that an app's chart can include the sidecar's:

  include "chaosproxy.sidecarContainer" (dict "Values" .Values.chaosproxy "Release" .Release)
*/}}

{{- define "chaosproxy.name" -}}
{{- default "chaosproxy" .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* RELEASE-chaosproxy, or the release's name when it already says chaosproxy; at most
53 characters, so that each name made from it (NAME-scenarios) is at most 63. */}}
{{- define "chaosproxy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- $name := include "chaosproxy.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "chaosproxy.instanceLabels" -}}
app.kubernetes.io/name: {{ include "chaosproxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The proxies' pods (not the fleet's Redis). */}}
{{- define "chaosproxy.selectorLabels" -}}
{{ include "chaosproxy.instanceLabels" . }}
app.kubernetes.io/component: proxy
{{- end }}

{{- define "chaosproxy.labels" -}}
{{ include "chaosproxy.instanceLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with (get . "Chart") }}
helm.sh/chart: {{ printf "%s-%s" .Name .Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .AppVersion | quote }}
{{- end }}
{{- end }}

{{- define "chaosproxy.image" -}}
{{- $tag := .Values.image.tag }}
{{- if and (not $tag) (hasKey . "Chart") }}{{ $tag = .Chart.AppVersion }}{{ end }}
{{- printf "%s:%s" .Values.image.repository (required "image.tag is required" $tag | toString) }}
{{- end }}

{{- define "chaosproxy.adminSecretName" -}}
{{- .Values.admin.existingSecret | default (printf "%s-admin" (include "chaosproxy.fullname" .)) }}
{{- end }}

{{- define "chaosproxy.adminSecretKey" -}}
{{- if .Values.admin.existingSecret }}{{ .Values.admin.existingSecretKey }}{{ else }}token{{ end }}
{{- end }}

{{- define "chaosproxy.scenariosConfigMapName" -}}
{{- .Values.scenarios.existingConfigMap | default (printf "%s-scenarios" (include "chaosproxy.fullname" .)) }}
{{- end }}

{{/* Whether the chart makes the scenarios ConfigMap (and so mounts one). */}}
{{- define "chaosproxy.hasScenarios" -}}
{{- if or .Values.scenarios.existingConfigMap .Values.scenarios.files }}yes{{ end }}
{{- end }}

{{- define "chaosproxy.redisName" -}}
{{- printf "%s-redis" (include "chaosproxy.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The variables the chart sets itself: `settings` may not name them. */}}
{{- define "chaosproxy.managed" -}}
CHAOSPROXY_LISTEN CHAOSPROXY_UPSTREAM CHAOSPROXY_SCENARIOS CHAOSPROXY_ADMIN CHAOSPROXY_ADMIN_TOKEN CHAOSPROXY_LOG_FORMAT CHAOSPROXY_TRUST_CLIENT_SCENARIOS CHAOSPROXY_STATE CHAOSPROXY_FLEET CHAOSPROXY_REPLICA_ID
{{- end }}

{{/* The env of the chaosproxy container, in either mode. */}}
{{- define "chaosproxy.env" -}}
{{- $managed := splitList " " (include "chaosproxy.managed" .) }}
{{- if .Values.upstream }}
- name: CHAOSPROXY_UPSTREAM
  value: {{ .Values.upstream | quote }}
{{- end }}
{{- if include "chaosproxy.hasScenarios" . }}
- name: CHAOSPROXY_SCENARIOS
  value: /scenarios
{{- end }}
- name: CHAOSPROXY_ADMIN
  value: {{ printf "0.0.0.0:%d" (int .Values.admin.port) | quote }}
- name: CHAOSPROXY_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "chaosproxy.adminSecretName" . }}
      key: {{ include "chaosproxy.adminSecretKey" . }}
- name: CHAOSPROXY_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- if kindIs "bool" .Values.trustClientScenarios }}
- name: CHAOSPROXY_TRUST_CLIENT_SCENARIOS
  value: {{ ternary "yes" "no" .Values.trustClientScenarios | quote }}
{{- end }}
{{- if eq .Values.mode "fleet" }}
- name: CHAOSPROXY_STATE
{{- if .Values.redis.enabled }}
  value: {{ printf "redis://%s:6379/0" (include "chaosproxy.redisName" .) | quote }}
{{- else if .Values.redis.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.existingSecretKey }}
{{- else }}
  value: {{ required "mode fleet needs a Redis: redis.enabled, redis.url or redis.existingSecret" .Values.redis.url | quote }}
{{- end }}
- name: CHAOSPROXY_FLEET
  value: {{ .Values.fleet.name | default (include "chaosproxy.fullname" .) | quote }}
- name: CHAOSPROXY_REPLICA_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- range $name, $value := .Values.settings }}
{{- if has $name $managed }}
{{- fail (printf "settings.%s: the chart sets %s itself (see values.yaml)" $name $name) }}
{{- end }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "chaosproxy.probes" -}}
startupProbe:
  httpGet: {path: /health, port: admin}
  {{- toYaml .Values.startupProbe | nindent 2 }}
readinessProbe:
  httpGet: {path: /health, port: admin}
  {{- toYaml .Values.readinessProbe | nindent 2 }}
{{- with .Values.livenessProbe }}
livenessProbe:
  httpGet: {path: /health, port: admin}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The chaosproxy container; its proxy listens on .listen. */}}
{{- define "chaosproxy.container" -}}
{{- $ctx := .context -}}
- name: chaosproxy
  image: {{ include "chaosproxy.image" $ctx | quote }}
  imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  args: ["serve", "--listen", {{ .listen | quote }}]
  env:
    {{- include "chaosproxy.env" $ctx | trim | nindent 4 }}
  ports:
    {{- if .proxyPort }}
    - name: proxy
      containerPort: {{ .proxyPort }}
    {{- end }}
    - name: admin
      containerPort: {{ int $ctx.Values.admin.port }}
  {{- if include "chaosproxy.hasScenarios" $ctx }}
  volumeMounts:
    - name: chaosproxy-scenarios
      mountPath: /scenarios
      readOnly: true
  {{- end }}
  {{- include "chaosproxy.probes" $ctx | nindent 2 }}
  resources:
    {{- toYaml $ctx.Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml $ctx.Values.securityContext | nindent 4 }}
{{- end }}

{{/*
The sidecar: a list of one container for your Pod's initContainers (native, the
default) or containers (sidecar.native: false). The proxy listens on the Pod's
loopback, 127.0.0.1:proxyPort, for the app only; the admin API on admin.port.
*/}}
{{- define "chaosproxy.sidecarContainer" -}}
{{- $listen := printf "127.0.0.1:%d" (int .Values.proxyPort) }}
{{- include "chaosproxy.container" (dict "context" . "listen" $listen "native" .Values.sidecar.native "proxyPort" 0) | trim }}
{{- end }}

{{/* The sidecar's volumes, for your Pod's volumes: (empty without scenarios). */}}
{{- define "chaosproxy.sidecarVolumes" -}}
{{- if include "chaosproxy.hasScenarios" . -}}
- name: chaosproxy-scenarios
  configMap:
    name: {{ include "chaosproxy.scenariosConfigMapName" . }}
{{- end }}
{{- end }}
