{{- define "identity.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "identity.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "identity.labels" -}}
{{ include "identity.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "identity.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The issuer: Zitadel's external URL. */}}
{{- define "identity.issuer" -}}
{{- $scheme := ternary "https" "http" .Values.externalSecure -}}
{{- $default := ternary 443 80 .Values.externalSecure -}}
{{- if eq (int .Values.externalPort) (int $default) -}}
{{- printf "%s://%s" $scheme .Values.externalDomain -}}
{{- else -}}
{{- printf "%s://%s:%d" $scheme .Values.externalDomain (int .Values.externalPort) -}}
{{- end -}}
{{- end -}}

{{- define "identity.masterkeySecret" -}}
{{- default (printf "%s-masterkey" (include "identity.fullname" .)) .Values.masterkey.existingSecret -}}
{{- end -}}

{{/* Zitadel's configuration file. */}}
{{- define "identity.config" -}}
{{- $pg := dict "Host" .Values.database.host "Port" (int .Values.database.port) "Database" .Values.database.name
      "User" (dict "Username" .Values.database.user "SSL" (dict "Mode" .Values.database.sslMode)) -}}
{{- if .Values.database.admin.user -}}
{{- $_ := set $pg "Admin" (dict "Username" .Values.database.admin.user "SSL" (dict "Mode" .Values.database.sslMode)) -}}
{{- end -}}
{{- $cfg := dict "ExternalDomain" .Values.externalDomain "ExternalPort" (int .Values.externalPort)
      "ExternalSecure" .Values.externalSecure "TLS" (dict "Enabled" false)
      "Database" (dict "postgres" $pg) -}}
{{- mustMergeOverwrite $cfg (deepCopy .Values.config) | toYaml -}}
{{- end -}}

{{/* The steps of Zitadel's setup: the first instance, created once. */}}
{{- define "identity.steps" -}}
FirstInstance:
  PatPath: /machinekey/pat
  Org:
    Name: {{ .Values.firstInstance.orgName | quote }}
    Machine:
      Machine:
        Username: flexplane-setup
        Name: flexplane setup job
      Pat:
        ExpirationDate: {{ .Values.firstInstance.patExpiration | quote }}
{{- end -}}

{{/* The role keys flexplane reads. */}}
{{- define "identity.roles" -}}
{{- $roles := list "platform-admin" -}}
{{- range .Values.flexplane.vdcs -}}
{{- $vdc := . -}}
{{- range list "admin" "member" "viewer" -}}
{{- $roles = append $roles (printf "vdc:%s:%s" $vdc .) -}}
{{- end -}}
{{- end -}}
{{- join " " $roles -}}
{{- end -}}

{{- define "identity.dbEnv" -}}
- name: ZITADEL_DATABASE_POSTGRES_USER_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.passwordKey }}
{{- if .Values.database.admin.user }}
- name: ZITADEL_DATABASE_POSTGRES_ADMIN_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.admin.existingSecret }}
      key: {{ .Values.database.admin.passwordKey }}
{{- end }}
- name: ZITADEL_MASTERKEY
  valueFrom:
    secretKeyRef:
      name: {{ include "identity.masterkeySecret" . }}
      key: masterkey
{{- end -}}

{{- define "identity.podSecurity" -}}
runAsNonRoot: true
runAsUser: 1000
runAsGroup: 1000
fsGroup: 1000
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "identity.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "identity.validate" -}}
{{- if not .Values.externalDomain -}}{{- fail "externalDomain is required" -}}{{- end -}}
{{- if not .Values.database.host -}}{{- fail "database.host is required" -}}{{- end -}}
{{- if not .Values.database.existingSecret -}}{{- fail "database.existingSecret (the Secret with the database user's password) is required" -}}{{- end -}}
{{- if and .Values.database.admin.user (not .Values.database.admin.existingSecret) -}}{{- fail "database.admin.existingSecret is required with database.admin.user" -}}{{- end -}}
{{- if not .Values.flexplane.portalURL -}}{{- fail "flexplane.portalURL is required" -}}{{- end -}}
{{- end -}}
