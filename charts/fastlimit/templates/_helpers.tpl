{{/* The chart's name, shortened to a DNS label. */}}
{{- define "fastlimit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release name, with the chart's name unless it holds it. */}}
{{- define "fastlimit.fullname" -}}
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

{{/* Labels that select the pods. */}}
{{- define "fastlimit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fastlimit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "fastlimit.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fastlimit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Secret holding REDIS_URL, and its key. */}}
{{- define "fastlimit.redisSecret" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "fastlimit.fullname" .)) }}
{{- end }}
{{- define "fastlimit.redisSecretKey" -}}
{{- if .Values.redis.existingSecret }}{{ .Values.redis.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{/* Whether FastLimit has a Redis. */}}
{{- define "fastlimit.hasRedis" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret }}true{{ end }}
{{- end }}

{{/* The ConfigMap holding the rules. */}}
{{- define "fastlimit.rulesConfigMap" -}}
{{- .Values.rules.existingConfigMap | default (printf "%s-rules" (include "fastlimit.fullname" .)) }}
{{- end }}
