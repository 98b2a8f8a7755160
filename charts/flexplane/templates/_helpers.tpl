{{/* The release's full name, at most 63 characters. */}}
{{- define "flexplane.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "flexplane.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: orchestrator
{{- end -}}

{{- define "flexplane.labels" -}}
{{ include "flexplane.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "flexplane.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "flexplane.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference: repository@digest, else repository:tag. */}}
{{- define "flexplane.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The orchestrator's -memory-limit: memoryLimitPercent of the container's memory limit (Mi or Gi), in MiB. */}}
{{- define "flexplane.memoryLimit" -}}
{{- $limit := toString .Values.resources.limits.memory -}}
{{- $mib := 0 -}}
{{- if hasSuffix "Gi" $limit -}}
{{- $mib = mul (trimSuffix "Gi" $limit | atoi) 1024 -}}
{{- else if hasSuffix "Mi" $limit -}}
{{- $mib = trimSuffix "Mi" $limit | atoi -}}
{{- end -}}
{{- if le (int $mib) 0 -}}
{{- fail (printf "resources.limits.memory %q must be a whole number of Mi or Gi" $limit) -}}
{{- end -}}
{{- printf "%dMiB" (div (mul $mib .Values.memoryLimitPercent) 100) -}}
{{- end -}}

{{/* The Secret holding Headscale's database password. */}}
{{- define "flexplane.meshPostgresSecret" -}}
{{- default (printf "%s-mesh-postgres" (include "flexplane.fullname" .)) .Values.meshPostgres.existingSecret -}}
{{- end -}}

{{/* The namespace of the orchestrator's catalog Secrets (the load balancers' certificates). */}}
{{- define "flexplane.secretsNamespace" -}}
{{- default (printf "%s-secrets" .Release.Namespace) .Values.secretsNamespace.name -}}
{{- end -}}

{{/* Checks across values that the schema cannot express. */}}
{{/* The claim the replicas keep agent releases on. */}}
{{- define "flexplane.releasesClaim" -}}
{{- .Values.releases.persistence.existingClaim | default (printf "%s-releases" (include "flexplane.fullname" .)) -}}
{{- end -}}

{{- define "flexplane.validate" -}}
{{- if and .Values.audit.log (ne .Values.audit.log "-") -}}
{{- fail "audit.log is \"-\" (the container's stdout) or empty: the container's file system is read-only" -}}
{{- end -}}
{{- if and .Values.releases.signingKeys (gt (int .Values.replicaCount) 1) (ne .Values.releases.persistence.accessMode "ReadWriteMany") -}}
{{- fail "releases.persistence.accessMode must be ReadWriteMany with more than one replica: every replica reads the release store" -}}
{{- end -}}
{{- if eq (include "flexplane.secretsNamespace" .) .Release.Namespace -}}
{{- fail "secretsNamespace.name must not be the release's namespace: the orchestrator may read every Secret of that namespace" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.meshPostgres.url) -}}
{{- fail "meshPostgres.url is required with more than one replica: the mesh control server keeps its state in PostgreSQL then" -}}
{{- end -}}
{{- if .Values.meshPostgres.url -}}
{{- if and (not .Values.meshPostgres.existingSecret) (not .Values.meshPostgres.password) -}}
{{- fail "meshPostgres needs existingSecret or password" -}}
{{- end -}}
{{- if and .Values.meshPostgres.existingSecret .Values.meshPostgres.password -}}
{{- fail "meshPostgres: set existingSecret or password, not both" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A container of the test hook running `orchestrator probe`: image,
pullPolicy and resources of the dict given. */}}
{{- define "flexplane.testProbe" -}}
image: {{ .image | quote }}
imagePullPolicy: {{ .pullPolicy }}
resources:
  {{- toYaml .resources | nindent 2 }}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities:
    drop: ["ALL"]
{{- end -}}
