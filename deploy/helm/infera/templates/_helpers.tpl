{{/* Names, labels and the pieces the Deployment and the migration Job share. */}}

{{- define "infera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "infera.fullname" -}}
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

{{- define "infera.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "infera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "infera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "infera.labels" -}}
helm.sh/chart: {{ include "infera.chart" . }}
{{ include "infera.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* the serving pods' labels: what the Services, the PDB and the ServiceMonitor select */}}
{{- define "infera.serverSelectorLabels" -}}
{{ include "infera.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{- define "infera.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "infera.secretName" -}}
{{- default (printf "%s-secrets" (include "infera.fullname" .)) .Values.secret.name }}
{{- end }}

{{- define "infera.migrateJobName" -}}
{{- printf "%s-migrate-%d" (include "infera.fullname" .) (int .Release.Revision) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Bitnami's names for a subchart's resources: the release name alone when it already holds the chart's name */}}
{{- define "infera.subchartFullname" -}}
{{- $chart := index . 1 }}
{{- $root := index . 0 }}
{{- $values := index $root.Values $chart }}
{{- if $values.fullnameOverride }}
{{- $values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains $chart $root.Release.Name }}
{{- $root.Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" $root.Release.Name $chart | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The environment of every Infera container (serving, waiting for migrations, migrating): one definition, so
they cannot drift apart. Secrets come from Secrets; a subchart's URL is made from its password by Kubernetes'
$(VAR) expansion, never written out here. */}}
{{- define "infera.env" -}}
- name: INFERA_REPLICA_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: INFERA_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "infera.secretName" . }}
      key: secret-key
- name: INFERA_ADMIN_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "infera.secretName" . }}
      key: admin-password
{{- if .Values.postgresql.enabled }}
- name: POSTGRESQL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "infera.subchartFullname" (list . "postgresql") }}
      key: password
- name: DATABASE_URL
  value: {{ printf "postgres://%s:$(POSTGRESQL_PASSWORD)@%s:5432/%s" .Values.postgresql.auth.username (include "infera.subchartFullname" (list . "postgresql")) .Values.postgresql.auth.database | quote }}
{{- else }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "infera.secretName" . }}
      key: database-url
{{- end }}
{{- if .Values.redis.enabled }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "infera.subchartFullname" (list . "redis") }}
      key: redis-password
- name: REDIS_URL
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s-master:6379/0" (include "infera.subchartFullname" (list . "redis")) | quote }}
{{- else }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "infera.secretName" . }}
      key: redis-url
{{- end }}
{{- end }}

{{- define "infera.envFrom" -}}
- configMapRef:
    name: {{ include "infera.fullname" . }}-config
{{- end }}

{{- define "infera.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "infera.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
{{- end }}

{{- define "infera.writableMounts" -}}
- name: var
  mountPath: /data
- name: tmp
  mountPath: /tmp
{{- end }}
