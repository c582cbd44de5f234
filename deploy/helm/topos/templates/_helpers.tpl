{{/* The version label every object carries (the kustomize base's `labels:`). */}}
{{- define "topos.version" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* An image reference: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "topos.image" -}}
{{ .image.repository }}:{{ .image.tag | default .chart.AppVersion }}
{{- end -}}

{{/* The Service's scheme and port: https on 443, or http on 80 without TLS. */}}
{{- define "topos.scheme" -}}
{{ ternary "https" "http" .Values.tls.enabled }}
{{- end -}}
{{- define "topos.servicePort" -}}
{{ ternary 443 80 .Values.tls.enabled }}
{{- end -}}

{{/* The coordinator's config file: the values' config with what other values decide filled in. */}}
{{- define "topos.config" -}}
{{- $cfg := deepCopy .Values.coordinator.config -}}
{{- $_ := set $cfg "coordinator" (mustMergeOverwrite (deepCopy (default (dict) $cfg.coordinator)) (dict "listen" (printf "0.0.0.0:%v" .Values.coordinator.port))) -}}
{{- if .Values.tls.enabled -}}
{{- $_ := set $cfg "tls" (dict "certFile" "/etc/topos/tls/tls.crt" "keyFile" "/etc/topos/tls/tls.key") -}}
{{- end -}}
{{- $auth := dict "enabled" .Values.auth.enabled "openReadOnly" .Values.auth.openReadOnly "agentServiceAccounts" (list (printf "%s/topos-agent" .Values.namespace)) -}}
{{- $_ := set $cfg "auth" (mustMergeOverwrite (deepCopy (default (dict) $cfg.auth)) $auth) -}}
{{- $election := default (dict) $cfg.leaderElection -}}
{{- $_ := set $cfg "leaderElection" (mustMergeOverwrite (deepCopy $election) (dict "namespace" .Values.namespace)) -}}
{{- toYaml $cfg -}}
{{- end -}}
