{{/*
PolicyExceptions: where they are honoured from, the config lines that say so, and the
webhook that checks each one (in every namespace, the release's too: the main webhooks'
namespaceSelector leaves that one out).
*/}}
{{- define "quickq-guard.exceptionNamespaces" -}}
{{- $listed := .Values.exceptions.namespaces | default (list .Release.Namespace) -}}
{{- uniq $listed | toJson -}}
{{- end -}}

{{- define "quickq-guard.exceptionConfig" -}}
{{- if .Values.exceptions.enabled -}}
exceptionNamespaces: {{ include "quickq-guard.exceptionNamespaces" . }}
exceptionMaxDays: {{ int .Values.exceptions.maxDays }}
exceptionWildcards: {{ .Values.exceptions.wildcards }}
{{- end -}}
{{- end -}}

{{- define "quickq-guard.exceptionsWebhook" -}}
{{- $root := .root -}}
admissionReviewVersions: [v1]
sideEffects: None
# The validating webhook's policy (Ignore until armed): an exception it did not see is
# still checked by the engine at every review before it is honoured.
failurePolicy: {{ .failurePolicy }}
timeoutSeconds: {{ $root.Values.webhook.timeoutSeconds }}
# Every version of the group comes here as the one it was written in: none gets past.
matchPolicy: Equivalent
clientConfig:
  {{- with $root.Values.webhook.url }}
  url: {{ printf "%s%s" (trimSuffix "/" .) $.path | quote }}
  {{- else }}
  service:
    name: {{ .svc }}
    namespace: {{ .ns }}
    path: {{ .path }}
    port: {{ $root.Values.service.port }}
  {{- end }}
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
rules:
  - apiGroups: [quickq.io]
    apiVersions: ["*"]
    resources: [policyexceptions]
    operations: [CREATE, UPDATE]
    scope: Namespaced
{{- end -}}
