{{/*
Shared body of the validating and mutating webhooks. The namespaceSelector
leaves out the system namespaces and the release's own, so a broken webhook
can never block the pods that would repair it.
*/}}
{{- define "quickq-guard.webhookBody" -}}
{{- $root := .root -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: {{ $root.Values.webhook.failurePolicy }}
timeoutSeconds: {{ $root.Values.webhook.timeoutSeconds }}
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
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "quickq-guard.excludedNamespaces" $root }}
{{- with $root.Values.webhook.objectSelector }}
objectSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.webhook.matchConditions }}
matchConditions:
  {{- toYaml . | nindent 2 }}
{{- end }}
rules:
  - apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  - apiGroups: [apps]
    apiVersions: [v1]
    resources: [deployments, replicasets, statefulsets, daemonsets]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  - apiGroups: [batch]
    apiVersions: [v1]
    resources: [jobs, cronjobs]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- with $root.Values.nodeTemplate.groups }}
  - apiGroups: {{ toJson . }}
    apiVersions: ["*"]
    resources: [nodetemplates]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- end }}
{{- end -}}
