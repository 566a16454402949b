{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "leasehold.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the release name, prefixed to the chart name unless it already
contains it ("leasehold" for a release named leasehold).
*/}}
{{- define "leasehold.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "leasehold.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object (those of one component add app.kubernetes.io/component). */}}
{{- define "leasehold.labels" -}}
helm.sh/chart: {{ include "leasehold.chart" . }}
app.kubernetes.io/name: {{ include "leasehold.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: leasehold
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the coordinator pods (and not the migration
Job's). Never change them: a Deployment's selector is immutable. */}}
{{- define "leasehold.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leasehold.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: coordinator
{{- end }}

{{- define "leasehold.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "leasehold.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* ServiceAccount of the migration Job; empty means the namespace default. */}}
{{- define "leasehold.migrationServiceAccountName" -}}
{{- if .Values.migration.serviceAccountName }}
{{- .Values.migration.serviceAccountName }}
{{- else if not .Values.serviceAccount.create }}
{{- include "leasehold.serviceAccountName" . }}
{{- end }}
{{- end }}

{{/* The Secret and key holding the PostgreSQL URL. */}}
{{- define "leasehold.databaseSecretName" -}}
{{- if .Values.database.url }}
{{- printf "%s-database" (include "leasehold.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- required "database.existingSecret (or database.url) is required: the coordinator runs on PostgreSQL in Kubernetes" .Values.database.existingSecret }}
{{- end }}
{{- end }}

{{- define "leasehold.databaseSecretKey" -}}
{{- if .Values.database.url }}database-url{{ else }}{{ required "database.existingSecretKey is required" .Values.database.existingSecretKey }}{{ end }}
{{- end }}

{{- define "leasehold.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Environment shared by the coordinator and the migration Job. */}}
{{- define "leasehold.databaseEnv" -}}
- name: LEASEHOLD_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "leasehold.databaseSecretName" . }}
      key: {{ include "leasehold.databaseSecretKey" . }}
{{- end }}

{{/* Connection mode of the gRPC probes: empty for plaintext. */}}
{{/*
How the kubelet probes the coordinator: "grpc" (native gRPC probes on the
gRPC port, health service names liveness/readiness) or "http" (httpGet
/healthz and /readyz on the plaintext HTTP port). Auto: http when TLS is on,
since the kubelet's gRPC probe cannot do TLS or present a client
certificate; grpc otherwise.
*/}}
{{- define "leasehold.probeType" -}}
{{- if .Values.probes.type }}
{{- .Values.probes.type }}
{{- else if .Values.tls.enabled }}http
{{- else }}grpc
{{- end }}
{{- end }}

{{/* One probe's handler: (list $ "liveness"|"readiness"). */}}
{{- define "leasehold.probeHandler" -}}
{{- $ := index . 0 }}
{{- $which := index . 1 }}
{{- if eq (include "leasehold.probeType" $) "http" }}
httpGet:
  path: {{ ternary "/healthz" "/readyz" (eq $which "liveness") }}
  port: http
  scheme: HTTP
{{- else }}
grpc:
  port: {{ $.Values.service.grpcPort }}
  service: {{ $which }}
{{- end }}
{{- end }}

{{/* Fail early on settings that cannot work together. */}}
{{- define "leasehold.validate" -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.secretName is required when tls.enabled is true" }}
{{- end }}
{{- if and .Values.tls.enabled (eq (toString .Values.probes.type) "grpc") }}
{{- fail "probes.type grpc cannot probe a TLS port (the kubelet's gRPC probe speaks plaintext); leave probes.type empty or set http" }}
{{- end }}
{{- if and .Values.tls.clientCA.enabled (not .Values.tls.enabled) }}
{{- fail "tls.clientCA.enabled (mTLS) needs tls.enabled" }}
{{- end }}
{{- if not .Values.auth.mode }}
{{- fail "auth.mode is required (serve --auth), e.g. api-key" }}
{{- end }}
{{- end }}
