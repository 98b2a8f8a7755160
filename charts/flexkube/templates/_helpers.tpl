{{/* Labels selecting one component's pods (immutable: no version). */}}
{{- define "flexkube.selectorLabels" -}}
app.kubernetes.io/name: flexkube
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "flexkube.labels" -}}
{{ include "flexkube.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Values.version | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
cluster.x-k8s.io/cluster-name: {{ .root.Values.cluster }}
{{- end -}}

{{/* host:port of the API server for the components. */}}
{{- define "flexkube.apiServerAddress" -}}
{{- default (printf "%s-apiserver.%s.svc:%d" .Values.cluster .Release.Namespace (int .Values.apiServer.service.port)) .Values.addresses.apiServer -}}
{{- end -}}

{{/* host:port of etcd for the API server. */}}
{{- define "flexkube.etcdAddress" -}}
{{- default (printf "%s-etcd.%s.svc:%d" .Values.cluster .Release.Namespace (int .Values.etcd.clientPort)) .Values.addresses.etcd -}}
{{- end -}}

{{/* The API server's advertised address. */}}
{{- define "flexkube.advertiseAddress" -}}
{{- $host := regexReplaceAll ":[0-9]+$" .Values.endpoint "" | trimPrefix "[" | trimSuffix "]" -}}
{{- if .Values.apiServer.advertiseAddress -}}
{{- .Values.apiServer.advertiseAddress -}}
{{- else if regexMatch "^[0-9.]+$|:" $host -}}
{{- $host -}}
{{- else -}}
$(POD_IP)
{{- end -}}
{{- end -}}

{{/* The pod-level security context: non-root, Secrets readable by the group. */}}
{{- define "flexkube.podSecurity" -}}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.runAsUser }}
  runAsGroup: {{ .Values.runAsUser }}
  fsGroup: {{ .Values.runAsUser }}
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "flexkube.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}

{{/* A probe: HTTPS GET of path on the named port. */}}
{{- define "flexkube.probe" -}}
httpGet:
  scheme: {{ .scheme | default "HTTPS" }}
  path: {{ .path }}
  port: {{ .port }}
periodSeconds: {{ .period | default 10 }}
timeoutSeconds: 5
failureThreshold: {{ .failures | default 3 }}
{{- end -}}

{{/* A projected Secret source: secret and its items, key: path. */}}
{{- define "flexkube.secretItems" -}}
- secret:
    name: {{ .name }}
    items:
    {{- range $key, $path := .items }}
      - key: {{ $key }}
        path: {{ $path }}
    {{- end }}
{{- end -}}

{{/* The egress proxy's image: the orchestrator's, at the chart's appVersion unless tagged. */}}
{{- define "flexkube.egressImage" -}}
{{- $e := .Values.egressProxy.image -}}
{{- if $e.digest -}}
{{- printf "%s@%s" $e.repository $e.digest -}}
{{- else -}}
{{- printf "%s:%s" $e.repository (default .Chart.AppVersion $e.tag) -}}
{{- end -}}
{{- end -}}

{{/* Checks across values that the schema cannot express. */}}
{{- define "flexkube.validate" -}}
{{- if not (regexMatch ":[0-9]+$" .Values.endpoint) -}}
{{- fail (printf "endpoint %q must be host:port" .Values.endpoint) -}}
{{- end -}}
{{- end -}}
