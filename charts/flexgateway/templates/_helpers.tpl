{{/* The release's full name, at most 50 characters (a zone is appended). */}}
{{- define "flexgateway.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "flexgateway.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: flexgateway
{{- end -}}

{{- define "flexgateway.labels" -}}
{{ include "flexgateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The image reference: repository@digest, else repository:tag. */}}
{{- define "flexgateway.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the zones' admin tokens, a key per zone. */}}
{{- define "flexgateway.tokenSecret" -}}
{{- default (printf "%s-admin-tokens" (include "flexgateway.fullname" .)) .Values.adminToken.existingSecret -}}
{{- end -}}

{{/* Checks across values that the schema cannot express. */}}
{{- define "flexgateway.validate" -}}
{{- $seen := dict -}}
{{- range .Values.zones -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "zones: zone %q appears twice" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- if not .Values.adminTLS.existingSecret -}}
{{- fail "adminTLS.existingSecret is required: a Secret with tls.crt, tls.key and ca.crt for the admin API's mutual TLS" -}}
{{- end -}}
{{- end -}}
