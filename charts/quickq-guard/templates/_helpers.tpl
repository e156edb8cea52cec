{{/* Chart name, overridable so two installs can coexist under other names. */}}
{{- define "quickq-guard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Resource name prefix: <release>-quickq-guard unless the release already says it. */}}
{{- define "quickq-guard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "quickq-guard.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "quickq-guard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades, so never add version labels here. */}}
{{- define "quickq-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quickq-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Standard labels on every object; `app` too, which the require-labels policy asks for. */}}
{{- define "quickq-guard.labels" -}}
helm.sh/chart: {{ include "quickq-guard.chart" . }}
{{ include "quickq-guard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: admission-webhook
app.kubernetes.io/part-of: quickq-guard
app.kubernetes.io/managed-by: {{ .Release.Service }}
app: {{ include "quickq-guard.name" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "quickq-guard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "quickq-guard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Service the API server calls; its DNS names are the certificate's SANs. */}}
{{- define "quickq-guard.serviceName" -}}
{{- include "quickq-guard.fullname" . -}}
{{- end -}}

{{- define "quickq-guard.tlsSecretName" -}}
{{- if eq .Values.certs.mode "secret" -}}
{{- required "certs.secret.name is required when certs.mode=secret" .Values.certs.secret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "quickq-guard.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "quickq-guard.certificateName" -}}
{{- printf "%s-serving" (include "quickq-guard.fullname" .) -}}
{{- end -}}

{{/* DNS names of the Service, in the order the serving certificate lists them. */}}
{{- define "quickq-guard.dnsNames" -}}
{{- $svc := include "quickq-guard.serviceName" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/* Namespaces the webhooks never see: the configured ones plus the release's own. */}}
{{- define "quickq-guard.excludedNamespaces" -}}
{{- $all := concat (list "kube-system" "kube-public" "kube-node-lease") .Values.config.excludeNamespaces (list .Release.Namespace) -}}
{{- uniq $all | toJson -}}
{{- end -}}

{{- define "quickq-guard.image" -}}
{{- $tag := .Values.image.tag | toString -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag must be a pinned version, not latest" -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}
