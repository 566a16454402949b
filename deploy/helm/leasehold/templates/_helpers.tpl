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
{{- if and (eq .Values.auth.mode "none") (not .Values.auth.insecureAllowUnauthenticated) }}
{{- fail "auth.mode none: serve refuses to listen beyond loopback without authentication (its pods would crash-loop). Use auth.mode api-key (the default) or mtls, or set auth.insecureAllowUnauthenticated=true if a NetworkPolicy or a mesh keeps strangers out" }}
{{- end }}
{{- if and (eq .Values.auth.mode "mtls") (not (and .Values.tls.enabled .Values.tls.clientCA.enabled)) }}
{{- fail "auth.mode mtls needs client certificates: set tls.enabled=true, tls.secretName and tls.clientCA.enabled=true (serve --auth mtls requires --tls-client-ca-file)" }}
{{- end }}
{{- if and .Values.auth.insecureAllowUnauthenticated (ne .Values.auth.mode "none") }}
{{- fail (printf "auth.insecureAllowUnauthenticated applies to auth.mode none only, not %s: remove it" .Values.auth.mode) }}
{{- end }}
{{- $need := include "leasehold.shutdownSeconds" . | int }}
{{- with .Values.terminationGracePeriodSeconds }}
{{- if le (int .) $need }}
{{- fail (printf "terminationGracePeriodSeconds %d does not cover the shutdown: preStop %ds + 2 x shutdownGrace %s + 5s flush = %ds; raise it or leave it empty to have it computed" (int .) (int $.Values.lifecycle.preStopSleepSeconds) $.Values.shutdownGrace $need) }}
{{- end }}
{{- end }}
{{- if .Values.podDisruptionBudget.enabled }}
{{- $replicas := include "leasehold.minReplicas" . | int }}
{{- $min := .Values.podDisruptionBudget.minAvailable }}
{{- if and (gt $replicas 1) (kindIs "string" $min) (eq (toString $min) "100%") }}
{{- fail "podDisruptionBudget.minAvailable 100% would block every node drain: use 1 (or a lower percentage)" }}
{{- end }}
{{- if and (gt $replicas 1) (not (kindIs "string" $min)) (ge (int $min) $replicas) }}
{{- fail (printf "podDisruptionBudget.minAvailable %d is not below the %d replicas: it would block every node drain. Lower it or raise the replica count" (int $min) $replicas) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Seconds of shutdownGrace (h, m and s parts; the schema allows no other unit). */}}
{{- define "leasehold.shutdownGraceSeconds" -}}
{{- $g := toString .Values.shutdownGrace }}
{{- $h := regexFind "[0-9]+h" $g | trimSuffix "h" | default "0" | int }}
{{- $m := regexFind "[0-9]+m" $g | trimSuffix "m" | default "0" | int }}
{{- $s := regexFind "[0-9]+s" $g | trimSuffix "s" | default "0" | int }}
{{- add (mul $h 3600) (mul $m 60) $s }}
{{- end }}

{{/* Seconds a shutdown may take: the preStop pause, two grace periods (streams drain, then calls finish) and the 5s telemetry flush. */}}
{{- define "leasehold.shutdownSeconds" -}}
{{- add (int .Values.lifecycle.preStopSleepSeconds) (mul 2 (include "leasehold.shutdownGraceSeconds" . | int)) 5 }}
{{- end }}

{{/* terminationGracePeriodSeconds: the value set, or the shutdown plus 15s to spare. */}}
{{- define "leasehold.terminationGracePeriodSeconds" -}}
{{- if .Values.terminationGracePeriodSeconds }}
{{- .Values.terminationGracePeriodSeconds | int }}
{{- else }}
{{- add (include "leasehold.shutdownSeconds" . | int) 15 }}
{{- end }}
{{- end }}

{{/* The fewest coordinator pods the release runs. */}}
{{- define "leasehold.minReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.minReplicas | int }}{{ else }}{{ .Values.replicaCount | int }}{{ end }}
{{- end }}

{{/* The Secret the bootstrap Job writes the first admin key into. */}}
{{- define "leasehold.bootstrapSecretName" -}}
{{- .Values.bootstrap.secretName | default (printf "%s-admin-key" (include "leasehold.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{/* Whether the bootstrap Job (and its RBAC) is rendered. */}}
{{- define "leasehold.bootstrapEnabled" -}}
{{- if and .Values.bootstrap.enabled (eq .Values.auth.mode "api-key") }}true{{ end }}
{{- end }}
