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

{{/* The rules ConfigMap's data: rules.files, or without any
rules.defaultFiles; each file as a JSON string, byte for byte. */}}
{{- define "fastlimit.rulesData" -}}
{{- range $file, $rules := (.Values.rules.files | default .Values.rules.defaultFiles) }}
{{ $file | toJson }}: {{ $rules | toJson }}
{{- end }}
{{- end }}

{{/* Where the rules ConfigMap is mounted: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config. */}}
{{- define "fastlimit.rulesPath" -}}
{{- printf "%s/%s/config" (trimSuffix "/" .Values.rules.runtimeRoot) .Values.rules.runtimeSubdirectory | clean }}
{{- end }}

{{/* The variables that locate the rules, as envoyproxy/ratelimit reads them. */}}
{{- define "fastlimit.rulesEnv" -}}
- name: RUNTIME_ROOT
  value: {{ .Values.rules.runtimeRoot | quote }}
- name: RUNTIME_SUBDIRECTORY
  value: {{ .Values.rules.runtimeSubdirectory | quote }}
- name: RUNTIME_WATCH_ROOT
  value: "false"
- name: RUNTIME_IGNOREDOTFILES
  value: "true"
{{- end }}

{{/* The image: FastLimit publishes none, so image.repository is required. */}}
{{- define "fastlimit.image" -}}
{{- $repo := required "image.repository is required: FastLimit publishes no image; build one from the repository's Dockerfile, push it, and name it here (see the chart's README)" .Values.image.repository }}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The ServiceAccount's name. */}}
{{- define "fastlimit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- .Values.serviceAccount.name | default (include "fastlimit.fullname" .) }}
{{- else }}
{{- .Values.serviceAccount.name | default "default" }}
{{- end }}
{{- end }}

{{/* A memory quantity (384Mi, 1.5Gi, 400M, 402653184) in bytes; fails on
other forms. */}}
{{- define "fastlimit.bytes" -}}
{{- $q := toString . }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
{{- $unit := trimPrefix $num $q }}
{{- if or (not $num) (not (hasKey $units $unit)) }}
{{- fail (printf "resources.limits.memory %q: goMemLimitPercent needs a quantity such as 384Mi or 1.5Gi (or set goMemLimitPercent to 0 and GOMEMLIMIT in env)" $q) }}
{{- end }}
{{- mulf (float64 $num) (get $units $unit) | floor | int64 }}
{{- end }}

{{/* GOMEMLIMIT: goMemLimitPercent of the memory limit, in bytes; empty
without a limit, with goMemLimitPercent 0, or with GOMEMLIMIT in env. */}}
{{- define "fastlimit.goMemLimit" -}}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) }}
{{- if and $limit (gt (int .Values.goMemLimitPercent) 0) (not (hasKey .Values.env "GOMEMLIMIT")) }}
{{- divf (mulf (include "fastlimit.bytes" $limit | float64) .Values.goMemLimitPercent) 100 | floor | int64 }}
{{- end }}
{{- end }}

{{/* An env value as text; a whole number as an integer (500000, not 5e+05). */}}
{{- define "fastlimit.envValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* The decision helm test asks on POST /json: tests.request, or else one of
the rules the chart renders: the domain of the first file (by name) that
names one, with that file's first descriptor's key and value ("helm-test"
for either when it has none). Empty with rules.existingConfigMap, whose
rules the chart cannot read, or when no file names a domain. */}}
{{- define "fastlimit.testRequest" -}}
{{- if .Values.tests.request }}
{{- .Values.tests.request }}
{{- else if not .Values.rules.existingConfigMap }}
{{- $req := "" }}
{{- range $file, $rules := (.Values.rules.files | default .Values.rules.defaultFiles) }}
{{- $doc := fromYaml (toString $rules) }}
{{- $domain := get $doc "domain" }}
{{- if and (not $req) (kindIs "string" $domain) $domain }}
{{- $entry := dict "key" "helm-test" "value" "helm-test" }}
{{- $descriptors := get $doc "descriptors" }}
{{- if and (kindIs "slice" $descriptors) $descriptors }}
{{- $first := first $descriptors }}
{{- if kindIs "map" $first }}
{{- with get $first "key" }}{{ $_ := set $entry "key" (toString .) }}{{ end }}
{{- with get $first "value" }}{{ $_ := set $entry "value" (toString .) }}{{ end }}
{{- end }}
{{- end }}
{{- $req = dict "domain" $domain "descriptors" (list (dict "entries" (list $entry))) | toJson }}
{{- end }}
{{- end }}
{{- $req }}
{{- end }}
{{- end }}

{{/* The headless Service of the operators' API (operatorAPI.enabled). */}}
{{- define "fastlimit.adminService" -}}
{{- printf "%s-admin" (include "fastlimit.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The names the admin listener answers to in Host (ADMIN_ALLOWED_HOSTS):
its headless Service's, short to fully qualified. */}}
{{- define "fastlimit.adminHosts" -}}
{{- $svc := include "fastlimit.adminService" . }}
{{- $ns := .Release.Namespace }}
{{- printf "%s,%s.%s,%s.%s.svc,%s.%s.svc.%s" $svc $svc $ns $svc $ns $svc $ns (trimSuffix "." .Values.operatorAPI.clusterDomain) }}
{{- end }}

{{/* Where the admin tokens' Secret is mounted. */}}
{{- define "fastlimit.tokensPath" -}}
/etc/fastlimit/admin-tokens
{{- end }}
